/* The ingest thread: one zmq_poll over every SUB (and replay DEALER)
 * socket, commands from other threads through a queue woken by an eventfd,
 * and the listener table. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "source/frames.h"
#include "kvrouter/log.h"
#include "source/source_internal.h"

typedef struct kvr_source_cmd {
    kvr_source_fn fn;
    void *arg;
    bool done;
    struct kvr_source_cmd *next;
} kvr_source_cmd;

static _Thread_local kvr_source *tls_running; /* set while on the ingest thread */

/* Messages taken from one socket per poll round, so a flooding engine
 * cannot starve the others. */
#define KVR_SOURCE_BURST 256
#define KVR_MAX_FRAMES 5

double kvr_source_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *kvr_listener_state_name(kvr_listener_state s)
{
    switch (s) {
    case KVR_LISTENER_CONNECTING:
        return "connecting";
    case KVR_LISTENER_LIVE:
        return "live";
    case KVR_LISTENER_REPLAYING:
        return "replaying";
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
    cfg->poll_ms = 20;
    cfg->max_buffered = 65536;
    cfg->max_buffered_bytes = 256ull << 20;
    cfg->reconnect_max_ms = 1000;
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

static void handle_sub(kvr_source *src, kvr_listener *l)
{
    zmq_msg_t f[KVR_MAX_FRAMES];
    size_t n;
    for (int i = 0; i < KVR_SOURCE_BURST && l->sub; i++) {
        if (!kvr_zmq_recv_frames(l->sub, ZMQ_DONTWAIT, f, KVR_MAX_FRAMES, &n))
            return;
        l->c.messages++;
        uint64_t seq = 0;
        const void *seq_data = n >= 2 ? zmq_msg_data(&f[1]) : NULL;
        size_t seq_len = n >= 2 ? zmq_msg_size(&f[1]) : 0;
        if (kvr_frame_parse(n, seq_data, seq_len, &seq) != KVR_FRAME_OK)
            l->c.bad_frames++;
        else
            kvr_listener_on_live(src, l, seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
        kvr_zmq_close_frames(f, KVR_MAX_FRAMES, n);
    }
}

static void handle_dealer(kvr_source *src, kvr_listener *l)
{
    zmq_msg_t f[KVR_MAX_FRAMES];
    size_t n;
    for (int i = 0; i < KVR_SOURCE_BURST && l->dealer; i++) {
        if (!kvr_zmq_recv_frames(l->dealer, ZMQ_DONTWAIT, f, KVR_MAX_FRAMES, &n))
            return;
        if (n < 3 || n > 4 || zmq_msg_size(&f[0]) != 0) {
            l->c.bad_frames++;
        } else {
            size_t after = n - 1; /* frames after the delimiter */
            zmq_msg_t *seqf = &f[after == 3 ? 2 : 1];
            zmq_msg_t *pay = &f[n - 1];
            kvr_listener_on_replay(src, l, after, zmq_msg_data(seqf), zmq_msg_size(seqf),
                                   zmq_msg_data(pay), zmq_msg_size(pay));
        }
        kvr_zmq_close_frames(f, KVR_MAX_FRAMES, n);
    }
}

static void run_commands(kvr_source *src)
{
    pthread_mutex_lock(&src->mu);
    kvr_source_cmd *list = src->cmds;
    src->cmds = NULL;
    pthread_mutex_unlock(&src->mu);
    /* The queue is LIFO; run in arrival order. */
    kvr_source_cmd *rev = NULL;
    while (list) {
        kvr_source_cmd *nx = list->next;
        list->next = rev;
        rev = list;
        list = nx;
    }
    while (rev) {
        kvr_source_cmd *nx = rev->next;
        rev->fn(src, rev->arg);
        pthread_mutex_lock(&src->mu);
        rev->done = true;
        pthread_cond_broadcast(&src->cond);
        pthread_mutex_unlock(&src->mu);
        rev = nx;
    }
}

static void *ingest_main(void *arg)
{
    kvr_source *src = arg;
    tls_running = src;
    zmq_pollitem_t *items = NULL;
    kvr_listener **owners = NULL;
    bool *is_dealer = NULL;
    size_t cap = 0, n_items = 0;
    src->items_dirty = true;
    while (!src->stop) {
        run_commands(src);
        if (src->items_dirty) {
            size_t need = 1 + 2 * src->n_ls;
            if (need > cap) {
                free(items);
                free(owners);
                free(is_dealer);
                cap = need * 2;
                items = calloc(cap, sizeof *items);
                owners = calloc(cap, sizeof *owners);
                is_dealer = calloc(cap, sizeof *is_dealer);
                if (!items || !owners || !is_dealer) {
                    KVR_LOG_LIMITED(KVR_LOG_ERROR, NULL, "source: out of memory for the poll set");
                    break;
                }
            }
            n_items = 0;
            items[n_items++] = (zmq_pollitem_t){.socket = NULL, .fd = src->wake_fd,
                                                .events = ZMQ_POLLIN};
            for (size_t i = 0; i < src->n_ls; i++) {
                kvr_listener *l = src->ls[i];
                owners[n_items] = l;
                is_dealer[n_items] = false;
                items[n_items++] = (zmq_pollitem_t){.socket = l->sub, .events = ZMQ_POLLIN};
                if (l->dealer) {
                    owners[n_items] = l;
                    is_dealer[n_items] = true;
                    items[n_items++] =
                        (zmq_pollitem_t){.socket = l->dealer, .events = ZMQ_POLLIN};
                }
            }
            src->items_dirty = false;
        }
        int rc = zmq_poll(items, (int)n_items, src->cfg.poll_ms);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) {
            uint64_t v;
            if (read(src->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                break;
        }
        for (size_t i = 1; rc > 0 && i < n_items && !src->items_dirty; i++) {
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            kvr_listener *l = owners[i];
            void *had_dealer = l->dealer;
            if (is_dealer[i])
                handle_dealer(src, l);
            else
                handle_sub(src, l);
            if (l->dealer != had_dealer)
                src->items_dirty = true;
        }
        double now = kvr_source_now();
        for (size_t i = 0; i < src->n_ls; i++) {
            kvr_listener *l = src->ls[i];
            void *had_dealer = l->dealer;
            kvr_listener_check_timeout(src, l, now);
            if (l->dealer != had_dealer)
                src->items_dirty = true;
        }
    }
    free(items);
    free(owners);
    free(is_dealer);
    /* Wake anyone still waiting: their command will never run. */
    pthread_mutex_lock(&src->mu);
    src->stop = 1;
    pthread_cond_broadcast(&src->cond);
    pthread_mutex_unlock(&src->mu);
    tls_running = NULL;
    return NULL;
}

kvr_source *kvr_source_create(kvr_indexer *ix, const kvr_source_config *cfg)
{
    kvr_source *src = calloc(1, sizeof *src);
    if (!src)
        return NULL;
    kvr_source_config_default(&src->cfg);
    if (cfg) {
        if (cfg->replay_timeout_ms)
            src->cfg.replay_timeout_ms = cfg->replay_timeout_ms;
        if (cfg->rcv_hwm)
            src->cfg.rcv_hwm = cfg->rcv_hwm;
        if (cfg->max_msg_size)
            src->cfg.max_msg_size = cfg->max_msg_size;
        if (cfg->max_message_bytes)
            src->cfg.max_message_bytes = cfg->max_message_bytes;
        if (cfg->poll_ms)
            src->cfg.poll_ms = cfg->poll_ms;
        if (cfg->max_buffered)
            src->cfg.max_buffered = cfg->max_buffered;
        if (cfg->max_buffered_bytes)
            src->cfg.max_buffered_bytes = cfg->max_buffered_bytes;
        if (cfg->reconnect_max_ms > 0)
            src->cfg.reconnect_max_ms = cfg->reconnect_max_ms;
    }
    if (src->cfg.max_msg_size <= 0)
        src->cfg.max_msg_size = src->cfg.max_message_bytes > (uint64_t)INT64_MAX / 2
                                    ? INT64_MAX
                                    : (int64_t)(2 * src->cfg.max_message_bytes);
    src->ix = ix;
    src->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    src->zctx = zmq_ctx_new();
    pthread_mutex_init(&src->mu, NULL);
    pthread_cond_init(&src->cond, NULL);
    kvr_batch_init(&src->batch);
    kvr_batch_set_max_bytes(&src->batch, (size_t)src->cfg.max_message_bytes);
    if (src->wake_fd < 0 || !src->zctx ||
        pthread_create(&src->thread, NULL, ingest_main, src) != 0) {
        kvr_source_destroy(src);
        return NULL;
    }
    src->thread_started = true;
    return src;
}

static void free_listener(kvr_listener *l)
{
    if (l->sub)
        zmq_close(l->sub);
    if (l->dealer)
        zmq_close(l->dealer);
    kvr_listener_free_buffer(l);
    free(l);
}

void kvr_source_destroy(kvr_source *src)
{
    if (!src)
        return;
    if (src->thread_started) {
        src->stop = 1;
        uint64_t one = 1;
        if (write(src->wake_fd, &one, sizeof one) < 0) {
            /* the poll timeout still ends the loop */
        }
        pthread_join(src->thread, NULL);
    }
    for (size_t i = 0; i < src->n_ls; i++)
        free_listener(src->ls[i]);
    free(src->ls);
    kvr_batch_free(&src->batch);
    if (src->zctx)
        zmq_ctx_term(src->zctx);
    if (src->wake_fd >= 0)
        close(src->wake_fd);
    pthread_mutex_destroy(&src->mu);
    pthread_cond_destroy(&src->cond);
    free(src);
}

int kvr_source_run(kvr_source *src, kvr_source_fn fn, void *arg)
{
    if (tls_running == src) {
        fn(src, arg);
        return 0;
    }
    kvr_source_cmd cmd = {fn, arg, false, NULL};
    pthread_mutex_lock(&src->mu);
    if (src->stop) {
        pthread_mutex_unlock(&src->mu);
        return -1;
    }
    cmd.next = src->cmds;
    src->cmds = &cmd;
    pthread_mutex_unlock(&src->mu);
    uint64_t one = 1;
    if (write(src->wake_fd, &one, sizeof one) < 0) {
        /* eventfd overflow is impossible at these counts; poll timeout covers it */
    }
    pthread_mutex_lock(&src->mu);
    while (!cmd.done && !src->stop)
        pthread_cond_wait(&src->cond, &src->mu);
    bool done = cmd.done;
    if (!done) {
        /* Thread gone before running it: unlink so nothing points at our stack. */
        for (kvr_source_cmd **p = &src->cmds; *p; p = &(*p)->next)
            if (*p == &cmd) {
                *p = cmd.next;
                break;
            }
    }
    pthread_mutex_unlock(&src->mu);
    return done ? 0 : -1;
}

static kvr_listener *find_listener(kvr_source *src, kvr_worker *w, uint32_t rank, size_t *idx)
{
    for (size_t i = 0; i < src->n_ls; i++)
        if (src->ls[i]->w == w && src->ls[i]->rank == rank) {
            if (idx)
                *idx = i;
            return src->ls[i];
        }
    return NULL;
}

static void *open_sub(kvr_source *src, const char *endpoint, const char *topic)
{
    void *s = zmq_socket(src->zctx, ZMQ_SUB);
    if (!s)
        return NULL;
    int zero = 0;
    int64_t maxsz = src->cfg.max_msg_size;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &src->cfg.rcv_hwm, sizeof src->cfg.rcv_hwm);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &src->cfg.reconnect_max_ms,
                   sizeof src->cfg.reconnect_max_ms);
    if (zmq_setsockopt(s, ZMQ_SUBSCRIBE, topic, strlen(topic)) != 0 ||
        zmq_connect(s, endpoint) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
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

int kvr_source_listen(kvr_source *src, kvr_worker *w, uint64_t worker_id, uint32_t rank,
                      const char *endpoint, const char *replay_endpoint, const char *topic)
{
    kvr_listener tmp;
    memset(&tmp, 0, sizeof tmp);
    if (!endpoint || !copy_str(tmp.endpoint, sizeof tmp.endpoint, endpoint) ||
        !copy_str(tmp.replay_endpoint, sizeof tmp.replay_endpoint, replay_endpoint) ||
        !copy_str(tmp.topic, sizeof tmp.topic, topic))
        return -1;
    size_t idx;
    kvr_listener *old = find_listener(src, w, rank, &idx);
    if (old && strcmp(old->endpoint, tmp.endpoint) == 0 &&
        strcmp(old->replay_endpoint, tmp.replay_endpoint) == 0 &&
        strcmp(old->topic, tmp.topic) == 0)
        return 0;
    void *sub = open_sub(src, tmp.endpoint, tmp.topic);
    if (!sub)
        return -1;
    if (old) {
        /* New endpoint: a new publisher whose numbering starts over. Counters
         * stay so the operator keeps the history. */
        kvr_listener_reset(src, old);
        zmq_close(old->sub);
        old->sub = sub;
        memcpy(old->endpoint, tmp.endpoint, sizeof tmp.endpoint);
        memcpy(old->replay_endpoint, tmp.replay_endpoint, sizeof tmp.replay_endpoint);
        memcpy(old->topic, tmp.topic, sizeof tmp.topic);
        old->state = KVR_LISTENER_CONNECTING;
        src->items_dirty = true;
        return 2;
    }
    if (src->n_ls == src->cap_ls) {
        size_t cap = src->cap_ls ? src->cap_ls * 2 : 8;
        kvr_listener **nl = realloc(src->ls, cap * sizeof *nl);
        if (!nl) {
            zmq_close(sub);
            return -1;
        }
        src->ls = nl;
        src->cap_ls = cap;
    }
    kvr_listener *l = malloc(sizeof *l);
    if (!l) {
        zmq_close(sub);
        return -1;
    }
    *l = tmp;
    l->w = w;
    l->worker_id = worker_id;
    l->rank = rank;
    l->sub = sub;
    l->state = KVR_LISTENER_CONNECTING;
    src->ls[src->n_ls++] = l;
    src->items_dirty = true;
    return 1;
}

size_t kvr_source_unlisten(kvr_source *src, kvr_worker *w, uint32_t rank)
{
    size_t n = 0;
    for (size_t i = 0; i < src->n_ls;) {
        kvr_listener *l = src->ls[i];
        if (l->w == w && (rank == UINT32_MAX || l->rank == rank)) {
            free_listener(l);
            src->ls[i] = src->ls[--src->n_ls];
            n++;
        } else {
            i++;
        }
    }
    if (n)
        src->items_dirty = true;
    return n;
}

void kvr_source_reset_cursors(kvr_source *src, kvr_worker *w)
{
    for (size_t i = 0; i < src->n_ls; i++)
        if (src->ls[i]->w == w) {
            kvr_listener_reset(src, src->ls[i]);
            src->items_dirty = true;
        }
}

size_t kvr_source_count(kvr_source *src, kvr_worker *w)
{
    size_t n = 0;
    for (size_t i = 0; i < src->n_ls; i++)
        if (!w || src->ls[i]->w == w)
            n++;
    return n;
}

size_t kvr_source_listeners(kvr_source *src, kvr_worker *w, kvr_listener_info *out, size_t cap)
{
    size_t n = 0;
    double now = kvr_source_now();
    for (size_t i = 0; i < src->n_ls; i++) {
        kvr_listener *l = src->ls[i];
        if (w && l->w != w)
            continue;
        if (n < cap) {
            kvr_listener_info *o = &out[n];
            o->worker_id = l->worker_id;
            o->dp_rank = l->rank;
            memcpy(o->endpoint, l->endpoint, sizeof o->endpoint);
            memcpy(o->replay_endpoint, l->replay_endpoint, sizeof o->replay_endpoint);
            memcpy(o->topic, l->topic, sizeof o->topic);
            o->state = l->state;
            o->has_seq = l->has_seq;
            o->last_seq = l->last_seq;
            o->seconds_since_last_event = l->last_event_time > 0 ? now - l->last_event_time : -1;
            o->c = l->c;
        }
        n++;
    }
    return n;
}
