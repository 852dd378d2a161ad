#include "sim/bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/hash.h"
#include "mock/clock.h"
#include "mock/prefix_cache.h"
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
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 1024;
        kvr_bench_op *n = realloc(s->ops, ncap * sizeof *n);
        if (!n)
            return NULL;
        s->ops = n;
        s->cap = ncap;
    }
    if (s->pool_len + pool_need > s->pool_cap) {
        size_t ncap = s->pool_cap ? s->pool_cap : 1 << 16;
        while (ncap < s->pool_len + pool_need)
            ncap *= 2;
        uint64_t *n = realloc(s->pool, ncap * sizeof *n);
        if (!n)
            return NULL;
        s->pool = n;
        s->pool_cap = ncap;
    }
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
    if (s->tok_len + n > s->tok_cap) {
        size_t ncap = s->tok_cap ? s->tok_cap : 1 << 16;
        while (ncap < s->tok_len + n)
            ncap *= 2;
        uint32_t *nt = realloc(s->tok, ncap * sizeof *nt);
        if (!nt)
            return -1;
        s->tok = nt;
        s->tok_cap = ncap;
    }
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

/* ---- replay ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Owner id per op, created up front so the timed loop only replays. */
static kvr_owner *map_owners(kvr_index *idx, const kvr_bench_stream *s)
{
    kvr_owner *o = malloc((s->n ? s->n : 1) * sizeof *o);
    if (!o)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        o[i] = s->ops[i].kind == KVR_BOP_MATCH
                   ? KVR_OWNER_NONE
                   : kvr_index_owner(idx, s->ops[i].worker, s->ops[i].rank);
    return o;
}

/* locked: the caller holds the write lock (kvr_index_write_begin). */
static void apply_event(kvr_index *idx, const kvr_bench_stream *s, const kvr_bench_op *op,
                        kvr_owner o, bool locked, kvr_bench_result *r)
{
    const uint64_t *p = s->pool + op->off;
    kvr_tier tier = (kvr_tier)op->tier;
    switch (op->kind) {
    case KVR_BOP_STORE:
        if ((locked ? kvr_index_store_locked(idx, o, tier, op->has_parent, op->parent, p,
                                             p + op->n, op->n)
                    : kvr_index_store(idx, o, tier, op->has_parent, op->parent, p, p + op->n,
                                      op->n)) != KVR_DROP_NONE)
            r->parent_not_found++;
        break;
    case KVR_BOP_REMOVE:
        r->unknown_removes += locked ? kvr_index_remove_locked(idx, o, tier, p, op->n)
                                     : kvr_index_remove(idx, o, tier, p, op->n);
        break;
    case KVR_BOP_CLEAR:
        if (locked)
            kvr_index_clear_owner_locked(idx, o);
        else
            kvr_index_clear_owner(idx, o);
        break;
    default:
        break;
    }
}

/* End of the run of stores starting at op i that continue each other (same
 * owner and tier, each parented on the previous one's last block), at most
 * max_blocks blocks; *blocks gets their count. */
static size_t store_run(const kvr_bench_stream *s, const kvr_owner *owners, size_t i,
                        uint32_t max_blocks, size_t *blocks)
{
    const kvr_bench_op *a = &s->ops[i];
    size_t j = i + 1, nb = a->n;
    for (; j < s->n; j++) {
        const kvr_bench_op *b = &s->ops[j], *prev = &s->ops[j - 1];
        if (b->kind != KVR_BOP_STORE || owners[j] != owners[i] || b->tier != a->tier ||
            !b->has_parent || b->parent != s->pool[prev->off + prev->n - 1] ||
            nb + b->n > max_blocks)
            break;
        nb += b->n;
    }
    *blocks = nb;
    return j;
}

/* One kvr_index_store for the run [i, end): engine then local hashes of
 * every op, gathered in scratch (2 * max blocks). */
static void apply_run(kvr_index *idx, const kvr_bench_stream *s, const kvr_owner *owners,
                      size_t i, size_t end, size_t nb, uint64_t *scratch, kvr_bench_result *r)
{
    size_t at = 0;
    for (size_t k = i; k < end; k++) {
        const kvr_bench_op *op = &s->ops[k];
        memcpy(scratch + at, s->pool + op->off, op->n * sizeof *scratch);
        memcpy(scratch + nb + at, s->pool + op->off + op->n, op->n * sizeof *scratch);
        at += op->n;
    }
    const kvr_bench_op *a = &s->ops[i];
    if (kvr_index_store(idx, owners[i], (kvr_tier)a->tier, a->has_parent, a->parent, scratch,
                        scratch + nb, nb) != KVR_DROP_NONE)
        r->parent_not_found++;
}

int kvr_bench_replay(const kvr_bench_stream *s, kvr_bench_result *r)
{
    return kvr_bench_replay_coalesced(s, 0, r);
}

int kvr_bench_replay_coalesced(const kvr_bench_stream *s, uint32_t coalesce, kvr_bench_result *r)
{
    kvr_index *idx = kvr_index_create();
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    kvr_owner *owners = idx ? map_owners(idx, s) : NULL;
    double *lat = malloc((s->n ? s->n : 1) * sizeof *lat);
    uint64_t *scratch = coalesce > 1 ? malloc(2 * (size_t)coalesce * sizeof *scratch) : NULL;
    int rc = -1;
    if (!idx || !ctx || !owners || !lat || (coalesce > 1 && !scratch))
        goto out;
    r->events = r->matches = r->event_blocks = r->match_blocks = r->checksum = 0;
    r->parent_not_found = r->unknown_removes = 0;
    kvr_index_stats base;
    kvr_index_stats_get(idx, &base);
    r->bytes_baseline = base.bytes;
    double t0 = kvr_sim_seconds(CLOCK_MONOTONIC), c0 = kvr_sim_seconds(CLOCK_THREAD_CPUTIME_ID);
    for (size_t i = 0; i < s->n; i++) {
        const kvr_bench_op *op = &s->ops[i];
        if (op->kind != KVR_BOP_MATCH) {
            size_t nb, end;
            if (coalesce > 1 && op->kind == KVR_BOP_STORE && op->n <= coalesce &&
                (end = store_run(s, owners, i, coalesce, &nb)) > i + 1) {
                apply_run(idx, s, owners, i, end, nb, scratch, r);
                r->events += end - i;
                r->event_blocks += nb;
                i = end - 1;
                continue;
            }
            apply_event(idx, s, op, owners[i], false, r);
            r->events++;
            r->event_blocks += op->n;
            continue;
        }
        const kvr_match_entry *res;
        double a = kvr_sim_seconds(CLOCK_MONOTONIC);
        size_t k = kvr_index_match(idx, ctx, s->pool + op->off, op->n, &res);
        lat[r->matches++] = kvr_sim_seconds(CLOCK_MONOTONIC) - a;
        r->match_blocks += op->n;
        for (size_t j = 0; j < k; j++)
            r->checksum += res[j].gpu_blocks;
    }
    r->seconds = kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
    r->cpu_seconds = kvr_sim_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
    kvr_index_stats_get(idx, &r->stats);
    r->match_p50_us = percentile(lat, r->matches, 0.50) * 1e6;
    r->match_p99_us = percentile(lat, r->matches, 0.99) * 1e6;
    r->match_max_us = r->matches ? lat[r->matches - 1] * 1e6 : 0;
    /* The first pass is the figure; two more keep each request's fastest
     * time, which separates the index's own latency from the machine
     * stopping the thread mid-call (timer ticks, other processes). */
    double *fastest = malloc((r->matches ? r->matches : 1) * sizeof *fastest);
    size_t ns = 0;
    for (int pass = 0; pass < (fastest ? KVR_BENCH_SHORT_PASSES : 1); pass++) {
        ns = 0;
        for (size_t i = 0; i < s->n; i++) {
            const kvr_bench_op *op = &s->ops[i];
            if (op->kind != KVR_BOP_MATCH)
                continue;
            const kvr_match_entry *res;
            uint32_t n = op->n < KVR_BENCH_SHORT ? op->n : KVR_BENCH_SHORT;
            double a = kvr_sim_seconds(CLOCK_MONOTONIC);
            kvr_index_match(idx, ctx, s->pool + op->off, n, &res);
            double dt = kvr_sim_seconds(CLOCK_MONOTONIC) - a;
            if (pass == 0)
                lat[ns] = dt;
            if (fastest && (pass == 0 || dt < fastest[ns]))
                fastest[ns] = dt;
            ns++;
        }
    }
    r->short_p50_us = percentile(lat, ns, 0.50) * 1e6;
    r->short_p99_us = percentile(lat, ns, 0.99) * 1e6;
    r->short_fastest_p50_us = fastest ? percentile(fastest, ns, 0.50) * 1e6 : 0;
    r->short_fastest_p99_us = fastest ? percentile(fastest, ns, 0.99) * 1e6 : 0;
    free(fastest);
    /* memory must return to the baseline once every owner is gone */
    for (size_t i = 0; i < s->n; i++)
        if (owners[i] != KVR_OWNER_NONE)
            kvr_index_clear_owner(idx, owners[i]);
    kvr_index_stats end;
    kvr_index_stats_get(idx, &end);
    r->bytes_after_clear = end.bytes;
    rc = 0;
out:
    free(scratch);
    free(lat);
    free(owners);
    kvr_match_ctx_destroy(ctx);
    kvr_index_destroy(idx);
    return rc;
}

/* ---- concurrent replay: events on one thread, matches on the others ---- */

typedef struct {
    const kvr_bench_stream *s;
    kvr_index *idx;
    size_t first, step; /* this reader's share of the match ops */
    double *lat;      /* ring of the latest cap samples */
    size_t nlat, cap; /* nlat counts every match */
    atomic_bool *done;
    kvr_match_ctx_stats wait;
    double seconds;
} reader_arg;

static void *reader_main(void *p)
{
    reader_arg *a = p;
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    if (!ctx)
        return NULL;
    /* Keep matching (cycling through this reader's share of the requests)
     * for as long as the writer ingests, so the rates overlap in time. */
    double t0 = kvr_sim_seconds(CLOCK_MONOTONIC);
    bool any = false;
    int pass = 0;
    do {
        size_t seen = 0;
        /* the first pass always completes, so short streams still measure */
        for (size_t i = 0; i < a->s->n && (pass == 0 || !atomic_load(a->done)); i++) {
            const kvr_bench_op *op = &a->s->ops[i];
            if (op->kind != KVR_BOP_MATCH || seen++ % a->step != a->first)
                continue;
            const kvr_match_entry *res;
            double b = kvr_sim_seconds(CLOCK_MONOTONIC);
            kvr_index_match(a->idx, ctx, a->s->pool + op->off, op->n, &res);
            a->lat[a->nlat++ % a->cap] = kvr_sim_seconds(CLOCK_MONOTONIC) - b;
            any = true;
        }
        pass++;
    } while (any && !atomic_load(a->done));
    a->seconds = kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
    kvr_match_ctx_stats_get(ctx, &a->wait);
    kvr_match_ctx_destroy(ctx);
    return NULL;
}

int kvr_bench_replay_concurrent(const kvr_bench_stream *s, int threads, kvr_bench_result *r)
{
    r->threads = threads;
    if (threads < 2)
        return 0;
    int nr = threads - 1;
    kvr_index *idx = kvr_index_create();
    kvr_owner *owners = idx ? map_owners(idx, s) : NULL;
    reader_arg *ra = calloc((size_t)nr, sizeof *ra);
    pthread_t *th = calloc((size_t)nr, sizeof *th);
    double *lat = malloc((s->n ? s->n : 1) * sizeof *lat);
    int rc = -1, started = 0;
    if (!idx || !owners || !ra || !th || !lat)
        goto out;
    atomic_bool done;
    atomic_init(&done, false);
    size_t cap = s->n ? s->n : 1;
    for (int t = 0; t < nr; t++) {
        ra[t] = (reader_arg){s, idx, (size_t)t, (size_t)nr, NULL, 0, cap, &done, {0}, 0};
        ra[t].lat = malloc(cap * sizeof(double));
        if (!ra[t].lat || pthread_create(&th[t], NULL, reader_main, &ra[t]) != 0)
            break;
        started++;
    }
    double t0 = kvr_sim_seconds(CLOCK_MONOTONIC);
    kvr_bench_result scratch = {0};
    uint64_t events = 0;
    /* One writer holding the lock across slices of events, handing it to
     * waiting matches between events, as the facade applies a batch. */
    kvr_index_write_begin(idx);
    uint64_t slice = kvr_index_now_ns();
    for (size_t i = 0; i < s->n; i++)
        if (s->ops[i].kind != KVR_BOP_MATCH) {
            apply_event(idx, s, &s->ops[i], owners[i], true, &scratch);
            events++;
            kvr_index_write_yield(idx, &slice);
        }
    kvr_index_write_end(idx);
    double ingest = kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
    atomic_store(&done, true);
    size_t nl = 0;
    uint64_t matches = 0;
    double reader_s = 0;
    r->reader_waits = 0;
    r->reader_wait_total_ms = r->reader_wait_max_us = 0;
    for (int t = 0; t < started; t++) {
        pthread_join(th[t], NULL);
        size_t kept = ra[t].nlat < ra[t].cap ? ra[t].nlat : ra[t].cap;
        if (nl + kept > cap)
            kept = cap - nl;
        memcpy(lat + nl, ra[t].lat, kept * sizeof *lat);
        nl += kept;
        matches += ra[t].nlat;
        if (ra[t].seconds > reader_s)
            reader_s = ra[t].seconds;
        r->reader_waits += ra[t].wait.waits;
        r->reader_wait_total_ms += (double)ra[t].wait.wait_ns / 1e6;
        if ((double)ra[t].wait.max_wait_ns / 1e3 > r->reader_wait_max_us)
            r->reader_wait_max_us = (double)ra[t].wait.max_wait_ns / 1e3;
    }
    r->conc_seconds = kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
    r->conc_events_per_s = ingest > 0 ? (double)events / ingest : 0;
    r->conc_matches_per_s = reader_s > 0 ? (double)matches / reader_s : 0;
    r->conc_match_p50_us = percentile(lat, nl, 0.50) * 1e6;
    r->conc_match_p99_us = percentile(lat, nl, 0.99) * 1e6;
    rc = started == nr ? 0 : -1;
out:
    if (ra)
        for (int t = 0; t < nr; t++)
            free(ra[t].lat);
    free(ra);
    free(th);
    free(lat);
    free(owners);
    kvr_index_destroy(idx);
    return rc;
}
