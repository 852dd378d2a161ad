/* Measured prefill rates per (index, worker, rank), for the ttft cost model
 * (include/kvrouter/route.h, learn_prefill_rate). A sample is one request
 * that found its worker with no prefill queued: the time to its first token
 * is then its own prefill, slowed by the decodes the worker was running.
 * Bounded at KVR_ROUTE_MAX_RATES entries (worker churn brings new ids);
 * caller holds kvr_router.mu throughout. */
#include <stdlib.h>

#include "route/internal.h"

route_rate *route_rate_find(route_bookings *b, uintptr_t index, uint64_t worker_id,
                            uint32_t dp_rank)
{
    uint64_t head = 0;
    if (!kvr_u64map_get(&b->rates, route_wr_key(index, worker_id, dp_rank), &head))
        return NULL;
    for (route_rate *rt = (route_rate *)(uintptr_t)head; rt; rt = rt->hnext)
        if (rt->index == index && rt->worker_id == worker_id && rt->dp_rank == dp_rank)
            return rt;
    return NULL;
}

static void rate_unlink(route_bookings *b, route_rate *rt)
{
    uint64_t key = route_wr_key(rt->index, rt->worker_id, rt->dp_rank);
    uint64_t head = 0;
    kvr_u64map_get(&b->rates, key, &head);
    route_rate *first = (route_rate *)(uintptr_t)head;
    if (first == rt) {
        if (rt->hnext)
            kvr_u64map_put(&b->rates, key, (uint64_t)(uintptr_t)rt->hnext);
        else
            kvr_u64map_del(&b->rates, key, NULL);
    } else {
        for (route_rate *p = first; p; p = p->hnext)
            if (p->hnext == rt) {
                p->hnext = rt->hnext;
                break;
            }
    }
    b->n_rates--;
    free(rt);
}

/* At the bound a full scan finds the stalest entry: it runs once per new
 * worker past 65536 known ones, not per request. */
static void evict_stalest(route_bookings *b)
{
    route_rate *oldest = NULL;
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&b->rates, &it, &k, &v))
        for (route_rate *rt = (route_rate *)(uintptr_t)v; rt; rt = rt->hnext)
            if (!oldest || rt->updated_at < oldest->updated_at)
                oldest = rt;
    if (oldest)
        rate_unlink(b, oldest);
}

void route_rate_sample(route_bookings *b, uintptr_t index, uint64_t worker_id, uint32_t dp_rank,
                       double tokens, double seconds, double now)
{
    route_rate *rt = route_rate_find(b, index, worker_id, dp_rank);
    if (!rt) {
        if (b->n_rates >= KVR_ROUTE_MAX_RATES)
            evict_stalest(b);
        if (!(rt = calloc(1, sizeof *rt)))
            return; /* a lost sample, nothing else */
        rt->index = index;
        rt->worker_id = worker_id;
        rt->dp_rank = dp_rank;
        uint64_t key = route_wr_key(index, worker_id, dp_rank), head = 0;
        kvr_u64map_get(&b->rates, key, &head);
        rt->hnext = (route_rate *)(uintptr_t)head;
        if (kvr_u64map_put(&b->rates, key, (uint64_t)(uintptr_t)rt) < 0) {
            free(rt);
            return;
        }
        b->n_rates++;
    }
    rt->tokens = rt->tokens * KVR_ROUTE_RATE_DECAY + tokens;
    rt->seconds = rt->seconds * KVR_ROUTE_RATE_DECAY + seconds;
    rt->samples++;
    rt->updated_at = now;
    b->rate_samples++;
}

double route_rate_measured(const route_rate *rt)
{
    if (!rt || rt->samples < KVR_ROUTE_RATE_MIN_SAMPLES || !(rt->seconds > 0))
        return 0;
    return rt->tokens / rt->seconds;
}

void route_rates_free(route_bookings *b)
{
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&b->rates, &it, &k, &v)) {
        route_rate *rt = (route_rate *)(uintptr_t)v;
        while (rt) {
            route_rate *next = rt->hnext;
            free(rt);
            rt = next;
        }
    }
    kvr_u64map_free(&b->rates);
    b->n_rates = 0;
}
