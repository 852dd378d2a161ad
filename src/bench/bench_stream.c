/* The benchmark's event stream (SPEC §9): each trace request goes to a
 * worker drawn from a seeded sequence, a mock prefix cache per worker turns
 * it into the store/remove events the engine would publish, and one match of
 * the request's local hashes precedes them. */
#include "bench/bench.h"

#include <stdlib.h>
#include <string.h>

#include "kvrouter/hash.h"
#include "mock/prefix_cache.h"
#include "util/grow.h"
#include "util/u64map.h"

void kvr_bench_stream_free(kvr_bench_stream *s)
{
    free(s->ops);
    free(s->pool);
    free(s->tok);
    memset(s, 0, sizeof *s);
}

kvr_bench_op *kvr_bench_push_op(kvr_bench_stream *s, size_t pool_need)
{
    if (kvr_grow((void **)&s->ops, &s->cap, s->n + 1, sizeof *s->ops, 1024) < 0 ||
        kvr_grow((void **)&s->pool, &s->pool_cap, s->pool_len + pool_need, sizeof *s->pool,
                 1 << 16) < 0)
        return NULL;
    kvr_bench_op *op = &s->ops[s->n++];
    memset(op, 0, sizeof *op);
    op->off = s->pool_len;
    s->pool_len += pool_need;
    return op;
}

/* ---- building the stream ---- */

typedef struct {
    kvr_bench_stream *s;
    uint64_t worker;
    const uint64_t *keys, *locals; /* the current request's chain keys and local hashes */
    const uint32_t *tokens;        /* its tokens, when the stream keeps them */
    kvr_bench_granularity gran;
    bool oom;
} sink_ctx;

static void on_evicted(void *ud, const uint64_t *keys, size_t n)
{
    sink_ctx *c = ud;
    /* SGLang: one BlockRemoved per page; vLLM: one for the whole eviction */
    size_t per = c->gran == KVR_BENCH_SGLANG ? 1 : n;
    for (size_t i = 0; i < n; i += per) {
        kvr_bench_op *op = kvr_bench_push_op(c->s, per);
        if (!op) {
            c->oom = true;
            return;
        }
        op->kind = KVR_BOP_REMOVE;
        op->tier = KVR_TIER_GPU;
        op->worker = c->worker;
        op->n = (uint32_t)per;
        memcpy(c->s->pool + op->off, keys + i, per * sizeof *keys);
    }
}

static int keep_tokens(kvr_bench_stream *s, const uint32_t *t, size_t n, size_t *off)
{
    if (kvr_grow((void **)&s->tok, &s->tok_cap, s->tok_len + n, sizeof *s->tok, 1 << 16) < 0)
        return -1;
    memcpy(s->tok + s->tok_len, t, n * sizeof *t);
    *off = s->tok_len;
    s->tok_len += n;
    return 0;
}

static void on_stored(void *ud, bool has_parent, uint64_t parent, const uint64_t *keys, size_t n)
{
    sink_ctx *c = ud;
    size_t first = (size_t)(keys - c->keys); /* the sink hands out a suffix of our keys */
    size_t per = c->gran == KVR_BENCH_SGLANG ? 1 : n;
    for (size_t i = 0; i < n; i += per) {
        kvr_bench_op *op = kvr_bench_push_op(c->s, 2 * per);
        if (!op) {
            c->oom = true;
            return;
        }
        op->kind = KVR_BOP_STORE;
        op->tier = KVR_TIER_GPU;
        op->worker = c->worker;
        /* each page's parent is the page before it */
        op->has_parent = i ? true : has_parent;
        op->parent = i ? keys[i - 1] : parent;
        op->n = (uint32_t)per;
        memcpy(c->s->pool + op->off, keys + i, per * sizeof *keys);
        memcpy(c->s->pool + op->off + per, c->locals + first + i, per * sizeof *keys);
        uint32_t bs = c->s->block_size;
        if (c->tokens && keep_tokens(c->s, c->tokens + (first + i) * bs, per * bs, &op->tok_off))
            c->oom = true;
    }
}

int kvr_bench_build(const kvr_trace *t, const kvr_bench_config *cfg, kvr_bench_stream *out)
{
    memset(out, 0, sizeof *out);
    if (cfg->workers == 0 || cfg->block_size == 0)
        return -1;
    out->block_size = cfg->block_size;
    kvr_prefix_cache **caches = calloc(cfg->workers, sizeof *caches);
    size_t max_tokens = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t m = (size_t)t->reqs[i].n_hash_ids * KVR_TRACE_BLOCK_TOKENS;
        if (m > max_tokens)
            max_tokens = m;
    }
    uint32_t *tokens = malloc((max_tokens + 1) * sizeof *tokens);
    size_t max_blocks = max_tokens / cfg->block_size + 1;
    uint64_t *locals = malloc(max_blocks * sizeof *locals);
    uint64_t *keys = malloc(max_blocks * sizeof *keys);
    int rc = -1;
    if (!caches || !tokens || !locals || !keys)
        goto out;
    uint64_t rng = cfg->seed ? cfg->seed : 1;
    for (size_t i = 0; i < t->n; i++) {
        /* Weyl step + murmur finalizer: uniform worker choice, reproducible
         * from the seed (the published checksums depend on this sequence). */
        rng += 0x9E3779B97F4A7C15ULL;
        uint64_t w = kvr_mix64(rng) % cfg->workers;
        size_t nt = kvr_trace_tokens(&t->reqs[i], tokens, max_tokens);
        size_t nb = kvr_hash_blocks(tokens, nt, cfg->block_size, false, KVR_HASH_SEED, locals,
                                    max_blocks);
        if (nb == 0)
            continue;
        for (size_t b = 0; b < nb; b++)
            keys[b] = b ? kvr_hash_chain(keys[b - 1], locals[b]) : locals[0];
        kvr_bench_op *op = kvr_bench_push_op(out, nb);
        if (!op)
            goto out;
        op->kind = KVR_BOP_MATCH;
        op->n = (uint32_t)nb;
        memcpy(out->pool + op->off, locals, nb * sizeof *locals);
        if (!caches[w] && !(caches[w] = kvr_prefix_cache_create(cfg->capacity)))
            goto out;
        sink_ctx sc = {out, w, keys, locals, cfg->keep_tokens ? tokens : NULL, cfg->granularity,
                       false};
        kvr_prefix_cache_sink sink = {on_stored, on_evicted, &sc};
        kvr_prefix_cache_insert(caches[w], keys, nb, &sink);
        if (sc.oom)
            goto out;
    }
    rc = 0;
out:
    if (caches)
        for (uint32_t w = 0; w < cfg->workers; w++)
            kvr_prefix_cache_destroy(caches[w]);
    free(caches);
    free(tokens);
    free(locals);
    free(keys);
    if (rc < 0)
        kvr_bench_stream_free(out);
    return rc;
}

