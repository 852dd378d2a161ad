/* Measured prefill rates per (index, worker, rank), for the ttft cost model
 * (include/kvrouter/route.h, learn_prefill_rate). A sample is one request
 * that found its worker with no prefill queued: the time to its first token
 * is then its own prefill, slowed by the decodes the worker was running.
 * Decode speed likewise, from /prefill_done to /free per output token: it
 * predicts when a booking whose /free was lost is finished. The same
 * samples fit, per (model, group), how much decoding slows prefill. And
 * how far the ttft model's predictions fall from the timings, fleet-wide
 * (tie_from_error reads it).
 * Bounded at KVR_ROUTE_MAX_RATES entries (worker churn brings new ids);
 * caller holds kvr_router.mu throughout. */
#include <math.h>
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
    uintptr_t index = rt->index;
    uint64_t worker_id = rt->worker_id;
    uint32_t dp_rank = rt->dp_rank;
    route_edge_free(rt->edge);
    free(rt);
    route_slot_changed(b, index, worker_id, dp_rank);
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
    if (oldest) {
        rate_unlink(b, oldest);
        b->rates_evicted++;
    }
}

/* The rate of (index, worker, rank), created when new. */
static route_rate *rate_get(route_bookings *b, uintptr_t index, uint64_t worker_id,
                            uint32_t dp_rank)
{
    route_rate *rt = route_rate_find(b, index, worker_id, dp_rank);
    if (!rt) {
        if (b->n_rates >= KVR_ROUTE_MAX_RATES)
            evict_stalest(b);
        if (!(rt = calloc(1, sizeof *rt)))
            return NULL;
        rt->index = index;
        rt->worker_id = worker_id;
        rt->dp_rank = dp_rank;
        uint64_t key = route_wr_key(index, worker_id, dp_rank), head = 0;
        kvr_u64map_get(&b->rates, key, &head);
        rt->hnext = (route_rate *)(uintptr_t)head;
        if (kvr_u64map_put(&b->rates, key, (uint64_t)(uintptr_t)rt) < 0) {
            free(rt);
            return NULL;
        }
        b->n_rates++;
        route_slot_changed(b, index, worker_id, dp_rank);
    }
    return rt;
}

void route_rate_sample(route_bookings *b, uintptr_t index, uint64_t worker_id, uint32_t dp_rank,
                       double tokens, double seconds, double now)
{
    route_rate *rt = rate_get(b, index, worker_id, dp_rank);
    if (!rt) {
        b->rate_samples_lost++; /* out of memory: the rate learns without it */
        return;
    }
    rt->tokens = rt->tokens * KVR_ROUTE_RATE_DECAY + tokens;
    rt->seconds = rt->seconds * KVR_ROUTE_RATE_DECAY + seconds;
    rt->samples++;
    rt->updated_at = now;
    b->rate_samples++;
}

void route_rate_decode_sample(route_bookings *b, uintptr_t index, uint64_t worker_id,
                              uint32_t dp_rank, double tokens, double seconds, double now)
{
    route_rate *rt = rate_get(b, index, worker_id, dp_rank);
    if (!rt) {
        b->decode_samples_lost++; /* out of memory */
        return;
    }
    rt->decode_tokens = rt->decode_tokens * KVR_ROUTE_RATE_DECAY + tokens;
    rt->decode_seconds = rt->decode_seconds * KVR_ROUTE_RATE_DECAY + seconds;
    rt->decode_samples++;
    rt->updated_at = now;
}

double route_rate_decode_spt(const route_rate *rt)
{
    if (!rt || rt->decode_samples < KVR_ROUTE_RATE_MIN_SAMPLES || !(rt->decode_tokens > 0))
        return 0;
    return rt->decode_seconds / rt->decode_tokens;
}

double route_rate_recent_work(const route_rate *rt, double now)
{
    if (!rt || !(rt->work > 0))
        return 0;
    double age = now > rt->work_at ? now - rt->work_at : 0;
    return rt->work * exp(-age / KVR_ROUTE_WORK_TAU_S);
}

route_rate *route_rate_add_work(route_bookings *b, uintptr_t index, uint64_t worker_id,
                                uint32_t dp_rank, double tokens, double now)
{
    route_rate *rt = rate_get(b, index, worker_id, dp_rank);
    if (!rt)
        return NULL;
    rt->work = route_rate_recent_work(rt, now) + tokens;
    rt->work_at = now;
    rt->updated_at = now;
    return rt;
}

void route_rate_note_edge(route_bookings *b, route_rate *rt, const uint64_t *hashes,
                          uint32_t n_blocks, uint32_t matched, double matched_tokens,
                          double prompt_tokens, double intake_tokens, double capacity, double now)
{
    if (!rt) {
        b->edges.lost++; /* no rate to hold the edge (out of memory) */
        return;
    }
    rt->updated_at = now;
    /* out of memory: the edge misses this prompt, the router still routes */
    if (route_edge_note(&rt->edge, hashes, n_blocks, matched, matched_tokens, prompt_tokens,
                        intake_tokens, capacity, &b->edges) < 0)
        b->edges.lost++;
}

double route_rate_measured(const route_rate *rt)
{
    if (!rt || rt->samples < KVR_ROUTE_RATE_MIN_SAMPLES || !(rt->seconds > 0))
        return 0;
    return rt->tokens / rt->seconds;
}

void route_ttft_error_sample(route_bookings *b, double predicted_s, double measured_s)
{
    if (!(predicted_s > 0) || !(measured_s > 0) || !isfinite(measured_s))
        return;
    b->err_abs = b->err_abs * KVR_ROUTE_ERR_DECAY + fabs(measured_s - predicted_s);
    b->err_pred = b->err_pred * KVR_ROUTE_ERR_DECAY + predicted_s;
    b->err_samples++;
}

double route_ttft_error(const route_bookings *b)
{
    if (b->err_samples < KVR_ROUTE_ERR_MIN_SAMPLES || !(b->err_pred > 0))
        return 0;
    return b->err_abs / b->err_pred;
}

void route_fit_sample(route_bookings *b, uintptr_t index, double tokens, double seconds,
                      double decode_context)
{
    if (!(tokens > 0))
        return;
    uint64_t v = 0;
    route_decode_fit *f = NULL;
    if (kvr_u64map_get(&b->fits, (uint64_t)index, &v))
        f = (route_decode_fit *)(uintptr_t)v;
    else if ((f = calloc(1, sizeof *f)) &&
             kvr_u64map_put(&b->fits, (uint64_t)index, (uint64_t)(uintptr_t)f) < 0) {
        free(f);
        f = NULL;
    }
    if (!f) {
        b->fit_samples_lost++; /* out of memory: the fit learns without it */
        return;
    }
    double y = seconds / tokens, x = decode_context, d = KVR_ROUTE_FIT_DECAY;
    f->w = f->w * d + tokens;
    f->x = f->x * d + tokens * x;
    f->y = f->y * d + tokens * y;
    f->xx = f->xx * d + tokens * x * x;
    f->xy = f->xy * d + tokens * x * y;
    f->n++;
}

double route_fit_share(route_bookings *b, uintptr_t index, double fallback)
{
    uint64_t v = 0;
    if (!kvr_u64map_get(&b->fits, (uint64_t)index, &v))
        return fallback;
    const route_decode_fit *f = (const route_decode_fit *)(uintptr_t)v;
    if (f->n < KVR_ROUTE_FIT_MIN_SAMPLES || !(f->w > 0))
        return fallback;
    double mx = f->x / f->w, my = f->y / f->w;
    double vx = f->xx / f->w - mx * mx, cxy = f->xy / f->w - mx * my;
    if (!(vx > KVR_ROUTE_FIT_MIN_SPREAD * KVR_ROUTE_FIT_MIN_SPREAD))
        return fallback;
    double slope = cxy / vx, intercept = my - slope * mx;
    if (!(intercept > 0))
        return fallback;
    double k = slope / intercept;
    return k < 0 ? 0 : k > KVR_ROUTE_FIT_MAX_SHARE ? KVR_ROUTE_FIT_MAX_SHARE : k;
}

void route_rates_drop_edges(route_bookings *b)
{
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&b->rates, &it, &k, &v))
        for (route_rate *rt = (route_rate *)(uintptr_t)v; rt; rt = rt->hnext) {
            route_edge_free(rt->edge);
            rt->edge = NULL;
        }
}

void route_rates_free(route_bookings *b)
{
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&b->rates, &it, &k, &v)) {
        route_rate *rt = (route_rate *)(uintptr_t)v;
        while (rt) {
            route_rate *next = rt->hnext;
            route_edge_free(rt->edge);
            free(rt);
            rt = next;
        }
    }
    kvr_u64map_free(&b->rates);
    b->n_rates = 0;
    it = 0;
    while (kvr_u64map_next(&b->fits, &it, &k, &v))
        free((void *)(uintptr_t)v);
    kvr_u64map_free(&b->fits);
}
