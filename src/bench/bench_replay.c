/* Replay of a bench stream through the index on one thread, timed: events
 * (optionally coalesced into runs, as the facade does) and matches in
 * stream order; then 128-block matches against the final index, and a clear
 * of every owner that must bring the index back to its starting bytes. */
#include "bench/bench.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "util/clock.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double kvr_bench_percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Owner id per op, created up front so the timed loop only replays. */
kvr_owner *kvr_bench_owners(kvr_index *idx, const kvr_bench_stream *s)
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

void kvr_bench_apply_event(kvr_index *idx, const kvr_bench_stream *s, const kvr_bench_op *op,
                           kvr_owner o, bool locked, kvr_bench_result *r)
{
    const uint64_t *p = s->pool + op->off;
    kvr_tier tier = (kvr_tier)op->tier;
    switch (op->kind) {
    case KVR_BOP_STORE:;
        int64_t added; /* the indexer's occupancy count: part of the store's cost */
        if ((locked ? kvr_index_store_locked(idx, o, tier, op->has_parent, op->parent, p,
                                             p + op->n, op->n, &added)
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

/* Every op of the stream in order; `sum`: add each match's gpu_blocks into
 * r->checksum (reading ~460 entries a match with 1000 owners, a third of
 * the replay's instructions on conv1000: the bench's work, not the
 * index's). Inlined into the two passes below. */
static inline __attribute__((always_inline)) void
replay(kvr_index *idx, kvr_match_ctx *ctx, const kvr_bench_stream *s, const kvr_owner *owners,
       uint32_t coalesce, uint64_t *scratch, double *lat, kvr_bench_result *r, bool sum)
{
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
            kvr_bench_apply_event(idx, s, op, owners[i], false, r);
            r->events++;
            r->event_blocks += op->n;
            continue;
        }
        const kvr_match_entry *res;
        double a = kvr_clock_seconds(CLOCK_MONOTONIC);
        size_t k = kvr_index_match(idx, ctx, s->pool + op->off, op->n, &res);
        lat[r->matches++] = kvr_clock_seconds(CLOCK_MONOTONIC) - a;
        r->match_blocks += op->n;
        if (sum) {
            /* a local sum: through r the compiler reloads it for every entry */
            uint64_t c = 0;
            for (size_t j = 0; j < k; j++)
                c += res[j].gpu_blocks;
            r->checksum += c;
        }
    }
}

/* The timed replay, the index's work only (its own function, so profilers
 * can select exactly it: valgrind --toggle-collect=replay_ops). */
__attribute__((noinline)) static void replay_ops(kvr_index *idx, kvr_match_ctx *ctx,
                                                 const kvr_bench_stream *s,
                                                 const kvr_owner *owners, uint32_t coalesce,
                                                 uint64_t *scratch, double *lat,
                                                 kvr_bench_result *r)
{
    replay(idx, ctx, s, owners, coalesce, scratch, lat, r, false);
}

/* The same replay on a fresh index, summing the match results. */
__attribute__((noinline)) static void replay_checksum(kvr_index *idx, kvr_match_ctx *ctx,
                                                      const kvr_bench_stream *s,
                                                      const kvr_owner *owners,
                                                      uint32_t coalesce, uint64_t *scratch,
                                                      double *lat, kvr_bench_result *r)
{
    replay(idx, ctx, s, owners, coalesce, scratch, lat, r, true);
}

/* The checksum, from a second replay on its own index, timed as the first
 * (r->checksum_seconds, r->checksum_cpu_seconds). It runs after the timed
 * one, which so keeps the heap and caches a single replay would find.
 * -1 on OOM. */
static int checksum_pass(const kvr_bench_stream *s, uint32_t coalesce, uint64_t *scratch,
                         double *lat, kvr_bench_result *r)
{
    kvr_index *idx = kvr_index_create();
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    kvr_owner *owners = idx ? kvr_bench_owners(idx, s) : NULL;
    int rc = -1;
    if (idx && ctx && owners) {
        kvr_bench_result t = {0};
        double t0 = kvr_clock_seconds(CLOCK_MONOTONIC),
               c0 = kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
        replay_checksum(idx, ctx, s, owners, coalesce, scratch, lat, &t);
        r->checksum_seconds = kvr_clock_seconds(CLOCK_MONOTONIC) - t0;
        r->checksum_cpu_seconds = kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
        r->checksum = t.checksum;
        rc = 0;
    }
    free(owners);
    kvr_match_ctx_destroy(ctx);
    kvr_index_destroy(idx);
    return rc;
}

int kvr_bench_replay(const kvr_bench_stream *s, kvr_bench_result *r)
{
    return kvr_bench_replay_coalesced(s, 0, r);
}

int kvr_bench_replay_coalesced(const kvr_bench_stream *s, uint32_t coalesce, kvr_bench_result *r)
{
    kvr_index *idx = kvr_index_create();
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    kvr_owner *owners = idx ? kvr_bench_owners(idx, s) : NULL;
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
    struct rusage u0, u1;
    getrusage(RUSAGE_THREAD, &u0);
    double t0 = kvr_clock_seconds(CLOCK_MONOTONIC), c0 = kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
    replay_ops(idx, ctx, s, owners, coalesce, scratch, lat, r);
    getrusage(RUSAGE_THREAD, &u1);
    r->page_faults = (uint64_t)(u1.ru_minflt - u0.ru_minflt);
    r->sys_seconds = (double)(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) +
                     (double)(u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) * 1e-6;
    r->seconds = kvr_clock_seconds(CLOCK_MONOTONIC) - t0;
    r->cpu_seconds = kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
    kvr_index_stats_get(idx, &r->stats);
    r->match_p50_us = kvr_bench_percentile(lat, r->matches, 0.50) * 1e6;
    r->match_p99_us = kvr_bench_percentile(lat, r->matches, 0.99) * 1e6;
    r->match_max_us = r->matches ? lat[r->matches - 1] * 1e6 : 0;
    if (checksum_pass(s, coalesce, scratch, lat, r) < 0)
        goto out;
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
            double a = kvr_clock_seconds(CLOCK_MONOTONIC);
            kvr_index_match(idx, ctx, s->pool + op->off, n, &res);
            double dt = kvr_clock_seconds(CLOCK_MONOTONIC) - a;
            if (pass == 0)
                lat[ns] = dt;
            if (fastest && (pass == 0 || dt < fastest[ns]))
                fastest[ns] = dt;
            ns++;
        }
    }
    r->short_p50_us = kvr_bench_percentile(lat, ns, 0.50) * 1e6;
    r->short_p99_us = kvr_bench_percentile(lat, ns, 0.99) * 1e6;
    r->short_fastest_p50_us = fastest ? kvr_bench_percentile(fastest, ns, 0.50) * 1e6 : 0;
    r->short_fastest_p99_us = fastest ? kvr_bench_percentile(fastest, ns, 0.99) * 1e6 : 0;
    free(fastest);
    /* memory must return to the baseline once every owner is gone; each
     * clear holds the write lock throughout, so its time is a reader's wait */
    r->clears = 0;
    r->clear_max_us = 0;
    bool *cleared = calloc(r->stats.owners + 1, sizeof *cleared);
    for (size_t i = 0; i < s->n; i++) {
        kvr_owner o = owners[i];
        if (o == KVR_OWNER_NONE || (cleared && (o > r->stats.owners || cleared[o])))
            continue;
        double a = kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
        kvr_index_clear_owner(idx, o);
        double us = (kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - a) * 1e6;
        if (cleared)
            cleared[o] = true;
        r->clears++;
        if (us > r->clear_max_us)
            r->clear_max_us = us;
    }
    free(cleared);
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

