/* The listener table and the public API: creating and stopping the ingest
 * thread, SUB sockets with their monitors, listener snapshots, and the
 * peer-recovery hold. The thread itself is loop.c; the sequence rule is
 * listener.c. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "kvrouter/log.h"
#include "source/source_internal.h"
#include "util/clock.h"
#include "util/fds.h"
#include "util/grow.h"

double kvr_source_now(void) { return kvr_clock_mono(); }

const char *kvr_listener_state_name(kvr_listener_state s)
{
    switch (s) {
    case KVR_LISTENER_CONNECTING:
        return "connecting";
    case KVR_LISTENER_LIVE:
        return "live";
    case KVR_LISTENER_REPLAYING:
        return "replaying";
    case KVR_LISTENER_HELD:
        return "held";
    default:
        return "unknown";
    }
}

void kvr_source_config_default(kvr_source_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->replay_timeout_ms = 2000;
    cfg->rcv_hwm = 100000;
    cfg->max_message_bytes = 32ull << 20;
    cfg->max_msg_size = 0; /* 2 x max_message_bytes */
    cfg->max_buffered = 65536;
    cfg->max_buffered_bytes = 256ull << 20;
    cfg->max_buffered_total_bytes = 1ull << 30;
    cfg->reconnect_max_ms = 10000;
    cfg->replay_backoff_max_ms = 60000;
    cfg->fd_reserve = 64;
}

kvr_indexer *kvr_source_indexer(kvr_source *src) { return src->ix; }

const kvr_counter_desc kvr_source_counter_descs[] = {
#define KVR_SOURCE_COUNTER_DESC_(name, kind, help) \
    {#name, KVR_METRIC_##kind, help, offsetof(kvr_source_counters, name)},
    KVR_SOURCE_COUNTERS(KVR_SOURCE_COUNTER_DESC_)
#undef KVR_SOURCE_COUNTER_DESC_
};
const size_t kvr_source_counter_count =
    sizeof kvr_source_counter_descs / sizeof kvr_source_counter_descs[0];

void kvr_source_counters_add(kvr_source_counters *a, const kvr_source_counters *b)
{
#define KVR_SOURCE_COUNTER_ADD_(name, kind, help) a->name += b->name;
    KVR_SOURCE_COUNTERS(KVR_SOURCE_COUNTER_ADD_)
#undef KVR_SOURCE_COUNTER_ADD_
}

static void merge_config(kvr_source_config *dst, const kvr_source_config *cfg)
{
    if (cfg->replay_timeout_ms)
        dst->replay_timeout_ms = cfg->replay_timeout_ms;
    if (cfg->rcv_hwm)
        dst->rcv_hwm = cfg->rcv_hwm;
    if (cfg->max_msg_size)
        dst->max_msg_size = cfg->max_msg_size;
    if (cfg->max_message_bytes)
        dst->max_message_bytes = cfg->max_message_bytes;
    if (cfg->max_buffered)
        dst->max_buffered = cfg->max_buffered;
    if (cfg->max_buffered_bytes)
        dst->max_buffered_bytes = cfg->max_buffered_bytes;
    if (cfg->max_buffered_total_bytes)
        dst->max_buffered_total_bytes = cfg->max_buffered_total_bytes;
    if (cfg->reconnect_max_ms > 0)
        dst->reconnect_max_ms = cfg->reconnect_max_ms;
    if (cfg->fd_reserve)
        dst->fd_reserve = cfg->fd_reserve;
    if (cfg->replay_backoff_max_ms)
        dst->replay_backoff_max_ms = cfg->replay_backoff_max_ms;
}

kvr_source *kvr_source_create(kvr_indexer *ix, const kvr_source_config *cfg)
{
    /* A listener holds several descriptors (the mailboxes of its SUB, of
     * the SUB's monitor and of our end of it, plus its connection; three
     * more while it replays: the DEALER and its monitor): 1000 engines need
     * about 4000, and the usual soft limit is 1024. */
    kvr_fd_raise_limit();
    kvr_source *src = calloc(1, sizeof *src);
    if (!src)
        return NULL;
    kvr_source_config_default(&src->cfg);
    if (cfg)
        merge_config(&src->cfg, cfg);
    if (src->cfg.max_msg_size <= 0)
        src->cfg.max_msg_size = src->cfg.max_message_bytes > (uint64_t)INT64_MAX / 2
                                    ? INT64_MAX
                                    : (int64_t)(2 * src->cfg.max_message_bytes);
    src->ix = ix;
    src->epfd = epoll_create1(EPOLL_CLOEXEC);
    src->wake.kind = KVR_WATCH_WAKE;
    src->wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    src->zctx = zmq_ctx_new();
    /* A listener is three sockets (SUB, its monitor and our end of it); the
     * default of 1023 would stop registrations near 340 workers. */
    if (src->zctx)
        zmq_ctx_set(src->zctx, ZMQ_MAX_SOCKETS, zmq_ctx_get(src->zctx, ZMQ_SOCKET_LIMIT));
    pthread_mutex_init(&src->mu, NULL);
    pthread_cond_init(&src->cond, NULL);
    kvr_batch_init(&src->batch);
    kvr_batch_set_max_bytes(&src->batch, (size_t)src->cfg.max_message_bytes);
    src->burst = calloc(KVR_SOURCE_BURST * KVR_MAX_FRAMES, sizeof *src->burst);
    src->burst_n = calloc(KVR_SOURCE_BURST, sizeof *src->burst_n);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &src->wake};
    if (src->epfd < 0 || src->wake.fd < 0 || !src->zctx || !src->burst || !src->burst_n ||
        epoll_ctl(src->epfd, EPOLL_CTL_ADD, src->wake.fd, &ev) != 0 ||
        pthread_create(&src->thread, NULL, kvr_source_main, src) != 0) {
        kvr_source_destroy(src);
        return NULL;
    }
    src->thread_started = true;
    return src;
}

static void close_sub(kvr_source *src, kvr_listener *l)
{
    kvr_monitor_close(src, &l->mon, l->sub.sock);
    kvr_watch_close(src, &l->sub);
    l->connected = false;
    l->disconnected = false;
    l->reconnected = false;
    l->has_live_seq = false;
}

static void free_listener(kvr_source *src, kvr_listener *l)
{
    kvr_listener_reset(src, l);
    kvr_listener_free_buffer(src, l);
    close_sub(src, l);
    free(l);
}

void kvr_source_destroy(kvr_source *src)
{
    if (!src)
        return;
    if (src->thread_started) {
        src->stop = 1;
        kvr_source_wake(src);
        pthread_join(src->thread, NULL);
    }
    for (size_t i = 0; i < src->n_ls; i++)
        free_listener(src, src->ls[i]);
    free(src->ls);
    free(src->ready);
    free(src->ready_next);
    free(src->heap);
    free(src->burst);
    free(src->burst_n);
    kvr_batch_free(&src->batch);
    if (src->zctx)
        zmq_ctx_term(src->zctx);
    if (src->wake.fd >= 0)
        close(src->wake.fd);
    if (src->epfd >= 0)
        close(src->epfd);
    pthread_mutex_destroy(&src->mu);
    pthread_cond_destroy(&src->cond);
    free(src);
}

static kvr_listener *find_listener(kvr_source *src, kvr_worker *w, uint32_t rank)
{
    for (size_t i = 0; i < src->n_ls; i++)
        if (src->ls[i]->w == w && src->ls[i]->rank == rank)
            return src->ls[i];
    return NULL;
}

/* The SUB of l and a monitor on it (CONNECTED, HANDSHAKE_SUCCEEDED,
 * DISCONNECTED), both watched. On failure nothing is left open. */
static bool open_sub(kvr_source *src, kvr_listener *l)
{
    void *s = zmq_socket(src->zctx, ZMQ_SUB);
    if (!s)
        return false;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &src->cfg.rcv_hwm, sizeof src->cfg.rcv_hwm);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &src->cfg.max_msg_size, sizeof src->cfg.max_msg_size);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &src->cfg.reconnect_max_ms,
                   sizeof src->cfg.reconnect_max_ms);
    if (zmq_setsockopt(s, ZMQ_SUBSCRIBE, l->topic, strlen(l->topic)) != 0 ||
        kvr_monitor_open(src, &l->mon, s,
                         ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                             ZMQ_EVENT_DISCONNECTED) != 0) {
        zmq_close(s);
        return false;
    }
    if (zmq_connect(s, l->endpoint) != 0 || kvr_watch_open(src, &l->sub, s) != 0) {
        kvr_monitor_close(src, &l->mon, s);
        zmq_close(s);
        return false;
    }
    return true;
}

bool kvr_source_descriptors_left(kvr_source *src, char *why, size_t cap)
{
    size_t need = KVR_LISTENER_FDS + src->cfg.fd_reserve, open = 0;
    if (kvr_fd_free_at_least(need, &open))
        return true;
    if (why)
        snprintf(why, cap,
                 "out of file descriptors: %zu of RLIMIT_NOFILE %zu are open and a new listener "
                 "needs %d while %zu stay free for HTTP connections",
                 open, kvr_fd_limit(), KVR_LISTENER_FDS, src->cfg.fd_reserve);
    return false;
}

bool kvr_source_endpoint_valid(kvr_source *src, const char *endpoint)
{
    void *s = zmq_socket(src->zctx, ZMQ_DEALER);
    if (!s)
        return false;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    bool ok = zmq_connect(s, endpoint) == 0;
    zmq_close(s);
    return ok;
}

static bool copy_str(char *dst, size_t cap, const char *s)
{
    s = s ? s : "";
    size_t n = strlen(s);
    if (n >= cap)
        return false;
    memcpy(dst, s, n + 1);
    return true;
}

static void init_watches(kvr_listener *l)
{
    l->sub = (kvr_watch){.l = l, .fd = -1, .kind = KVR_WATCH_SUB};
    l->mon = (kvr_watch){.l = l, .fd = -1, .kind = KVR_WATCH_MON};
    l->dealer = (kvr_watch){.l = l, .fd = -1, .kind = KVR_WATCH_DEALER};
    l->dealer_mon = (kvr_watch){.l = l, .fd = -1, .kind = KVR_WATCH_DEALER_MON};
    kvr_timer_init(&l->replay_timer);
}

kvr_listen_result kvr_source_listen(kvr_source *src, kvr_worker *w, uint64_t worker_id,
                                    uint32_t rank, const char *endpoint,
                                    const char *replay_endpoint, const char *topic)
{
    char ep[KVR_ENDPOINT_MAX], rep[KVR_ENDPOINT_MAX], tp[KVR_NAME_MAX];
    if (!endpoint || !copy_str(ep, sizeof ep, endpoint) ||
        !copy_str(rep, sizeof rep, replay_endpoint) || !copy_str(tp, sizeof tp, topic))
        return KVR_LISTEN_FAILED;
    kvr_listener *old = find_listener(src, w, rank);
    if (old && strcmp(old->endpoint, ep) == 0 && strcmp(old->replay_endpoint, rep) == 0 &&
        strcmp(old->topic, tp) == 0)
        return KVR_LISTEN_UNCHANGED;
    if (old) {
        /* New endpoint: a new publisher whose numbering starts over. Counters
         * stay so the operator keeps the history. */
        kvr_listener keep = *old;
        kvr_listener_reset(src, old);
        close_sub(src, old);
        memcpy(old->endpoint, ep, sizeof ep);
        memcpy(old->replay_endpoint, rep, sizeof rep);
        memcpy(old->topic, tp, sizeof tp);
        old->replay_failures = 0;
        old->replay_backoff_until = 0;
        old->replay_error[0] = 0;
        if (!open_sub(src, old)) {
            /* keep the old sockets' settings: nothing changed */
            memcpy(old->endpoint, keep.endpoint, sizeof ep);
            memcpy(old->replay_endpoint, keep.replay_endpoint, sizeof rep);
            memcpy(old->topic, keep.topic, sizeof tp);
            open_sub(src, old);
            return KVR_LISTEN_FAILED;
        }
        old->state = old->held ? KVR_LISTENER_HELD : KVR_LISTENER_CONNECTING;
        return KVR_LISTEN_RESTARTED;
    }
    if (!kvr_source_descriptors_left(src, NULL, 0))
        return KVR_LISTEN_NO_DESCRIPTORS;
    if (KVR_GROW(src->ls, src->cap_ls, src->n_ls + 1) != 0)
        return KVR_LISTEN_FAILED;
    kvr_listener *l = calloc(1, sizeof *l);
    if (!l || !kvr_timer_reserve(src, src->n_ls + 1)) {
        free(l);
        return KVR_LISTEN_FAILED;
    }
    memcpy(l->endpoint, ep, sizeof ep);
    memcpy(l->replay_endpoint, rep, sizeof rep);
    memcpy(l->topic, tp, sizeof tp);
    l->w = w;
    l->worker_id = worker_id;
    l->rank = rank;
    l->held = src->holding;
    l->state = l->held ? KVR_LISTENER_HELD : KVR_LISTENER_CONNECTING;
    init_watches(l);
    errno = 0;
    if (!open_sub(src, l)) {
        free(l);
        return errno == EMFILE || errno == ENFILE ? KVR_LISTEN_NO_DESCRIPTORS
                                                  : KVR_LISTEN_FAILED;
    }
    src->ls[src->n_ls++] = l;
    return KVR_LISTEN_CREATED;
}

size_t kvr_source_unlisten(kvr_source *src, kvr_worker *w, uint32_t rank)
{
    size_t n = 0;
    for (size_t i = 0; i < src->n_ls;) {
        kvr_listener *l = src->ls[i];
        if (l->w == w && (rank == UINT32_MAX || l->rank == rank)) {
            free_listener(src, l);
            src->ls[i] = src->ls[--src->n_ls];
            n++;
        } else {
            i++;
        }
    }
    return n;
}

void kvr_source_reset_cursors(kvr_source *src, kvr_worker *w)
{
    for (size_t i = 0; i < src->n_ls; i++)
        if (src->ls[i]->w == w)
            kvr_listener_reset(src, src->ls[i]);
}

size_t kvr_source_count(kvr_source *src, kvr_worker *w)
{
    size_t n = 0;
    for (size_t i = 0; i < src->n_ls; i++)
        if (!w || src->ls[i]->w == w)
            n++;
    return n;
}

static void listener_info(const kvr_listener *l, double now, kvr_listener_info *o)
{
    o->worker = l->w;
    o->worker_id = l->worker_id;
    o->dp_rank = l->rank;
    memcpy(o->endpoint, l->endpoint, sizeof o->endpoint);
    memcpy(o->replay_endpoint, l->replay_endpoint, sizeof o->replay_endpoint);
    memcpy(o->topic, l->topic, sizeof o->topic);
    o->state = l->state;
    o->connected = l->connected;
    o->has_seq = l->has_seq;
    o->last_seq = l->last_seq;
    /* during a hold nothing of the stream is applied yet */
    o->has_cursor = !l->held && l->has_next && l->next > 0;
    o->cursor = o->has_cursor ? l->next - 1 : 0;
    o->has_digest = o->has_cursor && l->has_digest;
    o->cursor_digest = o->has_digest ? l->last_digest : 0;
    o->seconds_since_last_event = l->last_event_time > 0 ? now - l->last_event_time : -1;
    o->replay_state = kvr_replay_state_of(l, now);
    o->replay_backoff_s = o->replay_state == KVR_REPLAY_BACKOFF ? l->replay_backoff_until - now : 0;
    o->replay_failures = l->replay_failures;
    memcpy(o->replay_error, l->replay_error, sizeof o->replay_error);
    o->c = l->c;
}

size_t kvr_source_listeners(kvr_source *src, kvr_worker *w, kvr_listener_info *out, size_t cap)
{
    size_t n = 0;
    double now = kvr_source_now();
    for (size_t i = 0; i < src->n_ls; i++) {
        kvr_listener *l = src->ls[i];
        if (w && l->w != w)
            continue;
        if (n < cap)
            listener_info(l, now, &out[n]);
        n++;
    }
    return n;
}

void kvr_source_hold(kvr_source *src)
{
    src->holding = true;
    for (size_t i = 0; i < src->n_ls; i++)
        kvr_listener_hold(src, src->ls[i]);
}

bool kvr_source_release_one(kvr_source *src, kvr_worker *w, uint32_t rank, uint64_t cursor,
                            const uint64_t *cursor_digest)
{
    kvr_listener *l = find_listener(src, w, rank);
    if (!l || !l->held)
        return false;
    kvr_listener_release(src, l, true, cursor, cursor_digest);
    return true;
}

void kvr_source_release(kvr_source *src)
{
    src->holding = false;
    for (size_t i = 0; i < src->n_ls; i++)
        kvr_listener_release(src, src->ls[i], false, 0, NULL);
}
