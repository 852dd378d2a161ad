/* Internals shared by engine.c (GPU cache, publishing, API) and
 * engine_host.c (the HiCache host tier). */
#ifndef KVR_MOCK_ENGINE_INTERNAL_H
#define KVR_MOCK_ENGINE_INTERNAL_H

#include "mock/engine.h"
#include "mock/engine_events.h"
#include "mock/prefix_cache.h"
#include "mock/publisher.h"
#include "util/u64map.h"

/* What a host-tier store needs about a block after the GPU forgot it: its
 * parent handle and its token window. Kept only with HiCache on, for blocks
 * held by either tier. */
typedef struct {
    kvr_u64map by_key; /* engine hash -> slot */
    uint64_t *parent;
    uint8_t *has_parent;
    uint64_t *tokens; /* window tokens per slot */
    uint32_t cap, used, free_head;
} kvr_sim_block_table;

struct kvr_sim_engine {
    kvr_sim_engine_config cfg;
    uint32_t window; /* tokens hashed per block: B, or B+1 for Eagle */
    kvr_prefix_cache *gpu;
    /* Host tier, keyed by the same chain keys, so it is a prefix tree too:
     * LRU eviction of its leaves keeps every host block's prefix held. */
    kvr_prefix_cache *cpu;
    kvr_sim_block_table bt;
    uint64_t *chain; /* scratch: a root-to-block key path */
    size_t chain_cap;
    uint64_t *tok_scratch;
    size_t tok_scratch_cap;
    kvr_sim_pub *pub;
    kvr_sim_events ev;
    int64_t last_seq;
    kvr_sim_engine_stats stats;

    uint64_t *keys;
    size_t keys_cap;
    /* The request being inserted, for the cache callbacks. */
    const uint64_t *cur_tokens;
    size_t cur_n_keys;
    bool failed;
};

static inline bool kvr_sim_engine_emitting(const kvr_sim_engine *e) { return e->pub != NULL; }

/* engine_host.c */
void kvr_sim_host_init(kvr_sim_engine *e);
void kvr_sim_host_free(kvr_sim_engine *e);
/* Remembers a block newly stored on the GPU (parent and token window). */
bool kvr_sim_host_record(kvr_sim_engine *e, uint64_t key, bool has_parent, uint64_t parent,
                         const uint64_t *window);
/* GPU leaves evicted (leaf-first order): copy them to the host tier and
 * publish the host stores, then the GPU removal. */
void kvr_sim_host_gpu_evicted(kvr_sim_engine *e, const uint64_t *keys, size_t n);

#endif
