/* Internals shared by the ingest loop (loop.c), the listener table
 * (source.c), the per-rank sequence machine (listener.c), the replay client
 * (replay.c) and the timers (timers.c). Everything here is touched by the
 * ingest thread only, except the command queue (guarded by mu).
 *
 * Sockets and wake-ups: every ZeroMQ socket (SUB, a replay DEALER, the monitor
 * PAIR of each) has a kvr_watch registered in one epoll set on the socket's
 * ZMQ_FD. That descriptor is a notification, not a level: libzmq clears it
 * whenever it processes the socket's commands, which any send, recv or
 * ZMQ_EVENTS query may do. So a watch that was woken, or that we sent or
 * received on, goes on the ready list and is serviced (ZMQ_EVENTS, then recv
 * until it says no more input) without waiting for the descriptor again. */
#ifndef KVR_SOURCE_INTERNAL_H
#define KVR_SOURCE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <zmq.h>

#include "kvrouter/source.h"

typedef struct {
    uint64_t seq;
    void *data;
    size_t len;
} kvr_pending_msg;

#define KVR_LISTENER_MAX_SEEN_RANKS 8

/* Refused connection attempts (ZeroMQ retries every 100 ms or so) after
 * which a replay endpoint counts as dead: more than one, so an engine that
 * binds its replay socket a moment after its publisher is not given up. */
#define KVR_REPLAY_REFUSALS 3

typedef enum {
    KVR_WATCH_SUB,
    KVR_WATCH_MON,
    KVR_WATCH_DEALER,
    KVR_WATCH_DEALER_MON, /* the DEALER's monitor: a refused connection fails at once */
    KVR_WATCH_WAKE
} kvr_watch_kind;

typedef struct kvr_watch {
    struct kvr_listener *l; /* NULL for the wake eventfd */
    void *sock;             /* NULL when closed */
    int fd;                 /* registered descriptor, -1 when none */
    kvr_watch_kind kind;
    bool ready;             /* on src->ready */
} kvr_watch;

/* One pending deadline; timers.c keeps them in a binary heap by `when`. */
typedef struct kvr_timer {
    double when;
    size_t slot; /* heap index, SIZE_MAX when not armed */
} kvr_timer;

typedef struct kvr_listener {
    kvr_worker *w;
    uint64_t worker_id;
    uint32_t rank;
    char endpoint[KVR_ENDPOINT_MAX];
    char replay_endpoint[KVR_ENDPOINT_MAX];
    char topic[KVR_NAME_MAX];
    kvr_watch sub, mon, dealer, dealer_mon;

    kvr_listener_state state;
    bool has_next; /* a cursor exists: next is the sequence number expected */
    uint64_t next;
    bool has_seq;
    uint64_t last_seq;
    bool has_digest;      /* digest of the payload applied as next-1 */
    uint64_t last_digest; /* (a reconnection compares it with the replay's copy) */
    double last_event_time; /* monotonic seconds, 0 = never */

    /* the last number the live socket delivered on this connection: a
     * number below the cursor is a restart only when it is below this too
     * (a replay can run ahead of the live socket; SPEC §2: what a replay
     * covered is a duplicate) */
    bool has_live_seq;
    uint64_t live_seq;

    /* connection state from the SUB's monitor */
    bool connected;
    bool disconnected; /* the connection that carried the cursor's stream ended */
    bool reconnected;  /* ... and a new one came up: the next message may be a new stream */
    bool held;         /* peer recovery: buffer live messages, apply nothing */
    bool held_restart; /* ... and the engine restarted meanwhile */

    /* replay in progress */
    uint64_t replay_from;
    bool replay_verify;   /* first reply must be seq replay_from with last_digest */
    bool replay_got_first;
    bool replay_incomplete;
    uint32_t replay_refusals; /* connection attempts the endpoint refused (its monitor) */
    kvr_timer replay_timer;
    kvr_pending_msg *buf;
    size_t n_buf, cap_buf;
    uint64_t buf_bytes;

    /* health of the replay endpoint (SPEC §2: a failed replay degrades to
     * the no-replay rule; the endpoint is not tried again before backoff_until) */
    uint32_t replay_failures; /* consecutive */
    double replay_backoff_until;
    char replay_error[KVR_REPLAY_ERROR_MAX];

    /* ranks named by batches (their dp_rank overrides the socket's rank):
     * a restart or a lost history clears them too */
    uint32_t seen_ranks[KVR_LISTENER_MAX_SEEN_RANKS];
    uint32_t n_seen_ranks;

    kvr_source_counters c;
} kvr_listener;

struct kvr_source_cmd;

/* Messages taken from one socket per service, so a flooding engine cannot
 * starve the others. */
#define KVR_SOURCE_BURST 256
#define KVR_MAX_FRAMES 5

struct kvr_source {
    kvr_indexer *ix;
    kvr_source_config cfg;
    void *zctx;
    int epfd;
    kvr_watch wake; /* eventfd: commands and stop */
    pthread_t thread;
    bool thread_started;
    _Atomic int stop;

    pthread_mutex_t mu; /* guards cmd queue */
    pthread_cond_t cond;
    struct kvr_source_cmd *cmds;

    /* ingest thread only */
    kvr_listener **ls;
    size_t n_ls, cap_ls;
    kvr_watch **ready, **ready_next;
    size_t n_ready, cap_ready;
    kvr_timer **heap;
    size_t n_heap, cap_heap;
    bool holding; /* new listeners start held (kvr_source_hold) */
    uint64_t buffered_bytes; /* over every listener's buffer */
    uint64_t mon_seq;        /* names the monitor endpoints */
    kvr_batch batch;
    zmq_msg_t *burst;        /* KVR_SOURCE_BURST x KVR_MAX_FRAMES */
    size_t *burst_n;
};

/* loop.c: the ingest thread. */
void *kvr_source_main(void *arg);
/* Wakes the thread (a command is queued, or stop is set). */
void kvr_source_wake(kvr_source *src);
/* Registers the watch's socket descriptor and queues it for a first look
 * (input may have arrived before the descriptor was watched). */
int kvr_watch_open(kvr_source *src, kvr_watch *w, void *sock);
/* Unregisters and closes the socket (w->sock becomes NULL). */
void kvr_watch_close(kvr_source *src, kvr_watch *w);
/* Queues the watch to be serviced without waiting for its descriptor: after
 * a send on its socket, or when a burst stopped with input left. */
void kvr_watch_ready(kvr_source *src, kvr_watch *w);

/* timers.c. A listener has one timer, so the heap is sized (reserve) when a
 * listener is created and arming never allocates. */
void kvr_timer_init(kvr_timer *t);
bool kvr_timer_reserve(kvr_source *src, size_t n);
void kvr_timer_arm(kvr_source *src, kvr_timer *t, double when);
void kvr_timer_cancel(kvr_source *src, kvr_timer *t);
/* The earliest armed timer, or NULL. */
kvr_timer *kvr_timer_first(kvr_source *src);

/* listener.c: the SPEC §2 sequence machine. */
void kvr_listener_on_live(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                          size_t len);
/* A monitor event of the SUB (ZMQ_EVENT_CONNECTED / DISCONNECTED). */
void kvr_listener_on_monitor(kvr_source *src, kvr_listener *l, uint16_t event);
/* frames: after the "" delimiter, 2 ([seq, payload]) or 3 ([topic, seq,
 * payload]) frames. */
void kvr_listener_on_replay(kvr_source *src, kvr_listener *l, size_t n_frames,
                            const void *seq_frame, size_t seq_len, const void *payload,
                            size_t len);
/* The replay deadline passed. */
void kvr_listener_on_timeout(kvr_source *src, kvr_listener *l);
/* The replay endpoint refused KVR_REPLAY_REFUSALS attempts in a row (the
 * DEALER's monitor said so). */
void kvr_listener_on_replay_refused(kvr_source *src, kvr_listener *l);
/* Drops any replay and buffered messages; resets the cursor. */
void kvr_listener_reset(kvr_source *src, kvr_listener *l);
void kvr_listener_free_buffer(kvr_source *src, kvr_listener *l);
/* Starts holding: live messages are buffered, nothing applies; a replay in
 * progress ends. A listener that already applied part of its stream is
 * cleared: the dump loaded during the hold replaces that state. */
void kvr_listener_hold(kvr_source *src, kvr_listener *l);
/* Ends a hold: the content the listener's ranks hold reflects its stream up
 * to and including `cursor` (has_cursor false: its own cursor, if any,
 * stands), whose payload digest is *cursor_digest when known. */
void kvr_listener_release(kvr_source *src, kvr_listener *l, bool has_cursor, uint64_t cursor,
                          const uint64_t *cursor_digest);

/* monitor.c: a monitor (mon) on sock for the ZMQ_EVENT_* in events,
 * watched; -1 with nothing left open. */
int kvr_monitor_open(kvr_source *src, kvr_watch *mon, void *sock, int events);
/* Stops sock's monitor (sock may be NULL: already closed) and closes mon. */
void kvr_monitor_close(kvr_source *src, kvr_watch *mon, void *sock);
/* The next event the monitor holds; false when none is left. */
bool kvr_monitor_next(kvr_watch *mon, uint16_t *event);

/* replay.c: the DEALER side of a replay and the endpoint's backoff. */
bool kvr_replay_usable(kvr_source *src, const kvr_listener *l, double now);
/* Opens the DEALER and sends the request for `from`; false (endpoint marked
 * failing, reason in l->replay_error) when that cannot be done. */
bool kvr_replay_request(kvr_source *src, kvr_listener *l, uint64_t from);
void kvr_replay_close(kvr_source *src, kvr_listener *l);
/* Records a failed attempt: error text and the next backoff. */
void kvr_replay_mark_failed(kvr_source *src, kvr_listener *l, const char *why, double now);
void kvr_replay_mark_ok(kvr_listener *l);
kvr_replay_state kvr_replay_state_of(const kvr_listener *l, double now);

#endif
