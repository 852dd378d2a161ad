/* This replica's booking changes on their way to the stream. The router's
 * hook (under the router's lock) appends each change to the batch being
 * filled; a batch is due when it holds max_events events or max_bytes, or
 * max_delay_s after the batch before it was sealed (at once when that was
 * longer ago: a lone booking does not wait for company that is not
 * coming, and under load batches still go at most one per max_delay_s,
 * none of their events waiting longer than that) — and the flusher thread
 * takes it and publishes it without any lock held. So a /route pays for
 * one msgpack encoding, never for the broker.
 *
 * While NATS is down the outbox is disabled: changes are counted as not
 * published instead of piling up, and the load view is local (SPEC §10).
 * Full batches wait in a short queue; when the flusher cannot keep up
 * (a stalled connection) the oldest is dropped and counted. */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "util/clock.h"

#define CL_READY_MAX 64

typedef struct ready_batch {
    cl_buf events;
    uint32_t n;
    struct ready_batch *next;
} ready_batch;

static ready_batch *ready_head(cl_outbox *o) { return (ready_batch *)o->ready; }

void cl_outbox_init(cl_outbox *o, uint64_t self, uint32_t max_events, uint32_t max_bytes,
                    uint32_t max_chain, double max_delay_s)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    cl_cond_init(&o->cv);
    o->self = self;
    o->max_events = max_events;
    o->max_bytes = max_bytes;
    o->max_chain = max_chain;
    o->max_delay_s = max_delay_s;
}

static void drop_all(cl_outbox *o)
{
    uint64_t n = o->n_filling;
    o->filling.len = 0;
    o->n_filling = 0;
    while (ready_head(o)) {
        ready_batch *rb = ready_head(o);
        o->ready = rb->next;
        n += rb->n;
        cl_buf_free(&rb->events);
        free(rb);
    }
    o->ready_tail = NULL;
    o->n_ready = 0;
    atomic_fetch_add(&o->dropped, n);
}

void cl_outbox_destroy(cl_outbox *o)
{
    drop_all(o);
    cl_buf_free(&o->filling);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
}

/* Moves the filling batch to the ready queue (caller holds mu). */
static void seal(cl_outbox *o)
{
    ready_batch *rb = calloc(1, sizeof *rb);
    if (!rb) {
        atomic_fetch_add(&o->dropped, o->n_filling);
        o->filling.len = 0;
        o->n_filling = 0;
        return;
    }
    if (o->n_ready >= CL_READY_MAX) {
        ready_batch *old = ready_head(o);
        o->ready = old->next;
        if (!o->ready)
            o->ready_tail = NULL;
        o->n_ready--;
        atomic_fetch_add(&o->dropped, old->n);
        cl_buf_free(&old->events);
        free(old);
    }
    rb->events = o->filling;
    rb->n = o->n_filling;
    memset(&o->filling, 0, sizeof o->filling);
    o->n_filling = 0;
    o->last_sent = kvr_clock_mono();
    if (o->ready_tail)
        ((ready_batch *)o->ready_tail)->next = rb;
    else
        o->ready = rb;
    o->ready_tail = rb;
    o->n_ready++;
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
        bool now_due = false;
        if (o->n_filling++ == 0) {
            /* Paced from the last batch, not from this event: a change
             * after a quiet spell goes at once, and batching pays only
             * when changes come faster than max_delay_s. */
            o->due_at = o->last_sent + o->max_delay_s;
            now_due = kvr_clock_mono() >= o->due_at;
        }
        bool full = o->n_filling >= o->max_events || o->filling.len >= o->max_bytes;
        if (now_due || full)
            seal(o);
        /* Wake the flusher only when it waits for nothing: one waiting for
         * an earlier batch's deadline finds this one then, so under steady
         * load a batch costs it one wake-up, its timer. */
        if (o->flusher_idle ? o->n_filling <= 1 || now_due || full : now_due || full)
            pthread_cond_signal(&o->cv);
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

bool cl_outbox_take(cl_outbox *o, cl_buf *events, uint32_t *n)
{
    pthread_mutex_lock(&o->mu);
    for (;;) {
        if (!ready_head(o) && o->n_filling &&
            (o->stop || kvr_clock_mono() >= o->due_at))
            seal(o);
        if (ready_head(o)) {
            ready_batch *rb = ready_head(o);
            o->ready = rb->next;
            if (!o->ready)
                o->ready_tail = NULL;
            o->n_ready--;
            pthread_mutex_unlock(&o->mu);
            cl_buf_free(events);
            *events = rb->events;
            *n = rb->n;
            free(rb);
            return true;
        }
        if (o->stop) {
            pthread_mutex_unlock(&o->mu);
            return false;
        }
        if (o->n_filling) {
            struct timespec ts = cl_deadline(o->due_at - kvr_clock_mono());
            pthread_cond_timedwait(&o->cv, &o->mu, &ts);
        } else {
            o->flusher_idle = true;
            pthread_cond_wait(&o->cv, &o->mu);
            o->flusher_idle = false;
        }
    }
}

void cl_outbox_stop(cl_outbox *o)
{
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}
