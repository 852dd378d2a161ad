/* The default cost model (cost_model ttft, route.h): predicted seconds to
 * the first token from the queue still ahead, the uncached tokens, the
 * worker's prefill rate (measured from /prefill_done when it can be) and
 * the slowdown its decodes cause; plus max_bookings. A fake clock times
 * everything, so each expected cost is worked out by hand. */
#include <math.h>

#include "route_test_util.h"

#define BS 4
#define N 1024 /* 256 blocks */
/* Tokens the fixture holds: the pinned bookings of test_recompute_weight_keeps_cache
 * route up to 610 blocks of them (reading past N tokens read past the fixture). */
#define N_HELD (4 * N)

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    double now;
    uint32_t tokens[N_HELD];
} fx;

static fx *make_with(void (*tweak)(kvr_router_config *))
{
    fx *f = calloc(1, sizeof *f);
    f->ix = kvr_indexer_create();
    assert_non_null(f->ix);
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.rng_seed = 3;
    cfg.rank_refresh_s = 0;
    rt_fake_clock(&cfg, &f->now);
    if (tweak)
        tweak(&cfg);
    f->r = kvr_router_create(f->ix, &cfg);
    assert_non_null(f->r);
    f->now = 100;
    for (uint32_t i = 0; i < N_HELD; i++)
        f->tokens[i] = 700 + i;
    return f;
}

static void done(fx *f)
{
    rt_close(f->ix, f->r);
    free(f);
}

/* Worker id caches the first `blocks` blocks of the prompt on rank 0. */
static void worker_with(fx *f, uint64_t id, uint32_t blocks)
{
    kvr_worker *w = rt_register(f->ix, id, BS, KVR_MM_LEGACY, -1, false, NULL);
    if (blocks) {
        uint64_t t[N];
        rt_widen(f->tokens, t, blocks * BS);
        rt_store(f->ix, w, 0, BS, t, blocks * BS, false, id * 100000);
    }
}

/* Routes the first n tokens (pinned when pin != 0) with debug costs. */
static kvr_route_decision route_n(fx *f, const char *id, size_t n, uint64_t pin)
{
    return rt_route_debug(f->r, f->tokens, n, id, pin);
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

/* A decoding booking on worker pin: a prompt of N tokens starting with
 * token first (distinct firsts, distinct blocks), prefill done, not freed. */
static void book_decoding(fx *f, const char *id, uint32_t first, uint64_t pin)
{
    f->tokens[0] = first;
    kvr_route_decision d = route_n(f, id, N, pin);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
}

static void test_defaults_and_names(void **state)
{
    (void)state;
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    assert_int_equal(cfg.cost_model, KVR_COST_TTFT);
    assert_true(cfg.learn_prefill_rate);
    assert_int_equal(cfg.max_bookings, 262144);
    assert_string_equal(kvr_cost_model_name(KVR_COST_DYNAMO), "dynamo");
    assert_int_equal(kvr_router_config_parse(&cfg, "cost_model", "dynamo"), 0);
    assert_int_equal(cfg.cost_model, KVR_COST_DYNAMO);
    assert_int_equal(kvr_router_config_parse(&cfg, "cost_model", "ttft"), 0);
    assert_int_equal(cfg.cost_model, KVR_COST_TTFT);
    assert_int_equal(kvr_router_config_parse(&cfg, "cost_model", "fastest"), -1);
    assert_int_equal(kvr_router_config_parse(&cfg, "cost_model", "2"), -1);
    assert_int_equal(kvr_router_config_parse(&cfg, "prefill_tps", "0"), -1);
    assert_int_equal(kvr_router_config_parse(&cfg, "prefill_tps", "2e4"), 0);
    assert_true(cfg.prefill_tps == 2e4);
    assert_int_equal(kvr_router_config_parse(&cfg, "max_bookings", "1.5"), -1);
    assert_int_equal(kvr_router_config_parse(&cfg, "max_bookings", "0"), 0);
    assert_int_equal(kvr_router_config_parse(&cfg, "decode_kv_share", "x"), -1);
}

/* Worker 1 caches 200 of the 256 blocks, worker 2 nothing. Idle, at the
 * default 10000 tokens/s: worker 1 costs its 224 uncached tokens, worker 2
 * its 1024 plus 800 tokens it would copy from worker 1 (held by 1
 * candidate) at recompute_weight 20 each. */
static void test_cost_is_predicted_ttft(void **state)
{
    (void)state;
    fx *f = make_with(NULL);
    worker_with(f, 1, 200);
    worker_with(f, 2, 0);
    kvr_route_decision d = route_n(f, "a", N, 0);
    assert_true(d.worker_id == 1);
    assert_true(near(rt_cost_of(&d, 1)->cost, 224 / 1e4));
    assert_true(near(rt_cost_of(&d, 2)->cost, (1024 + 20 * 800) / 1e4));
    /* the prediction alone, before the copy cost */
    assert_true(near(rt_cost_of(&d, 1)->ttft_s, 224 / 1e4));
    assert_true(near(rt_cost_of(&d, 2)->ttft_s, 1024 / 1e4));
    assert_true(near(rt_cost_of(&d, 1)->credit, 800));
    assert_true(near(rt_cost_of(&d, 1)->decode_factor, 1.0));
    assert_int_equal(d.booked_prefill_tokens, 224);
    kvr_route_decision_free(&d);
    done(f);
}

/* A booking queues 224 tokens on worker 1. 10 ms later the worker has done
 * 10 ms x 1e4 tokens/s of them; never more than 90 % of the head is taken
 * as done while it has not reported. Once it decodes, its context (1024
 * tokens + 0 output) slows the next prefill by 1 + 5e-6 x 1024. */
static void test_queue_drains_with_time(void **state)
{
    (void)state;
    fx *f = make_with(NULL);
    worker_with(f, 1, 200);
    worker_with(f, 2, 0);
    kvr_route_decision d = route_n(f, "a", N, 0);
    kvr_route_decision_free(&d);
    double factor = 1 + 5e-6 * 1024;
    f->now += 0.01;
    d = route_n(f, NULL, N, 0);
    const kvr_route_cost *c = rt_cost_of(&d, 1);
    assert_true(near(c->decode_factor, 1.0));
    double rate = 1e4;
    assert_true(near(c->queued_tokens, 224 - 0.01 * rate));
    assert_true(near(c->cost, (224 - 0.01 * rate + 224) / rate));
    kvr_route_decision_free(&d);
    f->now += 10;
    d = route_n(f, NULL, N, 0);
    assert_true(near(rt_cost_of(&d, 1)->queued_tokens, 0.1 * 224));
    kvr_route_decision_free(&d);
    /* Prefill done: nothing queued, the decode factor stays until /free. */
    assert_int_equal(kvr_router_prefill_done(f->r, "a"), KVR_ROUTE_OK);
    d = route_n(f, NULL, N, 0);
    assert_true(near(rt_cost_of(&d, 1)->queued_tokens, 0));
    assert_true(near(rt_cost_of(&d, 1)->cost, 224 * factor / 1e4));
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_OK);
    done(f);
}

/* Worker 1 is measured: 4 requests of 1024 uncached tokens, each alone on
 * it, report their first token after 0.05 s: 20480 tokens/s. Worker 2 has
 * no sample and takes the measured mean; with a queued request on worker
 * 1 no sample is taken. Without learning, the configured rate stays. */
static void test_rate_learned_from_prefill_done(void **state)
{
    (void)state;
    fx *f = make_with(NULL);
    worker_with(f, 1, 0);
    worker_with(f, 2, 0);
    char id[16];
    for (int i = 0; i < KVR_ROUTE_RATE_MIN_SAMPLES; i++) {
        assert_true(kvr_router_prefill_rate(f->r, RT_MODEL, NULL, 1, 0) == 0);
        snprintf(id, sizeof id, "r%d", i);
        kvr_route_decision d = route_n(f, id, N, 1);
        kvr_route_decision_free(&d);
        f->now += 0.05;
        assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    }
    assert_true(near(kvr_router_prefill_rate(f->r, RT_MODEL, NULL, 1, 0), 1024 / 0.05));
    assert_true(kvr_router_prefill_rate(f->r, RT_MODEL, NULL, 2, 0) == 0);
    kvr_route_decision d = route_n(f, NULL, N, 0);
    assert_true(near(rt_cost_of(&d, 1)->prefill_tps, 20480));
    assert_true(near(rt_cost_of(&d, 2)->prefill_tps, 20480));
    kvr_route_decision_free(&d);
    /* A caller-measured TTFT counts instead of the clock: 0.1 s. */
    d = route_n(f, "x", N, 2);
    kvr_route_decision_free(&d);
    f->now += 5;
    assert_int_equal(kvr_router_prefill_done_after(f->r, "x", 0.1), KVR_ROUTE_OK);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.rate_samples, KVR_ROUTE_RATE_MIN_SAMPLES + 1);
    assert_int_equal(st.rates_learned, 1);
    /* None of these was priced at its worker's measured rate: no timing of
     * the model's error (tie_from_error) yet. */
    assert_int_equal(st.ttft_error_samples, 0);
    /* Queued behind "x" (not released): no sample. */
    d = route_n(f, "y", N, 2);
    kvr_route_decision_free(&d);
    d = route_n(f, "z", N, 2);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_prefill_done(f->r, "z"), KVR_ROUTE_OK);
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.rate_samples, KVR_ROUTE_RATE_MIN_SAMPLES + 1);
    done(f);
}

static double weight;
static void with_weight(kvr_router_config *c)
{
    c->recompute_weight = weight;
    c->tie_tolerance = 0; /* exact costs decide here */
}

/* Worker 1 caches 800 of 1024 tokens behind a queue, worker 2 is idle and
 * caches nothing. Waiting for the cache wins while queue + 224 < 1024 + w x
 * 800 (the copy worker 2 would make): below 800 queued tokens with w = 0,
 * below 2400 with w = 2. */
static void test_recompute_weight_keeps_cache(void **state)
{
    (void)state;
    static const struct {
        double w;
        uint32_t queued_blocks;
        uint64_t want;
    } cases[] = {{0, 190, 1}, {0, 210, 2}, {2, 590, 1}, {2, 610, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        weight = cases[k].w;
        fx *f = make_with(with_weight);
        worker_with(f, 1, 200);
        worker_with(f, 2, 0);
        /* A pinned booking of other tokens queues blocks x 4 tokens on 1. */
        uint32_t saved = f->tokens[0];
        f->tokens[0] = 5;
        kvr_route_decision d = route_n(f, "q", cases[k].queued_blocks * BS, 1);
        kvr_route_decision_free(&d);
        f->tokens[0] = saved;
        d = route_n(f, NULL, N, 0);
        if (d.worker_id != cases[k].want)
            fail_msg("w %g, queue %u blocks: worker %llu", cases[k].w, cases[k].queued_blocks,
                     (unsigned long long)d.worker_id);
        kvr_route_decision_free(&d);
        done(f);
    }
}

/* Three idle workers (no copy cost here); worker 1 caches 2 of 256 blocks,
 * so it is 0.8 % cheaper: within tie_tolerance (5 %) all three are as good, and the one
 * with the least recent work takes each request (reason "balanced"), so
 * three requests land on three workers; with tolerance 0 worker 1 takes
 * them all while its cost stays lowest (each is released at once). */
static void no_copy_cost(kvr_router_config *c) { c->recompute_weight = 0; }

static void no_tolerance(kvr_router_config *c)
{
    c->tie_tolerance = 0;
    c->recompute_weight = 0;
}

/* A block held by k candidates is 1/k of a copy: worker 1 holds 200 blocks,
 * worker 2 the first 100 of them, worker 3 nothing. Worker 3 copies 100
 * blocks held by 2 (50) and 100 held by 1 (100): 150 blocks = 600 tokens;
 * worker 2 copies 100 held by 1: 400 tokens; worker 1 none. */
static void test_copies_count_one_over_holders(void **state)
{
    (void)state;
    weight = 1;
    fx *f = make_with(with_weight);
    worker_with(f, 1, 200);
    worker_with(f, 2, 100);
    worker_with(f, 3, 0);
    kvr_route_decision d = route_n(f, NULL, N, 0);
    assert_true(near(rt_cost_of(&d, 1)->cost, 224 / 1e4));
    assert_true(near(rt_cost_of(&d, 2)->cost, (624 + 400) / 1e4));
    assert_true(near(rt_cost_of(&d, 3)->cost, (1024 + 600) / 1e4));
    kvr_route_decision_free(&d);
    done(f);
}

static void test_near_ties_go_to_least_recent_work(void **state)
{
    (void)state;
    for (int tol = 1; tol >= 0; tol--) {
        fx *f = make_with(tol ? no_copy_cost : no_tolerance);
        worker_with(f, 1, 2);
        worker_with(f, 2, 0);
        worker_with(f, 3, 0);
        bool used[4] = {false};
        for (int i = 0; i < 3; i++) {
            char id[8];
            snprintf(id, sizeof id, "b%d", i);
            kvr_route_decision d = route_n(f, id, N, 0);
            assert_true(d.worker_id >= 1 && d.worker_id <= 3);
            used[d.worker_id] = true;
            if (tol)
                assert_int_equal(d.reason, KVR_REASON_BALANCED);
            kvr_route_decision_free(&d);
            assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
            assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
        }
        if (tol)
            assert_true(used[1] && used[2] && used[3]);
        else
            assert_true(used[1] && !used[2] && !used[3]);
        done(f);
    }
}

/* Recent work is read from the candidate's state slot as well: the work a
 * booking adds comes after its load is created (which refreshes the slot
 * first), so route_rate_add_work must refresh it itself. */
static void test_booked_work_reaches_a_bound_slot(void **state)
{
    (void)state;
    fx *f = make_with(NULL);
    worker_with(f, 1, 0);
    worker_with(f, 2, 0);
    kvr_route_decision d = route_n(f, NULL, N, 0); /* binds both slots */
    assert_true(rt_cost_of(&d, 1)->recent_work == 0);
    kvr_route_decision_free(&d);
    d = route_n(f, "a", N, 1);
    double booked = (double)d.booked_prefill_tokens;
    assert_true(booked > 0);
    kvr_route_decision_free(&d);
    d = route_n(f, NULL, N, 0); /* no time passed: nothing decayed */
    assert_true(near(rt_cost_of(&d, 1)->recent_work, booked));
    assert_true(rt_cost_of(&d, 2)->recent_work == 0);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_OK);
    done(f);
}

/* A long request ties less: at 250 tokens/s the 1024-token prompt takes
 * 4.096 s, 4.064 s on worker 1 (2 blocks cached): 32 ms apart, inside 5 %
 * and 0.1 s but not inside 0.1 s / 4.064^2 = 6 ms, so worker 1 takes every
 * such request (the largest prompts set the TTFT tail: a worker 32 ms
 * slower for them is 32 ms on the p99). */
static void slow_prefill(kvr_router_config *c)
{
    c->recompute_weight = 0;
    c->prefill_tps = 250;
    c->learn_prefill_rate = false;
}

static void test_long_requests_tie_less(void **state)
{
    (void)state;
    fx *f = make_with(slow_prefill);
    worker_with(f, 1, 2);
    worker_with(f, 2, 0);
    worker_with(f, 3, 0);
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "l%d", i);
        kvr_route_decision d = route_n(f, id, N, 0);
        assert_true(near(rt_cost_of(&d, 1)->cost, 1016 / 250.0));
        assert_true(near(rt_cost_of(&d, 2)->cost, 1024 / 250.0));
        assert_int_equal(d.worker_id, 1);
        assert_int_equal(d.reason, KVR_REASON_BEST_COST);
        kvr_route_decision_free(&d);
        assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    }
    done(f);
}

/* tie_from_error: the requests of test_long_requests_tie_less once the
 * router has timed 16 requests on worker 1 at 2 % (then 0.5 %) above the
 * 4.064 s it predicted for each. The model's error, 2 %, is 81 ms of a
 * 4.064 s prompt: worker 2's 32 ms more tie with worker 1, and worker 1,
 * with all the recent work, loses the request. At 0.5 % (20 ms) worker 1
 * keeps it, as it does with the option off whatever the error (6 ms). */
static bool from_error;
static void slow_prefill_from_error(kvr_router_config *c)
{
    slow_prefill(c);
    c->tie_from_error = from_error;
}

static void test_tie_window_from_measured_error(void **state)
{
    (void)state;
    const double errs[] = {0.02, 0.005};
    for (int on = 0; on < 2; on++)
        for (size_t e = 0; e < 2; e++) {
            from_error = on;
            fx *f = make_with(slow_prefill_from_error);
            worker_with(f, 1, 2);
            worker_with(f, 2, 0);
            char id[16];
            for (int i = 0; i < 16; i++) {
                snprintf(id, sizeof id, "t%d", i);
                kvr_route_decision d = route_n(f, id, N, 1);
                double predicted = d.cost;
                kvr_route_decision_free(&d);
                assert_true(near(predicted, 1016 / 250.0));
                assert_int_equal(
                    kvr_router_prefill_done_after(f->r, id, predicted * (1 + errs[e])),
                    KVR_ROUTE_OK);
                assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
                kvr_router_stats st;
                kvr_router_stats_get(f->r, &st);
                assert_int_equal(st.ttft_error_samples, (uint64_t)i + 1);
                assert_true(i < 15 ? st.ttft_error == 0 : near(st.ttft_error, errs[e]));
            }
            kvr_route_decision d = route_n(f, "l", N, 0);
            bool wide = on && e == 0;
            assert_int_equal(d.worker_id, wide ? 2 : 1);
            assert_int_equal(d.reason, wide ? KVR_REASON_BALANCED : KVR_REASON_BEST_COST);
            kvr_route_decision_free(&d);
            done(f);
        }
}

/* The model's error is timed against the predicted time to first token
 * alone (kvr_route_cost.ttft_s), not the copy cost the pick's cost carries:
 * worker 1 caches 200 of the 256 blocks behind a queue of 2,000 tokens,
 * so idle worker 2 takes each request at 0.1824 s, its 1024 tokens plus
 * the 800 it would copy (recompute_weight 1, 10,000 tokens/s), of which
 * 0.1024 s is its TTFT. Each takes 2 % more than 0.1024 s: the error read
 * is 2 %, with tie_from_error off too (timed either way, in /metrics). */
static void copy_cost_no_guess(kvr_router_config *c)
{
    c->recompute_weight = 1;
    c->tie_tolerance = 0;
    c->learn_prefill_rate = false;
}

static void test_error_timed_against_the_ttft_without_copy_cost(void **state)
{
    (void)state;
    fx *f = make_with(copy_cost_no_guess);
    worker_with(f, 1, 200);
    worker_with(f, 2, 0);
    uint32_t saved = f->tokens[0];
    f->tokens[0] = 5;
    kvr_route_decision d = route_n(f, "q", 500 * BS, 1);
    kvr_route_decision_free(&d);
    f->tokens[0] = saved;
    char id[16];
    for (int i = 0; i < 16; i++) {
        snprintf(id, sizeof id, "t%d", i);
        d = route_n(f, id, N, 0);
        assert_int_equal(d.worker_id, 2);
        assert_true(near(d.cost, (1024 + 800) / 1e4));
        kvr_route_decision_free(&d);
        assert_int_equal(kvr_router_prefill_done_after(f->r, id, 1024 / 1e4 * 1.02),
                         KVR_ROUTE_OK);
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    }
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.ttft_error_samples, 16);
    if (!near(st.ttft_error, 0.02))
        fail_msg("error %g, want 0.02 of the 0.1024 s TTFT", st.ttft_error);
    done(f);
}

/* The decode slowdown is fitted from the rate samples: 40 requests of 1024
 * tokens, each alone on worker 1 while 0, 16, 32, 48 or 64 decodes of 1024
 * context tokens run there, take 1024 x (1 + 2e-5 x context) / 1e4 s. The
 * fit recovers 2e-5 (the configured share is 5e-6). */
static void test_decode_slowdown_fitted(void **state)
{
    (void)state;
    fx *f = make_with(NULL);
    worker_with(f, 1, 0);
    char id[32];
    for (int i = 0; i < 40; i++) {
        int m = (i % 5) * 16;
        for (int j = 0; j < m; j++) {
            snprintf(id, sizeof id, "d%d_%d", i, j);
            book_decoding(f, id, 20000 + (uint32_t)j, 1); /* no time passes: not a sample */
        }
        f->tokens[0] = 700;
        snprintf(id, sizeof id, "s%d", i);
        kvr_route_decision d = route_n(f, id, N, 1);
        kvr_route_decision_free(&d);
        double context = (double)m * N;
        f->now += N * (1 + 2e-5 * context) / 1e4;
        assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
        for (int j = 0; j < m; j++) {
            snprintf(id, sizeof id, "d%d_%d", i, j);
            assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
        }
    }
    for (int j = 0; j < 24; j++) { /* 24 decodes: 24576 context tokens */
        snprintf(id, sizeof id, "e%d", j);
        book_decoding(f, id, 30000 + (uint32_t)j, 1);
    }
    f->tokens[0] = 700;
    kvr_route_decision d = route_n(f, NULL, N, 1);
    double got = rt_cost_of(&d, 1)->decode_factor;
    if (fabs(got - (1 + 2e-5 * 24576)) > 0.01)
        fail_msg("decode factor %f, want %f", got, 1 + 2e-5 * 24576);
    kvr_route_decision_free(&d);
    done(f);
}

/* A candidate's rate is read through its state slot (src/route/slots.c),
 * bound by the first /route that scores it, before the worker has a rate.
 * The samples that complete the rate come with no load created or freed
 * (its booking is still held): the slot sees them only because the rate's
 * creation refreshed it (route_slot_changed in rates.c rate_get) and it
 * points at the rate rather than copying its figures. */
static void test_learned_rate_reaches_a_bound_slot(void **state)
{
    (void)state;
    fx *f = make_with(NULL);
    worker_with(f, 1, 0);
    kvr_route_decision d = route_n(f, NULL, N, 0); /* binds worker 1's slot */
    assert_true(near(rt_cost_of(&d, 1)->prefill_tps, 1e4));
    kvr_route_decision_free(&d);
    char id[16];
    for (int i = 0; i < KVR_ROUTE_RATE_MIN_SAMPLES; i++) {
        snprintf(id, sizeof id, "r%d", i);
        d = route_n(f, id, N, 1);
        kvr_route_decision_free(&d);
        f->now += 0.05;
        assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
        if (i == KVR_ROUTE_RATE_MIN_SAMPLES - 1) {
            d = route_n(f, NULL, N, 0);
            assert_true(near(rt_cost_of(&d, 1)->prefill_tps, 1024 / 0.05));
            kvr_route_decision_free(&d);
        }
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    }
    done(f);
}

static void no_learning(kvr_router_config *c) { c->learn_prefill_rate = false; }

static void test_no_learning_keeps_configured_rate(void **state)
{
    (void)state;
    fx *f = make_with(no_learning);
    worker_with(f, 1, 0);
    for (int i = 0; i < 2 * KVR_ROUTE_RATE_MIN_SAMPLES; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        kvr_route_decision d = route_n(f, id, N, 0);
        kvr_route_decision_free(&d);
        f->now += 0.05;
        assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    }
    kvr_route_decision d = route_n(f, NULL, N, 0);
    assert_true(near(rt_cost_of(&d, 1)->prefill_tps, 1e4));
    kvr_route_decision_free(&d);
    done(f);
}

static bool ahead_on;
static void decode_ahead_exact(kvr_router_config *c)
{
    no_tolerance(c);
    c->decode_ahead = ahead_on;
}

/* decode_ahead: worker 1 caches 250 of the 256 blocks of a short request
 * queued there (24 tokens to prefill, 2000 output tokens: context 2024),
 * worker 2 decodes five 1024-token requests (context 5120). A 1024-token
 * prompt nobody caches waits 24 tokens on worker 1, then prefills behind
 * that request's decode: 24 / 1e4 + 1024 x (1 + 5e-6 x 2024) / 1e4 =
 * 0.10596 s, against 1024 x (1 + 5e-6 x 5120) / 1e4 = 0.10502 s on worker
 * 2. Without the rule worker 1 costs 0.1048 s (the queue's decode unseen)
 * and takes it (exact argmin). The decode factor reported stays the
 * worker's decodes now (what the queue drains at). */
static void test_decode_ahead_slows_the_prefill_behind_the_queue(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        ahead_on = on;
        fx *f = make_with(decode_ahead_exact);
        worker_with(f, 1, 250);
        worker_with(f, 2, 0);
        kvr_route_request rq;
        memset(&rq, 0, sizeof rq);
        rq.q = rt_request(f->tokens, N, NULL, 0);
        rq.request_id = "short";
        rq.osl = 2000;
        rq.has_worker_id = true;
        rq.worker_id = 1;
        kvr_route_decision d;
        assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
        assert_int_equal(d.booked_prefill_tokens, 24);
        kvr_route_decision_free(&d);
        char id[16];
        for (int i = 0; i < 5; i++) {
            snprintf(id, sizeof id, "dec%d", i);
            book_decoding(f, id, 20000 + (uint32_t)i, 2);
        }
        f->tokens[0] = 50000;
        d = route_n(f, NULL, N, 0);
        const kvr_route_cost *c1 = rt_cost_of(&d, 1), *c2 = rt_cost_of(&d, 2);
        assert_true(near(c1->queued_tokens, 24));
        assert_true(near(c1->decode_factor, 1.0)); /* its decodes now: none */
        assert_true(near(c2->cost, 1024 * (1 + 5e-6 * 5120) / 1e4));
        if (on) {
            assert_true(near(c1->cost, 24 / 1e4 + 1024 * (1 + 5e-6 * 2024) / 1e4));
            assert_true(d.worker_id == 2);
        } else {
            assert_true(near(c1->cost, (24 + 1024) / 1e4));
            assert_true(d.worker_id == 1);
        }
        kvr_route_decision_free(&d);
        done(f);
    }
}

/* The decode factor is bounded: 120 decoding bookings of 256 distinct
 * blocks hold 122880 tokens, x 5e-6 = 0.61 above the cap 0.5. */
static void small_cap(kvr_router_config *c) { c->max_decode_slowdown = 0.5; }

static void test_decode_factor_bounded(void **state)
{
    (void)state;
    fx *f = make_with(small_cap);
    worker_with(f, 1, 0);
    char id[16];
    /* Distinct prompts: 120 bookings x 256 blocks x 4 tokens x 5e-6 > 0.5 */
    for (int i = 0; i < 120; i++) {
        snprintf(id, sizeof id, "d%d", i);
        book_decoding(f, id, 10000 + (uint32_t)i, 1);
    }
    f->tokens[0] = 700;
    kvr_route_decision d = route_n(f, NULL, N, 1);
    assert_true(near(rt_cost_of(&d, 1)->decode_factor, 1.5));
    kvr_route_decision_free(&d);
    done(f);
}

static void book_osl(fx *f, const char *id, uint32_t osl)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(f->tokens, N, NULL, 0);
    rq.request_id = id;
    rq.osl = osl;
    kvr_route_decision d;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
    kvr_route_decision_free(&d);
}

/* Four decodes of 100 tokens take 2 s each from /prefill_done to /free: 20
 * ms a token. A booking of 1000 output tokens whose /free never comes ages
 * out 4 x 20 s after its prefill instead of booking_ttl_s (600 s) after
 * /route; one of 100 tokens after the 30 s floor (4 x 2 s is less). */
static void test_booking_ages_out_after_predicted_decode(void **state)
{
    (void)state;
    fx *f = make_with(NULL);
    worker_with(f, 1, 0);
    char id[16];
    for (int i = 0; i < KVR_ROUTE_RATE_MIN_SAMPLES; i++) {
        snprintf(id, sizeof id, "d%d", i);
        book_osl(f, id, 100);
        assert_int_equal(kvr_router_prefill_done(f->r, id), KVR_ROUTE_OK);
        f->now += 2;
        assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
    }
    book_osl(f, "long", 1000);
    book_osl(f, "short", 100);
    book_osl(f, "unknown", 0);
    assert_int_equal(kvr_router_prefill_done(f->r, "long"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_prefill_done(f->r, "short"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_prefill_done(f->r, "unknown"), KVR_ROUTE_OK);
    kvr_router_stats st;
    f->now += 29;
    kvr_router_sweep(f->r);
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 3);
    f->now += 2; /* 31 s: "short" is done */
    kvr_router_sweep(f->r);
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 2);
    f->now += 48; /* 79 s */
    kvr_router_sweep(f->r);
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 2);
    f->now += 2; /* 81 s: "long" is done; "unknown" waits for its TTL */
    kvr_router_sweep(f->r);
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 1);
    assert_int_equal(st.bookings_aged_out, 2);
    assert_int_equal(kvr_router_release(f->r, "long"), KVR_ROUTE_UNKNOWN_ID);
    assert_int_equal(kvr_router_release(f->r, "unknown"), KVR_ROUTE_OK);
    done(f);
}

static void limit_two(kvr_router_config *c) { c->max_bookings = 2; }

/* max_bookings: the third booking is refused with KVR_ROUTE_LIMIT (HTTP
 * 429) naming the limit, counted; unbooked decisions still work, and a
 * /free makes room again. */
static void test_max_bookings(void **state)
{
    (void)state;
    fx *f = make_with(limit_two);
    worker_with(f, 1, 0);
    kvr_route_decision d = route_n(f, "a", N, 0);
    kvr_route_decision_free(&d);
    d = route_n(f, "b", N, 0);
    kvr_route_decision_free(&d);
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(f->tokens, N, NULL, 0);
    rq.request_id = "c";
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_LIMIT);
    assert_int_equal(kvr_route_status_http(KVR_ROUTE_LIMIT), 429);
    assert_non_null(strstr(d.error, "max_bookings"));
    assert_non_null(strstr(d.error, "2"));
    kvr_route_decision_free(&d);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_rejected, 1);
    assert_int_equal(st.bookings_active, 2);
    assert_int_equal(st.max_bookings, 2);
    d = route_n(f, NULL, N, 0);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_OK);
    d = route_n(f, "c", N, 0);
    kvr_route_decision_free(&d);
    done(f);
}

static void from_requests(kvr_router_config *c) { c->clock_from_requests = true; }

/* clock_from_requests: the clock is what callers said, never backwards. */
static void test_clock_from_requests(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    from_requests(&cfg);
    cfg.rank_refresh_s = 0;
    kvr_router *r = kvr_router_create(ix, &cfg);
    rt_register(ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    uint32_t t[N];
    for (uint32_t i = 0; i < N; i++)
        t[i] = i + 1;
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(t, N, NULL, 0);
    kvr_router_observe_time(r, 50);
    kvr_router_observe_time(r, 40);
    rq.request_id = "a";
    kvr_route_decision d;
    for (int i = 0; i < KVR_ROUTE_RATE_MIN_SAMPLES; i++) {
        char id[8];
        snprintf(id, sizeof id, "a%d", i);
        rq.request_id = id;
        assert_int_equal(kvr_route(r, &rq, &d), KVR_ROUTE_OK);
        kvr_route_decision_free(&d);
        kvr_router_observe_time(r, 50 + 0.1 * (i + 1)); /* 1024 tokens in 0.1 s */
        assert_int_equal(kvr_router_prefill_done(r, id), KVR_ROUTE_OK);
        assert_int_equal(kvr_router_release(r, id), KVR_ROUTE_OK);
    }
    assert_true(near(kvr_router_prefill_rate(r, RT_MODEL, NULL, 1, 0), 10240));
    kvr_router_destroy(r);
    kvr_indexer_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_names),
        cmocka_unit_test(test_cost_is_predicted_ttft),
        cmocka_unit_test(test_queue_drains_with_time),
        cmocka_unit_test(test_recompute_weight_keeps_cache),
        cmocka_unit_test(test_copies_count_one_over_holders),
        cmocka_unit_test(test_near_ties_go_to_least_recent_work),
        cmocka_unit_test(test_booked_work_reaches_a_bound_slot),
        cmocka_unit_test(test_long_requests_tie_less),
        cmocka_unit_test(test_tie_window_from_measured_error),
        cmocka_unit_test(test_error_timed_against_the_ttft_without_copy_cost),
        cmocka_unit_test(test_rate_learned_from_prefill_done),
        cmocka_unit_test(test_learned_rate_reaches_a_bound_slot),
        cmocka_unit_test(test_no_learning_keeps_configured_rate),
        cmocka_unit_test(test_decode_slowdown_fitted),
        cmocka_unit_test(test_decode_factor_bounded),
        cmocka_unit_test(test_decode_ahead_slows_the_prefill_behind_the_queue),
        cmocka_unit_test(test_booking_ages_out_after_predicted_decode),
        cmocka_unit_test(test_max_bookings),
        cmocka_unit_test(test_clock_from_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
