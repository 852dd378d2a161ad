#include "sim/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/hash.h"
#include "sim/engine_events.h"
#include "sim/prefix_cache.h"
#include "sim/publisher.h"
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
} block_table;

#define BT_NONE UINT32_MAX

struct kvr_sim_engine {
    kvr_sim_engine_config cfg;
    uint32_t window; /* tokens hashed per block: B, or B+1 for Eagle */
    kvr_prefix_cache *gpu;
    kvr_prefix_cache *cpu; /* single-key inserts: a flat LRU over host blocks */
    block_table bt;
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

static bool emitting(const kvr_sim_engine *e) { return e->pub != NULL; }

/* ---- block table ---- */

static void bt_free(block_table *bt)
{
    kvr_u64map_free(&bt->by_key);
    free(bt->parent);
    free(bt->has_parent);
    free(bt->tokens);
    memset(bt, 0, sizeof *bt);
    bt->free_head = BT_NONE;
}

static uint32_t bt_find(const block_table *bt, uint64_t key)
{
    uint64_t v;
    return kvr_u64map_get(&bt->by_key, key, &v) ? (uint32_t)v : BT_NONE;
}

static bool bt_put(kvr_sim_engine *e, uint64_t key, bool has_parent, uint64_t parent,
                   const uint64_t *window)
{
    block_table *bt = &e->bt;
    uint32_t s = bt_find(bt, key);
    if (s == BT_NONE) {
        if (bt->free_head != BT_NONE) {
            s = bt->free_head;
            bt->free_head = (uint32_t)bt->parent[s];
        } else {
            if (bt->used == bt->cap) {
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
            }
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

static void bt_drop(block_table *bt, uint64_t key)
{
    uint64_t v;
    if (!kvr_u64map_del(&bt->by_key, key, &v))
        return;
    bt->parent[v] = bt->free_head;
    bt->free_head = (uint32_t)v;
}

/* ---- cache callbacks ---- */

static void cpu_evicted(void *ud, const uint64_t *keys, size_t n)
{
    kvr_sim_engine *e = ud;
    e->stats.cpu_removed += n;
    if (emitting(e) && kvr_sim_events_remove(&e->ev, KVR_TIER_CPU, keys, n) != 0)
        e->failed = true;
    for (size_t i = 0; i < n; i++)
        if (!kvr_prefix_cache_contains(e->gpu, keys[i]))
            bt_drop(&e->bt, keys[i]);
}

/* Evicted GPU leaves move to the host tier before the GPU removal is
 * published, parents first (eviction order is leaf-first, so walk it
 * backwards): the router then sees each block keep a host owner and never
 * loses a parent a later host store links to. */
static void gpu_evicted(void *ud, const uint64_t *keys, size_t n)
{
    kvr_sim_engine *e = ud;
    if (e->cpu) {
        kvr_prefix_cache_sink cs = {.evicted = cpu_evicted, .ud = e};
        for (size_t i = n; i-- > 0;) {
            uint64_t k = keys[i];
            if (kvr_prefix_cache_contains(e->cpu, k)) {
                kvr_prefix_cache_match(e->cpu, &k, 1);
                continue;
            }
            uint32_t s = bt_find(&e->bt, k);
            if (s == BT_NONE || kvr_prefix_cache_insert(e->cpu, &k, 1, &cs) != 1) {
                bt_drop(&e->bt, k);
                continue;
            }
            e->stats.cpu_stored++;
            s = bt_find(&e->bt, k); /* still there: only other keys were evicted */
            if (emitting(e) && s != BT_NONE &&
                kvr_sim_events_store(&e->ev, KVR_TIER_CPU, e->bt.has_parent[s], e->bt.parent[s],
                                     &k, 1, e->bt.tokens + (size_t)s * e->window, e->window) != 0)
                e->failed = true;
        }
    }
    e->stats.gpu_removed += n;
    if (emitting(e) && kvr_sim_events_remove(&e->ev, KVR_TIER_GPU, keys, n) != 0)
        e->failed = true;
    if (e->cpu) {
        for (size_t i = 0; i < n; i++)
            if (!kvr_prefix_cache_contains(e->cpu, keys[i]))
                bt_drop(&e->bt, keys[i]);
    }
}

static void gpu_stored(void *ud, bool has_parent, uint64_t parent, const uint64_t *keys, size_t n)
{
    kvr_sim_engine *e = ud;
    /* The cache reports the stored suffix as a slice of the keys we gave it. */
    size_t a = (size_t)(keys - e->keys);
    if (keys < e->keys || a + n > e->cur_n_keys) {
        e->failed = true;
        return;
    }
    uint32_t B = e->cfg.block_size;
    const uint64_t *toks = e->cur_tokens + a * B;
    e->stats.gpu_stored += n;
    if (e->cpu) {
        for (size_t i = 0; i < n; i++) {
            bool hp = i > 0 || has_parent;
            uint64_t p = i > 0 ? keys[i - 1] : parent;
            if (!bt_put(e, keys[i], hp, p, toks + i * B))
                e->failed = true;
        }
    }
    if (emitting(e) &&
        kvr_sim_events_store(&e->ev, KVR_TIER_GPU, has_parent, parent, keys, n, toks,
                             n * B + (e->window - B)) != 0)
        e->failed = true;
}

/* ---- public ---- */

kvr_sim_engine *kvr_sim_engine_create(const kvr_sim_engine_config *cfg, char *err, size_t errlen)
{
    if (cfg->block_size == 0 || cfg->gpu_capacity == 0) {
        snprintf(err, errlen, "block_size and gpu_capacity must be positive");
        return NULL;
    }
    kvr_sim_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->cfg = *cfg;
    e->window = cfg->block_size + (cfg->eagle ? 1 : 0);
    e->last_seq = -1;
    e->bt.free_head = BT_NONE;
    kvr_u64map_init(&e->bt.by_key);
    kvr_sim_events_init(&e->ev);
    e->gpu = kvr_prefix_cache_create(cfg->gpu_capacity);
    if (!e->gpu) {
        snprintf(err, errlen, "cannot create a cache of %zu blocks", cfg->gpu_capacity);
        goto fail;
    }
    if (cfg->cpu_capacity) {
        e->cpu = kvr_prefix_cache_create(cfg->cpu_capacity);
        if (!e->cpu) {
            snprintf(err, errlen, "cannot create a host tier of %zu blocks", cfg->cpu_capacity);
            goto fail;
        }
    }
    if (cfg->zctx) {
        e->pub = kvr_sim_pub_create(cfg->zctx, cfg->pub_bind ? cfg->pub_bind : "tcp://127.0.0.1:*",
                                    cfg->replay_bind,
                                    cfg->ring_capacity ? cfg->ring_capacity : 4096, err, errlen);
        if (!e->pub)
            goto fail;
    }
    return e;
fail:
    kvr_sim_engine_destroy(e);
    return NULL;
}

void kvr_sim_engine_destroy(kvr_sim_engine *e)
{
    if (!e)
        return;
    kvr_sim_pub_destroy(e->pub);
    kvr_prefix_cache_destroy(e->gpu);
    kvr_prefix_cache_destroy(e->cpu);
    bt_free(&e->bt);
    kvr_sim_events_free(&e->ev);
    free(e->keys);
    free(e);
}

size_t kvr_sim_engine_hashes(const kvr_sim_engine *e, const uint64_t *tokens, size_t n,
                             uint64_t *out, size_t cap)
{
    uint32_t B = e->cfg.block_size;
    size_t nb = kvr_hash_block_count(n, B, e->cfg.eagle);
    uint64_t chain = 0;
    for (size_t i = 0; i < nb && i < cap; i++) {
        uint64_t local = kvr_hash_bytes(tokens + i * B, e->window * sizeof *tokens, 0);
        chain = i == 0 ? local : kvr_hash_chain(chain, local);
        out[i] = chain;
    }
    return nb;
}

static int compute_keys(kvr_sim_engine *e, const uint64_t *tokens, size_t n, size_t *nb)
{
    size_t need = kvr_hash_block_count(n, e->cfg.block_size, e->cfg.eagle);
    if (need > e->keys_cap) {
        uint64_t *nk = realloc(e->keys, need * sizeof *nk);
        if (!nk)
            return -1;
        e->keys = nk;
        e->keys_cap = need;
    }
    *nb = kvr_sim_engine_hashes(e, tokens, n, e->keys, need);
    return 0;
}

static void measure(kvr_sim_engine *e, size_t nb, bool touch, kvr_sim_hit *hit)
{
    size_t g = 0;
    if (touch)
        g = kvr_prefix_cache_match(e->gpu, e->keys, nb);
    else
        while (g < nb && kvr_prefix_cache_contains(e->gpu, e->keys[g]))
            g++;
    size_t c = 0;
    while (e->cpu && g + c < nb && kvr_prefix_cache_contains(e->cpu, e->keys[g + c])) {
        if (touch)
            kvr_prefix_cache_match(e->cpu, &e->keys[g + c], 1);
        c++;
    }
    hit->n_blocks = nb;
    hit->gpu_blocks = g;
    hit->cpu_blocks = c;
}

static int publish(kvr_sim_engine *e)
{
    if (!emitting(e) || kvr_sim_events_count(&e->ev) == 0)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const void *payload;
    size_t len;
    if (kvr_sim_events_encode(&e->ev, e->cfg.wire, (double)ts.tv_sec + ts.tv_nsec * 1e-9,
                              e->cfg.dp_rank, e->cfg.block_size, e->cfg.eagle, &payload,
                              &len) != 0)
        return -1;
    uint64_t seq;
    int rc = kvr_sim_pub_send(e->pub, payload, len, &seq);
    e->last_seq = (int64_t)seq;
    e->stats.batches++;
    kvr_sim_events_reset(&e->ev);
    return rc;
}

int kvr_sim_engine_serve(kvr_sim_engine *e, const uint64_t *tokens, size_t n, kvr_sim_hit *hit)
{
    size_t nb;
    if (compute_keys(e, tokens, n, &nb) != 0)
        return -1;
    measure(e, nb, true, hit);
    e->cur_tokens = tokens;
    e->cur_n_keys = nb;
    e->failed = false;
    kvr_sim_events_reset(&e->ev);
    kvr_prefix_cache_sink sink = {.stored = gpu_stored, .evicted = gpu_evicted, .ud = e};
    kvr_prefix_cache_insert(e->gpu, e->keys, nb, &sink);
    e->cur_tokens = NULL;
    int rc = publish(e);
    return e->failed ? -1 : rc;
}

void kvr_sim_engine_peek(kvr_sim_engine *e, const uint64_t *tokens, size_t n, kvr_sim_hit *hit)
{
    size_t nb;
    if (compute_keys(e, tokens, n, &nb) != 0) {
        memset(hit, 0, sizeof *hit);
        return;
    }
    measure(e, nb, false, hit);
}

int kvr_sim_engine_clear(kvr_sim_engine *e)
{
    kvr_prefix_cache_clear(e->gpu);
    if (e->cpu)
        kvr_prefix_cache_clear(e->cpu);
    bt_free(&e->bt);
    kvr_u64map_init(&e->bt.by_key);
    e->stats.clears++;
    if (!emitting(e))
        return 0;
    kvr_sim_events_reset(&e->ev);
    if (kvr_sim_events_clear(&e->ev) != 0)
        return -1;
    return publish(e);
}

const char *kvr_sim_engine_endpoint(const kvr_sim_engine *e)
{
    return e->pub ? kvr_sim_pub_endpoint(e->pub) : "";
}

const char *kvr_sim_engine_replay_endpoint(const kvr_sim_engine *e)
{
    return e->pub ? kvr_sim_pub_replay_endpoint(e->pub) : "";
}

bool kvr_sim_engine_wait_subscriber(kvr_sim_engine *e, int timeout_ms)
{
    return e->pub && kvr_sim_pub_wait_subscriber(e->pub, timeout_ms);
}

int64_t kvr_sim_engine_last_seq(const kvr_sim_engine *e) { return e->last_seq; }

uint64_t kvr_sim_engine_replays_served(const kvr_sim_engine *e)
{
    return e->pub ? kvr_sim_pub_replays_served(e->pub) : 0;
}

bool kvr_sim_engine_gpu_contains(const kvr_sim_engine *e, uint64_t h)
{
    return kvr_prefix_cache_contains(e->gpu, h);
}

bool kvr_sim_engine_cpu_contains(const kvr_sim_engine *e, uint64_t h)
{
    return e->cpu && kvr_prefix_cache_contains(e->cpu, h);
}

size_t kvr_sim_engine_gpu_size(const kvr_sim_engine *e) { return kvr_prefix_cache_size(e->gpu); }

size_t kvr_sim_engine_cpu_size(const kvr_sim_engine *e)
{
    return e->cpu ? kvr_prefix_cache_size(e->cpu) : 0;
}

kvr_sim_engine_stats kvr_sim_engine_get_stats(const kvr_sim_engine *e) { return e->stats; }
