#include "mock/workload.h"

#include <stdlib.h>
#include <string.h>

#include "kvrouter/hash.h"

static double unit(uint64_t x) { return (double)(kvr_mix64(x) >> 11) * 0x1.0p-53; }

uint64_t kvr_sim_wide_pad(uint64_t mm_hash, unsigned k)
{
    return kvr_mix64(mm_hash * 4 + k + 1) | (1ULL << 32);
}

int kvr_sim_workload_init(kvr_sim_workload *w, const kvr_trace *t, double mm_share, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    w->trace = t;
    w->mm_share = mm_share;
    w->seed = seed;
    kvr_u64map_init(&w->image_ids);
    if (mm_share <= 0)
        return 0;
    uint64_t salt = kvr_mix64(seed ^ 0x6d6d5f7368617265ULL);
    kvr_u64map seen;
    kvr_u64map_init(&seen);
    int rc = 0;
    for (size_t i = 0; i < t->n && rc == 0; i++) {
        const kvr_trace_request *r = &t->reqs[i];
        /* The image goes in the last full block this request adds to the
         * trace: the user's newest message (a conversation's first request
         * also adds the system prompt every conversation shares, where a
         * user's image never is). Being full, the block is in the shared
         * prefix of the conversation's later turns. */
        uint32_t first_new = 0;
        while (first_new < r->n_hash_ids && kvr_u64map_find(&seen, r->hash_ids[first_new]))
            first_new++;
        for (uint32_t k = first_new; k < r->n_hash_ids; k++)
            if (kvr_u64map_put(&seen, r->hash_ids[k], 1) < 0)
                rc = -1;
        uint32_t full = (uint32_t)(kvr_trace_tokens(r, NULL, 0) / KVR_TRACE_BLOCK_TOKENS);
        if (full > r->n_hash_ids)
            full = r->n_hash_ids;
        if (full <= first_new)
            continue;
        uint32_t j = full - 1;
        if (unit(r->hash_ids[j] ^ salt) >= mm_share)
            continue;
        uint64_t mm = kvr_mix64(r->hash_ids[j] + salt) & INT64_MAX;
        if (kvr_u64map_put(&w->image_ids, r->hash_ids[j], mm ? mm : 1) < 0)
            rc = -1;
    }
    kvr_u64map_free(&seen);
    return rc;
}

void kvr_sim_workload_free(kvr_sim_workload *w) { kvr_u64map_free(&w->image_ids); }

void kvr_sim_request_free(kvr_sim_request *r)
{
    free(r->route);
    free(r->legacy);
    free(r->wide);
    free(r->items);
    memset(r, 0, sizeof *r);
}

static int reserve(kvr_sim_request *r, size_t n, size_t items)
{
    if (n > r->cap) {
        uint32_t *a = realloc(r->route, n * sizeof *a);
        if (a)
            r->route = a;
        uint64_t *b = realloc(r->legacy, n * sizeof *b);
        if (b)
            r->legacy = b;
        uint64_t *c = realloc(r->wide, n * sizeof *c);
        if (c)
            r->wide = c;
        if (!a || !b || !c)
            return -1;
        r->cap = n;
    }
    if (items > r->items_cap) {
        kvr_sim_mm_item *it = realloc(r->items, items * sizeof *it);
        if (!it)
            return -1;
        r->items = it;
        r->items_cap = items;
    }
    return 0;
}

int kvr_sim_workload_build(const kvr_sim_workload *w, size_t idx, kvr_sim_request *r)
{
    const kvr_trace_request *tr = &w->trace->reqs[idx];
    size_t n = kvr_trace_tokens(tr, NULL, 0);
    if (reserve(r, n ? n : 1, tr->n_hash_ids ? tr->n_hash_ids : 1) != 0)
        return -1;
    kvr_trace_tokens(tr, r->route, n);
    r->n = n;
    r->n_items = 0;
    for (size_t i = 0; i < n; i++)
        r->legacy[i] = r->wide[i] = r->route[i];
    if (kvr_u64map_len(&w->image_ids) == 0)
        return 0;
    for (uint32_t b = 0; b < tr->n_hash_ids; b++) {
        uint64_t mm;
        if (!kvr_u64map_get(&w->image_ids, tr->hash_ids[b], &mm))
            continue;
        size_t start = (size_t)b * KVR_TRACE_BLOCK_TOKENS + KVR_SIM_IMAGE_OFFSET;
        if (start >= n)
            continue;
        size_t end = start + KVR_SIM_IMAGE_TOKENS;
        if (end > n)
            end = n;
        uint32_t pad = kvr_pad_value(mm);
        for (size_t p = start; p < end; p++) {
            r->route[p] = KVR_SIM_IMAGE_PLACEHOLDER;
            r->legacy[p] = pad;
            r->wide[p] = kvr_sim_wide_pad(mm, (unsigned)((p - start) % 4));
        }
        r->items[r->n_items++] = (kvr_sim_mm_item){(uint32_t)start, (uint32_t)end, mm};
    }
    return 0;
}
