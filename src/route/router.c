/* Router lifecycle, configuration, scratch pool and random numbers. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/options.h"
#include "route/internal.h"
#include "util/grow.h"
#include "util/rng.h"

/* kvr_router_config_default and kvr_router_config_set: router_options.c. */

kvr_router *kvr_router_create(kvr_indexer *ix, const kvr_router_config *cfg)
{
    if (!ix)
        return NULL;
    kvr_router *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->ix = ix;
    if (cfg)
        r->cfg = *cfg;
    else
        kvr_router_config_default(&r->cfg);
    if (!(r->cfg.booking_ttl_s > 0))
        r->cfg.booking_ttl_s = 600.0;
    pthread_mutex_init(&r->pool_mu, NULL);
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->ranks_mu, NULL);
    route_bookings_init(&r->bk, r->cfg.booking_ttl_s);
    r->bk.decode_expiry_factor = r->cfg.decode_expiry_factor;
    if (!(r->cfg.approx_ttl_s > 0))
        r->cfg.approx_ttl_s = 120.0;
    route_approx_init(&r->approx, r->cfg.approx_ttl_s, r->cfg.approx_max_blocks);
    r->rng = r->cfg.rng_seed;
    if (r->rng == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r->rng = kvr_mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) | 1;
    }
    return r;
}

/* Every cfg read after creation is under mu (cost.c, select.c, bookings.c), the
 * rank list's refresh under ranks_mu and the approximate index's limits
 * under its own mutex, so the swap takes all three (in the router's order:
 * mu first) and a request sees either the old settings or the new ones.
 * A changed approx_ttl_s applies to blocks routed from now on (a block
 * keeps the expiry it was given). lru_edge turned off drops the workers'
 * LRU edges (edge.c), kept only while a rule reads them. */
int kvr_router_set_config(kvr_router *r, const kvr_router_config *cfg)
{
    if (!r || !cfg)
        return -1;
    size_t n, applied = 0;
    const kvr_option *rows = kvr_router_options(&n);
    pthread_mutex_lock(&r->mu);
    pthread_mutex_lock(&r->ranks_mu);
    pthread_mutex_lock(&r->approx.mu);
    for (size_t i = 0; i < n; i++)
        if ((rows[i].flags & KVR_OPT_RELOAD) && !kvr_opt_same(&rows[i], &r->cfg, cfg)) {
            kvr_opt_copy(&rows[i], &r->cfg, cfg);
            applied++;
        }
    r->bk.decode_expiry_factor = r->cfg.decode_expiry_factor;
    if (r->cfg.lru_edge == KVR_EDGE_OFF)
        route_rates_drop_edges(&r->bk);
    if (r->cfg.approx_ttl_s > 0)
        r->approx.ttl_s = r->cfg.approx_ttl_s;
    r->approx.max_blocks = r->cfg.approx_max_blocks ? r->cfg.approx_max_blocks : 1;
    pthread_mutex_unlock(&r->approx.mu);
    pthread_mutex_unlock(&r->ranks_mu);
    pthread_mutex_unlock(&r->mu);
    return (int)applied;
}

void kvr_router_config_get(kvr_router *r, kvr_router_config *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->cfg;
    pthread_mutex_unlock(&r->mu);
}

static void scratch_destroy(route_scratch *s)
{
    kvr_match_ctx_destroy(s->mctx);
    free(s->caps);
    free(s->spans);
    free(s->ranks);
    free(s->rank_pos);
    free(s->worker_profile);
    for (size_t i = 0; i < s->profiles_cap; i++) {
        free(s->profiles[i].matches);
        free(s->profiles[i].hashes);
        free(s->profiles[i].same_worker);
    }
    free(s->profiles);
    free(s->padded[0]);
    free(s->padded[1]);
    free(s->entry_profile);
    free(s->entry_slot);
    free(s->approx_entries);
    free(s->states);
    free(s->unslotted);
    free(s->costs);
    free(s->split);
    free(s->member_work);
    free(s->first_match);
    free(s->match_stamp);
    kvr_u64map_free(&s->caps_pos);
    free(s->tied);
    free(s);
}

void kvr_router_destroy(kvr_router *r)
{
    if (!r)
        return;
    while (r->pool) {
        route_scratch *s = r->pool;
        r->pool = s->next;
        scratch_destroy(s);
    }
    route_bookings_free(&r->bk);
    route_approx_free(&r->approx);
    route_ranks_free(r);
    pthread_mutex_destroy(&r->ranks_mu);
    pthread_mutex_destroy(&r->pool_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Scratch is pooled rather than thread-local: the HTTP server's threads
 * come and go, and a pool frees everything at destroy. */
route_scratch *route_scratch_acquire(kvr_router *r)
{
    pthread_mutex_lock(&r->pool_mu);
    route_scratch *s = r->pool;
    if (s)
        r->pool = s->next;
    pthread_mutex_unlock(&r->pool_mu);
    if (s)
        return s;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->mctx = kvr_match_ctx_create();
    if (!s->mctx) {
        free(s);
        return NULL;
    }
    return s;
}

void route_scratch_release(kvr_router *r, route_scratch *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&r->pool_mu);
    s->next = r->pool;
    r->pool = s;
    pthread_mutex_unlock(&r->pool_mu);
}

int route_grow(void **buf, size_t *cap, size_t need, size_t elt)
{
    return kvr_grow(buf, cap, need, elt, 16);
}

uint64_t route_rng_next(kvr_router *r)
{
    return kvr_splitmix64(&r->rng);
}

double route_rng_uniform(kvr_router *r)
{
    return (double)(route_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

const char *kvr_seq_kind_name(kvr_seq_kind k)
{
    switch (k) {
    case KVR_SEQ_PLAIN: return "plain";
    case KVR_SEQ_MM_PADDED: return "mm_padded";
    case KVR_SEQ_TEXT_PREFIX: return "text_prefix";
    }
    return "unknown";
}

const char *kvr_route_reason_name(kvr_route_reason r)
{
    switch (r) {
    case KVR_REASON_BEST_COST: return "best_cost";
    case KVR_REASON_TIE_RANDOM: return "tie_random";
    case KVR_REASON_SAMPLED: return "sampled";
    case KVR_REASON_PINNED: return "pinned";
    case KVR_REASON_BALANCED: return "balanced";
    }
    return "unknown";
}

int kvr_route_status_http(kvr_route_status s)
{
    switch (s) {
    case KVR_ROUTE_OK: return 200;
    case KVR_ROUTE_BAD_REQUEST: return 400;
    case KVR_ROUTE_UNKNOWN_MODEL: return 404;
    case KVR_ROUTE_NO_CANDIDATE: return 400;
    case KVR_ROUTE_DUPLICATE_ID: return 409;
    case KVR_ROUTE_UNKNOWN_ID: return 404;
    case KVR_ROUTE_NO_MEMORY: return 500;
    case KVR_ROUTE_LIMIT: return 429;
    }
    return 500;
}

void kvr_router_stats_get(kvr_router *r, kvr_router_stats *out)
{
    memset(out, 0, sizeof *out);
    out->queries = atomic_load(&r->queries);
    out->routes = atomic_load(&r->routes);
    out->hash_passes = atomic_load(&r->hash_passes);
    pthread_mutex_lock(&r->mu);
    out->bookings_active = r->bk.n_active - r->bk.n_peer; /* peers': kvr_router_peer_stats */
    out->bookings_expired = r->bk.expired;
    out->bookings_released = r->bk.released;
    out->prefill_done = r->bk.prefill_done;
    out->load_entries = r->bk.n_loads;
    out->booked_block_refs = r->bk.n_refs;
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&r->bk.loads, &it, &k, &v))
        for (const route_load *l = (const route_load *)(uintptr_t)v; l; l = l->hnext) {
            out->held_blocks += kvr_u64map_len(&l->held);
            out->held_bytes += kvr_u64map_bytes(&l->held);
        }
    out->held_bytes += r->bk.n_refs * sizeof(uint64_t);
    out->bookings_rejected = r->bk.rejected;
    out->bookings_aged_out = r->bk.aged_out;
    out->max_bookings = r->cfg.max_bookings;
    out->rate_samples = r->bk.rate_samples;
    out->ttft_error = route_ttft_error(&r->bk);
    out->ttft_error_samples = r->bk.err_samples;
    out->rates_evicted = r->bk.rates_evicted;
    out->edge_returned = r->bk.edges.returned;
    out->edge_aged_out = r->bk.edges.aged_out;
    out->edge_at_limit = r->bk.edges.at_limit;
    out->edge_lost = r->bk.edges.lost;
#define LOST_COPY_(name, metric, help) out->name = r->bk.name;
    KVR_ROUTER_LOST_COUNTERS(LOST_COPY_)
#undef LOST_COPY_
    it = 0;
    while (kvr_u64map_next(&r->bk.rates, &it, &k, &v))
        for (const route_rate *rt = (const route_rate *)(uintptr_t)v; rt; rt = rt->hnext)
            out->rates_learned += route_rate_measured(rt) > 0;
    pthread_mutex_unlock(&r->mu);
    route_approx_stats(&r->approx, out);
}

double kvr_router_prefill_rate(kvr_router *r, const char *model, const char *group,
                               uint64_t worker_id, uint32_t dp_rank)
{
    kvr_index *idx = kvr_indexer_index(r->ix, model, group ? group : KVR_DEFAULT_ROUTING_GROUP);
    if (!idx)
        return 0;
    pthread_mutex_lock(&r->mu);
    double rate =
        route_rate_measured(route_rate_find(&r->bk, (uintptr_t)idx, worker_id, dp_rank));
    pthread_mutex_unlock(&r->mu);
    return rate;
}
