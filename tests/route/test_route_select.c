/* Selection and bookings with cost_model dynamo (SPEC §8): cost, tie-break, sampling, pins,
 * allow-lists, /prefill_done, /free and TTL expiry. Costs include the
 * request's own new blocks (4 for a 16-token prompt that no active request
 * on that worker shares), and bookings hold uncached prefill tokens and
 * distinct blocks (Dynamo ActiveSequences semantics); the shared-prefix and
 * memory tests are in test_route_load.c. */
#include <math.h>
#include <pthread.h>
#include <time.h>

#include "route_test_util.h"

#define BS 4
#define N 16 /* 4 blocks */

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    uint32_t tokens[N];
} fx;

static fx *make(double ttl, uint64_t seed)
{
    rt_cost_model = KVR_COST_DYNAMO; /* these tests check SPEC §8's formula */
    fx *f = calloc(1, sizeof *f);
    rt_open(&f->ix, &f->r, ttl, seed);
    for (uint32_t i = 0; i < N; i++)
        f->tokens[i] = 500 + i;
    return f;
}

static int setup(void **state)
{
    *state = make(0, 42);
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    rt_close(f->ix, f->r);
    free(f);
    return 0;
}

/* Worker `id` caches the first `blocks` blocks of the prompt on rank 0. */
static kvr_worker *worker_with(fx *f, uint64_t id, uint32_t blocks)
{
    kvr_worker *w = rt_register(f->ix, id, BS, KVR_MM_LEGACY, -1, false, NULL);
    if (blocks) {
        uint64_t t[N];
        rt_widen(f->tokens, t, blocks * BS);
        rt_store(f->ix, w, 0, BS, t, blocks * BS, false, id * 1000);
    }
    return w;
}

static kvr_route_request req_of(fx *f, const char *id)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(f->tokens, N, NULL, 0);
    rq.request_id = id;
    return rq;
}

static kvr_route_decision route_ok(fx *f, const kvr_route_request *rq)
{
    kvr_route_decision d;
    kvr_route_status st = kvr_route(f->r, rq, &d);
    if (st != KVR_ROUTE_OK)
        fail_msg("route failed: %d %s", st, d.error);
    return d;
}

static void test_overlap_wins_when_idle(void **state)
{
    fx *f = *state;
    worker_with(f, 1, 4);
    worker_with(f, 2, 1);
    kvr_route_request rq = req_of(f, NULL);
    rq.debug = true;
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_int_equal(d.reason, KVR_REASON_BEST_COST);
    assert_int_equal(d.overlap_tokens, 16);
    assert_int_equal(d.n_costs, 2);
    for (size_t i = 0; i < d.n_costs; i++) {
        /* cost = max(0, 16/4 - overlap) + 0 active + 4 new blocks (was
         * 0 / 3 before the request's own blocks counted) */
        double want = d.costs[i].worker_id == 1 ? 4.0 : 7.0;
        assert_true(fabs(d.costs[i].cost - want) < 1e-9);
        assert_int_equal(d.costs[i].new_blocks, 4);
    }
    kvr_route_decision_free(&d);
}

static void test_booking_shifts_next_request_when_load_dominates(void **state)
{
    fx *f = *state;
    worker_with(f, 1, 4);
    worker_with(f, 2, 0);
    /* A fully cached prompt books no prefill, and an identical request
     * shares its 4 prompt blocks, so only output blocks (held per request)
     * can push the next one away: osl 20 -> ceil((16 - 16 + 20) / 4) = 5. */
    kvr_route_request rq = req_of(f, "r1");
    rq.osl = 20;
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_int_equal(d.booked_prefill_tokens, 0);
    assert_int_equal(d.booked_blocks, 9);
    kvr_worker_load load;
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
    assert_int_equal(load.active_prefill_tokens, 0);
    assert_int_equal(load.active_decode_blocks, 9);
    assert_int_equal(load.bookings, 1);

    /* worker 1: max(0, 16/4 - 4) + 9 active + 5 new = 14;
     * worker 2: 4 + 0 + 9 new = 13 */
    rq.request_id = "r2";
    d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 2);
    assert_true(fabs(d.cost - 13.0) < 1e-9);
    kvr_route_decision_free(&d);
}

static void test_booking_does_not_shift_when_overlap_dominates(void **state)
{
    fx *f = *state;
    worker_with(f, 1, 4);
    worker_with(f, 2, 0);
    kvr_route_request rq = req_of(f, "r1");
    rq.overlap_score_credit = 2;
    rq.has_overlap_score_credit = true;
    rq.prefill_load_scale = 2;
    rq.has_prefill_load_scale = true;
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    /* worker 1: 2*max(0, 4 - 2*4) + 4 active + 0 new (r1's blocks) = 4;
     * worker 2: 2*4 + 0 + 4 new = 12 (r1's prefill is cached: none booked) */
    rq.request_id = "r2";
    d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_true(fabs(d.cost - 4.0) < 1e-9);
}

static void test_free_restores_state(void **state)
{
    fx *f = *state;
    worker_with(f, 1, 4);
    worker_with(f, 2, 0);
    kvr_route_request rq = req_of(f, "a");
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_DUPLICATE_ID);
    assert_non_null(strstr(d.error, "request_id"));
    kvr_router_stats st0;
    kvr_router_stats_get(f->r, &st0);
    assert_int_equal(st0.load_entries, 1);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_UNKNOWN_ID);
    assert_int_equal(kvr_router_prefill_done(f->r, "nope"), KVR_ROUTE_UNKNOWN_ID);
    kvr_worker_load load;
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
    assert_int_equal(load.active_prefill_tokens, 0);
    assert_int_equal(load.active_decode_blocks, 0);
    assert_int_equal(load.bookings, 0);
    rt_expect_nothing_held(f->r);
    /* The same id can be booked again, and lands where an idle fleet puts
     * it: only its own 4 blocks count (was 0 before they counted). */
    d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_true(fabs(d.cost - 4.0) < 1e-9);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 1);
    assert_int_equal(st.bookings_released, 1);
}

static void test_prefill_done_moves_load_to_decode(void **state)
{
    fx *f = *state;
    /* Worker 1 caches 3 of the 4 blocks: p1 books the 4 uncached tokens
     * (the whole prompt's 16 before uncached booking). */
    worker_with(f, 1, 3);
    worker_with(f, 2, 0);
    kvr_route_request rq = req_of(f, "p1");
    rq.osl = 8; /* blocks = 4 prompt + ceil(8 / 4) output = 6 */
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_int_equal(d.booked_blocks, 6);
    assert_int_equal(d.booked_prefill_tokens, 4);
    kvr_worker_load load;
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
    assert_int_equal(load.active_prefill_tokens, 4);
    assert_int_equal(kvr_router_prefill_done(f->r, "p1"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_prefill_done(f->r, "p1"), KVR_ROUTE_OK); /* idempotent */
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
    assert_int_equal(load.active_prefill_tokens, 0);
    assert_int_equal(load.active_decode_blocks, 6);
    /* An osl-0 probe. worker 1: max(0, 4 - 3) + 6 active + 0 new (p1 holds
     * all 4 prompt blocks) = 7; worker 2: 4 + 0 + 4 = 8. (Before shared
     * blocks counted once, worker 1 cost 6 + its overlap and lost.) */
    rq.request_id = NULL;
    rq.osl = 0;
    rq.debug = true;
    d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    for (size_t i = 0; i < d.n_costs; i++)
        if (d.costs[i].worker_id == 1) {
            assert_int_equal(d.costs[i].active_decode_blocks, 6);
            assert_int_equal(d.costs[i].new_blocks, 0);
            assert_true(fabs(d.costs[i].cost - 7.0) < 1e-9);
        }
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, "p1"), KVR_ROUTE_OK);
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
    assert_int_equal(load.active_decode_blocks, 0);
}

static void test_bookings_expire_after_ttl(void **state)
{
    (void)state;
    fx *f = make(0.05, 3);
    worker_with(f, 1, 4);
    kvr_route_request rq = req_of(f, "lost");
    kvr_route_decision d = route_ok(f, &rq);
    (void)d;
    kvr_worker_load load;
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
    assert_int_equal(load.bookings, 1);
    assert_int_equal(load.active_decode_blocks, 4);
    kvr_router_stats hs;
    kvr_router_stats_get(f->r, &hs);
    assert_int_equal(hs.held_blocks, 4);
    assert_int_equal(hs.booked_block_refs, 4);
    /* Poll the sweep rather than sleep a fixed time. */
    size_t expired = 0;
    for (int i = 0; i < 200 && !expired; i++) {
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        expired = kvr_router_sweep(f->r);
    }
    assert_int_equal(expired, 1);
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
    assert_int_equal(load.bookings, 0);
    assert_int_equal(load.active_prefill_tokens, 0);
    assert_int_equal(load.active_decode_blocks, 0);
    assert_int_equal(kvr_router_release(f->r, "lost"), KVR_ROUTE_UNKNOWN_ID);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_expired, 1);
    assert_int_equal(st.bookings_active, 0);
    /* Expiry drops the block references too, and their memory. */
    rt_expect_nothing_held(f->r);

    /* Lazy expiry: a route after the TTL sees no stale load without a sweep. */
    d = route_ok(f, &rq);
    for (int i = 0; i < 200; i++) {
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &load);
        if (load.bookings == 0)
            break;
    }
    assert_int_equal(load.bookings, 0);
    teardown((void **)&f);
}

static void test_tie_break_is_random(void **state)
{
    fx *f = *state;
    worker_with(f, 1, 0);
    worker_with(f, 2, 0);
    worker_with(f, 3, 2);
    kvr_route_request rq = req_of(f, NULL);
    rq.allowed_workers = (uint64_t[]){1, 2};
    rq.n_allowed_workers = 2;
    int count[3] = {0};
    for (int i = 0; i < 2000; i++) {
        kvr_route_decision d = route_ok(f, &rq);
        assert_int_equal(d.reason, KVR_REASON_TIE_RANDOM);
        assert_true(d.worker_id == 1 || d.worker_id == 2);
        count[d.worker_id]++;
    }
    /* Binomial(2000, 0.5): sd 22; 150 is ~7 sd. */
    assert_true(abs(count[1] - 1000) < 150);
}

static void test_temperature_follows_softmax(void **state)
{
    fx *f = *state;
    worker_with(f, 1, 4); /* cost 0 */
    worker_with(f, 2, 2); /* cost 2 */
    worker_with(f, 3, 0); /* cost 4 */
    kvr_route_request rq = req_of(f, NULL);
    rq.has_temperature = true;
    rq.temperature = 0.5;
    rq.debug = true;
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.reason, KVR_REASON_SAMPLED);
    double p[4] = {0};
    for (size_t i = 0; i < d.n_costs; i++)
        p[d.costs[i].worker_id] = d.costs[i].probability;
    kvr_route_decision_free(&d);
    /* normalized costs 0, 0.5, 1 -> weights e^0, e^-1, e^-2 */
    double z = 1 + exp(-1) + exp(-2);
    assert_true(fabs(p[1] - 1 / z) < 1e-9);
    assert_true(fabs(p[2] - exp(-1) / z) < 1e-9);
    assert_true(fabs(p[3] - exp(-2) / z) < 1e-9);

    rq.debug = false;
    const int draws = 20000;
    int count[4] = {0};
    for (int i = 0; i < draws; i++) {
        d = route_ok(f, &rq);
        count[d.worker_id]++;
    }
    double chi2 = 0;
    for (int w = 1; w <= 3; w++) {
        double e = draws * p[w];
        chi2 += (count[w] - e) * (count[w] - e) / e;
    }
    /* 2 degrees of freedom: P(chi2 > 13.8) = 0.001 */
    if (chi2 >= 13.8)
        fail_msg("chi2 %.2f: counts %d %d %d", chi2, count[1], count[2], count[3]);

    /* Temperature 0 (the default) is argmin again. */
    rq.has_temperature = false;
    d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_int_equal(d.reason, KVR_REASON_BEST_COST);
}

static void test_pin_and_allowed_workers(void **state)
{
    fx *f = *state;
    worker_with(f, 1, 4);
    kvr_worker *w2 = worker_with(f, 2, 1);
    uint64_t t[N];
    rt_widen(f->tokens, t, N);
    rt_store(f->ix, w2, 1, BS, t, 3 * BS, false, 7000); /* rank 1 holds 3 blocks */

    kvr_route_request rq = req_of(f, NULL);
    rq.has_worker_id = true;
    rq.worker_id = 2;
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 2);
    assert_int_equal(d.dp_rank, 1); /* best rank of the pinned worker */
    assert_int_equal(d.reason, KVR_REASON_PINNED);
    assert_int_equal(d.overlap_tokens, 12);

    rq.has_dp_rank = true;
    rq.dp_rank = 0;
    d = route_ok(f, &rq);
    assert_int_equal(d.dp_rank, 0);
    assert_int_equal(d.overlap_tokens, 4);

    rq.dp_rank = 9;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_NO_CANDIDATE);
    assert_non_null(strstr(d.error, "dp_rank"));
    rq.has_dp_rank = false;
    rq.worker_id = 77;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_NO_CANDIDATE);
    assert_non_null(strstr(d.error, "worker_id"));

    rq.has_worker_id = false;
    rq.allowed_workers = (uint64_t[]){2};
    rq.n_allowed_workers = 1;
    d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 2);
    assert_int_equal(d.reason, KVR_REASON_BEST_COST);
    /* A long allow-list (hashed) behaves the same. */
    uint64_t many[40];
    for (int i = 0; i < 40; i++)
        many[i] = 100 + (uint64_t)i;
    many[17] = 2;
    rq.allowed_workers = many;
    rq.n_allowed_workers = 40;
    d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 2);
    many[17] = 3;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_NO_CANDIDATE);
    rq.n_allowed_workers = 1;
    rq.allowed_workers = (uint64_t[]){99};
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_NO_CANDIDATE);
    assert_non_null(strstr(d.error, "allowed_workers"));

    rq.allowed_workers = NULL;
    rq.temperature = -1;
    rq.has_temperature = true;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_BAD_REQUEST);
    assert_non_null(strstr(d.error, "temperature"));
}

static void test_cpu_and_disk_reach_earn_weighted_credit(void **state)
{
    fx *f = *state;
    kvr_worker *w = worker_with(f, 1, 1); /* gpu block 0 */
    uint64_t t[N];
    rt_widen(f->tokens, t, N);
    /* The host tier holds blocks 0..2 and disk blocks 0..3 of the same prompt. */
    rt_store_tier(f->ix, w, 0, KVR_TIER_CPU, BS, t, 3 * BS, false, 5000);
    rt_store_tier(f->ix, w, 0, KVR_TIER_DISK, BS, t, 4 * BS, false, 6000);
    worker_with(f, 2, 0);
    kvr_route_request rq = req_of(f, NULL);
    rq.debug = true;
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.worker_id, 1);
    assert_int_equal(d.overlap_tokens, 4); /* overlap_tokens counts gpu only */
    for (size_t i = 0; i < d.n_costs; i++)
        if (d.costs[i].worker_id == 1) {
            assert_int_equal(d.costs[i].gpu_blocks, 1);
            assert_int_equal(d.costs[i].cpu_blocks, 3);
            assert_int_equal(d.costs[i].disk_blocks, 4);
            /* credit = 1 + 0.75 * 2 + 0.25 * 1 = 2.75; cost = 4 - 2.75
             * + 4 new blocks (the request's own, now counted) */
            assert_true(fabs(d.costs[i].credit - 2.75) < 1e-9);
            assert_true(fabs(d.costs[i].cost - 5.25) < 1e-9);
        }
    kvr_route_decision_free(&d);
}

static void test_fresh_rank_with_overlap_is_a_candidate(void **state)
{
    (void)state;
    fx *f = make(0, 5);
    kvr_router_destroy(f->r);
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.cost_model = KVR_COST_DYNAMO;
    cfg.rank_refresh_s = 1000; /* the rank cache never ages out here */
    f->r = kvr_router_create(f->ix, &cfg);
    kvr_worker *w = worker_with(f, 1, 1);
    kvr_route_request rq = req_of(f, NULL);
    kvr_route_decision d = route_ok(f, &rq);
    assert_int_equal(d.dp_rank, 0);
    uint64_t t[N];
    rt_widen(f->tokens, t, N);
    rt_store(f->ix, w, 3, BS, t, N, false, 9000);
    d = route_ok(f, &rq);
    assert_int_equal(d.dp_rank, 3);
    assert_int_equal(d.overlap_tokens, 16);
    teardown((void **)&f);
}

typedef struct {
    fx *f;
    int id;
} worker_arg;

static void *route_and_free(void *p)
{
    worker_arg *a = p;
    char rid[32];
    for (int i = 0; i < 300; i++) {
        snprintf(rid, sizeof rid, "%d-%d", a->id, i);
        kvr_route_request rq = req_of(a->f, rid);
        kvr_route_decision d;
        if (kvr_route(a->f->r, &rq, &d) != KVR_ROUTE_OK)
            return (void *)1;
        if (i % 2 && kvr_router_prefill_done(a->f->r, rid) != KVR_ROUTE_OK)
            return (void *)1;
        if (kvr_router_release(a->f->r, rid) != KVR_ROUTE_OK)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent_routes_leave_no_load(void **state)
{
    fx *f = *state;
    kvr_worker *w1 = worker_with(f, 1, 4);
    worker_with(f, 2, 2);
    pthread_t th[4];
    worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (worker_arg){f, i};
        pthread_create(&th[i], NULL, route_and_free, &args[i]);
    }
    /* Events keep applying while requests route. */
    uint64_t t[N];
    rt_widen(f->tokens, t, N);
    for (int i = 0; i < 50; i++) {
        kvr_indexer_clear_rank(f->ix, w1, 0);
        rt_store(f->ix, w1, 0, BS, t, N, false, 20000 + (uint64_t)i * 10);
    }
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        assert_null(rc);
    }
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 0);
    assert_int_equal(st.load_entries, 0); /* idle load records are freed */
    assert_int_equal(st.bookings_released, 1200);
    assert_int_equal(st.prefill_done, 600);
    rt_expect_nothing_held(f->r); /* every block reference and its memory came back */
    for (uint64_t id = 1; id <= 2; id++) {
        kvr_worker_load load;
        kvr_router_load(f->r, RT_MODEL, NULL, id, 0, &load);
        assert_int_equal(load.active_prefill_tokens, 0);
        assert_int_equal(load.active_decode_blocks, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_overlap_wins_when_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_booking_shifts_next_request_when_load_dominates,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_booking_does_not_shift_when_overlap_dominates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_free_restores_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefill_done_moves_load_to_decode, setup, teardown),
        cmocka_unit_test(test_bookings_expire_after_ttl),
        cmocka_unit_test_setup_teardown(test_tie_break_is_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_temperature_follows_softmax, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pin_and_allowed_workers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cpu_and_disk_reach_earn_weighted_credit, setup,
                                        teardown),
        cmocka_unit_test(test_fresh_rank_with_overlap_is_a_candidate),
        cmocka_unit_test_setup_teardown(test_concurrent_routes_leave_no_load, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
