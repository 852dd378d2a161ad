/* Load accounting (SPEC §8, Dynamo ActiveSequences semantics): pending
 * prefill is the uncached tokens; decode blocks are the DISTINCT blocks
 * held by a worker's active requests (shared prefixes count once); every
 * reference and its memory is returned on /free and on TTL expiry. */
#include <math.h>
#include <time.h>

#include "route_test_util.h"

#define BS 4
#define N 16 /* 4 blocks */

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    uint32_t a[N], b[N], c[N]; /* b shares a's first 2 blocks; c shares nothing */
} fx;

static fx *make(double ttl)
{
    rt_cost_model = KVR_COST_DYNAMO; /* these tests check SPEC §8's formula */
    fx *f = calloc(1, sizeof *f);
    rt_open(&f->ix, &f->r, ttl, 7);
    for (uint32_t i = 0; i < N; i++) {
        f->a[i] = 500 + i;
        f->b[i] = i < 2 * BS ? 500 + i : 900 + i;
        f->c[i] = 700 + i;
    }
    return f;
}

static int setup(void **state)
{
    *state = make(0);
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    rt_close(f->ix, f->r);
    free(f);
    return 0;
}

static kvr_route_decision route_on(fx *f, const uint32_t *tokens, const char *id, uint64_t worker,
                                   uint32_t osl)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(tokens, N, NULL, 0);
    rq.request_id = id;
    rq.osl = osl;
    rq.has_worker_id = worker != 0;
    rq.worker_id = worker;
    rq.debug = true;
    kvr_route_decision d;
    kvr_route_status st = kvr_route(f->r, &rq, &d);
    if (st != KVR_ROUTE_OK)
        fail_msg("route failed: %d %s", st, d.error);
    return d;
}

/* An unpinned, unbooked probe: the blocks it would add on workers 1, 2. */
static void expect_new_blocks(fx *f, const uint32_t *tokens, uint32_t osl, uint64_t on1,
                              uint64_t on2)
{
    kvr_route_decision d = route_on(f, tokens, NULL, 0, osl);
    assert_int_equal(rt_cost_of(&d, 1)->new_blocks, on1);
    assert_int_equal(rt_cost_of(&d, 2)->new_blocks, on2);
    kvr_route_decision_free(&d);
}

static kvr_worker_load load_of(fx *f, uint64_t worker)
{
    kvr_worker_load l;
    kvr_router_load(f->r, RT_MODEL, NULL, worker, 0, &l);
    return l;
}

static void test_shared_prefix_counts_once(void **state)
{
    fx *f = *state;
    rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    rt_register(f->ix, 2, BS, KVR_MM_LEGACY, -1, false, NULL);

    kvr_route_decision d = route_on(f, f->a, "a1", 1, 0);
    assert_int_equal(d.booked_blocks, 4);
    kvr_route_decision_free(&d);
    /* The identical prompt adds nothing on worker 1, all 4 blocks on 2. */
    expect_new_blocks(f, f->a, 0, 0, 4);
    d = route_on(f, f->a, "a2", 1, 0);
    assert_int_equal(d.booked_blocks, 0);
    kvr_route_decision_free(&d);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 4);
    assert_int_equal(load_of(f, 1).bookings, 2);

    /* b shares a's first 2 blocks: 2 new prompt blocks + 2 output blocks
     * (osl 8), which are the request's own. */
    expect_new_blocks(f, f->b, 8, 4, 6);
    d = route_on(f, f->b, "b1", 1, 8);
    assert_int_equal(d.booked_blocks, 4);
    kvr_route_decision_free(&d);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 8);
    expect_new_blocks(f, f->c, 0, 4, 4); /* an unrelated prompt shares nothing */

    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.held_blocks, 6);        /* a's 4 + b's 2 of its own */
    assert_int_equal(st.booked_block_refs, 12); /* 4 + 4 + 4 routing blocks */

    /* Freeing one of two holders keeps the shared blocks. */
    assert_int_equal(kvr_router_release(f->r, "a1"), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 8);
    assert_int_equal(kvr_router_release(f->r, "a2"), KVR_ROUTE_OK);
    /* b1 alone: its 4 prompt blocks + 2 output blocks. */
    assert_int_equal(load_of(f, 1).active_decode_blocks, 6);
    expect_new_blocks(f, f->a, 0, 2, 4);
    assert_int_equal(kvr_router_release(f->r, "b1"), KVR_ROUTE_OK);
    kvr_worker_load l = load_of(f, 1);
    assert_int_equal(l.active_decode_blocks, 0);
    assert_int_equal(l.active_prefill_tokens, 0);
    assert_int_equal(l.bookings, 0);
    rt_expect_nothing_held(f->r);
}

static void test_uncached_prefill_booking(void **state)
{
    fx *f = *state;
    kvr_worker *w1 = rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    rt_register(f->ix, 2, BS, KVR_MM_LEGACY, -1, false, NULL);
    uint64_t t[N];
    rt_widen(f->a, t, N);
    rt_store(f->ix, w1, 0, BS, t, 3 * BS, false, 100); /* 3 of a's 4 blocks cached */

    kvr_route_decision d = route_on(f, f->a, "p1", 1, 0);
    assert_int_equal(d.overlap_tokens, 12);
    assert_int_equal(d.booked_prefill_tokens, 4);
    kvr_route_decision_free(&d);
    d = route_on(f, f->a, "p2", 2, 0); /* nothing cached on worker 2 */
    assert_int_equal(d.booked_prefill_tokens, 16);
    kvr_route_decision_free(&d);
    assert_int_equal(load_of(f, 1).active_prefill_tokens, 4);
    assert_int_equal(load_of(f, 2).active_prefill_tokens, 16);

    /* The next request sees each worker's pending uncached tokens:
     * worker 1: (4 + 16)/4 - 3 = 2 (+ 4 active + 0 new);
     * worker 2: (16 + 16)/4 - 0 = 8 (+ 4 active + 0 new). */
    d = route_on(f, f->a, NULL, 0, 0);
    assert_true(fabs(rt_cost_of(&d, 1)->cost - 6.0) < 1e-9);
    assert_true(fabs(rt_cost_of(&d, 2)->cost - 12.0) < 1e-9);
    assert_int_equal(d.worker_id, 1);
    kvr_route_decision_free(&d);

    assert_int_equal(kvr_router_prefill_done(f->r, "p1"), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).active_prefill_tokens, 0);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 4);
    assert_int_equal(kvr_router_release(f->r, "p2"), KVR_ROUTE_OK);
    kvr_worker_load l = load_of(f, 2);
    assert_int_equal(l.active_prefill_tokens, 0);
    assert_int_equal(l.active_decode_blocks, 0);
    assert_int_equal(l.bookings, 0);
    assert_int_equal(kvr_router_release(f->r, "p1"), KVR_ROUTE_OK);
    l = load_of(f, 1);
    assert_int_equal(l.active_prefill_tokens + l.active_decode_blocks + l.bookings, 0);
}

static void test_ttl_expiry_releases_block_refs(void **state)
{
    (void)state;
    fx *f = make(0.05);
    rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    kvr_route_decision d = route_on(f, f->a, "x1", 1, 4);
    kvr_route_decision_free(&d);
    d = route_on(f, f->b, "x2", 1, 0);
    kvr_route_decision_free(&d);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.held_blocks, 6);
    assert_true(st.held_bytes > 0);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 7); /* 6 + x1's output block */

    size_t expired = 0;
    for (int i = 0; i < 200 && expired < 2; i++) {
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        expired += kvr_router_sweep(f->r);
    }
    assert_int_equal(expired, 2);
    kvr_worker_load l = load_of(f, 1);
    assert_int_equal(l.active_decode_blocks, 0);
    assert_int_equal(l.active_prefill_tokens, 0);
    rt_expect_nothing_held(f->r);
    teardown((void **)&f);
}

/* Memory follows the active bookings: many long prompts with a common
 * prefix hold one copy of it, and all of it comes back on /free. */
static void test_memory_bounded_and_returned(void **state)
{
    fx *f = *state;
    rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    enum { LONG = 4096, REQS = 64, COMMON = 2048 };
    uint32_t *tok = malloc(LONG * sizeof *tok);
    char id[32];
    for (int r = 0; r < REQS; r++) {
        for (uint32_t i = 0; i < LONG; i++)
            tok[i] = i < COMMON ? i : 100000u * (uint32_t)(r + 1) + i;
        kvr_route_request rq;
        memset(&rq, 0, sizeof rq);
        rq.q = rt_request(tok, LONG, NULL, 0);
        snprintf(id, sizeof id, "m%d", r);
        rq.request_id = id;
        kvr_route_decision d;
        assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
    }
    free(tok);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    const uint64_t common = COMMON / BS, own = (LONG - COMMON) / BS;
    assert_int_equal(st.held_blocks, common + REQS * own);
    assert_int_equal(st.booked_block_refs, REQS * (common + own));
    assert_int_equal(load_of(f, 1).active_decode_blocks, common + REQS * own);
    /* References as u64 + a map of at most 4 slots per distinct block. */
    uint64_t bound = st.booked_block_refs * 8 + 4 * st.held_blocks * 16;
    if (st.held_bytes > bound)
        fail_msg("held_bytes %llu over %llu", (unsigned long long)st.held_bytes,
                 (unsigned long long)bound);
    for (int r = 0; r < REQS; r++) {
        snprintf(id, sizeof id, "m%d", r);
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    }
    rt_expect_nothing_held(f->r);
}

/* Each candidate's load is read from the router's per-(worker, rank) slots,
 * which follow the rank cache's positions: a load must stay its worker's
 * while workers and ranks arrive and shift the positions, and a freed load
 * must read as none (not as its freed memory). */
static void test_loads_follow_workers_as_ranks_move(void **state)
{
    fx *f = *state;
    kvr_worker *w20 = rt_register(f->ix, 20, BS, KVR_MM_LEGACY, -1, false, NULL);
    rt_register(f->ix, 30, BS, KVR_MM_LEGACY, -1, false, NULL);
    kvr_route_decision d = route_on(f, f->a, "x", 30, 0);
    assert_int_equal(d.booked_prefill_tokens, 16);
    kvr_route_decision_free(&d);
    d = route_on(f, f->a, NULL, 0, 0);
    assert_int_equal(rt_cost_of(&d, 30)->active_prefill_tokens, 16);
    assert_int_equal(rt_cost_of(&d, 20)->active_prefill_tokens, 0);
    kvr_route_decision_free(&d);

    /* Worker 10 sorts before both, worker 20 gains rank 1: every position moves. */
    rt_register(f->ix, 10, BS, KVR_MM_LEGACY, -1, false, NULL);
    uint64_t t[N];
    rt_widen(f->a, t, N);
    rt_store(f->ix, w20, 1, BS, t, BS, false, 300);
    d = route_on(f, f->a, NULL, 0, 0);
    assert_int_equal(rt_cost_of(&d, 30)->active_prefill_tokens, 16);
    assert_int_equal(rt_cost_of(&d, 20)->active_prefill_tokens, 0);
    assert_int_equal(rt_cost_of(&d, 20)->dp_rank, 1);
    assert_int_equal(rt_cost_of(&d, 10)->active_prefill_tokens, 0);
    kvr_route_decision_free(&d);

    assert_int_equal(kvr_router_release(f->r, "x"), KVR_ROUTE_OK);
    d = route_on(f, f->a, NULL, 0, 0);
    assert_int_equal(rt_cost_of(&d, 30)->active_prefill_tokens, 0);
    assert_int_equal(rt_cost_of(&d, 30)->active_decode_blocks, 0);
    kvr_route_decision_free(&d);

    d = route_on(f, f->a, "y", 20, 0);
    uint64_t booked = d.booked_prefill_tokens;
    assert_int_equal(booked, 12); /* its first block is cached on rank 1 */
    kvr_route_decision_free(&d);
    d = route_on(f, f->a, "z", 30, 0);
    kvr_route_decision_free(&d);
    d = route_on(f, f->a, NULL, 0, 0);
    assert_int_equal(rt_cost_of(&d, 20)->active_prefill_tokens, booked);
    assert_int_equal(rt_cost_of(&d, 30)->active_prefill_tokens, 16);
    assert_int_equal(rt_cost_of(&d, 10)->active_prefill_tokens, 0);
    kvr_route_decision_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shared_prefix_counts_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncached_prefill_booking, setup, teardown),
        cmocka_unit_test(test_ttl_expiry_releases_block_refs),
        cmocka_unit_test_setup_teardown(test_memory_bounded_and_returned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loads_follow_workers_as_ranks_move, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
