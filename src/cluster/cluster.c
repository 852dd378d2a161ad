/* The cluster layer's lifecycle and its public calls (cluster.h): checks
 * the configuration, wires the registry observer and the router hook,
 * starts the threads of threads.c and waits for the starting replica's
 * state (registrations, bookings) before returning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cluster_state.h"
#include "kvrouter/hash.h"
#include "kvrouter/log.h"
#include "util/clock.h"
#include "util/rng.h"

const kvr_counter_desc kvr_cluster_counter_descs[] = {
#define KVR_CLUSTER_COUNTER_DESC_(name, kind, help) \
    {#name, KVR_METRIC_##kind, help, offsetof(kvr_cluster_counters, name)},
    KVR_CLUSTER_COUNTERS(KVR_CLUSTER_COUNTER_DESC_)
#undef KVR_CLUSTER_COUNTER_DESC_
};
const size_t kvr_cluster_counter_count =
    sizeof kvr_cluster_counter_descs / sizeof kvr_cluster_counter_descs[0];

void kvr_cluster_config_default(kvr_cluster_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->booking_ttl_s = 600;
    cfg->batch_max_events = 256;
    cfg->batch_max_delay_us = 1000;
    cfg->batch_max_bytes = 256u << 10;
    cfg->max_chain = 4096;
    cfg->stream_max_bytes = 256ll << 20;
    cfg->membership_ttl_s = 10;
    cfg->heartbeat_ms = 3000;
    cfg->startup_timeout_ms = 5000;
}

bool kvr_cluster_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n > 0 && n <= KVR_CLUSTER_NAME_MAX &&
           strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

const char *kvr_cluster_conn_name(kvr_cluster_conn s)
{
    switch (s) {
    case KVR_CLUSTER_CONNECTING: return "connecting";
    case KVR_CLUSTER_CONNECTED: return "connected";
    case KVR_CLUSTER_RECONNECTING: return "reconnecting";
    case KVR_CLUSTER_CLOSED: return "closed";
    }
    return "unknown";
}

static void fill_defaults(kvr_cluster_config *c)
{
    kvr_cluster_config d;
    kvr_cluster_config_default(&d);
    if (!(c->booking_ttl_s > 0))
        c->booking_ttl_s = d.booking_ttl_s;
    if (!c->batch_max_events)
        c->batch_max_events = d.batch_max_events;
    if (!c->batch_max_delay_us)
        c->batch_max_delay_us = d.batch_max_delay_us;
    if (!c->batch_max_bytes)
        c->batch_max_bytes = d.batch_max_bytes;
    if (!c->max_chain)
        c->max_chain = d.max_chain;
    if (c->max_chain > CL_MAX_CHAIN)
        c->max_chain = CL_MAX_CHAIN;
    if (c->stream_max_bytes <= 0)
        c->stream_max_bytes = d.stream_max_bytes;
    if (!c->membership_ttl_s)
        c->membership_ttl_s = d.membership_ttl_s;
    if (!c->heartbeat_ms)
        c->heartbeat_ms = d.heartbeat_ms;
    if (!c->startup_timeout_ms)
        c->startup_timeout_ms = d.startup_timeout_ms;
}

static bool check_config(const kvr_cluster_config *cfg, char *err, size_t err_len)
{
    const char *u = cfg->replica_url;
    if (!cfg->nats_url || !cfg->nats_url[0])
        snprintf(err, err_len, "cluster: a NATS URL is required (--nats)");
    else if (!cfg->name || !cfg->name[0])
        snprintf(err, err_len, "cluster: a cluster name is required with NATS (--cluster NAME)");
    else if (!kvr_cluster_name_valid(cfg->name))
        snprintf(err, err_len, "cluster: name '%s' must be 1..%d of A-Z a-z 0-9 _ -",
                 cfg->name ? cfg->name : "", KVR_CLUSTER_NAME_MAX);
    else if (!u || strlen(u) >= CL_MAX_URL ||
             (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0))
        snprintf(err, err_len, "cluster: replica URL '%s' must be an http(s) URL under %u bytes",
                 u ? u : "", CL_MAX_URL);
    else if (!cfg->codec.encode || !cfg->codec.decode || !cfg->codec.release)
        snprintf(err, err_len, "cluster: a registration codec is required");
    else
        return true;
    return false;
}

static void make_names(cl_names *n, const char *name)
{
    snprintf(n->bucket[CL_BUCKET_WORKERS], sizeof n->bucket[0], "KVR_%s_WORKERS", name);
    snprintf(n->bucket[CL_BUCKET_REPLICAS], sizeof n->bucket[0], "KVR_%s_REPLICAS", name);
    snprintf(n->stream, sizeof n->stream, "KVR_%s_BOOKINGS", name);
    snprintf(n->subject, sizeof n->subject, "kvr.%s.bookings", name);
}

/* An id for this process, distinct from every earlier run of the replica
 * (same URL) with overwhelming probability. */
static uint64_t make_incarnation(const void *salt)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)salt;
    x = kvr_splitmix64(&x);
    return x ? x : 1;
}

/* Registrations made before the cluster started (an embedding program's)
 * are shared like later ones. */
static void seed_mirror(kvr_cluster *c)
{
    kvr_registrations l;
    if (kvr_registry_list(c->registry, &l) != 0)
        return;
    for (size_t i = 0; i < l.n; i++) {
        kvr_reg_event ev = {KVR_REG_EVENT_ADDED, KVR_REGISTRY_CREATED, &l.items[i]};
        cl_sync_observer(&c->sync, &ev);
    }
    kvr_registrations_free(&l);
}

static bool start_thread(pthread_t *t, bool *started, void *(*fn)(void *), kvr_cluster *c,
                         const char *name)
{
    *started = pthread_create(t, NULL, fn, c) == 0;
    if (*started)
        pthread_setname_np(*t, name); /* top -H, /proc/PID/task/TID/comm */
    return *started;
}

/* Waits until the starting state is in, or the startup timeout. */
static void wait_started(kvr_cluster *c)
{
    struct timespec deadline = cl_deadline(c->cfg.startup_timeout_ms / 1e3);
    pthread_mutex_lock(&c->mu);
    while (!(atomic_load(&c->registrations_loaded) && atomic_load(&c->bookings_replayed)) &&
           pthread_cond_timedwait(&c->cv, &c->mu, &deadline) == 0)
        ;
    pthread_mutex_unlock(&c->mu);
    if (atomic_load(&c->registrations_loaded) && atomic_load(&c->bookings_replayed))
        return;
    if (atomic_load(&c->conn) != KVR_CLUSTER_CONNECTED && !atomic_load(&c->connects)) {
        atomic_store(&c->started_without_nats, true);
        kvr_log(KVR_LOG_WARN,
                "cluster: NATS at %s unreachable for %u ms: starting on local state "
                "(registrations and bookings are shared once it is reachable)",
                c->cfg.nats_url, c->cfg.startup_timeout_ms);
    } else {
        kvr_log(KVR_LOG_WARN,
                "cluster: still reading the cluster's state after %u ms (registrations %s, "
                "bookings %s); continuing",
                c->cfg.startup_timeout_ms,
                atomic_load(&c->registrations_loaded) ? "read" : "pending",
                atomic_load(&c->bookings_replayed) ? "replayed" : "pending");
    }
}

kvr_cluster *kvr_cluster_start(const kvr_cluster_config *cfg, kvr_registry *registry,
                               kvr_router *router, char *err, size_t err_len)
{
    if (!check_config(cfg, err, err_len))
        return NULL;
    kvr_cluster *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "cluster: out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    fill_defaults(&c->cfg);
    c->nats_url = strdup(cfg->nats_url);
    c->name = strdup(cfg->name);
    c->replica_url = strdup(cfg->replica_url);
    c->registry = registry;
    c->router = router;
    pthread_mutex_init(&c->mu, NULL);
    cl_cond_init(&c->cv);
    if (!c->nats_url || !c->name || !c->replica_url || cl_sync_init(&c->sync, &cfg->codec) < 0) {
        free(c->nats_url);
        free(c->name);
        free(c->replica_url);
        free(c);
        snprintf(err, err_len, "cluster: out of memory");
        return NULL;
    }
    c->sync.wake = cl_wake_control;
    c->sync.wake_user = c;
    c->cfg.nats_url = c->nats_url;
    c->cfg.name = c->name;
    c->cfg.replica_url = c->replica_url;
    make_names(&c->names, c->name);
    c->self = kvr_hash_bytes(c->replica_url, strlen(c->replica_url), 0);
    if (!c->self)
        c->self = 1;
    cl_self_init(&c->me, c->replica_url, make_incarnation(c), kvr_clock_wall());
    cl_outbox_init(&c->outbox, c->self, c->cfg.batch_max_events, c->cfg.batch_max_bytes,
                   c->cfg.max_chain, c->cfg.batch_max_delay_us / 1e6, cl_send_batch, c);
    cl_inbox_init(&c->inbox, router, c->self, c->me.incarnation, c->cfg.booking_ttl_s);
    atomic_store(&c->conn, KVR_CLUSTER_CONNECTING);

    cl_feed_init(&c->feed, &c->inbox);
    cl_nats_events ev = {cl_on_conn, cl_on_batch, cl_on_live, c};
    c->nats = cl_nats_open(c->cfg.nats_url, &ev, err, err_len);
    if (!c->nats) {
        kvr_cluster_stop(c);
        return NULL;
    }
    if (kvr_registry_observe(registry, cl_sync_observer, &c->sync) != 0) {
        snprintf(err, err_len, "cluster: cannot observe the registry");
        kvr_cluster_stop(c);
        return NULL;
    }
    c->observing = true;
    seed_mirror(c);
    kvr_router_set_booking_hook(router, cl_outbox_hook, &c->outbox);
    c->hooked = true;
    if (!start_thread(&c->flush_thread, &c->flush_started, cl_flush_main, c, "kvr-nats-flush") ||
        !start_thread(&c->watch_thread, &c->watch_started, cl_watch_main, c, "kvr-nats-watch") ||
        !start_thread(&c->ctl_thread, &c->ctl_started, cl_control_main, c, "kvr-nats-ctl")) {
        snprintf(err, err_len, "cluster: cannot start its threads");
        kvr_cluster_stop(c);
        return NULL;
    }
    wait_started(c);
    return c;
}

void kvr_cluster_stop(kvr_cluster *c)
{
    if (!c)
        return;
    if (c->hooked)
        kvr_router_set_booking_hook(c->router, NULL, NULL);
    if (c->observing)
        kvr_registry_unobserve(c->registry, cl_sync_observer, &c->sync);
    /* What the router booked until now still goes out. */
    cl_outbox_stop(&c->outbox);
    if (c->flush_started)
        pthread_join(c->flush_thread, NULL);
    pthread_mutex_lock(&c->mu);
    c->stop = true; /* the watch thread sees it within CL_WATCH_POLL_MS */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->watch_started)
        pthread_join(c->watch_thread, NULL);
    if (c->ctl_started)
        pthread_join(c->ctl_thread, NULL);
    if (c->nats && atomic_load(&c->conn) == KVR_CLUSTER_CONNECTED)
        cl_nats_kv_delete(c->nats, CL_BUCKET_REPLICAS, c->me.key);
    atomic_store(&c->closing, true);
    cl_nats_close(c->nats);
    cl_outbox_destroy(&c->outbox);
    cl_buf_free(&c->msg);
    cl_feed_destroy(&c->feed);
    cl_inbox_destroy(&c->inbox);
    cl_sync_destroy(&c->sync);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->nats_url);
    free(c->name);
    free(c->replica_url);
    free(c);
}

void kvr_cluster_publish_due(kvr_cluster *c)
{
    if (c)
        cl_outbox_send_due(&c->outbox);
}

void kvr_cluster_refresh(kvr_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    c->beat_now = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

size_t kvr_cluster_peers(kvr_cluster *c, kvr_cluster_peer *out, size_t cap)
{
    if (atomic_load(&c->conn) != KVR_CLUSTER_CONNECTED)
        return 0;
    cl_member m[64];
    int n = cl_members_read(c, m, sizeof m / sizeof m[0]);
    size_t k = n > 0 ? cl_member_rank(m, (size_t)n, &c->me) : 0;
    for (size_t i = 0; i < k && i < cap; i++)
        memcpy(out[i].url, m[i].url, sizeof out[i].url);
    return k < cap ? k : cap;
}

void kvr_cluster_status_get(kvr_cluster *c, kvr_cluster_status *out)
{
    memset(out, 0, sizeof *out);
    out->conn = (kvr_cluster_conn)atomic_load(&c->conn);
    out->registrations_loaded = atomic_load(&c->registrations_loaded);
    out->bookings_replayed = atomic_load(&c->bookings_replayed);
    out->started_without_nats = atomic_load(&c->started_without_nats);
    kvr_cluster_counters *k = &out->c;
    k->connects = atomic_load(&c->connects);
    k->disconnects = atomic_load(&c->disconnects);
    k->bookings_published = atomic_load(&c->bookings_published);
    k->batches_published = atomic_load(&c->batches_published);
    k->publish_failures = atomic_load(&c->publish_failures) + atomic_load(&c->outbox.dropped);
    k->flusher_batches = atomic_load(&c->outbox.flusher_sent);
    k->flusher_wakes = atomic_load(&c->outbox.flusher_wakes);
    k->setup_failures = atomic_load(&c->setup_failures);
    k->replay_failures = atomic_load(&c->replay_failures);
    k->heartbeat_failures = atomic_load(&c->heartbeat_failures);
    k->batches_received = atomic_load(&c->inbox.batches);
    k->peer_events_applied = atomic_load(&c->inbox.applied);
    k->peer_events_rejected = atomic_load(&c->inbox.rejected);
    k->live_batches_dropped = atomic_load(&c->feed.dropped);
    k->own_batches_skipped = atomic_load(&c->inbox.own_skipped);
    k->adopted_events = atomic_load(&c->inbox.adopted);
    k->invalid_payloads = atomic_load(&c->inbox.invalid) + atomic_load(&c->sync.invalid);
    k->registrations_applied = atomic_load(&c->sync.applied);
    k->registrations_rejected = atomic_load(&c->sync.rejected);
    k->registration_reads = atomic_load(&c->registration_reads);
    k->registration_watch_failures = atomic_load(&c->watch_failures);
    k->registrations_written = atomic_load(&c->sync.written);
    k->registration_write_failures = atomic_load(&c->sync.write_failures);
    k->registrations_pending = cl_sync_pending(&c->sync);
    k->replicas = atomic_load(&c->replicas);
    kvr_router_peer_stats ps;
    kvr_router_peer_stats_get(c->router, &ps);
    k->peer_bookings_active = ps.active;
}
