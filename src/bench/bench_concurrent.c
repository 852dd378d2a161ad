/* Concurrent replay: one thread applies the stream's events as the facade
 * applies a batch (write lock held across slices, handed to waiting
 * matches), while the others match in a loop; reports both rates and how
 * long readers waited for the writer. */
#include "bench/bench.h"
#include "bench/sched_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "util/clock.h"

typedef struct {
    const kvr_bench_stream *s;
    kvr_index *idx;
    size_t first, step; /* this reader's share of the match ops */
    double *lat;      /* ring of the latest cap samples */
    size_t nlat, cap; /* nlat counts every match */
    atomic_bool *done;
    kvr_match_ctx_stats wait;
    double seconds;
    kvr_sched_log sched;
} reader_arg;

/* A scheduler sample every 100 us at most: ~2 % of a thread's time. */
#define SCHED_EVERY_NS 100000u

static void *reader_main(void *p)
{
    reader_arg *a = p;
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    if (!ctx)
        return NULL;
    kvr_sched_log_open(&a->sched, SCHED_EVERY_NS, kvr_index_now_ns());
    /* Keep matching (cycling through this reader's share of the requests)
     * for as long as the writer ingests, so the rates overlap in time. */
    double t0 = kvr_clock_seconds(CLOCK_MONOTONIC);
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
            uint64_t b = kvr_index_now_ns();
            kvr_index_match(a->idx, ctx, a->s->pool + op->off, op->n, &res);
            uint64_t e = kvr_index_now_ns();
            a->lat[a->nlat++ % a->cap] = (double)(e - b) / 1e9;
            kvr_sched_log_take(&a->sched, e, 0);
            any = true;
        }
        pass++;
    } while (any && !atomic_load(a->done));
    a->seconds = kvr_clock_seconds(CLOCK_MONOTONIC) - t0;
    kvr_sched_log_take(&a->sched, kvr_index_now_ns(), 1);
    kvr_match_ctx_stats_get(ctx, &a->wait);
    kvr_match_ctx_destroy(ctx);
    return NULL;
}

/* Keeps the writer's three longest events (microseconds, under the lock). */
static void note_event(kvr_bench_result *r, const kvr_bench_stream *s, size_t op, double us)
{
    if (us >= 1000)
        r->writer_events_over_1ms++;
    int k = 3;
    while (k > 0 && us > r->writer_longest[k - 1].us)
        k--;
    if (k == 3)
        return;
    memmove(&r->writer_longest[k + 1], &r->writer_longest[k],
            (size_t)(2 - k) * sizeof r->writer_longest[0]);
    r->writer_longest[k].us = us;
    r->writer_longest[k].kind = s->ops[op].kind;
    r->writer_longest[k].n = s->ops[op].n;
    r->writer_longest[k].op = op;
}

/* Every event of the stream on a fresh index, each timed in thread CPU
 * time; keeps the longest (r->event_cpu_max) apart from those that rebuilt
 * a large table: that part runs under a read lock, so matches do not wait
 * for it (r->rebuild_cpu_max_us). */
#define REBUILD_MIN_US 100.0 /* no table kvr_tree_fit rebuilds outside the write lock is faster */
static int longest_event_cpu(const kvr_bench_stream *s, kvr_bench_result *r)
{
    kvr_index *idx = kvr_index_create();
    kvr_owner *owners = idx ? kvr_bench_owners(idx, s) : NULL;
    if (!owners) {
        kvr_index_destroy(idx);
        return -1;
    }
    kvr_bench_result scratch = {0};
    memset(&r->event_cpu_max, 0, sizeof r->event_cpu_max);
    r->rebuild_cpu_max_us = 0;
    uint64_t rebuilds = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->ops[i].kind == KVR_BOP_MATCH)
            continue;
        double a = kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
        kvr_bench_apply_event(idx, s, &s->ops[i], owners[i], false, &scratch);
        double us = (kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - a) * 1e6;
        if (us < REBUILD_MIN_US && us <= r->event_cpu_max.us)
            continue;
        kvr_index_stats st;
        kvr_index_stats_get(idx, &st);
        if (st.table_rebuilds != rebuilds) {
            rebuilds = st.table_rebuilds;
            if (us > r->rebuild_cpu_max_us)
                r->rebuild_cpu_max_us = us;
        } else if (us > r->event_cpu_max.us) {
            r->event_cpu_max.us = us;
            r->event_cpu_max.kind = s->ops[i].kind;
            r->event_cpu_max.n = s->ops[i].n;
            r->event_cpu_max.op = i;
        }
    }
    r->table_rebuilds = rebuilds;
    free(owners);
    kvr_index_destroy(idx);
    return 0;
}

/* Of a wait of wait_ns inside the span, the queued time that must have
 * fallen within the wait (all of the span outside it could have been). */
static double queued_within(const kvr_sched_span *sp, uint64_t wait_ns)
{
    uint64_t outside = sp->to_ns - sp->from_ns - wait_ns;
    return sp->queued_ns > outside ? (double)(sp->queued_ns - outside) / 1e3 : 0;
}

/* Lines the longest reader wait up with both threads' scheduler logs. */
static void explain_longest_wait(const reader_arg *ra, int nr, const kvr_sched_log *writer,
                                 kvr_bench_result *r)
{
    memset(&r->wait_why, 0, sizeof r->wait_why);
    const reader_arg *w = NULL;
    for (int t = 0; t < nr; t++)
        if (ra[t].wait.max_wait_ns && (!w || ra[t].wait.max_wait_ns > w->wait.max_wait_ns))
            w = &ra[t];
    if (!w)
        return;
    uint64_t to = w->wait.max_wait_end_ns, from = to - w->wait.max_wait_ns;
    kvr_sched_span ws, rs;
    if (!kvr_sched_log_span(writer, from, to, &ws) || !kvr_sched_log_span(&w->sched, from, to, &rs))
        return;
    r->wait_why.known = true;
    r->wait_why.span_us = (double)(ws.to_ns - ws.from_ns) / 1e3;
    r->wait_why.writer_run_us = (double)ws.run_ns / 1e3;
    r->wait_why.writer_queued_us = (double)ws.queued_ns / 1e3;
    r->wait_why.writer_queued_min_us = queued_within(&ws, to - from);
    r->wait_why.reader_queued_min_us = queued_within(&rs, to - from);
}

int kvr_bench_replay_concurrent(const kvr_bench_stream *s, int threads, kvr_bench_result *r)
{
    r->threads = threads;
    if (threads < 2)
        return 0;
    int nr = threads - 1;
    kvr_index *idx = kvr_index_create();
    kvr_owner *owners = idx ? kvr_bench_owners(idx, s) : NULL;
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
        ra[t] = (reader_arg){s, idx, (size_t)t, (size_t)nr, NULL, 0, cap, &done, {0}, 0, {.fd = -1}};
        ra[t].lat = malloc(cap * sizeof(double));
        if (!ra[t].lat || pthread_create(&th[t], NULL, reader_main, &ra[t]) != 0)
            break;
        started++;
    }
    double t0 = kvr_clock_seconds(CLOCK_MONOTONIC);
    kvr_bench_result scratch = {0};
    uint64_t events = 0;
    /* One writer holding the lock across slices of events, handing it to
     * waiting matches between events, as the facade applies a batch. */
    struct rusage u0, u1;
    getrusage(RUSAGE_THREAD, &u0);
    memset(r->writer_longest, 0, sizeof r->writer_longest);
    r->writer_events_over_1ms = 0;
    kvr_sched_log wlog;
    kvr_sched_log_open(&wlog, SCHED_EVERY_NS, kvr_index_now_ns());
    kvr_index_write_begin(idx);
    uint64_t slice = kvr_index_now_ns();
    for (size_t i = 0; i < s->n; i++)
        if (s->ops[i].kind != KVR_BOP_MATCH) {
            uint64_t a = kvr_index_now_ns();
            kvr_bench_apply_event(idx, s, &s->ops[i], owners[i], true, &scratch);
            uint64_t e = kvr_index_now_ns();
            note_event(r, s, i, (double)(e - a) / 1e3);
            kvr_sched_log_take(&wlog, e, 0);
            events++;
            kvr_index_write_yield(idx, &slice);
        }
    kvr_index_write_end(idx);
    kvr_sched_log_take(&wlog, kvr_index_now_ns(), 1);
    double ingest = kvr_clock_seconds(CLOCK_MONOTONIC) - t0;
    getrusage(RUSAGE_THREAD, &u1);
    r->writer_page_faults = (uint64_t)(u1.ru_minflt - u0.ru_minflt);
    r->writer_preemptions = (uint64_t)(u1.ru_nivcsw - u0.ru_nivcsw);
    r->writer_sys_seconds = (double)(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) +
                            (double)(u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) * 1e-6;
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
    r->conc_seconds = kvr_clock_seconds(CLOCK_MONOTONIC) - t0;
    explain_longest_wait(ra, started, &wlog, r);
    r->writer_queued_s =
        wlog.n ? (double)(wlog.v[wlog.n - 1].queued_ns - wlog.v[0].queued_ns) / 1e9 : 0;
    kvr_sched_log_close(&wlog);
    r->conc_events_per_s = ingest > 0 ? (double)events / ingest : 0;
    r->conc_matches_per_s = reader_s > 0 ? (double)matches / reader_s : 0;
    r->conc_match_p50_us = kvr_bench_percentile(lat, nl, 0.50) * 1e6;
    r->conc_match_p99_us = kvr_bench_percentile(lat, nl, 0.99) * 1e6;
    rc = started == nr && longest_event_cpu(s, r) == 0 ? 0 : -1;
out:
    if (ra)
        for (int t = 0; t < nr; t++) {
            free(ra[t].lat);
            if (t < started) /* the others never opened theirs */
                kvr_sched_log_close(&ra[t].sched);
        }
    free(ra);
    free(th);
    free(lat);
    free(owners);
    kvr_index_destroy(idx);
    return rc;
}

