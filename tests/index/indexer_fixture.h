/* Builders shared by the facade tests: worker settings, raw events and
 * batches as structs (no msgpack), and match lookups through the facade. */
#ifndef KVR_TEST_INDEXER_FIXTURE_H
#define KVR_TEST_INDEXER_FIXTURE_H

#include "test_support.h"

/* raw event builders (store_ev, remove_ev, clear_ev, text) and WIDE */
#include "../normalize/norm_fixture.h"

#include <stdlib.h>
#include <string.h>

#include "kvrouter/hash.h"
#include "kvrouter/indexer.h"

#define MODEL "m"
#define B 4u
static inline kvr_worker_settings settings(uint64_t id, kvr_mm_identity mode)
{
    kvr_worker_settings s;
    memset(&s, 0, sizeof s);
    s.model_name = MODEL;
    s.worker_id = id;
    s.block_size = B;
    s.mm_identity = mode;
    s.accepts_mm_hashes = -1;
    return s;
}

static inline kvr_worker *reg_ok(kvr_indexer *ix, const kvr_worker_settings *s,
                                 kvr_reg_result want)
{
    kvr_worker *w = NULL;
    assert_int_equal(kvr_indexer_register(ix, s, &w), want);
    assert_non_null(w);
    return w;
}

/* Text tokens base, base+1, ... in the request form (u32). */
static inline void text32(uint32_t *tok, size_t n, uint32_t base)
{
    for (size_t i = 0; i < n; i++)
        tok[i] = base + (uint32_t)i;
}

static inline kvr_batch batch_of(kvr_raw_event *evs, uint32_t n)
{
    kvr_batch b;
    kvr_batch_init(&b);
    kvr_batch_of_events(&b, evs, n);
    return b;
}

/* Applies events one batch, socket rank `rank`, no batch dp_rank. */
static inline void apply(kvr_indexer *ix, kvr_worker *w, uint32_t rank, kvr_raw_event *evs,
                         uint32_t n)
{
    kvr_batch b = batch_of(evs, n);
    kvr_indexer_apply(ix, w, rank, &b);
}

typedef struct {
    uint32_t gpu, cpu, disk;
} reach;

/* Match of (worker, rank) for a token sequence hashed with seed (default
 * 1337) in the default group of MODEL. */
static inline reach match_seed(kvr_indexer *ix, uint64_t worker, uint32_t rank,
                               const uint32_t *tokens, size_t n, uint64_t seed)
{
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    assert_non_null(ctx);
    const kvr_match_entry *e = NULL;
    size_t k = kvr_indexer_match_tokens(ix, MODEL, NULL, ctx, tokens, n, false, seed, &e);
    reach r = {0, 0, 0};
    for (size_t i = 0; i < k; i++) {
        if (e[i].worker_id == worker && e[i].dp_rank == rank) {
            r.gpu = e[i].gpu_blocks;
            r.cpu = e[i].cpu_blocks;
            r.disk = e[i].disk_blocks;
        }
    }
    kvr_match_ctx_destroy(ctx);
    return r;
}

static inline uint32_t match_gpu(kvr_indexer *ix, uint64_t worker, uint32_t rank,
                                 const uint32_t *tokens, size_t n)
{
    return match_seed(ix, worker, rank, tokens, n, KVR_HASH_SEED).gpu;
}

/* Snapshot of one worker (heap: the struct is large). */
static inline kvr_worker_info *info_of(kvr_indexer *ix, kvr_worker *w)
{
    kvr_worker_info *info = malloc(sizeof *info);
    assert_non_null(info);
    kvr_worker_info_get(ix, w, info);
    return info;
}

static inline const kvr_rank_info *rank_of(const kvr_worker_info *info, uint32_t rank)
{
    for (uint32_t i = 0; i < info->n_ranks; i++)
        if (info->ranks[i].dp_rank == rank)
            return &info->ranks[i];
    return NULL;
}

#endif
