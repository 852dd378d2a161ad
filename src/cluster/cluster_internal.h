/* The cluster layer's parts and how they share state (include/kvrouter/
 * cluster.h has the contract).
 *
 * Parts: payload.c validates and encodes every NATS payload; outbox.c turns
 * the router's booking hook into batches; inbox.c applies the batches read
 * back; regsync.c mirrors the registry against the bucket; membership.c is
 * the replica records; nats.c is the only file that knows cnats; cluster.c
 * runs the threads. Everything but nats.c and cluster.c knows no transport
 * and is tested without one.
 *
 * Threads and locks (take them in this order, never the other way):
 * 1. the router's lock (route layer): the booking hook runs under it and
 *    takes outbox.mu. Nothing here calls the router holding a cluster lock.
 * 2. outbox.send_mu, then outbox.mu: mu guards the batch being filled and
 *    the sealed ones; the hook takes mu only. The thread that sends (the
 *    booking thread that sealed a batch, after the router's lock is
 *    released, or the flusher) holds send_mu and publishes with mu
 *    released. outbox.wake_mu is a leaf: the flusher's sleep.
 * 3. regsync.mu: the registry mirror. The registry's observer (on the
 *    ingest thread) takes it briefly; the watch thread decides under it and
 *    calls the registry only after releasing it (the registry waits for the
 *    ingest thread, whose observer would wait for regsync.mu).
 * 4. ctl.mu: the control thread's wake-ups (reconnected, writes pending,
 *    stop); cnats' connection callbacks only set flags and signal.
 * The bookings subscription's callback (a cnats thread) holds no cluster
 * lock while it calls kvr_router_apply_peer. Counters are atomics. */
#ifndef KVR_CLUSTER_INTERNAL_H
#define KVR_CLUSTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "kvrouter/cluster.h"
#include "util/clock.h"
#include "util/u64map.h"

/* The layer's condition variables wait on the monotonic clock (a wall
 * clock step must not stretch a 1 ms batch delay or a startup wait). */
static inline void cl_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* The deadline `seconds` from now, for pthread_cond_timedwait on them. */
static inline struct timespec cl_deadline(double seconds)
{
    double at = kvr_clock_mono() + (seconds > 0 ? seconds : 0);
    struct timespec ts;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* ---- names (cluster.c) --------------------------------------------------- */

typedef enum { CL_BUCKET_WORKERS = 0, CL_BUCKET_REPLICAS, CL_BUCKET_COUNT } cl_bucket;

typedef struct {
    char bucket[CL_BUCKET_COUNT][KVR_CLUSTER_NAME_MAX + 16]; /* KVR_<name>_WORKERS ... */
    char stream[KVR_CLUSTER_NAME_MAX + 16];                  /* KVR_<name>_BOOKINGS */
    char subject[KVR_CLUSTER_NAME_MAX + 16];                 /* kvr.<name>.bookings */
} cl_names;

/* ---- payloads (payload.c): the one place NATS bytes are trusted ---------- */

/* Bounds, with their reasons. */
#define CL_BATCH_VERSION 1
#define CL_MAX_BATCH_EVENTS 4096u   /* 16x what a replica sends in one batch */
#define CL_MAX_BATCH_BYTES (8u << 20) /* the largest NATS max_payload anyone sets */
#define CL_MAX_CHAIN 65536u         /* the most blocks a /route can book (2^20 tokens / 16) */
#define CL_MAX_VALUE_BYTES (16u << 10) /* a /register JSON is < 2 KiB with every field full */
#define CL_MAX_URL KVR_CLUSTER_URL_MAX
#define CL_MAX_KEY 1100u            /* two hex-encoded names + worker + rank */

/* Batch: msgpack [version, publisher u64, incarnation u64, [event...]];
 * event [op, owner u64, request_id] and for BOOKED also model, group,
 * worker u64, rank, prefill_tokens, unique_blocks, chain (bin of 8-byte
 * big-endian hashes). Owner 0 never travels: it is the publisher's id. */
typedef struct {
    uint64_t publisher;
    uint64_t incarnation;
    uint32_t n_events;
    const char *events; /* the first event, inside the payload */
    const char *end;
} cl_batch;

/* One decoded event; the strings and the chain live in it (reused). */
typedef struct {
    kvr_booking_event ev;
    char id[KVR_ROUTE_MAX_ID_LEN + 1];
    char model[KVR_NAME_MAX];
    char group[KVR_NAME_MAX];
    uint64_t *chain;
    size_t chain_cap;
} cl_event;

void cl_event_free(cl_event *e);

/* Checks the whole payload (mp_check) and its header. 0, or -1 with err. */
int cl_batch_open(const char *data, size_t len, cl_batch *b, char *err, size_t err_len);
/* The next event of b into e (b->events advances). 1 read, 0 none left;
 * -1 this event is malformed (skipped: the rest still read) with err; -2
 * out of memory. ev.owner is the wire's (publisher for BOOKED). */
int cl_batch_next(cl_batch *b, cl_event *e, char *err, size_t err_len);

/* Appends one event to a growing msgpack buffer; owner is the wire owner
 * (never 0); at most max_chain chain hashes, the rest added to
 * unique_blocks. 0, -1 out of memory. */
typedef struct {
    char *data;
    size_t len, cap;
} cl_buf;
int cl_batch_append(cl_buf *b, const kvr_booking_event *ev, uint64_t owner, uint32_t max_chain);
/* Appends n raw bytes. 0, -1 out of memory. */
int cl_buf_append(cl_buf *b, const void *p, size_t n);
/* The header of a batch of n events, written in front of its events. */
int cl_batch_header(cl_buf *out, uint64_t publisher, uint64_t incarnation, uint32_t n);
void cl_buf_free(cl_buf *b);

/* Membership record: {"url", "started_at", "ready", "incarnation"}. */
typedef struct {
    char url[CL_MAX_URL];
    double started_at; /* Unix seconds */
    bool ready;
    uint64_t incarnation;
} cl_member;

char *cl_member_encode(const cl_member *m);
int cl_member_decode(const char *text, size_t len, cl_member *m, char *err, size_t err_len);

/* A registration bucket value: bounded, decoded by the codec, and its key
 * must be the key of what it decodes to. 0 (release *holder with the
 * codec), or -1 with err. */
int cl_reg_value_decode(const kvr_cluster_codec *codec, const char *key, const char *val,
                        size_t len, kvr_registration *reg, void **holder, char *err,
                        size_t err_len);

/* The parts of a registration key (kvr_cluster_key); model and group hold
 * KVR_NAME_MAX bytes. false for a key kvr_cluster_key cannot have made. */
bool cl_key_parse(const char *key, char *model, char *group, uint64_t *worker_id,
                  uint32_t *dp_rank);

/* ---- the outbox (outbox.c): hook -> batches ------------------------------ */

/* Sends one sealed batch (its events, n of them); called by one thread at a
 * time, in the order the batches were sealed, no outbox lock held. */
typedef void (*cl_send_fn)(void *user, const cl_buf *events, uint32_t n);

typedef struct {
    pthread_mutex_t mu;      /* the filling batch and the sealed ones */
    pthread_mutex_t send_mu; /* one sender at a time (taken before mu) */
    pthread_mutex_t wake_mu; /* the flusher's sleep; a leaf lock */
    pthread_cond_t wake_cv;  /* signalled at stop, or for an asleep flusher */
    uint64_t self;      /* wire owner of this replica's own bookings */
    uint32_t max_events, max_bytes, max_chain;
    double max_delay_s;
    cl_send_fn send;
    void *send_user;
    cl_buf filling;     /* events only */
    uint32_t n_filling;
    void *ready, *ready_tail; /* sealed batches, oldest first (outbox.c) */
    bool enabled;       /* false while NATS is down: events are counted, not kept */
    bool stop;
    /* Read without mu: by a booking thread (anything sealed to send?) and
     * by the flusher (anything to wait for?). */
    _Atomic uint32_t n_ready;
    _Atomic bool filling_any;
    _Atomic double last_sent; /* monotonic time the last batch was sealed */
    _Atomic bool flusher_asleep; /* a new filling batch must wake it */
    _Atomic uint64_t dropped; /* events not kept (disabled, out of memory) */
    _Atomic uint64_t flusher_sent, flusher_wakes; /* batches the flusher sent; times it was signalled */
} cl_outbox;

void cl_outbox_init(cl_outbox *o, uint64_t self, uint32_t max_events, uint32_t max_bytes,
                    uint32_t max_chain, double max_delay_s, cl_send_fn send, void *send_user);
void cl_outbox_destroy(cl_outbox *o);
/* The router's booking hook (user = the outbox): appends the change to the
 * filling batch and seals the batch when it is full or due. Wakes nobody
 * while the flusher is on its timer. */
void cl_outbox_hook(void *user, const kvr_booking_event *ev);
void cl_outbox_enable(cl_outbox *o, bool on);
/* For the thread that made a booking change, after the router's lock is
 * released: sends the sealed batches, unless another thread is sending
 * (which then sends them too). One atomic load when nothing is sealed. */
void cl_outbox_send_due(cl_outbox *o);
/* The flusher thread's body: sends the batch no booking came to seal once
 * max_delay_s after the batch before it (so before its first event is that
 * old), and whatever a booking thread left sealed and unsent;
 * on stop, seals and sends what is left, then returns. */
void cl_outbox_flusher(cl_outbox *o);
void cl_outbox_stop(cl_outbox *o);

/* ---- the inbox (inbox.c): batches -> the router --------------------------- */

typedef struct {
    kvr_router *router;
    uint64_t self, incarnation;
    double ttl_s;
    cl_event scratch; /* one caller at a time: the feed's lock */
    /* A previous run of this replica's batches are adopted (until the first
     * replay ended), then skipped: adoption is not idempotent (feed.c). */
    bool adopt_previous;
    _Atomic uint64_t batches, applied, rejected, own_skipped, adopted, invalid;
} cl_inbox;

void cl_inbox_init(cl_inbox *in, kvr_router *router, uint64_t self, uint64_t incarnation,
                   double ttl_s);
void cl_inbox_destroy(cl_inbox *in);
/* One batch as stored at wall_ns (Unix ns, the stream's timestamp), read
 * at now_ns. Events are applied in order; a malformed one is counted and
 * skipped, a malformed batch counted and dropped. */
void cl_inbox_apply(cl_inbox *in, const char *data, size_t len, int64_t wall_ns, int64_t now_ns);

/* ---- the bookings feed (feed.c): a replay, then live ------------------------ */

typedef struct cl_feed_item cl_feed_item;

typedef struct {
    pthread_mutex_t mu; /* every batch applied, both subscriptions' threads */
    cl_inbox *inbox;
    bool replaying;     /* live batches wait for the replay's end */
    cl_feed_item *head, *tail;
    size_t bytes, max_bytes; /* waiting; past max_bytes the oldest go */
    _Atomic uint64_t dropped; /* live batches lost while waiting */
} cl_feed;

void cl_feed_init(cl_feed *f, cl_inbox *in);
void cl_feed_destroy(cl_feed *f);
/* Before the replay's consumer is made: live batches wait from now on. */
void cl_feed_begin_replay(cl_feed *f);
/* A batch of the replay (wall_ns: its stream time; pending: messages after
 * it). true when it was the last: the waiting live batches were applied,
 * the replay's consumer can go. */
bool cl_feed_replayed(cl_feed *f, const char *data, size_t len, int64_t wall_ns,
                      uint64_t pending);
/* The replay found nothing to read: go live. */
void cl_feed_end_replay(cl_feed *f);
/* A batch from the live subject. */
void cl_feed_live(cl_feed *f, const char *data, size_t len);

/* ---- the registry mirror (regsync.c) -------------------------------------- */

typedef struct cl_sync_rec cl_sync_rec;

typedef struct {
    pthread_mutex_t mu;
    kvr_cluster_codec codec;
    /* Called (no lock held) when a key became dirty: a write is due. */
    void (*wake)(void *user);
    void *wake_user;
    kvr_u64map recs;     /* key hash -> cl_sync_rec* (chained) */
    size_t n_recs;
    uint64_t pass;       /* bumped at every fresh read of the bucket */
    cl_sync_rec *dirty_head, *dirty_tail; /* records whose bucket value must change */
    size_t n_dirty;
    _Atomic uint64_t applied, rejected, written, write_failures, invalid;
} cl_sync;

int cl_sync_init(cl_sync *s, const kvr_cluster_codec *codec);
void cl_sync_destroy(cl_sync *s);
/* Whether records of this origin are written to the bucket (regsync.c). */
bool cl_origin_shared(kvr_origin o);
/* The registry observer (user = the cl_sync). */
void cl_sync_observer(void *user, const kvr_reg_event *ev);

/* What the watch thread must do about one bucket entry. */
typedef enum {
    CL_SYNC_NOTHING = 0,
    CL_SYNC_REGISTER,   /* apply reg (origin cluster) */
    CL_SYNC_UNREGISTER  /* remove the rank of u */
} cl_sync_action;

typedef struct {
    cl_sync_action action;
    kvr_registration reg;   /* REGISTER: strings in holder */
    void *holder;
    kvr_unregistration unreg; /* UNREGISTER: its strings are the buffers below */
    char model[KVR_NAME_MAX];
    char group[KVR_NAME_MAX];
} cl_sync_todo;

void cl_sync_begin_pass(cl_sync *s);
/* What to do about a watched entry (val NULL for a delete or purge
 * marker), filled into *t. t->unreg points into *t: use t where it was
 * filled, never a copy. */
void cl_sync_entry(cl_sync *s, const char *key, const char *val, size_t len, cl_sync_todo *t);
void cl_sync_todo_done(cl_sync *s, cl_sync_todo *t, bool ok);
/* The bucket was read to its end: every local record the bucket lacks is
 * to be written. */
void cl_sync_end_pass(cl_sync *s);

/* The next write for the control thread: a put (*val set, malloc'd) or a
 * delete (*val NULL) of *key (malloc'd). false when none is pending. */
bool cl_sync_next_write(cl_sync *s, char **key, char **val);
/* The write of key (val as given, NULL for a delete) succeeded or not. */
void cl_sync_write_done(cl_sync *s, const char *key, const char *val, bool ok);
size_t cl_sync_pending(cl_sync *s);

/* ---- membership (membership.c) ------------------------------------------- */

/* The record to put for this replica. */
typedef struct {
    char url[CL_MAX_URL];
    char key[2 * CL_MAX_URL];
    uint64_t incarnation;
    double started_at;
} cl_self;

void cl_self_init(cl_self *me, const char *url, uint64_t incarnation, double started_at);
/* Orders n records as kvr_cluster_peers lists them and drops mine; the
 * count left. */
size_t cl_member_rank(cl_member *m, size_t n, const cl_self *me);

/* ---- the NATS adapter (nats.c) -------------------------------------------- */

typedef struct cl_nats cl_nats;

typedef struct {
    void (*on_conn)(void *user, kvr_cluster_conn state); /* cnats callback threads */
    /* A batch from the bookings stream (the replay): its time, and how
     * many messages the stream holds after it for this consumer. */
    void (*on_batch)(void *user, const char *data, size_t len, int64_t wall_ns,
                     uint64_t pending);
    /* A batch from the live subject (never this connection's own). */
    void (*on_live)(void *user, const char *data, size_t len);
    void *user;
} cl_nats_events;

typedef struct {
    int64_t booking_max_age_ns;
    int64_t stream_max_bytes;
    int64_t membership_ttl_ns;
} cl_nats_limits;

/* Connects (or keeps trying in the background). NULL only for a bad URL or
 * out of memory. */
cl_nats *cl_nats_open(const char *url, const cl_nats_events *ev, char *err, size_t err_len);
void cl_nats_close(cl_nats *n);
/* Creates or opens the buckets and the stream; after every (re)connection.
 * 0, or -1 with err. */
int cl_nats_ensure(cl_nats *n, const cl_names *names, const cl_nats_limits *lim, char *err,
                   size_t err_len);
size_t cl_nats_max_payload(cl_nats *n);
int cl_nats_kv_put(cl_nats *n, cl_bucket b, const char *key, const char *val, size_t len);
/* 0 also when the key was not there. */
int cl_nats_kv_delete(cl_nats *n, cl_bucket b, const char *key);

typedef struct cl_watch cl_watch;
typedef struct {
    const char *key;
    const char *val; /* NULL for a delete / purge marker */
    size_t len;
} cl_kv_entry;
typedef enum {
    CL_WATCH_ENTRY = 0,
    CL_WATCH_CAUGHT_UP, /* the initial values are all delivered */
    CL_WATCH_TIMEOUT,
    CL_WATCH_BROKEN     /* stopped, or the connection went: make a new one */
} cl_watch_result;

/* Every key of the bucket: its current values first, then changes. */
cl_watch *cl_nats_watch(cl_nats *n, cl_bucket b);
/* The entry stays valid until the next call. A watch is used by one thread
 * only, from cl_nats_watch to cl_nats_watch_destroy (threads.c). */
cl_watch_result cl_nats_watch_next(cl_watch *w, int timeout_ms, cl_kv_entry *out);
void cl_nats_watch_destroy(cl_watch *w);

/* The live subscription of the bookings subject (kept across reconnections
 * by cnats; ended by cl_nats_close). 0 also when it exists. */
int cl_nats_live_subscribe(cl_nats *n, char *err, size_t err_len);
/* The replay: an ordered consumer of the whole stream (any previous one
 * ended first). *none_pending: the stream is empty. */
int cl_nats_subscribe(cl_nats *n, bool *none_pending, char *err, size_t err_len);
/* Ends the replay's consumer; returns once no callback of it runs or will. */
void cl_nats_unsubscribe(cl_nats *n);
/* Publishes a batch (not acknowledged: see nats.c). 0, or -1 when not
 * connected or refused by the client. */
int cl_nats_publish(cl_nats *n, const char *data, size_t len);

#endif
