/* Out of memory on the /route paths that route anyway: the copy cost of the
 * ttft model (route_add_duplicate_cost's two arrays) and the recent work a
 * booking adds (route_rate_add_work's rate). The request is still routed
 * and booked, and each loss is counted (kvr_router_stats copy_cost_lost,
 * work_lost, and edge_lost when an lru_edge rule could not note the
 * booking either), where before it was dropped silently. Likewise the
 * /prefill_done timing a prefill rate could not take (rate_samples_lost),
 * nor the decode-slowdown fit (fit_samples_lost), the /free timing the
 * decode speed could not take (decode_samples_lost),
 * and a booking the approximate index (a worker without KV events) could
 * note only in part or not at all (approx_lost), which must never leave a
 * hole in a prompt's prefix. Allocation failure is injected by linking
 * this test with tests/support/fail_alloc.c: the armed calloc of one exact (count,
 * size), or realloc of one size, fails once. */
#include <math.h>
#include <unistd.h>

#include "route/internal.h"
#include "fail_alloc.h"
#include "route_test_util.h"

#define BS 4
#define N 1024 /* 256 blocks */

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    uint32_t tokens[N];
} fx;

static fx *make(kvr_lru_edge edge)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    rt_open(&f->ix, &f->r, 60, 3);
    kvr_router_config cfg;
    kvr_router_config_get(f->r, &cfg);
    cfg.lru_edge = edge;
    assert_int_equal(kvr_router_set_config(f->r, &cfg), edge != KVR_EDGE_OFF);
    for (uint32_t i = 0; i < N; i++)
        f->tokens[i] = 700 + i;
    /* worker 1 caches 200 of the 256 blocks, worker 2 nothing */
    kvr_worker *w = rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    uint64_t t[N];
    rt_widen(f->tokens, t, 200 * BS);
    rt_store(f->ix, w, 0, BS, t, 200 * BS, false, 100000);
    rt_register(f->ix, 2, BS, KVR_MM_LEGACY, -1, false, NULL);
    kvr_fail_reset();
    return f;
}

static void done(fx *f)
{
    rt_close(f->ix, f->r);
    free(f);
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

static kvr_router_stats stats_of(fx *f)
{
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    return st;
}

/* The copy cost's count per reach (calloc of max_reach + 1 = 201 u32s)
 * fails: both costs stay plain TTFT (worker 2: its 1024 tokens at the
 * default 10,000 tokens/s, without the 20 x 800 it would copy), the request
 * is routed and booked, and the loss is counted once. */
static void test_copy_cost_out_of_memory_is_counted(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_OFF);
    kvr_route_decision d = rt_route_debug(f->r, f->tokens, N, "a", 0);
    assert_true(near(rt_cost_of(&d, 2)->cost, (1024 + 20 * 800) / 1e4));
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_OK); /* no queue on 1 */
    assert_int_equal(stats_of(f).copy_cost_lost, 0);

    kvr_fail_calloc(201, sizeof(uint32_t));
    d = rt_route_debug(f->r, f->tokens, N, "b", 0);
    assert_int_equal(kvr_fail_count(), 1);
    assert_true(near(rt_cost_of(&d, 1)->cost, 224 / 1e4));
    assert_true(near(rt_cost_of(&d, 2)->cost, 1024 / 1e4));
    assert_true(d.worker_id == 1);
    kvr_route_decision_free(&d);
    kvr_router_stats st = stats_of(f);
    assert_int_equal(st.copy_cost_lost, 1);
    assert_int_equal(st.bookings_active, 1);
    assert_int_equal(st.work_lost, 0);
    done(f);
}

/* The chosen worker's first booking creates its rate record (calloc of one
 * route_rate), which fails (were it another calloc of that size, the
 * counts below would not hold): the booking stands, its work is counted lost,
 * and the next booking there (memory back) adds its work as usual. With
 * lru_edge=tie the edge, held by that record, missed the booking too. */
static void test_recent_work_out_of_memory_is_counted(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_TIE);
    kvr_fail_calloc(1, sizeof(route_rate));
    kvr_route_decision d = rt_route_debug(f->r, f->tokens, N, "a", 1);
    assert_int_equal(kvr_fail_count(), 1);
    assert_true(d.worker_id == 1);
    assert_int_equal(d.booked_prefill_tokens, 224);
    kvr_route_decision_free(&d);
    kvr_router_stats st = stats_of(f);
    assert_int_equal(st.work_lost, 1);
    assert_int_equal(st.edge_lost, 1);
    assert_int_equal(st.bookings_active, 1);
    assert_int_equal(st.copy_cost_lost, 0);

    kvr_fail_calloc(0, 0);
    d = rt_route_debug(f->r, f->tokens, N, "b", 1);
    kvr_route_decision_free(&d);
    d = rt_route_debug(f->r, f->tokens, N, "c", 0);
    assert_true(rt_cost_of(&d, 1)->recent_work > 0); /* b's work counted */
    kvr_route_decision_free(&d);
    st = stats_of(f);
    assert_int_equal(st.work_lost, 1);
    assert_int_equal(st.edge_lost, 1);
    done(f);
}

/* /prefill_done of id after 0.1 s, the next calloc(1, size) failing; the
 * stats after it. */
static kvr_router_stats prefill_done_failing(fx *f, const char *id, size_t size)
{
    kvr_fail_calloc(1, size);
    assert_int_equal(kvr_router_prefill_done_after(f->r, id, 0.1), KVR_ROUTE_OK);
    return stats_of(f);
}

/* A /prefill_done timing whose rate record cannot be made (its booking's
 * record failed too, so none exists): the sample is counted lost, not
 * taken; with memory back the next timing is a sample as usual. */
static void test_rate_sample_out_of_memory_is_counted(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_OFF);
    kvr_fail_calloc(1, sizeof(route_rate));
    /* pinned to worker 2: 1024 tokens to prefill, nothing queued there */
    kvr_route_decision d = rt_route_debug(f->r, f->tokens, N, "a", 2);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(stats_of(f).work_lost, 1);
    kvr_router_stats st = prefill_done_failing(f, "a", sizeof(route_rate));
    assert_int_equal(kvr_fail_count(), 2);
    assert_int_equal(st.rate_samples, 0);
    assert_int_equal(st.rate_samples_lost, 1);
    assert_int_equal(st.prefill_done, 1);

    d = rt_route_debug(f->r, f->tokens, N, "b", 2);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_prefill_done_after(f->r, "b", 0.1), KVR_ROUTE_OK);
    st = stats_of(f);
    assert_int_equal(st.rate_samples, 1);
    assert_int_equal(st.rate_samples_lost, 1);
    done(f);
}

/* Routes tokens to worker pin with osl output tokens expected. */
static void route_osl(fx *f, const char *id, uint64_t pin, uint32_t osl)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(f->tokens, N, NULL, 0);
    rq.request_id = id;
    rq.has_worker_id = true;
    rq.worker_id = pin;
    rq.osl = osl;
    kvr_route_decision d;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
    kvr_route_decision_free(&d);
}

/* The first /prefill_done timing of the (model, group) creates its fit of
 * how decoding slows prefill (calloc of one route_decode_fit), which
 * fails: the rate takes the sample, the fit's is counted lost. A /free
 * timing whose rate record cannot be made (worker 1's failed at /route,
 * and its /prefill_done, 224 tokens to prefill, was no sample) is counted
 * lost as a decode sample. */
static void test_fit_and_decode_samples_out_of_memory_are_counted(void **state)
{
    (void)state;
    fx *f = make(KVR_EDGE_OFF);
    route_osl(f, "a", 2, 16);
    kvr_router_stats st = prefill_done_failing(f, "a", sizeof(route_decode_fit));
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(st.rate_samples, 1);
    assert_int_equal(st.fit_samples_lost, 1);
    assert_int_equal(st.decode_samples_lost, 0);

    kvr_fail_calloc(1, sizeof(route_rate));
    route_osl(f, "b", 1, 16);
    assert_int_equal(kvr_fail_count(), 2);
    assert_int_equal(kvr_router_prefill_done_after(f->r, "b", 0.1), KVR_ROUTE_OK);
    usleep(2000); /* the decode takes time: /free after /prefill_done */
    kvr_fail_calloc(1, sizeof(route_rate));
    assert_int_equal(kvr_router_release(f->r, "b"), KVR_ROUTE_OK);
    assert_int_equal(kvr_fail_count(), 3);
    st = stats_of(f);
    assert_int_equal(st.work_lost, 1);
    assert_int_equal(st.rate_samples, 1);
    assert_int_equal(st.rate_samples_lost, 0);
    assert_int_equal(st.decode_samples_lost, 1);
    assert_int_equal(st.fit_samples_lost, 1);
    assert_int_equal(kvr_router_release(f->r, "a"), KVR_ROUTE_OK); /* memory back */
    assert_int_equal(stats_of(f).decode_samples_lost, 1);
    done(f);
}

/* Worker 3 alone, registered without KV events: scored from the
 * approximate index of what was routed to it. */
static fx *make_approx(void)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    rt_open(&f->ix, &f->r, 60, 3);
    for (uint32_t i = 0; i < N; i++)
        f->tokens[i] = 700 + i;
    rt_kv_events = KVR_KV_EVENTS_OFF;
    rt_register(f->ix, 3, BS, KVR_MM_LEGACY, -1, false, NULL);
    rt_kv_events = KVR_KV_EVENTS_ON;
    kvr_fail_reset();
    return f;
}

/* Blocks of tokens[0..n) worker 3 is scored as holding. */
static uint32_t approx_overlap(fx *f, const uint32_t *tokens, size_t n)
{
    kvr_query_result q;
    kvr_query_result_init(&q);
    kvr_query_request rq = rt_request(tokens, n, NULL, 0);
    assert_int_equal(kvr_query(f->r, &rq, &q), KVR_ROUTE_OK);
    const kvr_query_entry *e = rt_entry(&q, 3, 0);
    assert_true(e->approximate);
    uint32_t g = e->gpu_blocks;
    kvr_query_result_free(&q);
    return g;
}

static void route_to_3(fx *f, const uint32_t *tokens, size_t n, const char *id)
{
    kvr_route_decision d = rt_route_debug(f->r, tokens, n, id, 3);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, id), KVR_ROUTE_OK);
}

/* The same 64 blocks routed again, the FIFO full (64 entries): its growth
 * to 128 fails before anything is noted, so the store stays as it was,
 * 64 blocks held, and the booking is counted. (The old code noted block 0,
 * failed to queue it, and deleted it: a hole at the root, 0 blocks held of
 * the prompt while the rest stayed.) */
static void test_approx_note_without_fifo_room_notes_nothing(void **state)
{
    (void)state;
    fx *f = make_approx();
    route_to_3(f, f->tokens, 64 * BS, "a");
    assert_int_equal(approx_overlap(f, f->tokens, 64 * BS), 64);
    kvr_fail_realloc(128 * 16); /* 128 fifo entries of (hash, expiry) */
    route_to_3(f, f->tokens, 64 * BS, "b");
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(approx_overlap(f, f->tokens, 64 * BS), 64);
    kvr_router_stats st = stats_of(f);
    assert_int_equal(st.approx_blocks, 64);
    assert_int_equal(st.approx_workers, 1);
    assert_int_equal(st.approx_lost, 1);
    route_to_3(f, f->tokens, 64 * BS, "c"); /* memory back */
    assert_int_equal(approx_overlap(f, f->tokens, 64 * BS), 64);
    assert_int_equal(stats_of(f).approx_lost, 1);
    done(f);
}

/* 256 blocks held (a map of 512 slots); a prompt sharing the first 64 adds
 * 192 new ones, and the map's growth to 1024 slots fails at the 385th
 * block held, i.e. at the prompt's block 192: its first 192 blocks are
 * noted, a prefix, counted; memory back, the next one notes all 256. */
static void test_approx_note_cut_short_keeps_a_prefix(void **state)
{
    (void)state;
    fx *f = make_approx();
    route_to_3(f, f->tokens, N, "a");
    uint32_t other[N];
    for (uint32_t i = 0; i < N; i++)
        other[i] = i < 64 * BS ? f->tokens[i] : 90000 + i;
    assert_int_equal(approx_overlap(f, other, N), 64);
    kvr_fail_calloc(1024, sizeof(kvr_u64map_slot));
    route_to_3(f, other, N, "b");
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(approx_overlap(f, other, N), 192);
    assert_int_equal(approx_overlap(f, f->tokens, N), 256);
    kvr_router_stats st = stats_of(f);
    assert_int_equal(st.approx_blocks, 256 + 128);
    assert_int_equal(st.approx_lost, 1);
    route_to_3(f, other, N, "c");
    assert_int_equal(approx_overlap(f, other, N), 256);
    assert_int_equal(stats_of(f).approx_lost, 1);
    done(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_cost_out_of_memory_is_counted),
        cmocka_unit_test(test_recent_work_out_of_memory_is_counted),
        cmocka_unit_test(test_rate_sample_out_of_memory_is_counted),
        cmocka_unit_test(test_fit_and_decode_samples_out_of_memory_are_counted),
        cmocka_unit_test(test_approx_note_without_fifo_room_notes_nothing),
        cmocka_unit_test(test_approx_note_cut_short_keeps_a_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
