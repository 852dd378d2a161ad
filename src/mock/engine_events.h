/* The events of one mock-engine batch, collected while the cache changes and
 * encoded with the wire encoder as one msgpack batch. Offsets, not pointers,
 * until encoding: the pool grows while events are added. */
#ifndef KVR_MOCK_ENGINE_EVENTS_H
#define KVR_MOCK_ENGINE_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvrouter/wire_encode.h"

typedef struct {
    kvr_event_type type;
    kvr_tier tier;
    bool has_parent;
    uint64_t parent;
    size_t h_off, nh, t_off, nt;
} kvr_sim_event_rec;

typedef struct {
    kvr_sim_event_rec *recs;
    size_t n, cap;
    uint64_t *pool;
    size_t pool_len, pool_cap;
    kvr_raw_event *raw;
    size_t raw_cap;
    kvr_wbuf wbuf;
    /* SGLang publishes one BlockStored per page (parent = the page before)
     * and one BlockRemoved per page; set per_block for that, leave it false
     * for vLLM's multi-block events. */
    bool per_block;
} kvr_sim_events;

void kvr_sim_events_init(kvr_sim_events *ev);
void kvr_sim_events_free(kvr_sim_events *ev);
void kvr_sim_events_reset(kvr_sim_events *ev);
size_t kvr_sim_events_count(const kvr_sim_events *ev);

/* tokens: nt tokens covering the stored blocks (n*B, or n*B+1 for Eagle).
 * With per_block, block i becomes its own event with tokens [i*B, i*B+W)
 * (W = B, or B+1 for Eagle). */
int kvr_sim_events_store(kvr_sim_events *ev, kvr_tier tier, bool has_parent, uint64_t parent,
                         const uint64_t *hashes, size_t nh, const uint64_t *tokens, size_t nt);
/* Without per_block, appends to the previous event when it is a removal on
 * the same tier; with per_block, one event per hash. */
int kvr_sim_events_remove(kvr_sim_events *ev, kvr_tier tier, const uint64_t *hashes, size_t nh);
int kvr_sim_events_clear(kvr_sim_events *ev);

/* Encodes [ts, events, dp_rank]; *payload stays valid until the next call. */
int kvr_sim_events_encode(kvr_sim_events *ev, kvr_wire_style style, double ts, uint32_t dp_rank,
                          uint32_t block_size, bool eagle, const void **payload, size_t *len);

#endif
