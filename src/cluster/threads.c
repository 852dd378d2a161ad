/* The cluster layer's threads and cnats' callbacks into it.
 * - control: after every (re)connection makes sure the buckets and the
 *   stream exist and the live bookings subscription is in place, has the
 *   watch thread read the registrations bucket anew, then (once that read
 *   is done, so the replayed bookings find their models) replays the
 *   bookings stream (feed.c) and ends the replay's consumer once it is
 *   over; while connected it writes the registry's pending changes and
 *   heartbeats membership.
 * - watch: reads the registrations bucket and applies it to the registry.
 *   Its watcher is touched by this thread alone (made, read, destroyed):
 *   a read asked for elsewhere (reconnection, the periodic read, stop) is
 *   a flag it polls every CL_WATCH_POLL_MS. (It was stopped from the
 *   control thread, under a reading watch thread, right when cnats
 *   re-creates the watcher's consumer after a reconnection: ASan once
 *   reported a heap-use-after-free inside libnats' kvWatcher_Stop there.)
 *   Besides every reconnection, the bucket is read whole every
 *   CL_RESYNC_S: an entry whose application failed (a registry limit, a
 *   transient error) or that a consumer lost is applied then, so a replica
 *   never stays apart from the bucket.
 * - flush: publishes the batches no booking thread sent (outbox.c).
 * A lost connection disables the outbox and marks the state stale; cnats
 * reconnects by itself and the next setup catches up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_state.h"
#include "kvrouter/log.h"
#include "util/clock.h"

#define CL_WATCH_POLL_MS 250
#define CL_RESYNC_S 60.0

static bool connected(kvr_cluster *c)
{
    return atomic_load(&c->conn) == KVR_CLUSTER_CONNECTED;
}

static void replay_ended(kvr_cluster *c);

/* ---- cnats callbacks ------------------------------------------------------ */

void cl_on_conn(void *user, kvr_cluster_conn state)
{
    kvr_cluster *c = user;
    if (state == KVR_CLUSTER_CONNECTED) {
        atomic_fetch_add(&c->connects, 1);
        atomic_store(&c->conn, KVR_CLUSTER_CONNECTED);
        kvr_log(KVR_LOG_INFO, "cluster: connected to NATS (%s)", c->cfg.nats_url);
    } else {
        int was = atomic_exchange(&c->conn, state);
        if (was == KVR_CLUSTER_CONNECTED && !atomic_load(&c->closing)) {
            atomic_fetch_add(&c->disconnects, 1);
            kvr_log(KVR_LOG_WARN,
                    "cluster: lost NATS; routing goes on with local bookings, registrations "
                    "are written once it is back");
        }
        cl_outbox_enable(&c->outbox, false);
        atomic_store(&c->registrations_loaded, false);
    }
    pthread_mutex_lock(&c->mu);
    if (state == KVR_CLUSTER_CONNECTED)
        c->need_setup = true;
    else
        c->setup_ok = false;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void cl_on_batch(void *user, const char *data, size_t len, int64_t wall_ns, uint64_t pending)
{
    kvr_cluster *c = user;
    if (cl_feed_replayed(&c->feed, data, len, wall_ns, pending))
        replay_ended(c);
}

void cl_on_live(void *user, const char *data, size_t len)
{
    kvr_cluster *c = user;
    cl_feed_live(&c->feed, data, len);
}

/* ---- control thread -------------------------------------------------------- */

/* The replay is over: /ready may count the bookings, and the control thread
 * ends the replay's consumer (not from its own callback). */
static void replay_ended(kvr_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->bookings_replayed, true);
    c->replay_over = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* A replay of the stream, the live subscription already in place. */
static void subscribe(kvr_cluster *c)
{
    char err[256];
    bool none = false;
    cl_nats_unsubscribe(c->nats);
    pthread_mutex_lock(&c->mu);
    c->replay_over = false;
    pthread_mutex_unlock(&c->mu);
    cl_feed_begin_replay(&c->feed);
    if (cl_nats_subscribe(c->nats, &none, err, sizeof err) < 0) {
        atomic_fetch_add(&c->replay_failures, 1);
        KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: %s (retried)", err);
        return; /* live batches keep waiting for the replay retried */
    }
    pthread_mutex_lock(&c->mu);
    c->subscribed = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (none) {
        cl_feed_end_replay(&c->feed);
        replay_ended(c);
    }
}

/* Everything a fresh connection needs; false to be retried. Called and
 * returns with c->mu held. */
static bool setup(kvr_cluster *c)
{
    pthread_mutex_unlock(&c->mu);
    cl_nats_limits lim = {(int64_t)(c->cfg.booking_ttl_s * 1e9), c->cfg.stream_max_bytes,
                          (int64_t)c->cfg.membership_ttl_s * 1000000000ll};
    char err[256];
    int rc = cl_nats_ensure(c->nats, &c->names, &lim, err, sizeof err);
    /* Live first, so the replay that follows leaves no gap (feed.c). */
    if (rc == 0)
        rc = cl_nats_live_subscribe(c->nats, err, sizeof err);
    if (rc < 0) {
        atomic_fetch_add(&c->setup_failures, 1);
        KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: %s (retried)", err);
    } else {
        size_t room = cl_nats_max_payload(c->nats);
        pthread_mutex_lock(&c->outbox.mu);
        if (room > 4096 && c->outbox.max_bytes > room - 4096)
            c->outbox.max_bytes = (uint32_t)(room - 4096);
        pthread_mutex_unlock(&c->outbox.mu);
        cl_outbox_enable(&c->outbox, true);
    }
    pthread_mutex_lock(&c->mu);
    if (rc < 0 || !connected(c))
        return false;
    c->setup_ok = true;
    c->subscribed = false;
    uint64_t gen = ++c->watch_gen;
    c->next_resync = kvr_clock_mono() + CL_RESYNC_S;
    pthread_cond_broadcast(&c->cv);
    /* The consumer waits for the registrations (their models), not longer
     * than a start would. */
    struct timespec deadline = cl_deadline(c->cfg.startup_timeout_ms / 1e3);
    while (!c->stop && c->loaded_gen < gen && connected(c) &&
           pthread_cond_timedwait(&c->cv, &c->mu, &deadline) == 0)
        ;
    if (c->stop || !connected(c))
        return true;
    pthread_mutex_unlock(&c->mu);
    subscribe(c);
    pthread_mutex_lock(&c->mu);
    return true;
}

static void write_registrations(kvr_cluster *c)
{
    char *key, *val;
    for (int budget = 256; budget > 0 && connected(c); budget--) {
        if (!cl_sync_next_write(&c->sync, &key, &val))
            break;
        int rc = val ? cl_nats_kv_put(c->nats, CL_BUCKET_WORKERS, key, val, strlen(val))
                     : cl_nats_kv_delete(c->nats, CL_BUCKET_WORKERS, key);
        cl_sync_write_done(&c->sync, key, val, rc == 0);
        if (rc != 0)
            KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: registration %s for %.80s failed "
                            "(retried)", val ? "write" : "delete", key);
        free(key);
        free(val);
        if (rc != 0)
            break;
    }
}

int cl_members_read(kvr_cluster *c, cl_member *out, size_t cap)
{
    cl_watch *w = cl_nats_watch(c->nats, CL_BUCKET_REPLICAS);
    if (!w)
        return -1;
    size_t n = 0;
    cl_kv_entry e;
    char err[160];
    for (;;) {
        cl_watch_result r = cl_nats_watch_next(w, 1000, &e);
        if (r != CL_WATCH_ENTRY)
            break;
        if (!e.val || n >= cap)
            continue;
        if (cl_member_decode(e.val, e.len, &out[n], err, sizeof err) == 0)
            n++;
        else
            atomic_fetch_add(&c->inbox.invalid, 1);
    }
    cl_nats_watch_destroy(w);
    return (int)n;
}

static void heartbeat(kvr_cluster *c)
{
    cl_member m;
    memset(&m, 0, sizeof m);
    snprintf(m.url, sizeof m.url, "%s", c->me.url);
    m.started_at = c->me.started_at;
    m.incarnation = c->me.incarnation;
    m.ready = c->cfg.ready_fn && c->cfg.ready_fn(c->cfg.ready_user);
    char *text = cl_member_encode(&m);
    if (!text || cl_nats_kv_put(c->nats, CL_BUCKET_REPLICAS, c->me.key, text, strlen(text)) < 0) {
        atomic_fetch_add(&c->heartbeat_failures, 1);
        KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: membership heartbeat failed");
    }
    free(text);
    cl_member all[256];
    int n = cl_members_read(c, all, sizeof all / sizeof all[0]);
    if (n >= 0)
        atomic_store(&c->replicas, (uint64_t)n);
}

void *cl_control_main(void *arg)
{
    kvr_cluster *c = arg;
    double next_beat = 0, next_retry = 0;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        double now = kvr_clock_mono();
        if (connected(c) && c->need_setup && now >= next_retry) {
            c->need_setup = false;
            if (!setup(c)) {
                c->need_setup = true;
                next_retry = kvr_clock_mono() + 1.0;
            }
            next_beat = 0;
            continue;
        }
        if (connected(c) && c->setup_ok) {
            if (c->beat_now) {
                c->beat_now = false;
                next_beat = 0;
            }
            if (c->loaded_gen == c->watch_gen && now >= c->next_resync) {
                c->watch_gen++;
                c->next_resync = now + CL_RESYNC_S;
                pthread_cond_broadcast(&c->cv);
            }
            if (c->replay_over) {
                c->replay_over = false;
                pthread_mutex_unlock(&c->mu);
                cl_nats_unsubscribe(c->nats);
                pthread_mutex_lock(&c->mu);
            }
            if (!c->subscribed && c->loaded_gen == c->watch_gen) {
                pthread_mutex_unlock(&c->mu);
                subscribe(c);
                pthread_mutex_lock(&c->mu);
            }
            pthread_mutex_unlock(&c->mu);
            write_registrations(c);
            if (kvr_clock_mono() >= next_beat) {
                heartbeat(c);
                next_beat = kvr_clock_mono() + c->cfg.heartbeat_ms / 1e3;
            }
            pthread_mutex_lock(&c->mu);
        }
        if (c->stop)
            break;
        double wait = 0.2;
        if (connected(c) && c->setup_ok && next_beat - kvr_clock_mono() < wait)
            wait = next_beat - kvr_clock_mono();
        if (wait > 0.001) {
            struct timespec ts = cl_deadline(wait);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void cl_wake_control(void *user)
{
    kvr_cluster *c = user;
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* ---- watch thread ------------------------------------------------------------ */

static void apply(kvr_cluster *c, cl_sync_todo *t)
{
    bool ok = true;
    if (t->action == CL_SYNC_REGISTER) {
        kvr_registry_reply rep;
        ok = kvr_registry_result_ok(kvr_registry_register(c->registry, &t->reg, &rep));
        if (!ok)
            KVR_LOG_LIMITED(KVR_LOG_WARN, NULL,
                            "cluster: registration from the bucket refused: %s", rep.error);
    } else if (t->action == CL_SYNC_UNREGISTER) {
        kvr_unregister_reply ur;
        kvr_unregister_result r = kvr_registry_unregister(c->registry, &t->unreg, &ur);
        ok = r == KVR_UNREG_REMOVED || r == KVR_UNREG_NOT_FOUND;
    }
    cl_sync_todo_done(&c->sync, t, ok);
}

static bool read_asked(kvr_cluster *c, uint64_t gen)
{
    pthread_mutex_lock(&c->mu);
    bool asked = c->stop || gen != c->watch_gen;
    pthread_mutex_unlock(&c->mu);
    return asked;
}

/* Reads w until it breaks, stops, or a newer read is asked for. false when
 * it broke by itself (to be made again). */
static bool read_bucket(kvr_cluster *c, cl_watch *w, uint64_t gen)
{
    cl_sync_begin_pass(&c->sync);
    for (;;) {
        cl_kv_entry e;
        cl_watch_result r = cl_nats_watch_next(w, CL_WATCH_POLL_MS, &e);
        if (r == CL_WATCH_ENTRY) {
            cl_sync_todo t;
            cl_sync_entry(&c->sync, e.key, e.val, e.len, &t);
            apply(c, &t);
            if (read_asked(c, gen))
                return true;
        } else if (r == CL_WATCH_CAUGHT_UP) {
            cl_sync_end_pass(&c->sync);
            atomic_fetch_add(&c->registration_reads, 1);
            pthread_mutex_lock(&c->mu);
            if (gen > c->loaded_gen)
                c->loaded_gen = gen;
            atomic_store(&c->registrations_loaded, true);
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
        } else if (r == CL_WATCH_TIMEOUT) {
            if (read_asked(c, gen))
                return true;
        } else {
            return read_asked(c, gen);
        }
    }
}

void *cl_watch_main(void *arg)
{
    kvr_cluster *c = arg;
    uint64_t have = 0;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        if (!c->setup_ok || c->watch_gen == have) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        uint64_t gen = c->watch_gen;
        pthread_mutex_unlock(&c->mu);
        cl_watch *w = cl_nats_watch(c->nats, CL_BUCKET_WORKERS);
        pthread_mutex_lock(&c->mu);
        if (!w || c->stop || gen != c->watch_gen) {
            pthread_mutex_unlock(&c->mu);
            cl_nats_watch_destroy(w);
            pthread_mutex_lock(&c->mu);
            if (!w && !c->stop) {
                atomic_fetch_add(&c->watch_failures, 1);
                struct timespec ts = cl_deadline(0.5);
                pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            }
            continue;
        }
        pthread_mutex_unlock(&c->mu);
        bool asked = read_bucket(c, w, gen);
        cl_nats_watch_destroy(w);
        pthread_mutex_lock(&c->mu);
        /* A watcher that broke by itself is made again, after a pause. */
        have = asked ? gen : 0;
        if (!asked && !c->stop) {
            atomic_fetch_add(&c->watch_failures, 1);
            struct timespec ts = cl_deadline(0.5);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- flush thread ------------------------------------------------------------ */

void *cl_flush_main(void *arg)
{
    kvr_cluster *c = arg;
    cl_outbox_flusher(&c->outbox);
    return NULL;
}

/* The outbox's sender: one thread at a time (outbox.send_mu), so c->msg is
 * its own. */
void cl_send_batch(void *user, const cl_buf *events, uint32_t n)
{
    kvr_cluster *c = user;
    c->msg.len = 0;
    bool ok = cl_batch_header(&c->msg, c->self, c->me.incarnation, n) == 0 &&
              cl_buf_append(&c->msg, events->data, events->len) == 0 &&
              cl_nats_publish(c->nats, c->msg.data, c->msg.len) == 0;
    if (ok) {
        atomic_fetch_add(&c->bookings_published, n);
        atomic_fetch_add(&c->batches_published, 1);
    } else {
        atomic_fetch_add(&c->publish_failures, n);
    }
}
