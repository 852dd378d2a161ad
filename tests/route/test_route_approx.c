/* Routing without KV events (route.h approximate index): a worker
 * registered kv_events off, or auto with no batch applied on that rank, is
 * scored from what the router routed to it, forgotten after approx_ttl_s
 * and beyond approx_max_blocks (oldest first). A fake clock drives the TTL. */
#include <math.h>

#include "route_test_util.h"

#define BS 4
#define N 64 /* 16 blocks */

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    double now;
    uint32_t a[N], b[N]; /* b shares a's first 8 blocks */
} fx;

static fx *make(uint64_t max_blocks)
{
    fx *f = calloc(1, sizeof *f);
    f->ix = kvr_indexer_create();
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.rng_seed = 5;
    cfg.rank_refresh_s = 0;
    rt_fake_clock(&cfg, &f->now);
    cfg.approx_ttl_s = 60;
    if (max_blocks)
        cfg.approx_max_blocks = max_blocks;
    f->r = kvr_router_create(f->ix, &cfg);
    assert_non_null(f->r);
    f->now = 1000;
    for (uint32_t i = 0; i < N; i++) {
        f->a[i] = 100 + i;
        f->b[i] = i < N / 2 ? 100 + i : 5000 + i;
    }
    return f;
}

static void done(fx *f)
{
    rt_close(f->ix, f->r);
    free(f);
}

static kvr_worker *reg(fx *f, uint64_t id, kvr_kv_events mode)
{
    rt_kv_events = mode;
    kvr_worker *w = rt_register(f->ix, id, BS, KVR_MM_LEGACY, -1, false, NULL);
    rt_kv_events = KVR_KV_EVENTS_ON;
    return w;
}

static kvr_route_decision route(fx *f, const uint32_t *tokens, const char *id, uint64_t pin)
{
    return rt_route_debug(f->r, tokens, N, id, pin);
}

static const kvr_query_entry *query_entry(fx *f, const uint32_t *tokens, uint64_t id,
                                          kvr_query_result *q)
{
    kvr_query_result_init(q);
    kvr_query_request rq = rt_request(tokens, N, NULL, 0);
    assert_int_equal(kvr_query(f->r, &rq, q), KVR_ROUTE_OK);
    return rt_entry(q, id, 0);
}

static uint32_t overlap(fx *f, const uint32_t *tokens, uint64_t id, bool *approx)
{
    kvr_query_result q;
    const kvr_query_entry *e = query_entry(f, tokens, id, &q);
    uint32_t g = e->gpu_blocks;
    assert_int_equal(e->cpu_blocks, g);
    if (approx)
        *approx = e->approximate;
    kvr_query_result_free(&q);
    return g;
}

/* Worker 2 publishes nothing: a request routed (and booked) there makes its
 * blocks its approximate cache, so the follow-up sharing 8 blocks goes back
 * to it; an unbooked decision records nothing. */
static void test_off_worker_scored_from_routed_blocks(void **state)
{
    (void)state;
    fx *f = make(0);
    reg(f, 1, KVR_KV_EVENTS_ON);
    reg(f, 2, KVR_KV_EVENTS_OFF);
    kvr_route_decision d = route(f, f->a, NULL, 2);
    kvr_route_decision_free(&d);
    bool approx = false;
    assert_int_equal(overlap(f, f->a, 2, &approx), 0);
    assert_true(approx);
    d = route(f, f->a, "first", 2);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_prefill_done(f->r, "first"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_release(f->r, "first"), KVR_ROUTE_OK);
    assert_int_equal(overlap(f, f->a, 2, NULL), 16);
    assert_int_equal(overlap(f, f->b, 2, NULL), 8);
    assert_int_equal(overlap(f, f->b, 1, &approx), 0);
    assert_false(approx);
    d = route(f, f->b, "second", 0);
    assert_true(d.worker_id == 2);
    assert_int_equal(d.overlap_tokens, 8 * BS);
    kvr_route_decision_free(&d);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.approx_workers, 1);
    assert_int_equal(st.approx_blocks, 16 + 8);
    done(f);
}

/* Forgotten approx_ttl_s after the last request that carried a block: a
 * later request refreshes only its own prefix. A sweep frees the store. */
static void test_blocks_expire_after_ttl(void **state)
{
    (void)state;
    fx *f = make(0);
    reg(f, 2, KVR_KV_EVENTS_OFF);
    kvr_route_decision d = route(f, f->a, "a", 2);
    kvr_route_decision_free(&d);
    f->now += 40;
    d = route(f, f->b, "b", 2); /* refreshes a's first 8 blocks */
    kvr_route_decision_free(&d);
    f->now += 30; /* a's last 8 blocks are 70 s old, the shared 8 are 30 s */
    assert_int_equal(overlap(f, f->a, 2, NULL), 8);
    assert_int_equal(overlap(f, f->b, 2, NULL), 16);
    f->now += 31;
    assert_int_equal(overlap(f, f->b, 2, NULL), 0);
    kvr_router_sweep(f->r);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.approx_workers, 0);
    assert_int_equal(st.approx_blocks, 0);
    done(f);
}

/* At most approx_max_blocks per worker: past it the oldest go first (here
 * down to 90 % of 20 = 18 blocks), and what is left is still a prefix. */
static void test_bounded_oldest_first(void **state)
{
    (void)state;
    fx *f = make(20);
    reg(f, 2, KVR_KV_EVENTS_OFF);
    kvr_route_decision d = route(f, f->a, "a", 2);
    kvr_route_decision_free(&d);
    f->now += 1;
    uint32_t c[N];
    for (uint32_t i = 0; i < N; i++)
        c[i] = 9000 + i; /* 16 fresh blocks: 32 in all, over the bound */
    d = route(f, c, "c", 2);
    kvr_route_decision_free(&d);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.approx_blocks, 18); /* 32 noted, the 14 oldest forgotten */
    assert_int_equal(st.approx_pruned, 14);
    assert_int_equal(overlap(f, c, 2, NULL), 16);
    assert_int_equal(overlap(f, f->a, 2, NULL), 0); /* the older chain went */
    done(f);
}

/* auto: a rank whose events stay silent for 10 s after the first request
 * routed there is scored from the approximate index (before that its
 * events may just be on their way); once a batch is applied on it, from the
 * events alone (they say what the engine really holds). */
static void test_auto_switches_to_events(void **state)
{
    (void)state;
    fx *f = make(0);
    kvr_worker *w = reg(f, 2, KVR_KV_EVENTS_AUTO);
    kvr_route_decision d = route(f, f->a, "a", 2);
    kvr_route_decision_free(&d);
    bool approx = false;
    f->now += 9;
    assert_int_equal(overlap(f, f->a, 2, &approx), 0);
    assert_true(approx);
    f->now += 1;
    assert_int_equal(overlap(f, f->a, 2, &approx), 16);
    assert_true(approx);
    uint64_t t[N];
    rt_widen(f->a, t, 4 * BS);
    rt_store(f->ix, w, 0, BS, t, 4 * BS, false, 777);
    assert_int_equal(overlap(f, f->a, 2, &approx), 4);
    assert_false(approx);
    done(f);
}

/* A rank registered without events has no index state; declared, it is a
 * candidate as itself (was: the worker was scored as rank 0 alone), and
 * blocks routed to it are its approximate cache. Unregistering the rank
 * drops it again. */
static bool has_entry(const kvr_query_result *q, uint64_t worker, uint32_t rank)
{
    for (size_t i = 0; i < q->n_entries; i++)
        if (q->entries[i].worker_id == worker && q->entries[i].dp_rank == rank)
            return true;
    return false;
}

static void test_declared_ranks_are_candidates(void **state)
{
    (void)state;
    fx *f = make(0);
    kvr_worker *w = reg(f, 2, KVR_KV_EVENTS_OFF);
    assert_int_equal(kvr_indexer_declare_rank(f->ix, w, 1), 0);
    assert_int_equal(kvr_indexer_declare_rank(f->ix, w, 5), 0);
    assert_int_equal(kvr_indexer_declare_rank(f->ix, w, 1), 0); /* once */
    assert_int_equal(kvr_indexer_declare_rank(f->ix, w, KVR_MAX_DP_RANKS), -1);
    kvr_query_result q;
    kvr_query_result_init(&q);
    kvr_query_request rq = rt_request(f->a, N, NULL, 0);
    assert_int_equal(kvr_query(f->r, &rq, &q), KVR_ROUTE_OK);
    assert_int_equal(q.n_entries, 2);
    assert_true(has_entry(&q, 2, 1) && has_entry(&q, 2, 5));
    kvr_query_result_free(&q);

    kvr_route_decision d = rt_route_debug(f->r, f->a, N, "a", 0);
    uint32_t rank = d.dp_rank;
    assert_true(rank == 1 || rank == 5);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_OK);
    kvr_query_result_init(&q);
    assert_int_equal(kvr_query(f->r, &rq, &q), KVR_ROUTE_OK);
    assert_int_equal(rt_entry(&q, 2, rank)->gpu_blocks, 16);
    assert_int_equal(rt_entry(&q, 2, rank == 1 ? 5 : 1)->gpu_blocks, 0);
    kvr_query_result_free(&q);

    assert_true(kvr_indexer_unregister_rank(f->ix, w, 5));
    assert_false(kvr_indexer_unregister_rank(f->ix, w, 5));
    kvr_query_result_init(&q);
    assert_int_equal(kvr_query(f->r, &rq, &q), KVR_ROUTE_OK);
    assert_int_equal(q.n_entries, 1);
    assert_true(has_entry(&q, 2, 1));
    kvr_query_result_free(&q);
    done(f);
}

/* One query scores every approximate candidate under one hold of the
 * index's lock (route_approx_held's batch): each entry gets its own
 * worker's prefix, chain (worker 5 is Eagle: its own profile) and
 * grace (worker 4 is auto: 0 for 10 s after its first request, then its
 * blocks), beside a worker with events. */
static void test_batch_scores_each_candidate(void **state)
{
    (void)state;
    fx *f = make(0);
    reg(f, 1, KVR_KV_EVENTS_ON);
    reg(f, 2, KVR_KV_EVENTS_OFF);
    reg(f, 3, KVR_KV_EVENTS_OFF);
    reg(f, 4, KVR_KV_EVENTS_AUTO);
    rt_kv_events = KVR_KV_EVENTS_OFF;
    rt_register(f->ix, 5, BS, KVR_MM_LEGACY, -1, true, NULL);
    rt_kv_events = KVR_KV_EVENTS_ON;
    static const struct {
        const char *id;
        uint64_t worker;
        bool b;
    } routed[] = {{"a2", 2, false}, {"b3", 3, true}, {"a4", 4, false}, {"b5", 5, true}};
    for (size_t i = 0; i < sizeof routed / sizeof *routed; i++) {
        kvr_route_decision d = route(f, routed[i].b ? f->b : f->a, routed[i].id, routed[i].worker);
        assert_true(d.worker_id == routed[i].worker);
        kvr_route_decision_free(&d);
    }
    f->now += 1;
    kvr_query_result q;
    query_entry(f, f->a, 1, &q);
    assert_false(rt_entry(&q, 1, 0)->approximate);
    assert_int_equal(rt_entry(&q, 1, 0)->gpu_blocks, 0);
    static const struct {
        uint64_t worker;
        uint32_t blocks;
    } want[] = {{2, 16}, {3, 8}, {4, 0}, {5, 7}}; /* 5: windows of B + 1 tokens, 7 in b's shared 32 */
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const kvr_query_entry *e = rt_entry(&q, want[i].worker, 0);
        assert_true(e->approximate);
        assert_int_equal(e->gpu_blocks, want[i].blocks);
        assert_int_equal(e->disk_blocks, want[i].blocks);
    }
    kvr_query_result_free(&q);
    f->now += 10; /* worker 4 is past its grace */
    assert_int_equal(overlap(f, f->a, 4, NULL), 16);
    assert_int_equal(overlap(f, f->a, 3, NULL), 8);
    assert_int_equal(overlap(f, f->b, 5, NULL), 15); /* b whole: 15 windows of 64 tokens */
    done(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_worker_scored_from_routed_blocks),
        cmocka_unit_test(test_blocks_expire_after_ttl),
        cmocka_unit_test(test_bounded_oldest_first),
        cmocka_unit_test(test_auto_switches_to_events),
        cmocka_unit_test(test_declared_ranks_are_candidates),
        cmocka_unit_test(test_batch_scores_each_candidate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
