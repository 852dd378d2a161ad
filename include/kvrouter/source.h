/* ZeroMQ sources (SPEC §2): one SUB socket per registered (worker, dp_rank),
 * one ingest thread waking on their descriptors (epoll), per-rank sequence
 * cursors with gap replay through a DEALER, and every counter /workers and
 * /metrics show.
 *
 * Threading: every mutation of the indexer (apply, clear, register,
 * unregister, load) happens on the ingest thread, so the indexer never sees
 * two writers. Other threads get there through kvr_source_run(), which runs a
 * function on the ingest thread between messages and waits for it.
 *
 * The sequence rule, per (worker, socket rank):
 * - The first message sets the cursor; above 0 with a usable replay endpoint,
 *   0.. is replayed first. What nobody replays is counted in lost_batches.
 * - seq == cursor + 1 applies. A higher number is a gap: replayed when the
 *   replay endpoint is usable, else counted as lost and applied (no clear).
 * - A lower number on the same connection is a restart: the rank is cleared
 *   and the new stream is taken from 0 (replayed when it can be).
 * - A reconnection (the SUB's monitor saw the connection drop and come back)
 *   is never taken for continuity: the next message may be a new stream.
 *   With a usable replay endpoint the router asks for its last applied
 *   number again and compares the payload: the same bytes mean the same
 *   stream (the gap, if any, is filled from that replay); other bytes or no
 *   such message mean a restart (rank cleared, replayed from 0). Without
 *   one, only the exact next number is taken as continuity; anything else
 *   is a restart, with its earlier batches counted as lost.
 * - A failed replay (timeout, unreachable, live buffer full) degrades to the
 *   no-replay rule for that gap and backs the endpoint off (1 s doubling to
 *   replay_backoff_max_ms) before it is tried again. A rank is cleared only
 *   for a restart or for history provably gone: a replay that starts later
 *   than asked or skips numbers. */
#ifndef KVROUTER_SOURCE_H
#define KVROUTER_SOURCE_H

#include "kvrouter/indexer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_source kvr_source;

typedef struct {
    uint32_t replay_timeout_ms; /* replay inactivity timeout; 0 -> 2000 */
    int rcv_hwm;                /* 0 -> 100000 */
    /* Payloads above max_message_bytes are refused before decoding and
     * counted (messages_over_limit); 0 -> 32 MiB. ZeroMQ itself disconnects
     * a peer whose message part exceeds max_msg_size (ZMQ_MAXMSGSIZE of every
     * SUB and DEALER, the memory bound of a receive); 0 -> twice
     * max_message_bytes, so an oversized batch reaches the counter instead of
     * only dropping the connection. */
    uint64_t max_message_bytes;
    int64_t max_msg_size;
    uint32_t max_buffered;      /* live messages held per listener during a replay or hold; 0 -> 65536 */
    uint64_t max_buffered_bytes; /* and their bytes; 0 -> 256 MiB */
    uint64_t max_buffered_total_bytes; /* over every listener; 0 -> 1 GiB */
    /* ZeroMQ retries an unreachable engine every 100 ms, doubling up to
     * this. A connection that drops starts again at 100 ms, so this bounds
     * only how late an engine unreachable for long is found. 0 -> 10000 */
    int reconnect_max_ms;
    /* a failed replay endpoint is not tried again for 1 s, doubling up to
     * this. 0 -> 60000 */
    uint32_t replay_backoff_max_ms;
    /* Descriptors a new listener must leave free for the rest of the
     * process (the HTTP server's connections): a listener is opened only
     * while KVR_LISTENER_FDS + fd_reserve descriptors are free under
     * RLIMIT_NOFILE. 0 -> 64. */
    size_t fd_reserve;
} kvr_source_config;

/* Descriptors one listener may hold: its SUB, the SUB's monitor and our end
 * of it (an eventfd each), the TCP connection, and while a gap is refilled a
 * replay DEALER, its monitor and our end of it, and its connection. */
#define KVR_LISTENER_FDS 8

typedef enum {
    KVR_LISTENER_CONNECTING = 0, /* no message yet */
    KVR_LISTENER_LIVE = 1,
    KVR_LISTENER_REPLAYING = 2,
    KVR_LISTENER_HELD = 3, /* peer recovery: buffering until the dump is loaded */
    KVR_LISTENER_STATE_COUNT
} kvr_listener_state;

/* The replay endpoint of a listener. */
typedef enum {
    KVR_REPLAY_NONE = 0, /* no replay endpoint registered */
    KVR_REPLAY_OK,       /* never failed, or the last replay was answered */
    KVR_REPLAY_BACKOFF,  /* the last attempt failed; not tried before backoff ends */
    KVR_REPLAY_FAILING,  /* the last attempt failed; the next gap tries again */
    KVR_REPLAY_STATE_COUNT
} kvr_replay_state;

const char *kvr_replay_state_name(kvr_replay_state s);
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
    X(messages_over_limit, COUNTER, "payloads refused: longer than max_message_bytes")     \
    X(reconnects, COUNTER, "connections to the engine after one dropped")                  \
    X(buffer_overflows, COUNTER, "live messages not held because a buffer bound was hit")  \
    X(buffered, GAUGE, "live messages held now (replay or peer recovery)")

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
#define KVR_REPLAY_ERROR_MAX 128
typedef struct {
    const kvr_worker *worker; /* the listener's worker (handle) */
    uint64_t worker_id;
    uint32_t dp_rank;
    char endpoint[KVR_ENDPOINT_MAX];
    char replay_endpoint[KVR_ENDPOINT_MAX]; /* "" when none */
    char topic[KVR_NAME_MAX];
    kvr_listener_state state;
    bool connected; /* the SUB has a connection to the engine now */
    bool has_seq;   /* last_seq: the last number received */
    uint64_t last_seq;
    /* the index holds this listener's stream up to and including cursor
     * (what a dump of it reflects); false while nothing of the current stream
     * is applied */
    bool has_cursor;
    uint64_t cursor;
    bool has_digest;         /* XXH3-64 of the cursor batch's payload, when known */
    uint64_t cursor_digest;  /* (a peer compares it with the engine's copy) */
    double seconds_since_last_event; /* -1 when nothing arrived yet */
    kvr_replay_state replay_state;
    double replay_backoff_s;  /* seconds left in backoff, 0 when not in backoff */
    uint32_t replay_failures; /* consecutive failed attempts */
    char replay_error[KVR_REPLAY_ERROR_MAX]; /* the last failure, "" when none */
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

typedef enum {
    KVR_LISTEN_CREATED = 0, /* a new listener for (w, rank) */
    KVR_LISTEN_UNCHANGED,   /* same endpoint, replay endpoint and topic: untouched */
    KVR_LISTEN_RESTARTED,   /* one of them changed: reconnected, cursor reset, counters kept */
    KVR_LISTEN_FAILED,      /* a string too long, a socket that cannot connect, or no
                               memory: nothing changed */
    KVR_LISTEN_NO_DESCRIPTORS /* a new listener, and fewer than KVR_LISTENER_FDS +
                                 fd_reserve descriptors are free (or a socket could not
                                 be opened for want of one): nothing changed */
} kvr_listen_result;

/* Whether a new listener fits in the process's descriptors (see
 * fd_reserve); false with why naming the numbers. Any thread. */
bool kvr_source_descriptors_left(kvr_source *src, char *why, size_t cap);

/* Inside kvr_source_run. Starts (or, when endpoint/topic/replay changed,
 * restarts) the listener of (w, rank). */
kvr_listen_result kvr_source_listen(kvr_source *src, kvr_worker *w, uint64_t worker_id,
                                    uint32_t rank, const char *endpoint,
                                    const char *replay_endpoint, const char *topic);
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

/* Peer recovery (SPEC §10), one mechanism for --peers and the cluster layer:
 * 1. kvr_source_hold: every listener, and every one created until the
 *    release, buffers its live messages (bounded as replay buffers are)
 *    and applies nothing; one that already applied part of its stream is
 *    cleared (the dump replaces that state: two states at two sequence
 *    numbers merged would keep blocks one of them removed).
 * 2. The caller registers the peer's workers (their listeners subscribe and
 *    buffer), waits for them to connect, then loads the peer's dump.
 * 3. kvr_source_release_one for each listener the dump has a cursor for,
 *    then kvr_source_release for the rest: the buffered messages above the
 *    cursor apply, a gap between the cursor and the buffer is replayed (or
 *    counted), a listener without a cursor keeps its own (a fresh one takes
 *    the first-message rule).
 * All inside kvr_source_run. */
void kvr_source_hold(kvr_source *src);
/* Releases (w, rank) with the cursor its loaded content reflects and, when
 * the dump carried it (cursor_digest != NULL), that batch's digest: a held
 * copy of the batch with other bytes, or a replay that disagrees, means the
 * engine restarted since the snapshot (rank cleared, stream taken from 0).
 * Returns false when no such held listener exists. */
bool kvr_source_release_one(kvr_source *src, kvr_worker *w, uint32_t rank, uint64_t cursor,
                            const uint64_t *cursor_digest);
/* Releases every listener still held, without a cursor, and ends the hold. */
void kvr_source_release(kvr_source *src);

kvr_indexer *kvr_source_indexer(kvr_source *src);
/* Monotonic clock in seconds (the time base of every source timer). */
double kvr_source_now(void);

#ifdef __cplusplus
}
#endif
#endif
