/* Bookings shared between replicas (route.h, "bookings shared between
 * replicas"): the hook that tells the cluster layer about this router's
 * booking changes, and the way back in for the other replicas' changes.
 * The route layer stays unaware of any transport; a peer's booking is an
 * ordinary booking with an owner, so the load model of bookings.c counts
 * it exactly as a local one. Everything here runs under r->mu. */
#include <math.h>
#include <string.h>

#include "route/internal.h"

void kvr_router_set_booking_hook(kvr_router *r, kvr_booking_hook_fn fn, void *user)
{
    pthread_mutex_lock(&r->mu);
    r->hook = fn;
    r->hook_user = user;
    pthread_mutex_unlock(&r->mu);
}

static void emit(kvr_router *r, const kvr_booking_event *ev)
{
    if (r->hook)
        r->hook(r->hook_user, ev);
}

void route_share_booked(kvr_router *r, const kvr_query_request *q, const kvr_route_cost *c,
                        uint64_t prefill_tokens, const uint64_t *chain, uint32_t n_chain,
                        uint64_t unique_blocks, const char *request_id)
{
    if (!r->hook)
        return;
    kvr_booking_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = KVR_BOOKING_BOOKED;
    ev.request_id = request_id;
    ev.model_name = q->model_name;
    ev.routing_group = q->routing_group ? q->routing_group : KVR_DEFAULT_ROUTING_GROUP;
    ev.worker_id = c->worker_id;
    ev.dp_rank = c->dp_rank;
    ev.prefill_tokens = prefill_tokens;
    ev.chain = chain;
    ev.n_chain = n_chain;
    ev.unique_blocks = unique_blocks;
    emit(r, &ev);
}

static kvr_route_status op_on(route_bookings *b, uint64_t owner, const char *id,
                              kvr_booking_op op, double now, double ttft_s)
{
    return op == KVR_BOOKING_RELEASED ? route_booking_release(b, owner, id, now)
                                      : route_booking_prefill_done(b, owner, id, now, ttft_s);
}

/* A client's /prefill_done or /free: this router's booking when it has one,
 * else a peer's booking of that id, which the hook forwards to its owner. */
kvr_route_status route_client_op(kvr_router *r, const char *request_id, kvr_booking_op op,
                                 double now, double ttft_s)
{
    uint64_t owner = 0;
    kvr_route_status st = op_on(&r->bk, 0, request_id, op, now, ttft_s);
    if (st == KVR_ROUTE_UNKNOWN_ID && route_booking_peer_owner(&r->bk, request_id, &owner)) {
        st = op_on(&r->bk, owner, request_id, op, now, ttft_s);
        r->peer_forwarded++;
    }
    if (st == KVR_ROUTE_OK) {
        kvr_booking_event ev;
        memset(&ev, 0, sizeof ev);
        ev.op = op;
        ev.owner = owner;
        ev.request_id = request_id;
        emit(r, &ev);
    }
    return st;
}

static kvr_route_status peer_book(kvr_router *r, const kvr_booking_event *ev)
{
    if (!ev->model_name || !ev->model_name[0] || !isfinite(ev->age_s))
        return KVR_ROUTE_BAD_REQUEST;
    double age = ev->age_s > 0 ? ev->age_s : 0;
    if (age >= r->bk.ttl_s)
        return KVR_ROUTE_OK; /* already expired wherever it was made */
    kvr_index *idx = kvr_indexer_index(
        r->ix, ev->model_name, ev->routing_group ? ev->routing_group : KVR_DEFAULT_ROUTING_GROUP);
    if (!idx)
        return KVR_ROUTE_UNKNOWN_MODEL;
    route_load *l = route_load_find(&r->bk, (uintptr_t)idx, ev->worker_id, ev->dp_rank, true);
    if (!l)
        return KVR_ROUTE_NO_MEMORY;
    double now = route_now(r);
    int b = route_book_as(&r->bk, ev->owner, ev->request_id, l, ev->prefill_tokens, ev->chain,
                          ev->n_chain, ev->unique_blocks, now - age, NULL, NULL);
    if (b != 0)
        return b > 0 ? KVR_ROUTE_DUPLICATE_ID : KVR_ROUTE_NO_MEMORY;
    if (ev->decode)
        route_booking_prefill_done(&r->bk, ev->owner, ev->request_id, now, -1);
    return KVR_ROUTE_OK;
}

kvr_route_status kvr_router_apply_peer(kvr_router *r, const kvr_booking_event *ev)
{
    const char *id = ev->request_id;
    bool id_ok = id && id[0] && strlen(id) <= KVR_ROUTE_MAX_ID_LEN;
    pthread_mutex_lock(&r->mu);
    double now = route_now(r);
    route_bookings_expire(&r->bk, now);
    kvr_route_status st = KVR_ROUTE_BAD_REQUEST;
    if (id_ok && ev->op == KVR_BOOKING_BOOKED)
        st = peer_book(r, ev);
    else if (id_ok && (ev->op == KVR_BOOKING_PREFILL_DONE || ev->op == KVR_BOOKING_RELEASED))
        st = op_on(&r->bk, ev->owner, id, ev->op, now, -1);
    if (st == KVR_ROUTE_OK)
        r->peer_applied++;
    else
        r->peer_rejected++;
    pthread_mutex_unlock(&r->mu);
    return st;
}

void kvr_router_peer_stats_get(kvr_router *r, kvr_router_peer_stats *out)
{
    pthread_mutex_lock(&r->mu);
    out->active = r->bk.n_peer;
    out->applied = r->peer_applied;
    out->rejected = r->peer_rejected;
    out->forwarded = r->peer_forwarded;
    pthread_mutex_unlock(&r->mu);
}
