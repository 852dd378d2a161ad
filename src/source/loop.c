/* The ingest thread. It sleeps in epoll_wait on the ZMQ_FD of every socket
 * and on an eventfd for commands, and wakes only for input, a command or the
 * earliest timer: 1000 silent or unreachable engines cost nothing here.
 *
 * ZMQ_FD is edge-like (source_internal.h): a woken socket is serviced until
 * ZMQ_EVENTS says no input is left, or put back on the ready list when its
 * burst ends early, and the loop does not sleep while that list is not
 * empty. A SUB's messages are taken as a burst and its monitor is read after
 * the burst, before any of them is applied: a message that arrived over a new
 * connection can only be in the burst if the monitor already holds the
 * CONNECTED event, so no message of a new connection is taken for the old
 * stream. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "kvrouter/log.h"
#include "source/frames.h"
#include "source/source_internal.h"
#include "util/grow.h"

typedef struct kvr_source_cmd {
    kvr_source_fn fn;
    void *arg;
    bool done;
    struct kvr_source_cmd *next;
} kvr_source_cmd;

static _Thread_local kvr_source *tls_running; /* set while on the ingest thread */

#define KVR_EPOLL_BATCH 256

static void ready_remove(kvr_source *src, kvr_watch *w)
{
    for (size_t i = 0; i < src->n_ready; i++)
        if (src->ready[i] == w) {
            src->ready[i] = src->ready[--src->n_ready];
            break;
        }
    w->ready = false;
}

void kvr_watch_ready(kvr_source *src, kvr_watch *w)
{
    if (w->ready || !w->sock)
        return;
    if (src->n_ready == src->cap_ready) {
        /* Both arrays swap roles each round, so they grow together. */
        size_t cap_a = src->cap_ready, cap_b = src->cap_ready;
        if (KVR_GROW(src->ready, cap_a, src->n_ready + 1) != 0 ||
            KVR_GROW(src->ready_next, cap_b, src->n_ready + 1) != 0)
            return; /* the descriptor still wakes us when more arrives */
        src->cap_ready = cap_a < cap_b ? cap_a : cap_b;
    }
    src->ready[src->n_ready++] = w;
    w->ready = true;
}

int kvr_watch_open(kvr_source *src, kvr_watch *w, void *sock)
{
    int fd;
    size_t sz = sizeof fd;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &sz) != 0)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
    if (epoll_ctl(src->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return -1;
    w->sock = sock;
    w->fd = fd;
    kvr_watch_ready(src, w);
    return 0;
}

void kvr_watch_close(kvr_source *src, kvr_watch *w)
{
    if (!w->sock)
        return;
    if (w->fd >= 0)
        epoll_ctl(src->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    if (w->ready)
        ready_remove(src, w);
    zmq_close(w->sock);
    w->sock = NULL;
    w->fd = -1;
}

static void service_monitor(kvr_source *src, kvr_listener *l)
{
    uint16_t event;
    while (kvr_monitor_next(&l->mon, &event))
        kvr_listener_on_monitor(src, l, event);
}

static void service_sub(kvr_source *src, kvr_listener *l)
{
    size_t n_msgs = 0;
    /* recv until EAGAIN: that also processes the socket's commands, so the
     * descriptor signals the next input */
    while (n_msgs < KVR_SOURCE_BURST &&
           kvr_zmq_recv_frames(l->sub.sock, ZMQ_DONTWAIT, src->burst + n_msgs * KVR_MAX_FRAMES,
                               KVR_MAX_FRAMES, &src->burst_n[n_msgs]))
        n_msgs++;
    if (n_msgs == KVR_SOURCE_BURST)
        kvr_watch_ready(src, &l->sub);
    service_monitor(src, l);
    for (size_t i = 0; i < n_msgs; i++) {
        zmq_msg_t *f = src->burst + i * KVR_MAX_FRAMES;
        size_t n = src->burst_n[i];
        l->c.messages++;
        uint64_t seq = 0;
        if (kvr_frame_parse(n, n >= 2 ? zmq_msg_data(&f[1]) : NULL, n >= 2 ? zmq_msg_size(&f[1]) : 0,
                            &seq) != KVR_FRAME_OK)
            l->c.bad_frames++;
        else
            kvr_listener_on_live(src, l, seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
        kvr_zmq_close_frames(f, KVR_MAX_FRAMES, n);
    }
}

/* The replay DEALER's monitor: ZMQ_EVENT_CONNECT_RETRIED is an attempt the
 * endpoint refused (nothing listens there: a dead engine, a wrong port). */
static void service_dealer_monitor(kvr_source *src, kvr_listener *l)
{
    uint16_t event;
    uint32_t refused = 0;
    while (kvr_monitor_next(&l->dealer_mon, &event))
        refused += event == ZMQ_EVENT_CONNECT_RETRIED;
    if (refused == 0 || l->state != KVR_LISTENER_REPLAYING)
        return;
    l->replay_refusals += refused;
    if (l->replay_refusals >= KVR_REPLAY_REFUSALS)
        kvr_listener_on_replay_refused(src, l);
}

static void service_dealer(kvr_source *src, kvr_listener *l)
{
    void *d = l->dealer.sock;
    zmq_msg_t f[KVR_MAX_FRAMES];
    size_t n;
    for (int i = 0; l->dealer.sock == d; i++) {
        if (i == KVR_SOURCE_BURST) {
            kvr_watch_ready(src, &l->dealer);
            return;
        }
        if (!kvr_zmq_recv_frames(d, ZMQ_DONTWAIT, f, KVR_MAX_FRAMES, &n))
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

/* Services every watch queued before this round; what they queue (a burst
 * cut short, a socket just sent on) waits for the next round. */
static void service_ready(kvr_source *src)
{
    kvr_watch **cur = src->ready;
    size_t n = src->n_ready;
    src->ready = src->ready_next;
    src->ready_next = cur;
    src->n_ready = 0;
    for (size_t i = 0; i < n; i++) {
        kvr_watch *w = cur[i];
        w->ready = false;
        if (!w->sock)
            continue; /* closed by an earlier handler this round */
        switch (w->kind) {
        case KVR_WATCH_SUB:
            service_sub(src, w->l);
            break;
        case KVR_WATCH_MON:
            service_monitor(src, w->l);
            break;
        case KVR_WATCH_DEALER:
            service_dealer(src, w->l);
            break;
        case KVR_WATCH_DEALER_MON:
            service_dealer_monitor(src, w->l);
            break;
        case KVR_WATCH_WAKE:
            break;
        }
    }
}

static void fire_timers(kvr_source *src)
{
    double now = kvr_source_now();
    kvr_timer *t;
    while ((t = kvr_timer_first(src)) && t->when <= now) {
        kvr_timer_cancel(src, t);
        kvr_listener *l = (kvr_listener *)((char *)t - offsetof(kvr_listener, replay_timer));
        kvr_listener_on_timeout(src, l);
    }
}

static int wait_ms(kvr_source *src)
{
    if (src->n_ready)
        return 0;
    kvr_timer *t = kvr_timer_first(src);
    if (!t)
        return -1;
    double ms = ceil((t->when - kvr_source_now()) * 1000.0);
    return ms <= 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
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

void *kvr_source_main(void *arg)
{
    kvr_source *src = arg;
    tls_running = src;
    struct epoll_event evs[KVR_EPOLL_BATCH];
    while (!src->stop) {
        int n = epoll_wait(src->epfd, evs, KVR_EPOLL_BATCH, wait_ms(src));
        if (n < 0 && errno != EINTR) {
            kvr_log(KVR_LOG_ERROR, "source: epoll_wait: %s; the ingest thread stops",
                    strerror(errno));
            break;
        }
        bool commands = false;
        for (int i = 0; i < n; i++) {
            kvr_watch *w = evs[i].data.ptr;
            if (w == &src->wake) {
                uint64_t v;
                if (read(src->wake.fd, &v, sizeof v) < 0 && errno != EAGAIN)
                    src->stop = 1;
                commands = true;
            } else {
                kvr_watch_ready(src, w);
            }
        }
        service_ready(src);
        fire_timers(src);
        if (commands)
            run_commands(src);
    }
    /* Wake anyone still waiting: their command will never run. */
    pthread_mutex_lock(&src->mu);
    src->stop = 1;
    pthread_cond_broadcast(&src->cond);
    pthread_mutex_unlock(&src->mu);
    tls_running = NULL;
    return NULL;
}

void kvr_source_wake(kvr_source *src)
{
    uint64_t one = 1;
    if (write(src->wake.fd, &one, sizeof one) < 0) {
        /* only EAGAIN at 2^64-1 pending wakes: the thread is awake anyway */
    }
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
    kvr_source_wake(src);
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
