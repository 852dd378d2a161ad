/* Load bookings per (index, worker, rank) with a TTL (SPEC §8). One TTL for
 * every booking, so creation order is expiry order and expiry pops a FIFO. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/hash.h"
#include "route/internal.h"

double route_now(const kvr_router *r)
{
    if (r->cfg.clock)
        return r->cfg.clock(r->cfg.clock_ud);
    if (r->cfg.clock_from_requests)
        return atomic_load(&((kvr_router *)r)->observed_time);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void route_bookings_init(route_bookings *b, double ttl_s)
{
    memset(b, 0, sizeof *b);
    kvr_u64map_init(&b->loads);
    kvr_u64map_init(&b->ids);
    kvr_u64map_init(&b->rates);
    kvr_u64map_init(&b->fits);
    b->ttl_s = ttl_s;
}

void route_bookings_free(route_bookings *b)
{
    route_booking *bk = b->head;
    while (bk) {
        route_booking *next = bk->next;
        free(bk->id);
        free(bk->chain);
        free(bk);
        bk = next;
    }
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&b->loads, &it, &k, &v)) {
        route_load *l = (route_load *)(uintptr_t)v;
        while (l) {
            route_load *next = l->hnext;
            kvr_u64map_free(&l->held);
            free(l);
            l = next;
        }
    }
    kvr_u64map_free(&b->loads);
    kvr_u64map_free(&b->ids);
    route_rates_free(b);
    route_slots_free(b);
}

uint64_t route_wr_key(uintptr_t index, uint64_t worker_id, uint32_t dp_rank)
{
    /* one mix (the map mixes again; equal keys are told apart by the
     * entries' fields): a /route looks up every candidate's load and rate */
    return kvr_mix64(worker_id ^ (uint64_t)index * 0x9e3779b97f4a7c15ULL) +
           (uint64_t)dp_rank * 0xc2b2ae3d27d4eb4fULL;
}

route_load *route_load_find(route_bookings *b, uintptr_t index, uint64_t worker_id,
                            uint32_t dp_rank, bool create)
{
    uint64_t key = route_wr_key(index, worker_id, dp_rank);
    uint64_t head = 0;
    kvr_u64map_get(&b->loads, key, &head);
    for (route_load *l = (route_load *)(uintptr_t)head; l; l = l->hnext)
        if (l->index == index && l->worker_id == worker_id && l->dp_rank == dp_rank)
            return l;
    if (!create)
        return NULL;
    route_load *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->index = index;
    l->worker_id = worker_id;
    l->dp_rank = dp_rank;
    kvr_u64map_init(&l->held);
    l->hnext = (route_load *)(uintptr_t)head;
    if (kvr_u64map_put(&b->loads, key, (uint64_t)(uintptr_t)l) < 0) {
        free(l);
        return NULL;
    }
    b->n_loads++;
    route_slot_changed(b, index, worker_id, dp_rank);
    return l;
}

/* Frees a load entry nobody books any more, so worker churn (new ids on
 * every scale-up) cannot grow the table without bound. */
static void load_drop_if_idle(route_bookings *b, route_load *l)
{
    if (l->bookings)
        return;
    uint64_t key = route_wr_key(l->index, l->worker_id, l->dp_rank);
    uint64_t head = 0;
    kvr_u64map_get(&b->loads, key, &head);
    route_load *first = (route_load *)(uintptr_t)head;
    if (first == l) {
        if (l->hnext)
            kvr_u64map_put(&b->loads, key, (uint64_t)(uintptr_t)l->hnext);
        else
            kvr_u64map_del(&b->loads, key, NULL);
    } else {
        route_load *p = first;
        while (p && p->hnext != l)
            p = p->hnext;
        if (p)
            p->hnext = l->hnext;
    }
    b->n_loads--;
    uintptr_t index = l->index;
    uint64_t worker_id = l->worker_id;
    uint32_t dp_rank = l->dp_rank;
    kvr_u64map_free(&l->held);
    free(l);
    route_slot_changed(b, index, worker_id, dp_rank);
}

uint64_t route_load_blocks(const route_load *l)
{
    return kvr_u64map_len(&l->held) + l->unique_blocks;
}

double route_load_pending_tokens(const route_load *l, double rate, double now)
{
    double q = (double)l->prefill_tokens;
    const route_booking *h = l->pending_head;
    if (!h || !(rate > 0) || now <= l->head_since)
        return q;
    double done = rate * (now - l->head_since);
    double cap = 0.9 * (double)h->prefill_tokens;
    return q - (done < cap ? done : cap);
}

static void pending_append(route_load *l, route_booking *bk, double now)
{
    bk->pprev = l->pending_tail;
    bk->pnext = NULL;
    if (l->pending_tail)
        l->pending_tail->pnext = bk;
    else {
        l->pending_head = bk;
        l->head_since = now;
    }
    l->pending_tail = bk;
}

/* The next pending booking starts when the head leaves. */
static void pending_unlink(route_load *l, route_booking *bk, double now)
{
    if (bk->pprev)
        bk->pprev->pnext = bk->pnext;
    else {
        l->pending_head = bk->pnext;
        l->head_since = now;
    }
    if (bk->pnext)
        bk->pnext->pprev = bk->pprev;
    else
        l->pending_tail = bk->pprev;
    bk->pprev = bk->pnext = NULL;
}

/* Every booking holds a whole prefix of its chain and a chain hash names
 * its whole prefix, so what a load holds of any chain is a prefix of it:
 * a galloping search finds it in O(log held) lookups instead of one per
 * block (this runs for every candidate under the router lock), one lookup
 * for a worker that shares nothing with the request. */
uint32_t route_load_held_prefix(const route_load *l, const uint64_t *chain, uint32_t n)
{
    if (n == 0 || !kvr_u64map_find(&l->held, chain[0]))
        return 0;
    uint32_t lo = 1, hi = n; /* chain[0..lo) held, chain[hi..n) not */
    for (uint32_t i = 1; i < n; i *= 2) {
        if (!kvr_u64map_find(&l->held, chain[i])) {
            hi = i;
            break;
        }
        lo = i + 1;
    }
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (kvr_u64map_find(&l->held, chain[mid]))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void unref_blocks(route_load *l, const uint64_t *chain, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t *cnt = kvr_u64map_find(&l->held, chain[i]);
        if (!cnt)
            continue; /* only after a partial, rolled-back reference */
        if (*cnt > 1)
            (*cnt)--;
        else
            kvr_u64map_del(&l->held, chain[i], NULL);
    }
}

/* References chain[0..n) on l; returns the blocks new to l, or -1 (no
 * reference left behind) when out of memory. */
static int64_t ref_blocks(route_load *l, const uint64_t *chain, uint32_t n)
{
    int64_t added = 0;
    /* A fresh load takes the whole chain: sized once rather than doubled
     * through every size up to it (failing here leaves the puts to grow). */
    if (kvr_u64map_len(&l->held) == 0)
        (void)kvr_u64map_reserve(&l->held, n);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t *cnt = kvr_u64map_find(&l->held, chain[i]);
        if (cnt) {
            (*cnt)++;
            continue;
        }
        if (kvr_u64map_put(&l->held, chain[i], 1) < 0) {
            unref_blocks(l, chain, i);
            return -1;
        }
        added++;
    }
    return added;
}

static uint64_t id_hash(const char *id)
{
    return kvr_hash_bytes(id, strlen(id), 0);
}

/* owner's booking of id. The id hash leaves the owner out, so a peer
 * booking of an id is found on the chain of the id alone. */
static route_booking *booking_find(route_bookings *b, uint64_t owner, const char *id, uint64_t h)
{
    uint64_t head = 0;
    if (!kvr_u64map_get(&b->ids, h, &head))
        return NULL;
    for (route_booking *bk = (route_booking *)(uintptr_t)head; bk; bk = bk->hnext)
        if (bk->owner == owner && strcmp(bk->id, id) == 0)
            return bk;
    return NULL;
}

bool route_booking_peer_owner(route_bookings *b, const char *id, uint64_t *owner)
{
    uint64_t head = 0;
    if (!kvr_u64map_get(&b->ids, id_hash(id), &head))
        return false;
    for (route_booking *bk = (route_booking *)(uintptr_t)head; bk; bk = bk->hnext)
        if (bk->owner != 0 && strcmp(bk->id, id) == 0) {
            *owner = bk->owner;
            return true;
        }
    return false;
}

/* Puts bk in the expiry list. This router's bookings come in expiry order
 * and go to the tail; a peer's may be older than the tail (it was booked
 * before it reached us) and walks back to its place. */
static void expiry_insert(route_bookings *b, route_booking *bk)
{
    route_booking *after = b->tail;
    while (after && after->expires_at > bk->expires_at)
        after = after->prev;
    bk->prev = after;
    bk->next = after ? after->next : b->head;
    if (bk->next)
        bk->next->prev = bk;
    else
        b->tail = bk;
    if (after)
        after->next = bk;
    else
        b->head = bk;
}

static void expiry_unlink(route_bookings *b, route_booking *bk)
{
    if (bk->prev)
        bk->prev->next = bk->next;
    else
        b->head = bk->next;
    if (bk->next)
        bk->next->prev = bk->prev;
    else
        b->tail = bk->prev;
    bk->prev = bk->next = NULL;
}

int route_book(route_bookings *b, const char *id, route_load *load, uint64_t prefill_tokens,
               const uint64_t *chain, uint32_t n_chain, uint64_t unique_blocks, double now,
               uint64_t *added, route_booking **out)
{
    return route_book_as(b, 0, id, load, prefill_tokens, chain, n_chain, unique_blocks, now,
                         added, out);
}

int route_book_as(route_bookings *b, uint64_t owner, const char *id, route_load *load,
                  uint64_t prefill_tokens, const uint64_t *chain, uint32_t n_chain,
                  uint64_t unique_blocks, double booked_at, uint64_t *added,
                  route_booking **out)
{
    uint64_t h = id_hash(id);
    if (booking_find(b, owner, id, h)) {
        load_drop_if_idle(b, load);
        return 1;
    }
    route_booking *bk = calloc(1, sizeof *bk);
    if (bk && (!(bk->id = strdup(id)) ||
               !(bk->chain = malloc((n_chain ? n_chain : 1) * sizeof *bk->chain)))) {
        free(bk->id);
        free(bk);
        bk = NULL;
    }
    if (!bk) {
        load_drop_if_idle(b, load);
        return -1;
    }
    uint64_t head = 0;
    kvr_u64map_get(&b->ids, h, &head);
    bk->hnext = (route_booking *)(uintptr_t)head;
    int64_t fresh = ref_blocks(load, chain, n_chain);
    if (fresh < 0 || kvr_u64map_put(&b->ids, h, (uint64_t)(uintptr_t)bk) < 0) {
        if (fresh >= 0)
            unref_blocks(load, chain, n_chain);
        free(bk->chain);
        free(bk->id);
        free(bk);
        load_drop_if_idle(b, load);
        return -1;
    }
    if (n_chain)
        memcpy(bk->chain, chain, n_chain * sizeof *chain);
    bk->n_chain = n_chain;
    bk->unique_blocks = unique_blocks;
    bk->idhash = h;
    bk->owner = owner;
    bk->load = load;
    bk->prefill_tokens = prefill_tokens;
    bk->expires_at = booked_at + b->ttl_s;
    bk->routed_at = booked_at;
    expiry_insert(b, bk);
    if (owner)
        b->n_peer++;
    load->bookings++;
    load->prefill_tokens += prefill_tokens;
    pending_append(load, bk, booked_at);
    load->unique_blocks += unique_blocks;
    b->n_active++;
    b->n_refs += n_chain;
    if (added)
        *added = (uint64_t)fresh + unique_blocks;
    if (out)
        *out = bk;
    return 0;
}

static void booking_remove(route_bookings *b, route_booking *bk, double now)
{
    route_load *l = bk->load;
    l->bookings--;
    if (!bk->decode) {
        l->prefill_tokens -= bk->prefill_tokens;
        pending_unlink(l, bk, now);
    } else
        l->decode_context -= bk->context;
    /* The last booking holds every reference left, and the load and its
     * map go with it (load_drop_if_idle below): no block-by-block release. */
    if (l->bookings)
        unref_blocks(l, bk->chain, bk->n_chain);
    l->unique_blocks -= bk->unique_blocks;
    b->n_refs -= bk->n_chain;

    uint64_t head = 0;
    kvr_u64map_get(&b->ids, bk->idhash, &head);
    route_booking *first = (route_booking *)(uintptr_t)head;
    if (first == bk) {
        if (bk->hnext)
            kvr_u64map_put(&b->ids, bk->idhash, (uint64_t)(uintptr_t)bk->hnext);
        else
            kvr_u64map_del(&b->ids, bk->idhash, NULL);
    } else {
        route_booking *p = first;
        while (p && p->hnext != bk)
            p = p->hnext;
        if (p)
            p->hnext = bk->hnext;
    }
    expiry_unlink(b, bk);
    b->n_active--;
    if (bk->owner)
        b->n_peer--;
    free(bk->id);
    free(bk->chain);
    free(bk);
    load_drop_if_idle(b, l);
}

size_t route_bookings_expire(route_bookings *b, double now)
{
    size_t n = 0;
    while (b->head && b->head->expires_at <= now) {
        if (b->head->aged_out)
            b->aged_out++;
        booking_remove(b, b->head, now);
        n++;
    }
    b->expired += n;
    return n;
}

/* A booking of this router whose decode time the worker's measured decode
 * speed predicts ages out decode_expiry_factor times that after its
 * prefill (at least KVR_ROUTE_DECODE_EXPIRY_MIN_S), not booking_ttl_s after
 * /route: a lost /free then stops counting once the request is surely
 * finished. Peers' bookings keep the TTL every replica applies. */
static void age_out_after_decode(route_bookings *b, route_booking *bk, double now)
{
    if (bk->owner || !bk->osl || !(b->decode_expiry_factor > 0))
        return;
    const route_load *l = bk->load;
    double spt = route_rate_decode_spt(route_rate_find(b, l->index, l->worker_id, l->dp_rank));
    if (!(spt > 0))
        return;
    double wait = b->decode_expiry_factor * spt * bk->osl;
    if (wait < KVR_ROUTE_DECODE_EXPIRY_MIN_S)
        wait = KVR_ROUTE_DECODE_EXPIRY_MIN_S;
    if (now + wait >= bk->expires_at)
        return;
    expiry_unlink(b, bk);
    bk->expires_at = now + wait;
    bk->aged_out = true;
    expiry_insert(b, bk);
}

kvr_route_status route_booking_prefill_done(route_bookings *b, uint64_t owner, const char *id,
                                            double now, double ttft_s)
{
    route_booking *bk = booking_find(b, owner, id, id_hash(id));
    if (!bk)
        return KVR_ROUTE_UNKNOWN_ID;
    /* A repeated /prefill_done is harmless: the tokens left once. */
    if (!bk->decode) {
        bk->decode = true;
        bk->load->prefill_tokens -= bk->prefill_tokens;
        bk->load->decode_context += bk->context;
        pending_unlink(bk->load, bk, now);
        b->prefill_done++;
        double t = ttft_s >= 0 ? ttft_s : now - bk->routed_at;
        if (!owner)
            route_ttft_error_sample(b, bk->predicted_s, t);
        if (bk->sample_rate && t > 0) {
            const route_load *l = bk->load;
            route_rate_sample(b, l->index, l->worker_id, l->dp_rank,
                              (double)bk->prefill_tokens * bk->decode_factor, t, now);
            route_fit_sample(b, l->index, (double)bk->prefill_tokens, t,
                             (double)bk->decoding_at_route);
        }
        bk->prefill_done_at = now;
        age_out_after_decode(b, bk, now);
    }
    return KVR_ROUTE_OK;
}

kvr_route_status route_booking_release(route_bookings *b, uint64_t owner, const char *id,
                                        double now)
{
    route_booking *bk = booking_find(b, owner, id, id_hash(id));
    if (!bk)
        return KVR_ROUTE_UNKNOWN_ID;
    /* A decode timed from /prefill_done to /free is a sample of the
     * worker's decode speed. */
    if (!bk->owner && bk->decode && bk->osl && now > bk->prefill_done_at) {
        const route_load *l = bk->load;
        route_rate_decode_sample(b, l->index, l->worker_id, l->dp_rank, bk->osl,
                                 now - bk->prefill_done_at, now);
    }
    booking_remove(b, bk, now);
    b->released++;
    return KVR_ROUTE_OK;
}

static int check_id(const char *id)
{
    return id && id[0] && strlen(id) <= KVR_ROUTE_MAX_ID_LEN;
}

/* A booking expired by now is unknown to op, as if the sweeper had run.
 * ttft_s: the caller's measure of a prefill (negative: the router times it). */
static kvr_route_status booking_op(kvr_router *r, const char *request_id, kvr_booking_op op,
                                   double ttft_s)
{
    if (!check_id(request_id))
        return KVR_ROUTE_UNKNOWN_ID;
    pthread_mutex_lock(&r->mu);
    double now = route_now(r);
    route_bookings_expire(&r->bk, now);
    kvr_route_status st = route_client_op(r, request_id, op, now, ttft_s);
    pthread_mutex_unlock(&r->mu);
    return st;
}

kvr_route_status kvr_router_prefill_done(kvr_router *r, const char *request_id)
{
    return booking_op(r, request_id, KVR_BOOKING_PREFILL_DONE, -1);
}

kvr_route_status kvr_router_prefill_done_after(kvr_router *r, const char *request_id,
                                               double ttft_s)
{
    return booking_op(r, request_id, KVR_BOOKING_PREFILL_DONE, ttft_s);
}

kvr_route_status kvr_router_release(kvr_router *r, const char *request_id)
{
    return booking_op(r, request_id, KVR_BOOKING_RELEASED, -1);
}

void kvr_router_observe_time(kvr_router *r, double t)
{
    if (!r->cfg.clock_from_requests || !isfinite(t))
        return;
    double cur = atomic_load(&r->observed_time);
    while (t > cur && !atomic_compare_exchange_weak(&r->observed_time, &cur, t))
        ;
}

size_t kvr_router_sweep(kvr_router *r)
{
    pthread_mutex_lock(&r->mu);
    double now = route_now(r);
    size_t n = route_bookings_expire(&r->bk, now);
    pthread_mutex_unlock(&r->mu);
    route_approx_sweep(&r->approx, now);
    return n;
}

void kvr_router_load(kvr_router *r, const char *model, const char *group, uint64_t worker_id,
                     uint32_t dp_rank, kvr_worker_load *out)
{
    memset(out, 0, sizeof *out);
    kvr_index *idx = kvr_indexer_index(r->ix, model, group ? group : KVR_DEFAULT_ROUTING_GROUP);
    if (!idx)
        return;
    pthread_mutex_lock(&r->mu);
    route_bookings_expire(&r->bk, route_now(r));
    route_load *l = route_load_find(&r->bk, (uintptr_t)idx, worker_id, dp_rank, false);
    if (l) {
        out->active_prefill_tokens = l->prefill_tokens;
        out->active_decode_blocks = route_load_blocks(l);
        out->bookings = l->bookings;
    }
    pthread_mutex_unlock(&r->mu);
}
