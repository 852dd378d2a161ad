/* Booking batches read back from the stream, into the router's load view.
 * Whose is what: the wire carries owners as replica ids, the router speaks
 * of 0 (mine) and peers. A batch this process published is skipped (the
 * router already holds its changes); a batch published under this
 * replica's id by another incarnation is a previous run of this replica,
 * whose bookings this run adopts as its own; an event owned by this
 * replica but published by a peer is a /free or /prefill_done forwarded to
 * its owner. Adoption happens in the first replay only (feed.c): a later
 * one skips the previous run's batches like this run's. A booking's age is the stream's timestamp of its batch, so a
 * replaying replica gives each booking only what is left of its TTL. */
#include <stdio.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "kvrouter/log.h"

void cl_inbox_init(cl_inbox *in, kvr_router *router, uint64_t self, uint64_t incarnation,
                   double ttl_s)
{
    memset(in, 0, sizeof *in);
    in->router = router;
    in->self = self;
    in->incarnation = incarnation;
    in->ttl_s = ttl_s;
    in->adopt_previous = true;
}

void cl_inbox_destroy(cl_inbox *in)
{
    cl_event_free(&in->scratch);
}

void cl_inbox_apply(cl_inbox *in, const char *data, size_t len, int64_t wall_ns, int64_t now_ns)
{
    atomic_fetch_add(&in->batches, 1);
    cl_batch b;
    char err[160];
    if (cl_batch_open(data, len, &b, err, sizeof err) < 0) {
        atomic_fetch_add(&in->invalid, 1);
        KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: booking batch of %zu bytes dropped: %s",
                        len, err);
        return;
    }
    bool mine = b.publisher == in->self;
    if (mine && (b.incarnation == in->incarnation || !in->adopt_previous)) {
        atomic_fetch_add(&in->own_skipped, 1);
        return;
    }
    double age = now_ns > wall_ns ? (double)(now_ns - wall_ns) / 1e9 : 0;
    cl_event *e = &in->scratch;
    int rc;
    while ((rc = cl_batch_next(&b, e, err, sizeof err)) != 0) {
        if (rc == -2)
            break; /* out of memory: the rest of the batch is lost, counted below */
        if (rc < 0) {
            atomic_fetch_add(&in->invalid, 1);
            KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: booking event dropped: %s", err);
            continue;
        }
        kvr_booking_event *ev = &e->ev;
        if (ev->owner == in->self) {
            ev->owner = 0;
            if (mine)
                atomic_fetch_add(&in->adopted, 1);
        }
        ev->age_s = age;
        if (kvr_router_apply_peer(in->router, ev) == KVR_ROUTE_OK)
            atomic_fetch_add(&in->applied, 1);
        else
            atomic_fetch_add(&in->rejected, 1);
    }
    if (rc == -2)
        atomic_fetch_add(&in->rejected, b.n_events + 1);
}
