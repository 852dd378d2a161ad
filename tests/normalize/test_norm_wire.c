/* Real msgpack bytes (fixtures/wire/payloads.json) through the wire decoder
 * and the normalizer: the Kimi wide-id store in every mode, filters, Eagle. */
#include "norm_fixture.h"
#include "batch_collect.h"

#include <stdlib.h>

typedef struct {
    json_t *root;
    unsigned char *bytes;
    kvr_batch batch;
    kvr_test_events ev; /* every event of the batch */
} payload;

static void load(payload *p, const char *name)
{
    p->root = kvr_test_load_json("fixtures/wire/payloads.json");
    size_t i;
    json_t *v;
    const char *hex = NULL;
    json_array_foreach(json_object_get(p->root, "payloads"), i, v) {
        if (strcmp(json_string_value(json_object_get(v, "name")), name) == 0)
            hex = json_string_value(json_object_get(v, "hex"));
    }
    assert_non_null(hex);
    size_t len;
    p->bytes = kvr_test_hex(hex, &len);
    assert_non_null(p->bytes);
    kvr_batch_init(&p->batch);
    assert_int_equal(kvr_batch_decode(&p->batch, p->bytes, len), KVR_BATCH_OK);
    memset(&p->ev, 0, sizeof p->ev);
    kvr_test_collect(&p->batch, &p->ev);
}

static void unload(payload *p)
{
    kvr_test_events_free(&p->ev);
    kvr_batch_free(&p->batch);
    free(p->bytes);
    json_decref(p->root);
}

static void test_kimi_wide_store_engine_wide(void **state)
{
    (void)state;
    payload p;
    load(&p, "sglang_kimi_wide_tokens");
    assert_int_equal(p.batch.n_events, 1);
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, 4, false, 0);
    kvr_norm_event out;
    kvr_normalize(n, &p.ev.ev[0], &out);
    const uint64_t kept[] = {(uint64_t)-5, 6};
    assert_store_of(&out, kept, 2, 8);
    for (uint32_t i = 0; i < 8; i++)
        assert_int_equal(out.tokens[i], 11 + i);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_excluded_ids, 1);
    assert_int_equal(c.mm_blocks_excluded, 1);
    assert_int_equal(c.wide_tokens_seen, 4);
    /* the recorded id is the third hash: its removal is filtered */
    const uint64_t rm[] = {7};
    kvr_raw_event ev = remove_ev(rm, 1);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.n_block_hashes, 0);
    kvr_normalizer_destroy(n);
    unload(&p);
}

static void test_kimi_wide_store_legacy_and_auto(void **state)
{
    (void)state;
    payload p;
    load(&p, "sglang_kimi_wide_tokens");
    kvr_norm_event out;
    kvr_normalizer *legacy = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    kvr_normalize(legacy, &p.ev.ev[0], &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    assert_int_equal(out.n_block_hashes, 2);
    assert_int_equal(counters(legacy).mm_excluded_ids, 0);
    assert_int_equal(kvr_normalizer_warnings(legacy), 1);
    kvr_normalizer_destroy(legacy);

    kvr_normalizer *autom = mk_norm(KVR_MM_AUTO, 4, false, 0);
    kvr_normalize(autom, &p.ev.ev[0], &out);
    assert_int_equal(out.n_block_hashes, 2);
    assert_int_equal(counters(autom).mm_excluded_ids, 1);
    assert_int_equal(kvr_normalizer_effective_mode(autom), KVR_MM_ENGINE_WIDE);
    assert_int_equal(kvr_normalizer_warnings(autom), 0);
    kvr_normalizer_destroy(autom);
    unload(&p);
}

static void test_sliding_window_removal_filtered(void **state)
{
    (void)state;
    payload p;
    load(&p, "vllm_map_removed_sliding");
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 16, false, 0);
    kvr_norm_event out;
    kvr_normalize(n, &p.ev.ev[0], &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(out.drop_reason, KVR_DROP_NON_MAIN_ATTENTION);
    kvr_normalizer_destroy(n);
    unload(&p);
}

static void test_eagle_bigram_payload(void **state)
{
    (void)state;
    payload p;
    load(&p, "eagle_bigram");
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, 4, false, 0);
    kvr_norm_event out;
    kvr_normalize(n, &p.ev.ev[0], &out);
    const uint64_t h[] = {201, 202};
    assert_true(out.eagle);
    assert_store_of(&out, h, 2, 9);
    for (uint32_t i = 0; i < 9; i++)
        assert_int_equal(out.tokens[i], i + 1);
    kvr_normalizer_destroy(n);
    unload(&p);
}

static void test_bad_event_alone_dropped(void **state)
{
    (void)state;
    payload p;
    load(&p, "batch_one_bad_event");
    assert_int_equal(p.batch.n_events, 3);
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    kvr_norm_event out;
    kvr_normalize(n, &p.ev.ev[0], &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    kvr_normalize(n, &p.ev.ev[1], &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    kvr_normalize(n, &p.ev.ev[2], &out);
    assert_int_equal(out.kind, KVR_NORM_REMOVE);
    assert_int_equal(out.n_block_hashes, 1);
    unload(&p);

    load(&p, "unknown_medium");
    kvr_normalize(n, &p.ev.ev[0], &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(out.drop_reason, KVR_DROP_UNKNOWN_TIER);
    assert_int_equal(counters(n).drops[KVR_DROP_UNKNOWN_TIER], 1);
    kvr_normalizer_destroy(n);
    unload(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kimi_wide_store_engine_wide),
        cmocka_unit_test(test_kimi_wide_store_legacy_and_auto),
        cmocka_unit_test(test_sliding_window_removal_filtered),
        cmocka_unit_test(test_eagle_bigram_payload),
        cmocka_unit_test(test_bad_event_alone_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
