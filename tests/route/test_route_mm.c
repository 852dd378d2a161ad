/* Request-side multimodal handling (SPEC §5): each worker is scored with the
 * sequence that fits its capabilities; identities are forwarded only to
 * workers that accept them and only when every item has one. */
#include "route_test_util.h"

#define BS 4
#define N 16
#define MM_HASH 9533257059414191570ull /* pad_value = 49115154 (SPEC §4) */
#define ITEM(s, e, h, v) {.start = (s), .end = (e), .has_mm_hash = (h), .mm_hash = (v)}

/* text 100..107 | image at 8..11 (placeholder 999) | text 200..203 */
static void request_tokens(uint32_t *t, uint32_t img_start)
{
    for (uint32_t i = 0; i < N; i++)
        t[i] = i < img_start ? 100 + i : (i < 12 ? 999 : 200 + i - 12);
}

/* What a legacy engine publishes: its pad value at the image positions. */
static void legacy_event_tokens(uint64_t *t, uint32_t img_start)
{
    for (uint32_t i = 0; i < N; i++)
        t[i] = i < img_start ? 100 + i : (i < 12 ? kvr_pad_value(MM_HASH) : 200 + i - 12);
}

/* What a Kimi engine_wide engine publishes: wide ids cycled over the image. */
static void wide_event_tokens(uint64_t *t, uint32_t n, uint32_t img_start)
{
    for (uint32_t i = 0; i < n; i++)
        t[i] = i < img_start ? 100 + i : (i < 12 ? (1ull << 40) + (i % 4) : 200 + i - 12);
}

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    rt_open(&f->ix, &f->r, 0, 7);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    rt_close(f->ix, f->r);
    free(f);
    return 0;
}

static void test_legacy_worker_gets_pad_substitution(void **state)
{
    fx *f = *state;
    kvr_worker *w = rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    uint64_t ev[N];
    legacy_event_tokens(ev, 8);
    rt_store(f->ix, w, 0, BS, ev, N, false, 1000);

    uint32_t t[N];
    request_tokens(t, 8);
    kvr_mm_item item = ITEM(8, 12, true, MM_HASH);
    kvr_query_request q = rt_request(t, N, &item, 1);
    kvr_query_result res;
    kvr_query_result_init(&res);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    const kvr_query_entry *e = rt_entry(&res, 1, 0);
    assert_int_equal(e->gpu_blocks, 4);
    assert_int_equal(e->routing_tokens, N);
    assert_int_equal(e->seq_kind, KVR_SEQ_MM_PADDED);
    assert_true(e->forward_mm_hashes);

    /* Without substitution the placeholders would not match the engine's pads. */
    kvr_query_request plain = rt_request(t, N, NULL, 0);
    assert_int_equal(kvr_query(f->r, &plain, &res), KVR_ROUTE_OK);
    assert_int_equal(rt_entry(&res, 1, 0)->gpu_blocks, 2);
    assert_false(rt_entry(&res, 1, 0)->forward_mm_hashes);

    kvr_route_request rq = {0};
    rq.q = q;
    kvr_route_decision d;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
    assert_true(d.forward_mm_hashes);
    assert_int_equal(d.overlap_tokens, 16);
    assert_int_equal(d.routing_tokens, N);
    kvr_route_decision_free(&d);
    kvr_query_result_free(&res);
}

static void test_non_accepting_workers_route_on_text_prefix(void **state)
{
    fx *f = *state;
    kvr_worker *k = rt_register(f->ix, 2, BS, KVR_MM_ENGINE_WIDE, -1, false, NULL);
    kvr_worker *l = rt_register(f->ix, 3, BS, KVR_MM_LEGACY, 0, false, NULL);
    uint64_t wide[N], legacy[N];
    wide_event_tokens(wide, N, 8);
    legacy_event_tokens(legacy, 8);
    rt_store(f->ix, k, 0, BS, wide, N, false, 1000);
    rt_store(f->ix, l, 0, BS, legacy, N, false, 2000);

    uint32_t t[N];
    request_tokens(t, 8);
    kvr_mm_item item = ITEM(8, 12, true, MM_HASH);
    kvr_query_request q = rt_request(t, N, &item, 1);
    kvr_query_result res;
    kvr_query_result_init(&res);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    for (uint64_t id = 2; id <= 3; id++) {
        const kvr_query_entry *e = rt_entry(&res, id, 0);
        assert_int_equal(e->gpu_blocks, 2);
        assert_int_equal(e->routing_tokens, 8);
        assert_int_equal(e->seq_kind, KVR_SEQ_TEXT_PREFIX);
        assert_false(e->forward_mm_hashes);
    }
    for (uint64_t id = 2; id <= 3; id++) {
        kvr_route_request rq = {0};
        rq.q = q;
        rq.has_worker_id = true;
        rq.worker_id = id;
        kvr_route_decision d;
        assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
        assert_int_equal(d.worker_id, id);
        assert_int_equal(d.reason, KVR_REASON_PINNED);
        assert_false(d.forward_mm_hashes);
        assert_int_equal(d.overlap_tokens, 8);
        kvr_route_decision_free(&d);
    }
    kvr_query_result_free(&res);
}

static void test_item_without_hash_disables_forwarding(void **state)
{
    fx *f = *state;
    kvr_worker *w = rt_register(f->ix, 1, BS, KVR_MM_LEGACY, 1, false, NULL);
    uint64_t ev[N];
    legacy_event_tokens(ev, 8);
    rt_store(f->ix, w, 0, BS, ev, N, false, 1000);
    uint32_t t[N];
    request_tokens(t, 8);
    kvr_mm_item items[2] = {ITEM(8, 12, true, MM_HASH), ITEM(13, 15, false, 0)};
    kvr_query_request q = rt_request(t, N, items, 2);
    kvr_route_request rq = {0};
    rq.q = q;
    kvr_route_decision d;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
    assert_false(d.forward_mm_hashes);
    assert_int_equal(d.routing_tokens, 8);
    assert_int_equal(d.overlap_tokens, 8);
    kvr_route_decision_free(&d);
}

static void test_mixed_fleet_scores_each_worker_with_its_sequence(void **state)
{
    fx *f = *state;
    kvr_worker *l = rt_register(f->ix, 10, BS, KVR_MM_LEGACY, -1, false, NULL);
    kvr_worker *k = rt_register(f->ix, 20, BS, KVR_MM_ENGINE_WIDE, -1, false, NULL);
    rt_register(f->ix, 30, BS, KVR_MM_LEGACY, -1, false, NULL); /* empty cache */
    uint64_t legacy[N], wide[N];
    legacy_event_tokens(legacy, 8);
    wide_event_tokens(wide, N, 8);
    rt_store(f->ix, l, 0, BS, legacy, N, false, 1000);
    rt_store(f->ix, k, 0, BS, wide, N, false, 1000);

    uint32_t t[N];
    request_tokens(t, 8);
    kvr_mm_item item = ITEM(8, 12, true, MM_HASH);
    kvr_query_request q = rt_request(t, N, &item, 1);
    kvr_query_result res;
    kvr_query_result_init(&res);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(res.n_entries, 3);
    assert_int_equal(rt_entry(&res, 10, 0)->gpu_blocks, 4);
    assert_true(rt_entry(&res, 10, 0)->forward_mm_hashes);
    assert_int_equal(rt_entry(&res, 20, 0)->gpu_blocks, 2);
    assert_false(rt_entry(&res, 20, 0)->forward_mm_hashes);
    assert_int_equal(rt_entry(&res, 30, 0)->gpu_blocks, 0);
    assert_false(rt_entry(&res, 30, 0)->rank_seen);
    assert_int_equal(res.n_hash_passes, 2);

    /* The full overlap wins and is told to forward; a later pin to the wide
     * worker is never told to forward. */
    kvr_route_request rq = {0};
    rq.q = q;
    kvr_route_decision d;
    assert_int_equal(kvr_route(f->r, &rq, &d), KVR_ROUTE_OK);
    assert_int_equal(d.worker_id, 10);
    assert_int_equal(d.reason, KVR_REASON_BEST_COST);
    assert_true(d.forward_mm_hashes);
    kvr_route_decision_free(&d);
    kvr_query_result_free(&res);
}

static void test_eagle_overlap_token_at_media_boundary(void **state)
{
    fx *f = *state;
    kvr_worker *e = rt_register(f->ix, 1, BS, KVR_MM_ENGINE_WIDE, -1, true, NULL);
    kvr_worker *p = rt_register(f->ix, 2, BS, KVR_MM_ENGINE_WIDE, -1, false, NULL);
    uint32_t t[N];
    kvr_query_result res;
    kvr_query_result_init(&res);

    /* Image at 8: Eagle block 1 hashes tokens 4..8, whose overlap token is
     * media, so only block 0 routes; the plain worker keeps two blocks. */
    uint64_t wide[N + 1];
    wide_event_tokens(wide, N + 1, 8);
    wide[N] = 300;
    rt_store(f->ix, e, 0, BS, wide, N + 1, true, 1000);
    rt_store(f->ix, p, 0, BS, wide, N, false, 1000);
    request_tokens(t, 8);
    kvr_mm_item item = ITEM(8, 12, true, MM_HASH);
    kvr_query_request q = rt_request(t, N, &item, 1);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(rt_entry(&res, 1, 0)->gpu_blocks, 1);
    assert_int_equal(rt_entry(&res, 2, 0)->gpu_blocks, 2);
    assert_int_equal(res.n_hash_passes, 2); /* eagle is part of the profile */

    /* Image at 9: Eagle block 1 (tokens 4..8) is all text and routes. */
    kvr_indexer_clear_rank(f->ix, e, 0);
    wide_event_tokens(wide, N + 1, 9);
    wide[N] = 300;
    rt_store(f->ix, e, 0, BS, wide, N + 1, true, 5000);
    request_tokens(t, 9);
    item.start = 9;
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(rt_entry(&res, 1, 0)->gpu_blocks, 2);
    assert_int_equal(rt_entry(&res, 1, 0)->routing_tokens, 9);
    kvr_query_result_free(&res);
}

static void test_each_distinct_sequence_hashed_once(void **state)
{
    fx *f = *state;
    kvr_worker *a = NULL;
    for (uint64_t id = 1; id <= 3; id++)
        rt_register(f->ix, id, BS, KVR_MM_LEGACY, -1, false, NULL);
    for (uint64_t id = 4; id <= 5; id++)
        rt_register(f->ix, id, BS, KVR_MM_ENGINE_WIDE, -1, false, NULL);
    a = rt_register(f->ix, 6, BS, KVR_MM_LEGACY, -1, false, "adapter-a");
    uint64_t legacy[N];
    legacy_event_tokens(legacy, 8);
    rt_store(f->ix, a, 0, BS, legacy, N, false, 1000); /* hashed with adapter-a's seed */

    uint32_t t[N];
    request_tokens(t, 8);
    kvr_mm_item item = ITEM(8, 12, true, MM_HASH);
    kvr_query_request q = rt_request(t, N, &item, 1);
    kvr_query_result res;
    kvr_query_result_init(&res);
    kvr_router_stats before, after;
    kvr_router_stats_get(f->r, &before);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    kvr_router_stats_get(f->r, &after);
    /* padded (no lora), text prefix (no lora), padded (adapter-a) */
    assert_int_equal(res.n_hash_passes, 3);
    assert_int_equal(after.hash_passes - before.hash_passes, 3);
    assert_int_equal(res.n_entries, 6);
    assert_int_equal(rt_entry(&res, 6, 0)->gpu_blocks, 4);
    assert_int_equal(rt_entry(&res, 1, 0)->gpu_blocks, 0);

    /* A request adapter overrides every worker's: one seed, two sequences,
     * and adapter-a's blocks no longer match under another adapter. */
    q.lora_name = "adapter-b";
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(res.n_hash_passes, 2);
    assert_int_equal(rt_entry(&res, 6, 0)->gpu_blocks, 0);
    q.lora_name = "adapter-a";
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(rt_entry(&res, 6, 0)->gpu_blocks, 4);
    /* A cache salt changes the namespace: nothing matches. */
    q.cache_salt = "tenant-a";
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(rt_entry(&res, 6, 0)->gpu_blocks, 0);
    kvr_query_result_free(&res);
}

static void expect_bad(kvr_router *r, const uint32_t *t, size_t n, const kvr_mm_item *items,
                       size_t n_items, const char *field)
{
    kvr_query_request q = rt_request(t, n, items, n_items);
    kvr_query_result res;
    kvr_query_result_init(&res);
    assert_int_equal(kvr_query(r, &q, &res), KVR_ROUTE_BAD_REQUEST);
    if (strncmp(res.error, field, strlen(field)) != 0)
        fail_msg("error '%s' does not name %s", res.error, field);
    kvr_query_result_free(&res);
}

static void test_span_validation(void **state)
{
    fx *f = *state;
    rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    uint32_t t[N];
    request_tokens(t, 8);
    kvr_mm_item beyond[1] = {ITEM(8, 17, true, 1)};
    expect_bad(f->r, t, N, beyond, 1, "mm_items[0].end");
    kvr_mm_item start_out[1] = {ITEM(16, 17, true, 1)};
    expect_bad(f->r, t, N, start_out, 1, "mm_items[0].start");
    kvr_mm_item empty[1] = {ITEM(8, 8, true, 1)};
    expect_bad(f->r, t, N, empty, 1, "mm_items[0].end");
    kvr_mm_item overlap[3] = {ITEM(0, 2, true, 1), ITEM(4, 9, true, 2), ITEM(8, 12, true, 3)};
    expect_bad(f->r, t, N, overlap, 3, "mm_items[2].start");
    kvr_mm_item unordered[2] = {ITEM(8, 12, true, 1), ITEM(2, 4, true, 2)};
    expect_bad(f->r, t, N, unordered, 2, "mm_items[1].start");
    expect_bad(f->r, t, 0, NULL, 0, "token_ids");

    kvr_mm_item adjacent[2] = {ITEM(4, 8, true, 1), ITEM(8, 12, true, 2)};
    kvr_query_request q = rt_request(t, N, adjacent, 2);
    kvr_query_result res;
    kvr_query_result_init(&res);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    q.model_name = "other";
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_UNKNOWN_MODEL);
    assert_non_null(strstr(res.error, "model_name"));
    kvr_query_result_free(&res);
}

static void test_auto_worker_stops_forwarding_after_wide_ids(void **state)
{
    fx *f = *state;
    kvr_worker *w = rt_register(f->ix, 1, BS, KVR_MM_AUTO, -1, false, NULL);
    uint32_t t[N];
    request_tokens(t, 8);
    kvr_mm_item item = ITEM(8, 12, true, MM_HASH);
    kvr_query_request q = rt_request(t, N, &item, 1);
    kvr_query_result res;
    kvr_query_result_init(&res);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    assert_true(rt_entry(&res, 1, 0)->forward_mm_hashes);
    assert_int_equal(rt_entry(&res, 1, 0)->routing_tokens, N);

    /* The engine shows it owns image identities: no more forwarding. */
    uint64_t wide[N];
    wide_event_tokens(wide, N, 8);
    rt_store(f->ix, w, 0, BS, wide, N, false, 1000);
    assert_int_equal(kvr_query(f->r, &q, &res), KVR_ROUTE_OK);
    const kvr_query_entry *e = rt_entry(&res, 1, 0);
    assert_false(e->forward_mm_hashes);
    assert_int_equal(e->seq_kind, KVR_SEQ_TEXT_PREFIX);
    assert_int_equal(e->gpu_blocks, 2);
    kvr_query_result_free(&res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_legacy_worker_gets_pad_substitution, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_accepting_workers_route_on_text_prefix, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_item_without_hash_disables_forwarding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mixed_fleet_scores_each_worker_with_its_sequence,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_eagle_overlap_token_at_media_boundary, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_each_distinct_sequence_hashed_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_span_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_worker_stops_forwarding_after_wide_ids, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
