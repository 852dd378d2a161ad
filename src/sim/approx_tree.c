#include "sim/approx_tree.h"

#include <stdbool.h>
#include <stdlib.h>

#include "kvrouter/hash.h"
#include "util/u64map.h"

struct kvr_sim_approx {
    size_t n;
    kvr_u64map *trees;
    uint64_t *chunks;
    size_t chunks_cap;
};

kvr_sim_approx *kvr_sim_approx_create(size_t n_workers)
{
    kvr_sim_approx *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->trees = calloc(n_workers ? n_workers : 1, sizeof *a->trees);
    if (!a->trees) {
        free(a);
        return NULL;
    }
    a->n = n_workers;
    for (size_t i = 0; i < n_workers; i++)
        kvr_u64map_init(&a->trees[i]);
    return a;
}

void kvr_sim_approx_destroy(kvr_sim_approx *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n; i++)
        kvr_u64map_free(&a->trees[i]);
    free(a->trees);
    free(a->chunks);
    free(a);
}

static size_t chunk_hashes(kvr_sim_approx *a, const uint32_t *tokens, size_t n)
{
    size_t nc = n / KVR_SIM_APPROX_CHUNK;
    if (nc > a->chunks_cap) {
        uint64_t *c = realloc(a->chunks, nc * sizeof *c);
        if (!c)
            return 0;
        a->chunks = c;
        a->chunks_cap = nc;
    }
    uint64_t chain = 0;
    for (size_t i = 0; i < nc; i++) {
        uint64_t h = kvr_hash_tokens(tokens + i * KVR_SIM_APPROX_CHUNK, KVR_SIM_APPROX_CHUNK, 7);
        chain = kvr_hash_chain(chain, h);
        a->chunks[i] = chain;
    }
    return nc;
}

static size_t match_chunks(const kvr_sim_approx *a, size_t w, size_t nc)
{
    size_t m = 0;
    while (m < nc && kvr_u64map_find(&a->trees[w], a->chunks[m]))
        m++;
    return m;
}

size_t kvr_sim_approx_match(kvr_sim_approx *a, size_t w, const uint32_t *tokens, size_t n)
{
    size_t nc = chunk_hashes(a, tokens, n);
    return match_chunks(a, w, nc) * KVR_SIM_APPROX_CHUNK;
}

static size_t least_loaded(size_t n, const uint32_t *load)
{
    size_t best = 0;
    for (size_t w = 1; w < n; w++)
        if (load[w] < load[best])
            best = w;
    return best;
}

size_t kvr_sim_approx_pick(kvr_sim_approx *a, const uint32_t *tokens, size_t n,
                           const uint32_t *load)
{
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t w = 0; w < a->n; w++) {
        if (load[w] < lo)
            lo = load[w];
        if (load[w] > hi)
            hi = load[w];
    }
    bool imbalanced = hi - lo > KVR_SIM_APPROX_BALANCE_ABS &&
                      (double)hi > KVR_SIM_APPROX_BALANCE_REL * (double)lo;
    if (imbalanced || n == 0)
        return least_loaded(a->n, load);
    size_t nc = chunk_hashes(a, tokens, n);
    size_t best = 0, best_m = 0;
    for (size_t w = 0; w < a->n; w++) {
        size_t m = match_chunks(a, w, nc);
        if (m > best_m || (m == best_m && load[w] < load[best])) {
            best = w;
            best_m = m;
        }
    }
    double ratio = (double)(best_m * KVR_SIM_APPROX_CHUNK) / (double)n;
    if (ratio > KVR_SIM_APPROX_CACHE_THRESHOLD)
        return best;
    return least_loaded(a->n, load);
}

int kvr_sim_approx_insert(kvr_sim_approx *a, size_t w, const uint32_t *tokens, size_t n)
{
    size_t nc = chunk_hashes(a, tokens, n);
    for (size_t i = 0; i < nc; i++)
        if (kvr_u64map_put(&a->trees[w], a->chunks[i], 1) < 0)
            return -1;
    return 0;
}
