/* `kvrouter bench` (SPEC §9): builds the event stream a fleet of mock
 * engines would publish for a trace, then replays it through the index API
 * and measures it. The stream is explicit (and can be written as JSON lines)
 * so another implementation can replay exactly the same work. */
#ifndef KVR_BENCH_BENCH_H
#define KVR_BENCH_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvrouter/common.h"
#include "kvrouter/index.h"
#include "mock/trace.h"

typedef enum { KVR_BOP_STORE = 0, KVR_BOP_REMOVE, KVR_BOP_CLEAR, KVR_BOP_MATCH } kvr_bench_op_kind;

typedef struct {
    uint8_t kind;
    uint8_t tier;
    bool has_parent;
    uint32_t rank;
    uint32_t n;      /* blocks (store), hashes (remove, match) */
    uint64_t worker;
    uint64_t parent;
    size_t off;      /* into pool: store = n engine then n local; remove/match = n hashes */
    size_t tok_off;  /* store, when the stream keeps tokens: n * block_size into tok */
} kvr_bench_op;

typedef struct {
    kvr_bench_op *ops;
    size_t n, cap;
    uint64_t *pool;
    size_t pool_len, pool_cap;
    /* The stored blocks' tokens (kvr_bench_config.keep_tokens), for replays
     * that hash them again (--pipeline); NULL otherwise. */
    uint32_t *tok;
    size_t tok_len, tok_cap;
    uint32_t block_size;
} kvr_bench_stream;

#define KVR_BENCH_SHORT 128
#define KVR_BENCH_SHORT_PASSES 3

/* How many blocks one event carries. SGLang publishes one BlockStored per
 * page (parent = the previous page) and one BlockRemoved per evicted page;
 * vLLM one event per batch of blocks. The checksum does not depend on it. */
typedef enum { KVR_BENCH_SGLANG = 0, KVR_BENCH_VLLM = 1 } kvr_bench_granularity;

typedef struct {
    uint32_t workers;
    size_t capacity;     /* blocks per mock engine */
    uint32_t block_size;
    uint64_t seed;       /* worker assignment */
    kvr_bench_granularity granularity;
    bool keep_tokens;    /* fill kvr_bench_stream.tok */
} kvr_bench_config;

void kvr_bench_stream_free(kvr_bench_stream *s);
/* Requests in trace order, each on a worker drawn uniformly (seeded); one
 * match (the request's local hashes) then the engine's remove/store events
 * for it. Engine hashes are chain keys (kvr_hash_chain). 0 ok, -1 OOM. */
int kvr_bench_build(const kvr_trace *t, const kvr_bench_config *cfg, kvr_bench_stream *out);

/* JSON lines, one op each, u64 as decimal integers (bench_events.c). */
int kvr_bench_write_events(const kvr_bench_stream *s, FILE *f);
/* Returns 0, or -1 with err naming the line and field. */
int kvr_bench_read_events(const char *path, kvr_bench_stream *out, char *err, size_t errlen);

typedef struct {
    /* sequential replay on one thread */
    double seconds;
    double cpu_seconds; /* thread CPU time of the replay (robust on a busy machine) */
    double sys_seconds; /* of which in the kernel (page faults of a growing index) */
    /* seconds and cpu_seconds time the index's work only; the checksum
     * comes from a second replay that also reads every match result, timed
     * as checksum_seconds, checksum_cpu_seconds */
    double checksum_seconds, checksum_cpu_seconds;
    uint64_t page_faults; /* minor faults during the replay */
    uint64_t events, matches, event_blocks, match_blocks;
    uint64_t parent_not_found, unknown_removes;
    double match_p50_us, match_p99_us, match_max_us;
    /* the same requests cut to their first KVR_BENCH_SHORT blocks, matched
     * against the final index after the replay */
    double short_p50_us, short_p99_us;
    /* each request's fastest of KVR_BENCH_SHORT_PASSES passes (0 on OOM) */
    double short_fastest_p50_us, short_fastest_p99_us;
    uint64_t checksum; /* sum of gpu_blocks over all match entries, mod 2^64 */
    kvr_index_stats stats;
    uint64_t bytes_baseline;    /* index bytes with the owners created, before any event */
    uint64_t bytes_after_clear; /* after the replay and clearing every owner */
    uint64_t clears;            /* owners cleared until none held anything */
    double clear_max_us;        /* the longest of those clears, thread CPU time */
    /* concurrent replay (threads > 1): one writer, threads-1 readers */
    int threads;
    double conc_seconds, conc_events_per_s, conc_matches_per_s;
    double conc_match_p50_us, conc_match_p99_us;
    uint64_t reader_waits;
    double reader_wait_total_ms, reader_wait_max_us;
    /* what the writer did meanwhile: its longest events (a reader's longest
     * wait is one of them, or the writer losing its core) */
    uint64_t writer_events_over_1ms, writer_page_faults;
    /* times the writer lost its core while it held the lock: a reader
     * waits as long as the writer is off the CPU */
    uint64_t writer_preemptions;
    double writer_sys_seconds;
    /* the writer's time runnable without a CPU over the ingest, and the
     * longest reader wait lined up with both threads' scheduler logs
     * (sched_log.h): over the sampled span around it (span_us, at least the
     * wait), the writer's time on its CPU and queued for one; of the wait
     * itself, at least writer_queued_min_us the writer was queued for a
     * core, and at least reader_queued_min_us the reader (woken, not yet
     * running). Not known without /proc/thread-self/schedstat or when no
     * reader waited. */
    double writer_queued_s;
    struct {
        bool known;
        double span_us, writer_run_us, writer_queued_us;
        double writer_queued_min_us, reader_queued_min_us;
    } wait_why;
    /* the longest event in thread CPU time, from an untimed replay of the
     * events alone (a clock read costs ~0.6 us here, too much for the timed
     * runs), apart from events that rebuilt a large table under a read lock
     * (table_rebuilds of them, the longest rebuild_cpu_max_us): without
     * preemption a reader waits at most one write slice plus this */
    struct {
        double us;
        uint8_t kind;
        uint32_t n;
        size_t op;
    } event_cpu_max;
    uint64_t table_rebuilds;
    double rebuild_cpu_max_us;
    struct {
        double us;
        uint8_t kind;
        uint32_t n;
        size_t op;
    } writer_longest[3];
} kvr_bench_result;

int kvr_bench_replay(const kvr_bench_stream *s, kvr_bench_result *r);
/* The same replay, but a run of stores that continue each other (same owner
 * and tier, each parented on the previous one's last block; SGLang's per-page
 * events of one request) goes to the index as one store of up to `coalesce`
 * blocks, as an ingestor holding a whole batch could do. Matches still see
 * whole events only. 0 or 1 = no coalescing. Same checksum. */
int kvr_bench_replay_coalesced(const kvr_bench_stream *s, uint32_t coalesce, kvr_bench_result *r);
int kvr_bench_replay_concurrent(const kvr_bench_stream *s, int threads, kvr_bench_result *r);

/* The stream as msgpack batches (SGLang tagged arrays; one batch per run of
 * one worker's events between matches, i.e. per request) applied through
 * the facade (kvr_batch_decode -> kvr_indexer_apply) on this thread; bench
 * workers register as legacy workers of model "bench" with the stream's
 * block size. Encoding is untimed; matches run through
 * kvr_indexer_match_hashes at their place in the stream, untimed, and sum
 * into checksum (equal to kvr_bench_replay's). Needs a stream built with
 * keep_tokens. 0 ok, -1 (no tokens, out of memory, registration failed). */
typedef struct {
    double seconds, cpu_seconds; /* decode + apply only */
    uint64_t batches, events, blocks, bytes; /* what was encoded */
    uint64_t bad_batches;       /* failed to decode (never expected) */
    uint64_t events_dropped;    /* by the facade, all reasons */
    uint64_t blocks_applied;    /* blocks stored + removed per the facade's counters */
    uint64_t matches, checksum;
} kvr_bench_pipeline_result;

int kvr_bench_pipeline(const kvr_bench_stream *s, kvr_bench_pipeline_result *r);

/* Internal, shared by the files of this layer. */
/* Appends an op with pool_need pool words (builder and reader). */
kvr_bench_op *kvr_bench_push_op(kvr_bench_stream *s, size_t pool_need);
/* Sorts v and returns its p-quantile (0 when n is 0). */
double kvr_bench_percentile(double *v, size_t n, double p);
/* Owner id per op (KVR_OWNER_NONE for matches), created before timing. */
kvr_owner *kvr_bench_owners(kvr_index *idx, const kvr_bench_stream *s);
/* Applies one store/remove/clear op, counting drops into r; locked: the
 * caller holds the write lock (kvr_index_write_begin). */
void kvr_bench_apply_event(kvr_index *idx, const kvr_bench_stream *s, const kvr_bench_op *op,
                           kvr_owner o, bool locked, kvr_bench_result *r);

#endif
