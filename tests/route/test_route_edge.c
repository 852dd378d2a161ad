/* The LRU edge (route/edge.c, router option lru_edge): with each worker's
 * KV capacity registered (max_total_num_tokens), the router counts each
 * prompt routed to a worker's depth in its LRU (the tokens taken in and hit
 * again there since), and the rules charge a placement the prompts its new tokens would push past the
 * edge. Worked out by hand on a fake clock: every prompt is its own
 * (distinct first token), the rate is the default 10000 tokens/s. */
#include <math.h>

#include "route_test_util.h"
#include "route/internal.h"

#define BS 4
#define CAP 2000 /* tokens per worker */
#define MAXN 2048

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    double now;
    uint32_t tokens[MAXN];
} fx;

static fx *make(kvr_lru_edge rule)
{
    fx *f = calloc(1, sizeof *f);
    f->ix = kvr_indexer_create();
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.rng_seed = 3;
    cfg.rank_refresh_s = 0;
    cfg.recompute_weight = 0; /* no prompt is held anywhere: nothing to copy */
    cfg.lru_edge = rule;
    rt_fake_clock(&cfg, &f->now);
    f->r = kvr_router_create(f->ix, &cfg);
    assert_non_null(f->r);
    f->now = 100;
    for (uint64_t id = 1; id <= 2; id++) {
        kvr_worker_settings s = {0};
        s.model_name = RT_MODEL;
        s.worker_id = id;
        s.block_size = BS;
        s.accepts_mm_hashes = -1;
        s.max_total_num_tokens = CAP;
        assert_int_equal(kvr_indexer_register(f->ix, &s, NULL), KVR_REG_CREATED);
    }
    return f;
}

/* Prompt `first` (n tokens) routed (pinned to pin when not 0) and done. */
static kvr_route_decision route(fx *f, const char *id, uint32_t first, size_t n, uint64_t pin)
{
    for (size_t i = 0; i < n; i++)
        f->tokens[i] = first * 10000 + (uint32_t)i;
    kvr_route_decision d = rt_route_debug(f->r, f->tokens, n, id, pin);
    assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    return d;
}

/* Worker w's cache holds the first n tokens of prompt `first` (its events
 * say so: engine block hashes from base). */
static void hold(fx *f, kvr_worker *w, uint32_t first, uint32_t n, uint64_t base)
{
    uint64_t t[MAXN];
    for (uint32_t i = 0; i < n; i++)
        t[i] = (uint64_t)first * 10000 + i;
    rt_store(f->ix, w, 0, BS, t, n, false, base);
}

/* Worker 1 took in prompt 1 (600 tokens), then prompt 2 (1000): prompt 1
 * is 1000 tokens old, in a 2000-token cache. Worker 2 took in prompt 3
 * (1700 tokens): more recent work, and its prompt is new. A cold request
 * of 1000 tokens pushes prompt 1 past worker 1's edge and nothing past
 * worker 2's. Off, the least recent work (worker 1) takes it; cost adds
 * 600 tokens at the share of prompts that came back (none yet: 1/2) to
 * worker 1's 0.1 s, out of the tie window; tie prefers the fewer pushed
 * out. */
static void test_placement_spares_the_prompt_at_the_edge(void **state)
{
    (void)state;
    const kvr_lru_edge rules[] = {KVR_EDGE_OFF, KVR_EDGE_COST, KVR_EDGE_TIE};
    const uint64_t want[] = {1, 2, 2};
    for (size_t k = 0; k < 3; k++) {
        fx *f = make(rules[k]);
        kvr_route_decision d = route(f, "p1", 1, 600, 1);
        kvr_route_decision_free(&d);
        d = route(f, "p2", 2, 1000, 1);
        kvr_route_decision_free(&d);
        d = route(f, "p3", 3, 1700, 2);
        kvr_route_decision_free(&d);
        d = route(f, "cold", 4, 1000, 0);
        if (d.worker_id != want[k])
            fail_msg("lru_edge %s: worker %llu", kvr_lru_edge_name(rules[k]),
                     (unsigned long long)d.worker_id);
        const kvr_route_cost *c1 = rt_cost_of(&d, 1), *c2 = rt_cost_of(&d, 2);
        if (rules[k] == KVR_EDGE_OFF) {
            assert_true(c1->edge_loss_tokens == 0 && c2->edge_loss_tokens == 0);
        } else {
            assert_true(c1->edge_loss_tokens == 600);
            assert_true(c2->edge_loss_tokens == 0);
            double extra = rules[k] == KVR_EDGE_COST ? 0.5 * 600 / 10000.0 : 0;
            assert_true(fabs(c1->cost - (0.1 + extra)) < 1e-9);
            assert_true(fabs(c2->cost - 0.1) < 1e-9);
        }
        kvr_route_decision_free(&d);
        rt_close(f->ix, f->r);
        free(f);
    }
}

/* Prompts 1 (600 tokens) and 2 (1000) pinned to worker 1, whose cache
 * then holds prompt 1 (its events say so); t: prompt 1's tokens and the
 * 1000 of its next turn. */
static kvr_worker *two_prompts_on_worker_1(fx *f, uint64_t t[1600])
{
    kvr_worker *w = kvr_indexer_find(f->ix, RT_MODEL, NULL, 1);
    kvr_route_decision d = route(f, "p1", 1, 600, 1);
    kvr_route_decision_free(&d);
    d = route(f, "p2", 2, 1000, 1);
    kvr_route_decision_free(&d);
    for (size_t i = 0; i < 1600; i++)
        t[i] = 10000 + i;
    rt_store(f->ix, w, 0, BS, t, 600, false, 5000);
    return w;
}

/* The age of what a request comes back to: the tokens its worker took in
 * since that prompt. Its own prompt is touched again, never charged as
 * pushed out; a prompt older than the capacity is gone from the edge. */
static void test_age_of_the_prompt_a_request_comes_back_to(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_COST);
    uint64_t t[1600];
    (void)two_prompts_on_worker_1(f, t);
    /* the next turn: prompt 1 and 1000 more tokens */
    kvr_route_decision d = route(f, "p1b", 1, 1600, 0);
    const kvr_route_cost *c1 = rt_cost_of(&d, 1), *c2 = rt_cost_of(&d, 2);
    assert_int_equal(c1->gpu_blocks, 150);
    assert_true(c1->prefix_age_tokens == 1000);
    assert_true(c2->prefix_age_tokens == -1);
    /* 1000 new tokens on worker 1 reach ages [1000, 2000): prompt 1 itself
     * (touched again, not lost); nothing else is that old */
    assert_true(c1->edge_loss_tokens == 0);
    assert_int_equal(d.worker_id, 1);
    kvr_route_decision_free(&d);
    /* worker 1 took in 1000 more: prompt 2 is 1000 old, prompt 1b new; a
     * cold 1500-token request there would push prompt 2 out */
    d = route(f, "cold", 4, 1500, 0);
    assert_true(rt_cost_of(&d, 1)->edge_loss_tokens == 1000);
    kvr_route_decision_free(&d);
    /* the conversation came back once; pinned there, 1500 more tokens age
     * prompt 2 past the capacity (kvr_router_edge_prompts_total) */
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.edge_returned, 1);
    assert_int_equal(st.edge_aged_out, 0);
    d = route(f, "cold2", 5, 1500, 1);
    kvr_route_decision_free(&d);
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.edge_returned, 1);
    assert_int_equal(st.edge_aged_out, 1);
    assert_int_equal(st.edge_lost, 0);
    rt_close(f->ix, f->r);
    free(f);
}

/* A hit moves blocks ahead in the LRU (a hit refreshes its path): prompts 1
 * and 2 (600 tokens each) on worker 1, then prompt 1's next turn (1000
 * tokens, 600 of them cached) there. Prompt 2 is then behind the 400 new
 * tokens and the 600 of prompt 1 that moved ahead of it: 1000 deep, not
 * the 400 taken in since. So a cold 1000-token request on worker 1 would
 * push it past the 2000-token edge, and its own next turn finds it 1000
 * old. Counting the intake only, both read 400 (no loss; age 400). */
static void test_a_hit_ages_the_prompts_it_moves_ahead_of(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_COST);
    kvr_worker *w = kvr_indexer_find(f->ix, RT_MODEL, NULL, 1);
    kvr_route_decision d = route(f, "p1", 1, 600, 1);
    kvr_route_decision_free(&d);
    d = route(f, "p2", 2, 600, 1);
    kvr_route_decision_free(&d);
    hold(f, w, 1, 600, 5000);
    d = route(f, "p1b", 1, 1000, 1);
    assert_int_equal(rt_cost_of(&d, 1)->gpu_blocks, 150);
    kvr_route_decision_free(&d);
    hold(f, w, 2, 600, 6000);
    d = route(f, "cold", 4, 1000, 0);
    assert_int_equal(d.worker_id, 2);
    if (rt_cost_of(&d, 1)->edge_loss_tokens != 600)
        fail_msg("a cold 1000 tokens on worker 1 push out %g tokens, want prompt 2's 600",
                 rt_cost_of(&d, 1)->edge_loss_tokens);
    kvr_route_decision_free(&d);
    d = route(f, "p2b", 2, 700, 1);
    if (rt_cost_of(&d, 1)->prefix_age_tokens != 1000)
        fail_msg("prompt 2 is %g deep in worker 1's LRU, want 1000",
                 rt_cost_of(&d, 1)->prefix_age_tokens);
    kvr_route_decision_free(&d);
    rt_close(f->ix, f->r);
    free(f);
}

/* A hit moves blocks ahead of the newer prompts only: prompt 0 (300
 * tokens) and then prompt 1 (600) on worker 1, then prompt 1's next turn
 * (1000 tokens, 600 cached) there. Prompt 1's 600 were ahead of prompt 0
 * already, so prompt 0 is 1000 deep (prompt 1 and the 400 new tokens), not
 * 1600 (had the move been counted for it as for a newer prompt). */
static void test_a_hit_leaves_older_prompts_their_depth(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_COST);
    kvr_worker *w = kvr_indexer_find(f->ix, RT_MODEL, NULL, 1);
    kvr_route_decision d = route(f, "p0", 6, 300, 1);
    kvr_route_decision_free(&d);
    d = route(f, "p1", 1, 600, 1);
    kvr_route_decision_free(&d);
    hold(f, w, 6, 300, 4000);
    hold(f, w, 1, 600, 5000);
    d = route(f, "p1b", 1, 1000, 1);
    assert_int_equal(rt_cost_of(&d, 1)->gpu_blocks, 150);
    assert_true(rt_cost_of(&d, 1)->prefix_age_tokens == 0); /* nothing since */
    kvr_route_decision_free(&d);
    d = route(f, "p0b", 6, 700, 1);
    assert_int_equal(rt_cost_of(&d, 1)->gpu_blocks, 75);
    if (rt_cost_of(&d, 1)->prefix_age_tokens != 1000)
        fail_msg("prompt 0 is %g deep in worker 1's LRU, want 1000",
                 rt_cost_of(&d, 1)->prefix_age_tokens);
    kvr_route_decision_free(&d);
    rt_close(f->ix, f->r);
    free(f);
}

/* A worker whose cache never ages a prompt out (a capacity far above what
 * it takes in) keeps the newest KVR_ROUTE_EDGE_MAX prompts: each one past
 * that is dropped, counted as aged out and, apart, as dropped at the
 * limit (kvr_router_edge_limit_drops_total). */
static void test_edge_keeps_at_most_its_limit(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_TIE);
    kvr_worker_settings s = {0};
    s.model_name = RT_MODEL;
    s.worker_id = 3;
    s.block_size = BS;
    s.accepts_mm_hashes = -1;
    s.max_total_num_tokens = 1ull << 30;
    assert_int_equal(kvr_indexer_register(f->ix, &s, NULL), KVR_REG_CREATED);
    const uint32_t extra = 40;
    kvr_router_stats st;
    for (uint32_t k = 1; k <= KVR_ROUTE_EDGE_MAX + extra; k++) {
        char id[16];
        snprintf(id, sizeof id, "q%u", k);
        kvr_route_decision d = route(f, id, 100 + k, BS, 3);
        kvr_route_decision_free(&d);
        kvr_router_stats_get(f->r, &st);
        /* a prompt is dropped when the next one is noted past the limit */
        uint64_t want = k > KVR_ROUTE_EDGE_MAX + 1 ? k - KVR_ROUTE_EDGE_MAX - 1 : 0;
        if (st.edge_at_limit != want)
            fail_msg("after %u prompts: %llu dropped at the limit, want %llu", k,
                     (unsigned long long)st.edge_at_limit, (unsigned long long)want);
    }
    assert_int_equal(st.edge_aged_out, st.edge_at_limit);
    assert_int_equal(st.edge_returned, 0);
    rt_close(f->ix, f->r);
    free(f);
}

/* lru_edge turned off on a running router (SIGHUP): the edges go with it
 * (no booking notes them any more; kept, they were memory per worker and
 * ages that stopped counting, wrong again when the rule came back). The
 * same turns as above: the age of prompt 1 was 1000 with the edge kept. */
static void test_turned_off_the_edges_go(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_COST);
    uint64_t t[1600];
    kvr_worker *w = two_prompts_on_worker_1(f, t);
    kvr_route_decision d;
    kvr_router_config next;
    kvr_router_config_get(f->r, &next);
    next.lru_edge = KVR_EDGE_OFF;
    assert_int_equal(kvr_router_set_config(f->r, &next), 1);
    d = route(f, "p1b", 1, 1600, 0);
    assert_int_equal(d.worker_id, 1);
    assert_true(rt_cost_of(&d, 1)->prefix_age_tokens == -1);
    kvr_route_decision_free(&d);
    /* back on: counted afresh from the next booking */
    next.lru_edge = KVR_EDGE_COST;
    assert_int_equal(kvr_router_set_config(f->r, &next), 1);
    d = route(f, "p1c", 1, 1600, 0);
    assert_true(rt_cost_of(&d, 1)->prefix_age_tokens == -1);
    kvr_route_decision_free(&d);
    rt_store(f->ix, w, 0, BS, t, 1600, false, 7000);
    d = route(f, "p1d", 1, 1700, 0);
    assert_true(rt_cost_of(&d, 1)->prefix_age_tokens == 0);
    kvr_route_decision_free(&d);
    rt_close(f->ix, f->r);
    free(f);
}

static void test_names(void **state)
{
    (void)state;
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    assert_int_equal(cfg.lru_edge, KVR_EDGE_OFF);
    assert_int_equal(kvr_router_config_parse(&cfg, "lru_edge", "tie"), 0);
    assert_int_equal(cfg.lru_edge, KVR_EDGE_TIE);
    assert_int_equal(kvr_router_config_parse(&cfg, "lru_edge", "cost"), 0);
    assert_int_equal(cfg.lru_edge, KVR_EDGE_COST);
    assert_int_equal(kvr_router_config_parse(&cfg, "lru_edge", "always"), -1);
    assert_string_equal(kvr_lru_edge_name(KVR_EDGE_OFF), "off");
    assert_null(kvr_lru_edge_name((kvr_lru_edge)3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placement_spares_the_prompt_at_the_edge),
        cmocka_unit_test(test_age_of_the_prompt_a_request_comes_back_to),
        cmocka_unit_test(test_a_hit_ages_the_prompts_it_moves_ahead_of),
        cmocka_unit_test(test_a_hit_leaves_older_prompts_their_depth),
        cmocka_unit_test(test_turned_off_the_edges_go),
        cmocka_unit_test(test_edge_keeps_at_most_its_limit),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
