/* This replica's booking changes on their way to the stream, sent without
 * waking another thread while bookings keep coming.
 *
 * The router's hook (under the router's lock) appends each change to the
 * batch being filled and seals the batch when it holds max_events events or
 * max_bytes, or when it is due: CL_PACE of max_delay_s after the batch
 * before it was sealed (at once when that was longer ago: a lone booking
 * does not wait for company that is not coming). The thread that made the
 * change then sends what is sealed itself, once the router's lock is
 * released (cl_outbox_send_due: a /route pays one msgpack encoding and,
 * about once per batch, one write to the NATS socket; cnats writes from
 * the calling thread, nats.c).
 *
 * The flusher thread is only for the tail, when no booking comes to seal
 * the filling batch: it sleeps on a timer until max_delay_s after the last
 * batch (the filling one's first event came after that) and sends it then,
 * so no event waits longer than max_delay_s (SPEC §10's 1 ms). Booking threads never signal it while it
 * is on its timer; the pace leaves them (1 - CL_PACE) of the delay to seal
 * a batch before its deadline, so under load the flusher wakes to find the
 * batch it waited for sent already. After a whole delay with nothing to
 * send it goes to sleep, and the first change after that wakes it once
 * (whoever of the two then sends it first).
 *
 * While NATS is down the outbox is disabled: changes are counted as not
 * published instead of piling up, and the load view is local (SPEC §10).
 * Sealed batches wait in a short queue; past CL_READY_MAX (a stalled
 * connection) the oldest is dropped and counted. */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "util/clock.h"

#define CL_READY_MAX 64
#define CL_PACE 0.75
/* An asleep flusher still looks every so often (it is woken for every new
 * batch besides). */
#define CL_ASLEEP_S 0.1

typedef struct ready_batch {
    cl_buf events;
    uint32_t n;
    struct ready_batch *next;
} ready_batch;

static ready_batch *ready_head(cl_outbox *o) { return (ready_batch *)o->ready; }

void cl_outbox_init(cl_outbox *o, uint64_t self, uint32_t max_events, uint32_t max_bytes,
                    uint32_t max_chain, double max_delay_s, cl_send_fn send, void *send_user)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_mutex_init(&o->send_mu, NULL);
    pthread_mutex_init(&o->wake_mu, NULL);
    cl_cond_init(&o->wake_cv);
    o->self = self;
    o->max_events = max_events;
    o->max_bytes = max_bytes;
    o->max_chain = max_chain;
    o->max_delay_s = max_delay_s;
    o->send = send;
    o->send_user = send_user;
}

static ready_batch *unlink_head(cl_outbox *o)
{
    ready_batch *rb = ready_head(o);
    o->ready = rb->next;
    if (!o->ready)
        o->ready_tail = NULL;
    atomic_fetch_sub(&o->n_ready, 1);
    return rb;
}

/* Counts the filling batch's events as dropped and empties it (caller
 * holds mu). */
static void drop_filling(cl_outbox *o)
{
    atomic_fetch_add(&o->dropped, o->n_filling);
    o->filling.len = 0;
    o->n_filling = 0;
    atomic_store(&o->filling_any, false);
}

static void drop_all(cl_outbox *o)
{
    drop_filling(o);
    uint64_t n = 0;
    while (ready_head(o)) {
        ready_batch *rb = unlink_head(o);
        n += rb->n;
        cl_buf_free(&rb->events);
        free(rb);
    }
    atomic_fetch_add(&o->dropped, n);
}

void cl_outbox_destroy(cl_outbox *o)
{
    drop_all(o);
    cl_buf_free(&o->filling);
    pthread_cond_destroy(&o->wake_cv);
    pthread_mutex_destroy(&o->wake_mu);
    pthread_mutex_destroy(&o->send_mu);
    pthread_mutex_destroy(&o->mu);
}

/* Moves the filling batch to the sealed queue (caller holds mu). */
static void seal(cl_outbox *o)
{
    ready_batch *rb = calloc(1, sizeof *rb);
    if (!rb) {
        drop_filling(o);
        return;
    }
    if (atomic_load(&o->n_ready) >= CL_READY_MAX) {
        ready_batch *old = unlink_head(o);
        atomic_fetch_add(&o->dropped, old->n);
        cl_buf_free(&old->events);
        free(old);
    }
    rb->events = o->filling;
    rb->n = o->n_filling;
    memset(&o->filling, 0, sizeof o->filling);
    o->n_filling = 0;
    atomic_store(&o->filling_any, false);
    atomic_store(&o->last_sent, kvr_clock_mono());
    if (o->ready_tail)
        ((ready_batch *)o->ready_tail)->next = rb;
    else
        o->ready = rb;
    o->ready_tail = rb;
    atomic_fetch_add(&o->n_ready, 1);
}

static void wake_flusher(cl_outbox *o)
{
    pthread_mutex_lock(&o->wake_mu);
    atomic_fetch_add(&o->flusher_wakes, 1);
    pthread_cond_signal(&o->wake_cv);
    pthread_mutex_unlock(&o->wake_mu);
}

void cl_outbox_hook(void *user, const kvr_booking_event *ev)
{
    cl_outbox *o = user;
    pthread_mutex_lock(&o->mu);
    if (!o->enabled || o->stop) {
        atomic_fetch_add(&o->dropped, 1);
    } else if (cl_batch_append(&o->filling, ev, ev->owner ? ev->owner : o->self,
                               o->max_chain) < 0) {
        atomic_fetch_add(&o->dropped, 1);
    } else {
        double now = kvr_clock_mono();
        o->n_filling++;
        /* Paced from the last batch, not from this event: a change after a
         * quiet spell goes at once, and batching pays only when changes
         * come faster than the pace. */
        bool sealed = now >= atomic_load(&o->last_sent) + CL_PACE * o->max_delay_s ||
                      o->n_filling >= o->max_events || o->filling.len >= o->max_bytes;
        if (sealed)
            seal(o);
        else if (o->n_filling == 1)
            atomic_store(&o->filling_any, true);
        /* An asleep flusher (a whole delay went by with nothing: not under
         * load) is woken for a new batch, sealed or not: a caller that
         * never calls cl_outbox_send_due (kvr_route used as a library)
         * still gets it published at once. Read after filling_any or
         * n_ready is set, or the flusher sees those. */
        if ((sealed || o->n_filling == 1) && atomic_load(&o->flusher_asleep))
            wake_flusher(o);
    }
    pthread_mutex_unlock(&o->mu);
}

void cl_outbox_enable(cl_outbox *o, bool on)
{
    pthread_mutex_lock(&o->mu);
    o->enabled = on;
    if (!on)
        drop_all(o);
    pthread_mutex_unlock(&o->mu);
}

/* Sends every sealed batch, in order (caller holds send_mu). */
static uint64_t send_sealed(cl_outbox *o)
{
    uint64_t sent = 0;
    for (;;) {
        pthread_mutex_lock(&o->mu);
        ready_batch *rb = ready_head(o) ? unlink_head(o) : NULL;
        pthread_mutex_unlock(&o->mu);
        if (!rb)
            return sent;
        o->send(o->send_user, &rb->events, rb->n);
        cl_buf_free(&rb->events);
        free(rb);
        sent++;
    }
}

/* Sends the sealed batches unless another thread is sending (it looks at
 * n_ready again after releasing send_mu, so it sends these too). The
 * batches this thread sent; *busy when another was sending. */
static uint64_t send_unless_busy(cl_outbox *o, bool *busy)
{
    uint64_t sent = 0;
    *busy = false;
    while (atomic_load(&o->n_ready) > 0) {
        if (pthread_mutex_trylock(&o->send_mu) != 0) {
            *busy = true;
            break;
        }
        sent += send_sealed(o);
        pthread_mutex_unlock(&o->send_mu);
    }
    return sent;
}

void cl_outbox_send_due(cl_outbox *o)
{
    bool busy;
    send_unless_busy(o, &busy);
}

/* Seals the filling batch max_delay_s after the last one (so before its
 * first event is max_delay_s old), or at stop, and sends what is sealed.
 * The seconds until the flusher is to look again, or -1 when nothing waits.
 * Takes no lock when nothing is due. Sealing needs mu only, so it waits for
 * no booking thread that is sending: that one sends what was sealed. */
static double flush_due(cl_outbox *o, bool all)
{
    double now = kvr_clock_mono();
    if (!all && atomic_load(&o->n_ready) == 0) {
        if (!atomic_load(&o->filling_any))
            return -1;
        double due = atomic_load(&o->last_sent) + o->max_delay_s;
        if (now < due)
            return due - now;
    }
    pthread_mutex_lock(&o->mu);
    now = kvr_clock_mono();
    double due = atomic_load(&o->last_sent) + o->max_delay_s;
    if (o->n_filling && (all || now >= due))
        seal(o);
    double wait = o->n_filling ? due - now : -1;
    pthread_mutex_unlock(&o->mu);
    if (all) {
        pthread_mutex_lock(&o->send_mu);
        atomic_fetch_add(&o->flusher_sent, send_sealed(o));
        pthread_mutex_unlock(&o->send_mu);
        return wait;
    }
    bool busy;
    atomic_fetch_add(&o->flusher_sent, send_unless_busy(o, &busy));
    /* A sender that is held up (a stalled connection) is looked at again
     * after a delay, not in a loop on what it is to send. */
    if (busy && (wait < 0 || wait > o->max_delay_s))
        wait = o->max_delay_s;
    return wait;
}

void cl_outbox_flusher(cl_outbox *o)
{
    bool quiet = false; /* the last wait found nothing to send */
    pthread_mutex_lock(&o->wake_mu);
    while (!o->stop) {
        pthread_mutex_unlock(&o->wake_mu);
        double wait = flush_due(o, false);
        pthread_mutex_lock(&o->wake_mu);
        if (o->stop)
            break;
        if (wait >= 0 || !quiet) {
            quiet = wait < 0;
            struct timespec ts = cl_deadline(wait >= 0 ? wait : o->max_delay_s);
            pthread_cond_timedwait(&o->wake_cv, &o->wake_mu, &ts);
            continue;
        }
        /* A whole delay with nothing: asleep until a change comes (the
         * hook sees flusher_asleep, or this sees filling_any). */
        atomic_store(&o->flusher_asleep, true);
        if (!atomic_load(&o->filling_any) && atomic_load(&o->n_ready) == 0) {
            struct timespec ts = cl_deadline(CL_ASLEEP_S);
            pthread_cond_timedwait(&o->wake_cv, &o->wake_mu, &ts);
        }
        atomic_store(&o->flusher_asleep, false);
    }
    pthread_mutex_unlock(&o->wake_mu);
    /* What the router booked until the stop still goes out. */
    flush_due(o, true);
}

void cl_outbox_stop(cl_outbox *o)
{
    /* Under both: the hook reads stop under mu, the flusher under wake_mu. */
    pthread_mutex_lock(&o->mu);
    pthread_mutex_lock(&o->wake_mu);
    o->stop = true;
    pthread_cond_broadcast(&o->wake_cv);
    pthread_mutex_unlock(&o->wake_mu);
    pthread_mutex_unlock(&o->mu);
}
