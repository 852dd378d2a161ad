#include "mock/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/hash.h"
#include "mock/engine_internal.h"

static bool emitting(const kvr_sim_engine *e) { return kvr_sim_engine_emitting(e); }

static void gpu_evicted(void *ud, const uint64_t *keys, size_t n)
{
    kvr_sim_engine *e = ud;
    if (e->cpu) {
        kvr_sim_host_gpu_evicted(e, keys, n);
        return;
    }
    e->stats.gpu_removed += n;
    if (emitting(e) && kvr_sim_events_remove(&e->ev, KVR_TIER_GPU, keys, n) != 0)
        e->failed = true;
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
            if (!kvr_sim_host_record(e, keys[i], hp, p, toks + i * B))
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
    kvr_sim_host_init(e);
    kvr_sim_events_init(&e->ev);
    e->ev.per_block = cfg->wire == KVR_WIRE_SGLANG;
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
                                    cfg->ring_capacity ? cfg->ring_capacity : 1024, err, errlen);
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
    kvr_sim_host_free(e);
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
    size_t g = 0, h = 0;
    if (touch)
        g = kvr_prefix_cache_match(e->gpu, e->keys, nb);
    else
        while (g < nb && kvr_prefix_cache_contains(e->gpu, e->keys[g]))
            g++;
    /* The host tier holds whole prefixes too; what it holds past the GPU
     * prefix is loaded back instead of recomputed. */
    if (e->cpu && touch)
        h = kvr_prefix_cache_match(e->cpu, e->keys, nb);
    else
        while (e->cpu && h < nb && kvr_prefix_cache_contains(e->cpu, e->keys[h]))
            h++;
    hit->n_blocks = nb;
    hit->gpu_blocks = g;
    hit->cpu_blocks = h > g ? h - g : 0;
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
    kvr_sim_host_free(e);
    kvr_sim_host_init(e);
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
