/* The simulator's requests: a Mooncake trace expanded to tokens, with a
 * configurable share of multimodal requests (SPEC §5). An image belongs to a
 * trace hash id: the last full block a request adds to the trace (its newest
 * message), for a share mm_share of the requests that add one. Every later
 * turn that shares that id
 * carries the same image at the same place, so images sit inside reused
 * conversation prefixes, where they matter to routing. One request has three token forms:
 *   route:  what a gateway sends the router: text + a placeholder token at
 *           image positions, plus mm_items [{start, end, mm_hash}];
 *   legacy: what a legacy engine caches and publishes: kvr_pad_value(mm_hash);
 *   wide:   what a Kimi engine_wide engine caches and publishes: four pad
 *           values >= 2^32 derived from mm_hash, cycled over the image. */
#ifndef KVR_MOCK_WORKLOAD_H
#define KVR_MOCK_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mock/trace.h"
#include "util/u64map.h"

/* Kimi's media placeholder token: an ordinary text-range id. */
#define KVR_SIM_IMAGE_PLACEHOLDER 163605u
#define KVR_SIM_IMAGE_OFFSET 32u  /* image start within its 512-token block */
#define KVR_SIM_IMAGE_TOKENS 256u /* tokens per image (clipped at the prompt end) */

typedef struct {
    uint32_t start, end; /* end exclusive */
    uint64_t mm_hash;    /* < 2^63 so it survives JSON integers */
} kvr_sim_mm_item;

typedef struct {
    const kvr_trace *trace;
    double mm_share;
    uint64_t seed;
    kvr_u64map image_ids; /* hash id -> mm_hash */
} kvr_sim_workload;

typedef struct {
    size_t n;
    uint32_t *route;
    uint64_t *legacy;
    uint64_t *wide;
    kvr_sim_mm_item *items;
    size_t n_items;
    size_t cap, items_cap;
} kvr_sim_request;

int kvr_sim_workload_init(kvr_sim_workload *w, const kvr_trace *t, double mm_share, uint64_t seed);
void kvr_sim_workload_free(kvr_sim_workload *w);
/* Fills r (buffers reused across calls) for request idx. */
int kvr_sim_workload_build(const kvr_sim_workload *w, size_t idx, kvr_sim_request *r);
void kvr_sim_request_free(kvr_sim_request *r);

/* The k-th (0..3) wide pad of an image: >= 2^32, so it cannot fit in u32. */
uint64_t kvr_sim_wide_pad(uint64_t mm_hash, unsigned k);

#endif
