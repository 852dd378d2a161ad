/* ZeroMQ sources (SPEC §2): one SUB socket per registered (worker, dp_rank),
 * one ingest thread polling them all, per-rank sequence cursors with gap
 * replay through a DEALER, and every counter /workers and /metrics show.
 *
 * Threading: every mutation of the indexer (apply, clear, register,
 * unregister, load) happens on the ingest thread, so the indexer never sees
 * two writers. Other threads get there through kvr_source_run(), which runs a
 * function on the ingest thread between messages and waits for it. */
#ifndef KVROUTER_SOURCE_H
#define KVROUTER_SOURCE_H

#include "kvrouter/indexer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_source kvr_source;

typedef struct {
    uint32_t replay_timeout_ms; /* 0 -> 2000 */
    int rcv_hwm;                /* 0 -> 100000 */
    /* Payloads above max_message_bytes are refused before decoding and
     * counted (messages_over_limit); 0 -> 32 MiB. ZeroMQ itself disconnects
     * a peer whose message part exceeds max_msg_size (the memory bound of
     * a receive); 0 -> twice max_message_bytes, so an oversized batch
     * reaches the counter instead of only dropping the connection. */
    uint64_t max_message_bytes;
    int64_t max_msg_size;
    uint32_t poll_ms;           /* 0 -> 20 */
    uint32_t max_buffered;      /* live messages held during a replay; 0 -> 65536 */
    uint64_t max_buffered_bytes; /* and their bytes; 0 -> 256 MiB */
    /* ZeroMQ retries an unreachable engine every 100 ms, doubling up to
     * this: 1000 dead endpoints would otherwise cost 10,000 connects a
     * second. A returning engine waits at most this long. 0 -> 1000 */
    int reconnect_max_ms;
} kvr_source_config;

typedef enum {
    KVR_LISTENER_CONNECTING = 0, /* no message yet */
    KVR_LISTENER_LIVE = 1,
    KVR_LISTENER_REPLAYING = 2,
    KVR_LISTENER_STATE_COUNT
} kvr_listener_state;

const char *kvr_listener_state_name(kvr_listener_state s);

/* Counters of one (worker, socket rank), as one list: X(name, COUNTER|GAUGE,
 * "help"). The list expands into kvr_source_counters, its sum and its
 * descriptors (which /workers and /metrics render), so a new counter is one
 * line here plus the code that moves it. Names are the HTTP/metrics contract. */
#define KVR_SOURCE_COUNTERS(X)                                                             \
    X(messages, COUNTER, "live messages received, any shape")                              \
    X(batches, COUNTER, "batches applied")                                                 \
    X(events_stored, COUNTER, "store events in applied batches")                           \
    X(events_removed, COUNTER, "removal events in applied batches")                        \
    X(events_cleared, COUNTER, "clear events in applied batches")                          \
    X(events_dropped, COUNTER, "events of an unknown type in applied batches")             \
    X(blocks_stored, COUNTER, "blocks named by store events")                              \
    X(blocks_removed, COUNTER, "blocks named by removal events")                           \
    X(seq_gaps, COUNTER, "sequence numbers above the one expected")                        \
    X(lost_batches, COUNTER, "batches that no replay gave back")                           \
    X(replays_ok, COUNTER, "replays that covered what they asked for")                     \
    X(replays_failed, COUNTER, "replays that timed out, were unreachable or incomplete")   \
    X(replayed_batches, COUNTER, "batches applied from a replay")                          \
    X(duplicates_skipped, COUNTER, "batches skipped as already applied")                   \
    X(restarts, COUNTER, "engine restarts detected (a new sequence stream)")               \
    X(rank_clears, COUNTER, "rank clears forced by a restart or by history gone")          \
    X(bad_frames, COUNTER, "messages of the wrong shape")                                  \
    X(malformed_batches, COUNTER, "batches that did not decode")                           \
    X(messages_over_limit, COUNTER, "payloads refused: longer than max_message_bytes")

typedef struct {
#define KVR_SOURCE_COUNTER_FIELD_(name, kind, help) uint64_t name;
    KVR_SOURCE_COUNTERS(KVR_SOURCE_COUNTER_FIELD_)
#undef KVR_SOURCE_COUNTER_FIELD_
} kvr_source_counters;

/* The list above in order, for renderers that loop over it. */
extern const kvr_counter_desc kvr_source_counter_descs[];
extern const size_t kvr_source_counter_count;
/* a += b, every counter of the list (sums over the listeners of a worker). */
void kvr_source_counters_add(kvr_source_counters *a, const kvr_source_counters *b);

#define KVR_ENDPOINT_MAX 512
typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    char endpoint[KVR_ENDPOINT_MAX];
    char replay_endpoint[KVR_ENDPOINT_MAX]; /* "" when none */
    char topic[KVR_NAME_MAX];
    kvr_listener_state state;
    bool has_seq;
    uint64_t last_seq;
    double seconds_since_last_event; /* -1 when nothing arrived yet */
    kvr_source_counters c;
} kvr_listener_info;

void kvr_source_config_default(kvr_source_config *cfg);

/* Creates the source and starts its ingest thread. NULL on failure. */
kvr_source *kvr_source_create(kvr_indexer *ix, const kvr_source_config *cfg);
/* Stops the thread, closes every socket. The indexer is left alone. */
void kvr_source_destroy(kvr_source *src);

/* Runs fn(src, arg) on the ingest thread and waits for it. Inside fn, and
 * only there, the kvr_source_listen/unlisten/listeners calls below and any
 * indexer mutation are allowed. Returns 0, or -1 if the thread is gone. */
typedef void (*kvr_source_fn)(kvr_source *src, void *arg);
int kvr_source_run(kvr_source *src, kvr_source_fn fn, void *arg);

/* Inside kvr_source_run. Starts (or, when endpoint/topic/replay changed,
 * restarts) the listener of (w, rank). Returns 1 created, 0 unchanged,
 * 2 restarted, -1 on error (bad endpoint: nothing changed). */
int kvr_source_listen(kvr_source *src, kvr_worker *w, uint64_t worker_id, uint32_t rank,
                      const char *endpoint, const char *replay_endpoint, const char *topic);
/* Whether a ZeroMQ socket can connect to endpoint (syntax, transport);
 * lets callers reject a registration before changing anything. */
bool kvr_source_endpoint_valid(kvr_source *src, const char *endpoint);
/* Inside kvr_source_run. Stops the listener of (w, rank), or every listener
 * of w when rank == UINT32_MAX. Returns how many were stopped. */
size_t kvr_source_unlisten(kvr_source *src, kvr_worker *w, uint32_t rank);
/* Inside kvr_source_run. Forget the cursors of w's listeners (after its
 * state was reset): the next message starts over, replaying from 0 when a
 * replay endpoint is known. */
void kvr_source_reset_cursors(kvr_source *src, kvr_worker *w);
/* Inside kvr_source_run. Snapshot of w's listeners (all when w == NULL).
 * Returns the count; writes at most cap. */
size_t kvr_source_listeners(kvr_source *src, kvr_worker *w, kvr_listener_info *out, size_t cap);
/* Inside kvr_source_run. Number of listeners of w (all when w == NULL). */
size_t kvr_source_count(kvr_source *src, kvr_worker *w);

kvr_indexer *kvr_source_indexer(kvr_source *src);
/* Monotonic clock in seconds (the time base of every source timer). */
double kvr_source_now(void);

#ifdef __cplusplus
}
#endif
#endif
