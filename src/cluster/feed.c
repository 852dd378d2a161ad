/* The bookings that reach this replica, in one order: a replay of the
 * stream after every (re)connection, then the live subject.
 *
 * Live batches come on a plain NATS subscription of the bookings subject,
 * and the connection is made without echo (nats.c): the server never sends
 * this replica its own batches, which were half or more of what a replica
 * read and woke up for (the stream consumer delivers every message stored,
 * its publisher's too). The stream is read only to catch up: at start (the
 * last TTL of bookings: a new replica starts with the fleet's load) and
 * after a reconnection (what was published meanwhile), by an ordered
 * consumer from its first message, dropped once it reached the end.
 *
 * While a replay runs, live batches wait here in arrival order and are
 * applied after its last message. Replaying the whole history in order
 * ends in the right state whatever the view held before (a booking's last
 * change in the stream decides it: booked again, then released again);
 * the batches that waited are a suffix of that history, so applying them
 * once more ends the same. Only adoption is not idempotent (a previous run
 * of this replica's bookings become this run's own): it happens in the
 * first replay alone, later ones skip those batches (inbox.c).
 *
 * Every batch goes through f->mu: the two subscriptions call in on two
 * cnats threads, and the inbox has one scratch event. */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "util/clock.h"

/* Live batches held during one replay: a replay reads memory at loopback
 * speed, seconds at most; past this the oldest are dropped (counted in
 * live_batches_dropped). */
#define CL_FEED_MAX_BYTES (64u << 20)

struct cl_feed_item {
    struct cl_feed_item *next;
    int64_t wall_ns; /* when it arrived: its bookings' age runs from then */
    size_t len;
    char data[];
};

static int64_t now_ns(void) { return (int64_t)(kvr_clock_wall() * 1e9); }

void cl_feed_init(cl_feed *f, cl_inbox *in)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->inbox = in;
    f->max_bytes = CL_FEED_MAX_BYTES;
    /* Until the first replay ends: the live subscription starts before the
     * registrations are read, and a live booking of a model not loaded yet
     * would be refused (the replay brings it again, but counted as
     * rejected meanwhile). */
    f->replaying = true;
}

/* The oldest waiting batch, taken out of the buffer (NULL when empty). */
static cl_feed_item *pop(cl_feed *f)
{
    cl_feed_item *it = f->head;
    if (it) {
        f->head = it->next;
        if (!f->head)
            f->tail = NULL;
        f->bytes -= it->len;
    }
    return it;
}

static void drop_buffer(cl_feed *f)
{
    for (cl_feed_item *it; (it = pop(f));)
        free(it);
}

void cl_feed_destroy(cl_feed *f)
{
    drop_buffer(f);
    pthread_mutex_destroy(&f->mu);
}

void cl_feed_begin_replay(cl_feed *f)
{
    pthread_mutex_lock(&f->mu);
    drop_buffer(f); /* the stream holds them: this replay reads them again */
    f->replaying = true;
    pthread_mutex_unlock(&f->mu);
}

/* With f->mu held. */
static void finish(cl_feed *f)
{
    for (cl_feed_item *it; (it = pop(f));) {
        cl_inbox_apply(f->inbox, it->data, it->len, it->wall_ns, now_ns());
        free(it);
    }
    f->replaying = false;
    f->inbox->adopt_previous = false;
}

void cl_feed_end_replay(cl_feed *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->replaying)
        finish(f);
    pthread_mutex_unlock(&f->mu);
}

bool cl_feed_replayed(cl_feed *f, const char *data, size_t len, int64_t wall_ns,
                      uint64_t pending)
{
    pthread_mutex_lock(&f->mu);
    bool done = false;
    if (f->replaying) { /* else: the consumer's last messages, read live already */
        cl_inbox_apply(f->inbox, data, len, wall_ns, now_ns());
        if (pending == 0) {
            finish(f);
            done = true;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return done;
}

void cl_feed_live(cl_feed *f, const char *data, size_t len)
{
    pthread_mutex_lock(&f->mu);
    if (!f->replaying) {
        int64_t now = now_ns();
        cl_inbox_apply(f->inbox, data, len, now, now);
    } else {
        cl_feed_item *it = malloc(sizeof *it + len);
        if (it) {
            it->next = NULL;
            it->wall_ns = now_ns();
            it->len = len;
            memcpy(it->data, data, len);
            if (f->tail)
                f->tail->next = it;
            else
                f->head = it;
            f->tail = it;
            f->bytes += len;
        } else {
            atomic_fetch_add(&f->dropped, 1);
        }
        while (f->bytes > f->max_bytes && f->head) {
            free(pop(f));
            atomic_fetch_add(&f->dropped, 1);
        }
    }
    pthread_mutex_unlock(&f->mu);
}
