/* The cluster object, shared by its lifecycle (cluster.c) and its threads
 * (threads.c). Locks and thread roles: cluster_internal.h. */
#ifndef KVR_CLUSTER_STATE_H
#define KVR_CLUSTER_STATE_H

#include "cluster/cluster_internal.h"

struct kvr_cluster {
    kvr_cluster_config cfg; /* strings point at the copies below */
    char *nats_url, *name, *replica_url;
    kvr_registry *registry;
    kvr_router *router;
    cl_names names;
    cl_self me;
    uint64_t self; /* replica id: hash of the URL, never 0 */
    cl_nats *nats;
    cl_outbox outbox;
    cl_buf msg; /* the batch being published (cl_send_batch) */
    cl_inbox inbox;
    cl_feed feed;
    cl_sync sync;
    bool observing, hooked;

    pthread_t ctl_thread, watch_thread, flush_thread;
    bool ctl_started, watch_started, flush_started;

    /* ctl.mu (cluster_internal.h, lock 4) guards everything down to
     * replay_over; the cv wakes the control thread, the watch thread and
     * the starting thread. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool need_setup;       /* (re)connected: buckets, stream, watch, consumer */
    bool setup_ok;         /* the buckets and the stream exist since the last connection */
    uint64_t watch_gen;    /* bumped to make the watch thread read the bucket again */
    double next_resync;    /* monotonic time of the next periodic read (control thread) */
    uint64_t loaded_gen;   /* watch_gen whose read reached the end */
    bool subscribed;       /* the replay of this connection started */
    bool replay_over;      /* its consumer is to be ended */
    bool beat_now;         /* kvr_cluster_refresh: heartbeat at once */

    _Atomic int conn; /* kvr_cluster_conn */
    _Atomic bool closing; /* kvr_cluster_stop is closing the connection */
    _Atomic bool registrations_loaded, bookings_replayed, started_without_nats;
    _Atomic uint64_t connects, disconnects, bookings_published, batches_published,
        publish_failures, replicas, registration_reads, watch_failures, setup_failures,
        replay_failures, heartbeat_failures;
};

/* threads.c */
void *cl_control_main(void *arg);
void *cl_watch_main(void *arg);
void *cl_flush_main(void *arg);
void cl_send_batch(void *user, const cl_buf *events, uint32_t n);
/* cnats callbacks (the cl_nats_events of the cluster). */
void cl_on_conn(void *user, kvr_cluster_conn state);
void cl_on_batch(void *user, const char *data, size_t len, int64_t wall_ns, uint64_t pending);
void cl_on_live(void *user, const char *data, size_t len);
/* cl_sync's wake-up (user = the cluster): a registry change is to be
 * written. */
void cl_wake_control(void *user);
/* The live records of the membership bucket (at most cap). -1 when the
 * bucket cannot be read. */
int cl_members_read(kvr_cluster *c, cl_member *out, size_t cap);

#endif
