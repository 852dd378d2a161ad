/* Several replicas, one router (SPEC §10). Each replica keeps its own index
 * fed by its own ZeroMQ subscriptions; what replicas must agree on goes
 * through NATS JetStream (nats-server + cnats):
 *
 * - Registrations: KV bucket KVR_<cluster>_WORKERS, one key per (model,
 *   group, instance, rank) (kvr_cluster_key), value the /register JSON of
 *   that rank. Every change the registry makes with origin http, cli or
 *   config is written to the bucket (not discovery's: every replica
 *   discovers on its own; not a peer dump's); every put or delete watched in the
 *   bucket is applied through the registry (kvr_registry_register /
 *   _unregister, origin "cluster"), the same path as POST /register. A
 *   watched value equal to what the registry already holds changes nothing
 *   (so a replica's own writes, coming back, do not take the record from
 *   its origin). On every (re)connection the bucket is read again from the
 *   start: values changed while away apply, deletes seen as markers apply,
 *   and what this replica changed meanwhile is written then (its changes
 *   win; so do records the bucket lacks altogether, which refills a bucket
 *   that was lost). A value that does not decode, whose key does not match
 *   its content, or that the registry refuses is counted and skipped.
 * - Membership: KV bucket KVR_<cluster>_REPLICAS with a TTL
 *   (membership_ttl_s), key = hex of this replica's URL, value {url,
 *   started_at, ready, incarnation}, put again every heartbeat_ms with ready
 *   from cfg.ready_fn. kvr_cluster_peers names the candidates for the
 *   starting replica's /dump.
 * - Bookings: memory stream KVR_<cluster>_BOOKINGS (subject
 *   kvr.<cluster>.bookings, MaxAge = booking_ttl_s, MaxBytes =
 *   stream_max_bytes). The router's booking hook (route.h) queues this
 *   replica's changes in batches of at most batch_max_events events; the
 *   booking thread publishes a batch its change completed
 *   (kvr_cluster_publish_due), about one per batch_max_delay_us under load
 *   (a change after a quiet spell goes at once), and a flusher publishes a
 *   batch no change completed batch_max_delay_us after the batch before
 *   it (so before its first event is that old).
 *   An ordered consumer reads every batch from the start of the stream
 *   (so a starting replica begins with the fleet's load) and hands the
 *   other replicas' events to kvr_router_apply_peer. A batch this process
 *   published is skipped; one an earlier run of this replica (same URL)
 *   published is adopted as this replica's own; a /free or /prefill_done
 *   forwarded to this replica's booking applies to it.
 * - NATS down: nothing waits for it. Registrations apply locally and are
 *   written on reconnection; bookings are neither published (counted in
 *   publish_failures) nor received, so the load view is local until the
 *   connection is back; cnats reconnects forever.
 *
 * Every payload read from NATS goes through one validator (cluster
 * payload.c): bounded sizes and types, before anything is applied.
 *
 * Threads: cnats' own (connection, the bookings subscription's callback,
 * connection-event callbacks); a watch thread that reads the registrations
 * bucket and applies it; a control thread that connects the buckets and the
 * stream, writes registrations, heartbeats membership and handles
 * reconnections; a flusher that publishes the booking batches no booking
 * thread published (kvr_cluster_publish_due). See
 * src/cluster/cluster_internal.h for the locks. */
#ifndef KVROUTER_CLUSTER_H
#define KVROUTER_CLUSTER_H

#include "kvrouter/registry.h"
#include "kvrouter/route.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_cluster kvr_cluster;

/* A cluster name becomes part of bucket, stream and subject names:
 * 1..KVR_CLUSTER_NAME_MAX of [A-Za-z0-9_-]. */
#define KVR_CLUSTER_NAME_MAX 64
bool kvr_cluster_name_valid(const char *name);

/* The /register JSON of a registration and back, as the HTTP layer reads
 * it (so the bucket holds exactly what /register takes and one parser reads
 * both). The server provides it; the cluster layer has no JSON schema of
 * its own. */
typedef struct {
    /* reg -> /register JSON text (malloc'd, NUL-terminated; the same
     * registration always gives the same text). NULL when out of memory. */
    char *(*encode)(void *user, const kvr_registration *reg);
    /* text (len bytes) -> *reg with origin "cluster"; strings borrowed from
     * *holder until release(holder). false with err naming the field. */
    bool (*decode)(void *user, const char *text, size_t len, kvr_registration *reg,
                   void **holder, char *err, size_t err_len);
    void (*release)(void *user, void *holder);
    void *user;
} kvr_cluster_codec;

typedef struct {
    const char *nats_url;     /* required: "nats://host:port[,nats://...]" */
    const char *name;         /* required: the cluster name */
    /* This replica's HTTP base URL as the others reach it (its /dump);
     * also its identity: a restarted replica with the same URL takes its
     * bookings back. Required. */
    const char *replica_url;
    double booking_ttl_s;          /* the router's; stream MaxAge. 0 -> 600 */
    uint32_t batch_max_events;     /* 0 -> 256 */
    uint32_t batch_max_delay_us;   /* 0 -> 1000 */
    uint32_t batch_max_bytes;      /* 0 -> 256 KiB (and below the server's max payload) */
    /* chain hashes per published booking; the rest count as its own
     * blocks on the receiving side. 0 -> 4096 */
    uint32_t max_chain;
    int64_t stream_max_bytes;      /* 0 -> 256 MiB */
    uint32_t membership_ttl_s;     /* 0 -> 10 */
    uint32_t heartbeat_ms;         /* 0 -> 3000 */
    /* kvr_cluster_start waits this long for the first connection, the
     * registrations and the bookings replay; NATS unreachable then means
     * starting on local state (and catching up once it is reachable).
     * 0 -> 5000 */
    uint32_t startup_timeout_ms;
    kvr_cluster_codec codec;
    /* Whether this replica is ready (its /ready), asked at every
     * heartbeat for the membership record. NULL: false. */
    bool (*ready_fn)(void *user);
    void *ready_user;
} kvr_cluster_config;

void kvr_cluster_config_default(kvr_cluster_config *cfg);

/* Connects to NATS (retrying in the background when it cannot), creates or
 * opens the two buckets and the stream, observes the registry, sets the
 * router's booking hook, reads the registrations bucket and replays the
 * bookings stream, waiting up to startup_timeout_ms for the last two. NULL
 * with err set for a bad configuration (name, URL, codec) or when a thread
 * or an observer cannot be had; an unreachable NATS is not an error.
 * registry and router must outlive the cluster. */
kvr_cluster *kvr_cluster_start(const kvr_cluster_config *cfg, kvr_registry *registry,
                               kvr_router *router, char *err, size_t err_len);
/* Removes this replica's membership record (when connected), flushes the
 * bookings queued so far, stops the threads, unhooks the router and the
 * registry, closes the connection. NULL is a no-op. */
void kvr_cluster_stop(kvr_cluster *c);

/* For the thread that just called kvr_route, kvr_router_prefill_done* or
 * kvr_router_release, once it returned: publishes the booking batches its
 * change sealed, from this thread, so that under load no other thread is
 * woken to publish them (a batch no booking seals goes from the flusher
 * after batch_max_delay_us). Returns at once when nothing is sealed or
 * another thread is publishing (which then publishes these too). NULL is a
 * no-op. */
void kvr_cluster_publish_due(kvr_cluster *c);

/* Puts this replica's membership record now rather than at the next
 * heartbeat: its readiness changed (the server calls it once it listens). */
void kvr_cluster_refresh(kvr_cluster *c);

/* The other replicas of the membership bucket, the candidates for a
 * starting replica's /dump: those whose record says ready first, each
 * group the longest running first (it has seen the most of every engine's
 * stream). A record is as old as its last heartbeat, so the caller asks a
 * candidate's /ready before it trusts it. At most cap URLs; 0 when there
 * is none or NATS is not connected. */
#define KVR_CLUSTER_URL_MAX 512
typedef struct {
    char url[KVR_CLUSTER_URL_MAX];
} kvr_cluster_peer;
size_t kvr_cluster_peers(kvr_cluster *c, kvr_cluster_peer *out, size_t cap);

/* The bucket key of (model, group, worker, rank): hex of model, hex of
 * group ("default" when NULL or ""), 16 hex digits of the worker id, hex of
 * the rank, joined by '.'. NATS keys allow few characters; hex keeps any
 * model name. Returns the length, or 0 when cap is too small. */
size_t kvr_cluster_key(const char *model, const char *group, uint64_t worker_id,
                       uint32_t dp_rank, char *buf, size_t cap);

typedef enum {
    KVR_CLUSTER_CONNECTING = 0, /* never connected yet */
    KVR_CLUSTER_CONNECTED,
    KVR_CLUSTER_RECONNECTING,   /* connected before, lost it */
    KVR_CLUSTER_CLOSED
} kvr_cluster_conn;

const char *kvr_cluster_conn_name(kvr_cluster_conn s);

/* Counters, as one list: X(name, COUNTER|GAUGE, help). */
#define KVR_CLUSTER_COUNTERS(X)                                                            \
    X(connects, COUNTER, "connections to NATS made (the first and every reconnection)")    \
    X(disconnects, COUNTER, "connections to NATS lost")                                    \
    X(bookings_published, COUNTER, "booking events published")                             \
    X(batches_published, COUNTER, "booking batches published")                             \
    X(publish_failures, COUNTER, "booking events not published (NATS down, client error)")  \
    X(flusher_batches, COUNTER, "booking batches the flusher sent (no booking came to send them within the batch delay)") \
    X(flusher_wakes, COUNTER, "times a booking woke the asleep flusher (the first change after a whole batch delay with none)") \
    X(setup_failures, COUNTER, "connection setups that failed: buckets, stream or live subscription (retried after 1 s)") \
    X(replay_failures, COUNTER, "bookings stream replays that could not start (retried)") \
    X(heartbeat_failures, COUNTER, "membership records that could not be put (retried at the next heartbeat)") \
    X(batches_received, COUNTER, "booking batches received (stream replays and the live subject)") \
    X(peer_events_applied, COUNTER, "other replicas' booking events applied to the load")  \
    X(peer_events_rejected, COUNTER, "booking events the router did not apply (expired, unknown model or id)") \
    X(live_batches_dropped, COUNTER, "live booking batches lost while a stream replay ran (over 64 MiB waiting, out of memory)") \
    X(own_batches_skipped, COUNTER, "batches this process published, read back by a stream replay") \
    X(adopted_events, COUNTER, "events of an earlier run of this replica, taken back")     \
    X(invalid_payloads, COUNTER, "NATS payloads (batches, events, values) that failed validation") \
    X(registrations_applied, COUNTER, "bucket puts and deletes applied to the registry")   \
    X(registrations_rejected, COUNTER, "bucket values the registry refused")               \
    X(registration_reads, COUNTER, "whole reads of the registrations bucket done (every connection and every 60 s)") \
    X(registration_watch_failures, COUNTER, "registrations watchers that could not be made or broke by themselves (made again after 0.5 s)") \
    X(registrations_written, COUNTER, "registry changes written to the bucket")            \
    X(registration_write_failures, COUNTER, "bucket writes that failed (retried)")         \
    X(registrations_pending, GAUGE, "registry changes waiting to be written to the bucket") \
    X(replicas, GAUGE, "replicas in the membership bucket, this one included")             \
    X(peer_bookings_active, GAUGE, "other replicas' bookings counted in the load view")

typedef struct {
#define KVR_CLUSTER_COUNTER_FIELD_(name, kind, help) uint64_t name;
    KVR_CLUSTER_COUNTERS(KVR_CLUSTER_COUNTER_FIELD_)
#undef KVR_CLUSTER_COUNTER_FIELD_
} kvr_cluster_counters;

extern const kvr_counter_desc kvr_cluster_counter_descs[];
extern const size_t kvr_cluster_counter_count;

typedef struct {
    kvr_cluster_conn conn;
    /* The registrations bucket was read to its end since the last
     * (re)connection. */
    bool registrations_loaded;
    /* The bookings stream was replayed to where it stood at subscription. */
    bool bookings_replayed;
    /* The start gave up waiting for NATS: this replica runs on local state
     * until it connects. */
    bool started_without_nats;
    kvr_cluster_counters c;
} kvr_cluster_status;

void kvr_cluster_status_get(kvr_cluster *c, kvr_cluster_status *out);

#ifdef __cplusplus
}
#endif
#endif
