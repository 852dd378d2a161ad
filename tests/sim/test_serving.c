/* The simulator's serving model (sim/serving.h): FIFO prefill, decode that
 * shares the GPU, KV memory admission. Every expected time is worked out
 * from the model's formula by hand. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#include "sim/serving.h"

typedef struct {
    double prefill_at[8], finished_at[8];
} seen;

static void on_prefill(void *ud, uint32_t req, uint32_t slot, double t)
{
    (void)slot;
    ((seen *)ud)->prefill_at[req] = t;
}

static void on_finish(void *ud, uint32_t req, uint32_t slot, double t)
{
    (void)slot;
    ((seen *)ud)->finished_at[req] = t;
}

static void setup(kvr_sim_serving *s, seen *log, double kv_read_tps, uint64_t kv_capacity)
{
    kvr_sim_serving_params p = {.prefill_tps = 1000, .decode_tps = 10,
                                .kv_read_tps = kv_read_tps, .kv_capacity = kv_capacity};
    assert_int_equal(kvr_sim_serving_init(s, &p, 2, 8), 0);
    memset(log, 0, sizeof *log);
    s->prefill_done = on_prefill;
    s->finished = on_finish;
    s->ud = log;
}

static kvr_sim_job job(double at, double work, double context, uint64_t blocks, double decode_s)
{
    return (kvr_sim_job){.arrival = at, .work = work, .context = context, .kv_blocks = blocks,
                         .decode_s = decode_s, .uncached = (uint64_t)work, .slot = 0};
}

static bool near(double a, double b) { return fabs(a - b) < 1e-9; }

/* Request 0 (1000 tokens) prefills in 1 s and then decodes for 10 s with a
 * mean context of 5000 tokens: at 10 tok/s that reads 5000 x 10 / 1e5 = 0.5
 * of the GPU's time, so request 1 (1000 tokens, arriving at 2 s) prefills at
 * 1000 / 1.5 tokens/s: 1.5 s. */
static void test_decode_slows_prefill(void **state)
{
    (void)state;
    kvr_sim_serving s;
    seen log;
    setup(&s, &log, 1e5, 0);
    kvr_sim_job a = job(0, 1000, 5000, 10, 10);
    assert_int_equal(kvr_sim_serving_submit(&s, 0, &a), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, 2), 0);
    assert_true(near(log.prefill_at[0], 1.0));
    assert_true(near(kvr_sim_serving_rate(&s, 0), 1000 / 1.5));
    assert_true(near(kvr_sim_serving_rate(&s, 1), 1000)); /* the other worker is idle */
    kvr_sim_job b = job(2, 1000, 100, 10, 1);
    assert_int_equal(kvr_sim_serving_submit(&s, 1, &b), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, INFINITY), 0);
    assert_true(near(s.ttft_s[0], 1.0));
    assert_true(near(s.ttft_s[1], 1.5));
    assert_true(near(log.finished_at[0], 11.0));
    kvr_sim_serving_free(&s);
}

/* The rate changes in the middle of a prefill: request 1 (1000 tokens)
 * starts at 10.5 s at 1000/1.5 tokens/s, request 0's decode ends at 11 s
 * (333.33 tokens done), the rest runs at 1000 tokens/s: ends at
 * 11 + 0.66667 s. */
static void test_rate_change_mid_prefill(void **state)
{
    (void)state;
    kvr_sim_serving s;
    seen log;
    setup(&s, &log, 1e5, 0);
    kvr_sim_job a = job(0, 1000, 5000, 10, 10);
    kvr_sim_job b = job(10.5, 1000, 100, 10, 1);
    assert_int_equal(kvr_sim_serving_submit(&s, 0, &a), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, 10.5), 0);
    assert_int_equal(kvr_sim_serving_submit(&s, 1, &b), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, INFINITY), 0);
    double done_by_11 = 0.5 * 1000 / 1.5;
    assert_true(near(log.prefill_at[1], 11.0 + (1000 - done_by_11) / 1000));
    kvr_sim_serving_free(&s);
}

/* FIFO: two requests at t = 0 on one worker; the second waits for the first
 * prefill and then prefills while the first decodes. With kv_read_tps 0
 * decode is free. The worker's queued tokens and running count follow. */
static void test_fifo_and_free_decode(void **state)
{
    (void)state;
    kvr_sim_serving s;
    seen log;
    setup(&s, &log, 0, 0);
    kvr_sim_job a = job(0, 500, 5000, 10, 10), b = job(0, 250, 5000, 10, 10);
    assert_int_equal(kvr_sim_serving_submit(&s, 0, &a), 0);
    assert_int_equal(kvr_sim_serving_submit(&s, 1, &b), 0);
    assert_int_equal(s.w[0].running, 2);
    assert_int_equal(s.w[0].queued, 750);
    assert_int_equal(kvr_sim_serving_run_until(&s, 0.6), 0);
    assert_int_equal(s.w[0].queued, 250);
    assert_int_equal(kvr_sim_serving_run_until(&s, INFINITY), 0);
    assert_true(near(s.ttft_s[0], 0.5));
    assert_true(near(s.ttft_s[1], 0.75));
    assert_int_equal(s.w[0].running, 0);
    assert_int_equal(s.w[0].queued, 0);
    kvr_sim_serving_free(&s);
}

/* KV memory 100 blocks: request 0 holds 80 while it decodes (until 11 s);
 * request 1 needs 50 and waits for it, then prefills 1000 tokens in 1 s.
 * Request 2 needs 20 and comes after request 1 in the FIFO: it waits too
 * (no overtaking), then prefills after request 1. A request larger than the
 * whole memory still runs on an empty worker. */
static void test_kv_admission(void **state)
{
    (void)state;
    kvr_sim_serving s;
    seen log;
    setup(&s, &log, 0, 100);
    kvr_sim_job a = job(0, 1000, 100, 80, 10), b = job(2, 1000, 100, 50, 1),
                c = job(3, 1000, 100, 20, 1);
    assert_int_equal(kvr_sim_serving_submit(&s, 0, &a), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, 2), 0);
    assert_int_equal(kvr_sim_serving_submit(&s, 1, &b), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, 3), 0);
    assert_int_equal(kvr_sim_serving_submit(&s, 2, &c), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, INFINITY), 0);
    assert_true(near(log.prefill_at[1], 12.0));
    assert_true(near(s.ttft_s[1], 10.0));
    assert_true(near(log.prefill_at[2], 13.0));
    kvr_sim_job big = job(20, 100, 100, 500, 1);
    big.slot = 1;
    assert_int_equal(kvr_sim_serving_submit(&s, 3, &big), 0);
    assert_int_equal(kvr_sim_serving_run_until(&s, INFINITY), 0);
    assert_true(near(s.ttft_s[3], 0.1));
    kvr_sim_serving_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_slows_prefill),
        cmocka_unit_test(test_rate_change_mid_prefill),
        cmocka_unit_test(test_fifo_and_free_decode),
        cmocka_unit_test(test_kv_admission),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
