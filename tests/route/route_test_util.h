/* Shared fixtures of the route tests: build index state through the facade
 * with raw events, as a source would after decoding. */
#ifndef KVR_ROUTE_TEST_UTIL_H
#define KVR_ROUTE_TEST_UTIL_H

#include "test_support.h"

#include <stdlib.h>
#include <string.h>

#include "kvrouter/hash.h"
#include "kvrouter/route.h"

#define RT_MODEL "m"

/* The workers of these tests publish KV events (or none at all, meaning an
 * empty cache), so they are registered kv_events on; test_route_approx
 * covers the other settings. */
static kvr_kv_events rt_kv_events = KVR_KV_EVENTS_ON;

static inline kvr_worker *rt_register(kvr_indexer *ix, uint64_t id, uint32_t bs,
                                      kvr_mm_identity mode, int accepts, bool eagle,
                                      const char *lora)
{
    kvr_worker_settings s = {0};
    s.kv_events = rt_kv_events;
    s.model_name = RT_MODEL;
    s.worker_id = id;
    s.block_size = bs;
    s.mm_identity = mode;
    s.accepts_mm_hashes = accepts;
    s.is_eagle = eagle;
    s.lora_name = lora;
    kvr_worker *w = NULL;
    kvr_reg_result res = kvr_indexer_register(ix, &s, &w);
    assert_true(res == KVR_REG_CREATED || res == KVR_REG_UNCHANGED);
    assert_non_null(w);
    return w;
}

/* One root store of ceil-less whole blocks: engine hashes base, base+1, ...
 * tokens are u64 (wide ids allowed); Eagle stores carry one extra token. */
static inline void rt_store_tier(kvr_indexer *ix, kvr_worker *w, uint32_t rank, kvr_tier tier,
                                 uint32_t bs, const uint64_t *tokens, uint32_t n_tokens,
                                 bool eagle, uint64_t base)
{
    uint32_t nb = eagle ? (n_tokens - 1) / bs : n_tokens / bs;
    uint64_t *hashes = calloc(nb ? nb : 1, sizeof *hashes);
    for (uint32_t i = 0; i < nb; i++)
        hashes[i] = base + i;
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_STORED;
    ev.tier = tier;
    ev.block_hashes = hashes;
    ev.n_block_hashes = nb;
    ev.token_ids = tokens;
    ev.n_token_ids = n_tokens;
    ev.eagle = eagle;
    ev.block_size = bs;
    kvr_batch b;
    kvr_batch_init(&b);
    kvr_batch_of_events(&b, &ev, 1);
    kvr_indexer_apply(ix, w, rank, &b);
    free(hashes);
}

static inline void rt_store(kvr_indexer *ix, kvr_worker *w, uint32_t rank, uint32_t bs,
                            const uint64_t *tokens, uint32_t n_tokens, bool eagle, uint64_t base)
{
    rt_store_tier(ix, w, rank, KVR_TIER_GPU, bs, tokens, n_tokens, eagle, base);
}

/* The router reads the time from *now (the test's fake clock, moved by
 * hand). */
static inline double rt_clock_read(void *now) { return *(const double *)now; }

static inline void rt_fake_clock(kvr_router_config *cfg, double *now)
{
    cfg->clock = rt_clock_read;
    cfg->clock_ud = now;
}

static inline void rt_widen(const uint32_t *in, uint64_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[i];
}

static inline const kvr_query_entry *rt_entry(const kvr_query_result *q, uint64_t worker,
                                              uint32_t rank)
{
    for (size_t i = 0; i < q->n_entries; i++)
        if (q->entries[i].worker_id == worker && q->entries[i].dp_rank == rank)
            return &q->entries[i];
    fail_msg("no entry for worker %llu rank %u", (unsigned long long)worker, rank);
    return NULL;
}

static inline kvr_query_request rt_request(const uint32_t *tokens, size_t n,
                                           const kvr_mm_item *items, size_t n_items)
{
    kvr_query_request q;
    memset(&q, 0, sizeof q);
    q.model_name = RT_MODEL;
    q.token_ids = tokens;
    q.n_tokens = n;
    q.mm_items = items;
    q.n_mm_items = n_items;
    return q;
}

/* Routes the first n tokens (with every candidate's cost when debug),
 * pinned to worker pin when pin != 0; fails the test unless the router
 * answers KVR_ROUTE_OK. */
static inline kvr_route_decision rt_route_as(kvr_router *r, const uint32_t *tokens, size_t n,
                                             const char *id, uint64_t pin, bool debug)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(tokens, n, NULL, 0);
    rq.request_id = id;
    rq.debug = debug;
    if (pin) {
        rq.has_worker_id = true;
        rq.worker_id = pin;
    }
    kvr_route_decision d;
    kvr_route_status st = kvr_route(r, &rq, &d);
    if (st != KVR_ROUTE_OK)
        fail_msg("route failed: %d %s", st, d.error);
    return d;
}

static inline kvr_route_decision rt_route_debug(kvr_router *r, const uint32_t *tokens, size_t n,
                                                const char *id, uint64_t pin)
{
    return rt_route_as(r, tokens, n, id, pin, true);
}

/* The cost model rt_router gives its routers: the library default unless a
 * test file of one model's formula sets it first. */
static kvr_cost_model rt_cost_model = KVR_COST_TTFT;

static inline kvr_router *rt_router(kvr_indexer *ix, double ttl, uint64_t seed)
{
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.cost_model = rt_cost_model;
    cfg.rng_seed = seed;
    cfg.rank_refresh_s = 0;
    if (ttl > 0)
        cfg.booking_ttl_s = ttl;
    kvr_router *r = kvr_router_create(ix, &cfg);
    assert_non_null(r);
    return r;
}

/* The indexer + router pair every route test starts from. */
static inline void rt_open(kvr_indexer **ix, kvr_router **r, double ttl, uint64_t seed)
{
    *ix = kvr_indexer_create();
    assert_non_null(*ix);
    *r = rt_router(*ix, ttl, seed);
}

static inline void rt_close(kvr_indexer *ix, kvr_router *r)
{
    kvr_router_destroy(r);
    kvr_indexer_destroy(ix);
}

/* A debug decision's cost of worker id (fails the test when absent). */
static inline const kvr_route_cost *rt_cost_of(const kvr_route_decision *d, uint64_t id)
{
    for (size_t i = 0; i < d->n_costs; i++)
        if (d->costs[i].worker_id == id)
            return &d->costs[i];
    fail_msg("no cost for worker %llu", (unsigned long long)id);
    return NULL;
}

/* No booking holds anything: block references, their memory, load records. */
static inline void rt_expect_nothing_held(kvr_router *r)
{
    kvr_router_stats st;
    kvr_router_stats_get(r, &st);
    assert_int_equal(st.held_blocks, 0);
    assert_int_equal(st.booked_block_refs, 0);
    assert_int_equal(st.held_bytes, 0);
    assert_int_equal(st.load_entries, 0);
}

#endif
