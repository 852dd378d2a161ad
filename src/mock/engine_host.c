/* The HiCache host tier of a mock engine. GPU leaves evicted by the GPU's
 * LRU move down to host memory, as SGLang's write-back HiCache does; the host
 * tier has its own capacity and LRU eviction of leaves. It is kept as a
 * prefix tree over the same chain keys: a block moves down together with any
 * of its ancestors the host lacks (those are still on the GPU, so the host
 * copy is a write-through of them). That keeps every host block's prefix on
 * the host, so nothing the host holds is unreachable, and the router, which
 * drops a subtree when its root loses its last owner, never hears of a
 * removal it cannot place. */
#include <stdlib.h>
#include <string.h>

#include "mock/engine_internal.h"

#define BT_NONE UINT32_MAX

void kvr_sim_host_init(kvr_sim_engine *e)
{
    memset(&e->bt, 0, sizeof e->bt);
    e->bt.free_head = BT_NONE;
    kvr_u64map_init(&e->bt.by_key);
}

void kvr_sim_host_free(kvr_sim_engine *e)
{
    kvr_sim_block_table *bt = &e->bt;
    kvr_u64map_free(&bt->by_key);
    free(bt->parent);
    free(bt->has_parent);
    free(bt->tokens);
    memset(bt, 0, sizeof *bt);
    free(e->chain);
    free(e->tok_scratch);
    e->chain = e->tok_scratch = NULL;
    e->chain_cap = e->tok_scratch_cap = 0;
}

static uint32_t bt_find(const kvr_sim_block_table *bt, uint64_t key)
{
    uint64_t v;
    return kvr_u64map_get(&bt->by_key, key, &v) ? (uint32_t)v : BT_NONE;
}

static bool bt_grow(kvr_sim_engine *e)
{
    kvr_sim_block_table *bt = &e->bt;
    uint32_t ncap = bt->cap ? bt->cap * 2 : 256;
    uint64_t *np = realloc(bt->parent, (size_t)ncap * sizeof *np);
    if (np)
        bt->parent = np;
    uint8_t *nh = realloc(bt->has_parent, ncap);
    if (nh)
        bt->has_parent = nh;
    uint64_t *nt = realloc(bt->tokens, (size_t)ncap * e->window * sizeof *nt);
    if (nt)
        bt->tokens = nt;
    if (!np || !nh || !nt)
        return false;
    bt->cap = ncap;
    return true;
}

bool kvr_sim_host_record(kvr_sim_engine *e, uint64_t key, bool has_parent, uint64_t parent,
                         const uint64_t *window)
{
    kvr_sim_block_table *bt = &e->bt;
    uint32_t s = bt_find(bt, key);
    if (s == BT_NONE) {
        if (bt->free_head != BT_NONE) {
            s = bt->free_head;
            bt->free_head = (uint32_t)bt->parent[s];
        } else {
            if (bt->used == bt->cap && !bt_grow(e))
                return false;
            s = bt->used++;
        }
        if (kvr_u64map_put(&bt->by_key, key, s) < 0) {
            bt->parent[s] = bt->free_head;
            bt->free_head = s;
            return false;
        }
    }
    bt->parent[s] = parent;
    bt->has_parent[s] = has_parent;
    memcpy(bt->tokens + (size_t)s * e->window, window, e->window * sizeof *window);
    return true;
}

static void bt_drop(kvr_sim_block_table *bt, uint64_t key)
{
    uint64_t v;
    if (!kvr_u64map_del(&bt->by_key, key, &v))
        return;
    bt->parent[v] = bt->free_head;
    bt->free_head = (uint32_t)v;
}

static bool reserve(uint64_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < n)
        ncap *= 2;
    uint64_t *nb = realloc(*buf, ncap * sizeof *nb);
    if (!nb)
        return false;
    *buf = nb;
    *cap = ncap;
    return true;
}

static void host_evicted(void *ud, const uint64_t *keys, size_t n)
{
    kvr_sim_engine *e = ud;
    e->stats.cpu_removed += n;
    if (kvr_sim_engine_emitting(e) && kvr_sim_events_remove(&e->ev, KVR_TIER_CPU, keys, n) != 0)
        e->failed = true;
    for (size_t i = 0; i < n; i++)
        if (!kvr_prefix_cache_contains(e->gpu, keys[i]))
            bt_drop(&e->bt, keys[i]);
}

/* The host stores one parent-linked run, with the tokens it covers: each
 * block's first B tokens, plus the last window's overlap token for Eagle. */
static void host_stored(void *ud, bool has_parent, uint64_t parent, const uint64_t *keys, size_t n)
{
    kvr_sim_engine *e = ud;
    e->stats.cpu_stored += n;
    if (!kvr_sim_engine_emitting(e))
        return;
    uint32_t B = e->cfg.block_size, extra = e->window - B;
    if (!reserve(&e->tok_scratch, &e->tok_scratch_cap, n * B + extra)) {
        e->failed = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t s = bt_find(&e->bt, keys[i]);
        if (s == BT_NONE) { /* every host block came from the GPU, which recorded it */
            e->failed = true;
            return;
        }
        const uint64_t *w = e->bt.tokens + (size_t)s * e->window;
        memcpy(e->tok_scratch + i * B, w, (i + 1 == n ? e->window : B) * sizeof *w);
    }
    if (kvr_sim_events_store(&e->ev, KVR_TIER_CPU, has_parent, parent, keys, n, e->tok_scratch,
                             n * B + extra) != 0)
        e->failed = true;
}

static void flush_chain(kvr_sim_engine *e, size_t len)
{
    if (len == 0)
        return;
    kvr_prefix_cache_sink sink = {.stored = host_stored, .evicted = host_evicted, .ud = e};
    kvr_prefix_cache_insert(e->cpu, e->chain, len, &sink);
}

/* Writes the root-to-key path into e->chain; returns its length, 0 if a
 * link is unknown (the block is then not moved). */
static size_t build_chain(kvr_sim_engine *e, uint64_t key)
{
    size_t len = 0;
    uint64_t cur = key;
    for (;;) {
        uint32_t s = bt_find(&e->bt, cur);
        if (s == BT_NONE || !reserve(&e->chain, &e->chain_cap, len + 1))
            return 0;
        e->chain[len++] = cur;
        if (!e->bt.has_parent[s])
            break;
        cur = e->bt.parent[s];
    }
    for (size_t i = 0; i < len / 2; i++) {
        uint64_t t = e->chain[i];
        e->chain[i] = e->chain[len - 1 - i];
        e->chain[len - 1 - i] = t;
    }
    return len;
}

void kvr_sim_host_gpu_evicted(kvr_sim_engine *e, const uint64_t *keys, size_t n)
{
    /* Eviction order is leaf-first; walked backwards, a block usually
     * continues the path of the one before, so whole runs move with one
     * host insert instead of one root-to-block walk each. */
    size_t len = 0;
    for (size_t i = n; i-- > 0;) {
        uint64_t k = keys[i];
        uint32_t s = bt_find(&e->bt, k);
        if (s == BT_NONE)
            continue;
        if (len > 0 && e->bt.has_parent[s] && e->bt.parent[s] == e->chain[len - 1] &&
            reserve(&e->chain, &e->chain_cap, len + 1)) {
            e->chain[len++] = k;
            continue;
        }
        flush_chain(e, len);
        len = build_chain(e, k);
    }
    flush_chain(e, len);
    e->stats.gpu_removed += n;
    if (kvr_sim_engine_emitting(e) && kvr_sim_events_remove(&e->ev, KVR_TIER_GPU, keys, n) != 0)
        e->failed = true;
    for (size_t i = 0; i < n; i++)
        if (!kvr_prefix_cache_contains(e->cpu, keys[i]))
            bt_drop(&e->bt, keys[i]);
}
