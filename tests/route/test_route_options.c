/* Opt-in cost options that depart from SPEC §8's letter (route.h):
 * unclamped_prefill and media_cut_weight. Their defaults keep the SPEC
 * cost exactly; each test shows the default tie and the opt-in choice.
 * And settings swapped into a running router (kvr_router_set_config). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "route_test_util.h"

#define BS 4
#define N 16 /* 4 blocks */

static uint32_t tokens[N];

static kvr_router *router_with(kvr_indexer *ix, bool unclamped, double cut_w, double credit)
{
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.cost_model = KVR_COST_DYNAMO; /* options of SPEC §8's formula */
    cfg.rng_seed = 7;
    cfg.rank_refresh_s = 0;
    cfg.overlap_score_credit = credit;
    cfg.unclamped_prefill = unclamped;
    cfg.media_cut_weight = cut_w;
    kvr_router *r = kvr_router_create(ix, &cfg);
    assert_non_null(r);
    return r;
}

static kvr_route_decision route_debug(kvr_router *r, const kvr_mm_item *items, size_t n_items)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(tokens, N, items, n_items);
    rq.debug = true;
    kvr_route_decision d;
    kvr_route_status st = kvr_route(r, &rq, &d);
    if (st != KVR_ROUTE_OK)
        fail_msg("route failed: %d %s", st, d.error);
    assert_int_equal(d.n_costs, 2);
    return d;
}

static double cost_of_worker(const kvr_route_decision *d, uint64_t id)
{
    for (size_t i = 0; i < d->n_costs; i++)
        if (d->costs[i].worker_id == id)
            return d->costs[i].cost;
    fail_msg("no cost for worker %llu", (unsigned long long)id);
    return NAN;
}

static void test_defaults_and_settings(void **state)
{
    (void)state;
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    assert_false(cfg.unclamped_prefill);
    assert_true(cfg.media_cut_weight == 0);
    assert_int_equal(kvr_router_config_set(&cfg, "unclamped_prefill", 1), 0);
    assert_true(cfg.unclamped_prefill);
    assert_int_equal(kvr_router_config_set(&cfg, "unclamped_prefill", 0), 0);
    assert_false(cfg.unclamped_prefill);
    assert_int_equal(kvr_router_config_set(&cfg, "unclamped_prefill", 2), -1);
    assert_int_equal(kvr_router_config_set(&cfg, "unclamped_prefill", 0.5), -1);
    assert_int_equal(kvr_router_config_set(&cfg, "media_cut_weight", 2.5), 0);
    assert_true(cfg.media_cut_weight == 2.5);
    assert_int_equal(kvr_router_config_set(&cfg, "media_cut_weight", -1), -1);
    assert_true(cfg.media_cut_weight == 2.5);
}

/* Worker 1 caches 1 block, worker 2 all 4; credit 8 per block covers the
 * 4-block load either way. Clamped (SPEC §8): both prefill terms are 0 and
 * the costs tie at the 4 new blocks. Unclamped: 4 - 8 = -4 and 4 - 32 = -28,
 * so the longer overlap wins by 24. */
static void test_unclamped_prefill_prefers_longer_overlap(void **state)
{
    (void)state;
    for (int unclamped = 0; unclamped <= 1; unclamped++) {
        kvr_indexer *ix = kvr_indexer_create();
        assert_non_null(ix);
        kvr_router *r = router_with(ix, unclamped, 0, 8);
        uint64_t t[N];
        rt_widen(tokens, t, N);
        kvr_worker *w1 = rt_register(ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
        kvr_worker *w2 = rt_register(ix, 2, BS, KVR_MM_LEGACY, -1, false, NULL);
        rt_store(ix, w1, 0, BS, t, BS, false, 1000);
        rt_store(ix, w2, 0, BS, t, N, false, 2000);
        kvr_route_decision d = route_debug(r, NULL, 0);
        if (!unclamped) {
            assert_true(fabs(cost_of_worker(&d, 1) - 4.0) < 1e-9);
            assert_true(fabs(cost_of_worker(&d, 2) - 4.0) < 1e-9);
            assert_int_equal(d.reason, KVR_REASON_TIE_RANDOM);
        } else {
            assert_true(fabs(cost_of_worker(&d, 1) - 0.0) < 1e-9);
            assert_true(fabs(cost_of_worker(&d, 2) - -24.0) < 1e-9);
            assert_int_equal(d.worker_id, 2);
            assert_int_equal(d.reason, KVR_REASON_BEST_COST);
        }
        kvr_route_decision_free(&d);
        kvr_router_destroy(r);
        kvr_indexer_destroy(ix);
    }
}

/* An image at tokens 8..12 of a 4-block prompt, nothing cached: the legacy
 * worker scores the pad-substituted 4 blocks, the engine_wide worker the
 * 2-block text prefix (2 blocks cut). Both cost 4 (prefill) + 4 (the
 * request's blocks), so they tie by default; media_cut_weight 1.5 adds
 * 1.5 x 2 = 3 to the engine_wide worker only. A text-only request pays
 * nothing anywhere. */
static void test_media_cut_weight_prefers_visible_worker(void **state)
{
    (void)state;
    kvr_mm_item item = {.start = 8, .end = 12, .has_mm_hash = true, .mm_hash = 0xabcdef};
    for (int weighted = 0; weighted <= 1; weighted++) {
        kvr_indexer *ix = kvr_indexer_create();
        assert_non_null(ix);
        kvr_router *r = router_with(ix, false, weighted ? 1.5 : 0, 1);
        rt_register(ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
        rt_register(ix, 2, BS, KVR_MM_ENGINE_WIDE, -1, false, NULL);
        kvr_route_decision d = route_debug(r, &item, 1);
        for (size_t i = 0; i < d.n_costs; i++)
            assert_int_equal(d.costs[i].routing_tokens, d.costs[i].worker_id == 1 ? 16 : 8);
        assert_true(fabs(cost_of_worker(&d, 1) - 8.0) < 1e-9);
        assert_true(fabs(cost_of_worker(&d, 2) - (weighted ? 11.0 : 8.0)) < 1e-9);
        if (weighted) {
            assert_int_equal(d.worker_id, 1);
            assert_int_equal(d.reason, KVR_REASON_BEST_COST);
        } else {
            assert_int_equal(d.reason, KVR_REASON_TIE_RANDOM);
        }
        kvr_route_decision_free(&d);
        d = route_debug(r, NULL, 0);
        assert_true(fabs(cost_of_worker(&d, 1) - cost_of_worker(&d, 2)) < 1e-9);
        kvr_route_decision_free(&d);
        kvr_router_destroy(r);
        kvr_indexer_destroy(ix);
    }
}

/* A booked /route of tokens with request_id id. */
static kvr_route_status route_id(kvr_router *r, const char *id, kvr_route_decision *d)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(tokens, N, NULL, 0);
    rq.request_id = id;
    rq.debug = true;
    return kvr_route(r, &rq, d);
}

/* max_bookings and cost_model change under a running router; booking_ttl_s
 * and rng_seed, read only at creation, stay. */
static void test_set_config_applies_reloadable_settings(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.max_bookings = 1;
    cfg.rng_seed = 7;
    kvr_router *r = kvr_router_create(ix, &cfg);
    rt_register(ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    kvr_route_decision d;
    assert_int_equal(route_id(r, "a", &d), KVR_ROUTE_OK);
    assert_true(d.cost > 0 && d.cost < 0.01); /* ttft: 16 tokens at 10,000/s */
    kvr_route_decision_free(&d);
    assert_int_equal(route_id(r, "b", &d), KVR_ROUTE_LIMIT);
    kvr_route_decision_free(&d);

    kvr_router_config next = cfg;
    next.max_bookings = 2;
    next.cost_model = KVR_COST_DYNAMO;
    next.booking_ttl_s = 1;
    next.rng_seed = 8;
    assert_int_equal(kvr_router_set_config(r, &next), 2);
    assert_int_equal(kvr_router_set_config(r, &next), 0); /* nothing left to change */
    kvr_router_config now;
    kvr_router_config_get(r, &now);
    assert_int_equal(now.max_bookings, 2);
    assert_int_equal(now.cost_model, KVR_COST_DYNAMO);
    assert_true(now.booking_ttl_s == cfg.booking_ttl_s);
    assert_int_equal(now.rng_seed, 7);
    assert_int_equal(route_id(r, "b", &d), KVR_ROUTE_OK);
    assert_true(d.cost >= 4); /* dynamo: 4 new blocks at least */
    kvr_route_decision_free(&d);
    assert_int_equal(route_id(r, "c", &d), KVR_ROUTE_LIMIT);
    kvr_route_decision_free(&d);
    kvr_router_stats st;
    kvr_router_stats_get(r, &st);
    assert_int_equal(st.max_bookings, 2);
    assert_int_equal(kvr_router_set_config(NULL, &next), -1);
    assert_int_equal(kvr_router_set_config(r, NULL), -1);
    kvr_router_destroy(r);
    kvr_indexer_destroy(ix);
}

typedef struct {
    kvr_router *r;
    int n_ok;
    atomic_bool done;
} swap_arg;

static void *route_and_free_loop(void *p)
{
    swap_arg *a = p;
    for (int i = 0; i < 400; i++) {
        char id[32];
        snprintf(id, sizeof id, "t%d", i);
        kvr_route_decision d;
        if (route_id(a->r, id, &d) == KVR_ROUTE_OK) {
            a->n_ok++;
            kvr_router_release(a->r, id);
        }
        kvr_route_decision_free(&d);
    }
    atomic_store(&a->done, true);
    return NULL;
}

/* Requests while the settings are swapped back and forth: every /route is
 * answered with one set or the other (the TSan build checks the locking). */
static void test_set_config_while_routing(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_router_config a, b;
    kvr_router_config_default(&a);
    a.rng_seed = 3;
    b = a;
    b.cost_model = KVR_COST_DYNAMO;
    b.tie_tolerance = 0;
    b.rank_refresh_s = 0;
    b.approx_ttl_s = 5;
    b.approx_max_blocks = 10;
    kvr_router *r = kvr_router_create(ix, &a);
    rt_register(ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    rt_register(ix, 2, BS, KVR_MM_LEGACY, -1, false, NULL);
    swap_arg arg = {r, 0, false};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, route_and_free_loop, &arg), 0);
    for (int i = 0; i < 200 || !atomic_load(&arg.done); i++)
        assert_true(kvr_router_set_config(r, i % 2 ? &a : &b) > 0);
    pthread_join(th, NULL);
    assert_int_equal(arg.n_ok, 400);
    kvr_router_destroy(r);
    kvr_indexer_destroy(ix);
}

int main(void)
{
    for (uint32_t i = 0; i < N; i++)
        tokens[i] = 700 + i;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_settings),
        cmocka_unit_test(test_unclamped_prefill_prefers_longer_overlap),
        cmocka_unit_test(test_media_cut_weight_prefers_visible_worker),
        cmocka_unit_test(test_set_config_applies_reloadable_settings),
        cmocka_unit_test(test_set_config_while_routing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
