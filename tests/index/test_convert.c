/* Converter: SPEC §4 vectors, lora from worker vs event, salt propagation,
 * Eagle windows, duplicate detection. */
#include "test_support.h"

#include <stdlib.h>
#include <string.h>

#include "index/convert.h"
#include "kvrouter/hash.h"

static kvr_str S(const char *s)
{
    kvr_str r = {s, s ? (uint32_t)strlen(s) : 0};
    return r;
}

static kvr_norm_event store(const uint64_t *hashes, uint32_t n, bool has_parent, uint64_t parent,
                            const uint32_t *tokens, uint32_t nt)
{
    kvr_norm_event e;
    memset(&e, 0, sizeof e);
    e.kind = KVR_NORM_STORE;
    e.tier = KVR_TIER_GPU;
    e.block_hashes = hashes;
    e.n_block_hashes = n;
    e.has_parent = has_parent;
    e.parent = parent;
    e.tokens = tokens;
    e.n_tokens = nt;
    return e;
}

static void test_spec_vectors(void **state)
{
    (void)state;
    kvr_converter *c = kvr_converter_create(4, false, NULL);
    assert_non_null(c);
    const uint32_t tok[] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint64_t h[] = {100, 200};
    uint64_t out[2];
    kvr_norm_event e = store(h, 2, false, 0, tok, 8);
    assert_int_equal(kvr_convert_store(c, &e, out), KVR_DROP_NONE);
    assert_int_equal(out[0], 14643705804678351452ull);
    assert_int_equal(out[1], 16777012769546811212ull);
    assert_int_equal(kvr_converter_default_seed(c), KVR_HASH_SEED);
    assert_int_equal(kvr_converter_tracked_blocks(c), 0); /* unsalted: no memory */
    kvr_converter_destroy(c);
    assert_null(kvr_converter_create(0, false, NULL));
}

static void test_lora_from_worker_vs_event(void **state)
{
    (void)state;
    const uint32_t tok[] = {0, 1, 2, 3};
    const uint64_t h[] = {100};
    uint64_t out[1];
    /* the worker's adapter applies when the event names none */
    kvr_converter *c = kvr_converter_create(4, false, "adapter-a");
    assert_int_equal(kvr_converter_default_seed(c), 8842669519798868182ull);
    kvr_norm_event e = store(h, 1, false, 0, tok, 4);
    assert_int_equal(kvr_convert_store(c, &e, out), KVR_DROP_NONE);
    assert_int_equal(out[0], 6665157333201000639ull);
    e.lora_name = S(""); /* empty is no name */
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], 6665157333201000639ull);
    e.lora_name = S("adapter-a"); /* naming the worker's own adapter: same seed */
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], 6665157333201000639ull);
    kvr_converter_destroy(c);
    /* the event's adapter wins over the worker's */
    c = kvr_converter_create(4, false, "other");
    e.lora_name = S("adapter-a");
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], 6665157333201000639ull);
    kvr_converter_destroy(c);
    /* no adapter anywhere */
    c = kvr_converter_create(4, false, "");
    e.lora_name = S(NULL);
    kvr_convert_store(c, &e, out);
    kvr_str none = {NULL, 0};
    assert_int_equal(out[0], kvr_hash_tokens(tok, 4, kvr_hash_seed(none, none)));
    kvr_converter_destroy(c);
}

static void test_salt_and_both_vectors(void **state)
{
    (void)state;
    const uint32_t tok[] = {0, 1, 2, 3};
    const uint64_t h[] = {100};
    uint64_t out[1];
    kvr_converter *c = kvr_converter_create(4, false, NULL);
    kvr_norm_event e = store(h, 1, false, 0, tok, 4);
    e.cache_salt = S("tenant-a");
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], 17009624042690211646ull);
    e.lora_name = S("adapter-a");
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], 8269515957840517240ull);
    kvr_converter_destroy(c);
}

static void test_salt_propagates_to_children(void **state)
{
    (void)state;
    kvr_converter *c = kvr_converter_create(4, false, NULL);
    const uint32_t tok[] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint64_t out[2], salted_seed = 1948188790972764086ull;
    /* store 1 names the salt */
    const uint64_t h1[] = {10, 11};
    kvr_norm_event e = store(h1, 2, false, 0, tok, 8);
    e.cache_salt = S("tenant-a");
    assert_int_equal(kvr_convert_store(c, &e, out), KVR_DROP_NONE);
    assert_int_equal(out[0], 17009624042690211646ull);
    assert_int_equal(kvr_converter_tracked_blocks(c), 2);
    /* store 2 omits it: same seed as its parent, and on to a grandchild */
    const uint64_t h2[] = {12};
    e = store(h2, 1, true, 11, tok, 4);
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], kvr_hash_tokens(tok, 4, salted_seed));
    const uint64_t h3[] = {13};
    e = store(h3, 1, true, 12, tok, 4);
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], 17009624042690211646ull);
    /* a child of an unsalted parent gets the default seed */
    const uint64_t h4[] = {20}, h5[] = {21};
    e = store(h4, 1, false, 0, tok, 4);
    kvr_convert_store(c, &e, out);
    e = store(h5, 1, true, 20, tok, 4);
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], kvr_hash_tokens(tok, 4, KVR_HASH_SEED));
    assert_int_equal(kvr_converter_tracked_blocks(c), 4);
    /* an explicit empty salt overrides the parent's */
    e = store(h5, 1, true, 13, tok, 4);
    e.cache_salt = S("");
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], kvr_hash_tokens(tok, 4, KVR_HASH_SEED));

    /* removal from gpu while cpu still holds block 13: the salt stays */
    e = store(h3, 1, true, 12, tok, 4);
    e.tier = KVR_TIER_CPU;
    kvr_convert_store(c, &e, out);
    kvr_convert_removed_tier(c, KVR_TIER_GPU, h3, 1);
    const uint64_t h6[] = {14};
    e = store(h6, 1, true, 13, tok, 4);
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], 17009624042690211646ull);
    /* gone from every tier: forgotten */
    kvr_convert_removed_tier(c, KVR_TIER_CPU, h3, 1);
    e = store(h6, 1, true, 13, tok, 4);
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], kvr_hash_tokens(tok, 4, KVR_HASH_SEED));
    /* removal from every tier that holds them forgets them; reset forgets everything */
    for (int t = 0; t < KVR_TIER_COUNT; t++)
        kvr_convert_removed_tier(c, (kvr_tier)t, h1, 2);
    e = store(h2, 1, true, 11, tok, 4);
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], kvr_hash_tokens(tok, 4, KVR_HASH_SEED));
    assert_true(kvr_converter_tracked_blocks(c) > 0);
    kvr_converter_reset(c);
    assert_int_equal(kvr_converter_tracked_blocks(c), 0);
    e = store(h3, 1, true, 12, tok, 4);
    kvr_convert_store(c, &e, out);
    assert_int_equal(out[0], kvr_hash_tokens(tok, 4, KVR_HASH_SEED));
    kvr_converter_destroy(c);
}

static void test_eagle_windows(void **state)
{
    (void)state;
    const uint32_t tok[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const uint64_t h[] = {10, 11};
    uint64_t out[2];
    /* worker flag or the store's flag */
    for (int from_store = 0; from_store < 2; from_store++) {
        kvr_converter *c = kvr_converter_create(4, !from_store, NULL);
        kvr_norm_event e = store(h, 2, false, 0, tok, 9);
        e.eagle = from_store;
        assert_int_equal(kvr_convert_store(c, &e, out), KVR_DROP_NONE);
        assert_int_equal(out[0], 1914873892905420881ull); /* [1,2,3,4,5] */
        assert_int_equal(out[1], kvr_hash_tokens(tok + 4, 5, KVR_HASH_SEED));
        /* without the last overlap token only one block can be hashed */
        e.n_tokens = 8;
        assert_int_equal(kvr_convert_store(c, &e, out), KVR_DROP_MALFORMED_EVENT);
        kvr_converter_destroy(c);
    }
}

static void test_duplicate_ids_rejected(void **state)
{
    (void)state;
    /* The normalizer detects the repeat (test_exclusion) and flags it; the
     * converter must reject a flagged store and hash nothing. */
    kvr_converter *c = kvr_converter_create(1, false, NULL);
    uint32_t tok[4] = {1, 2, 3, 4};
    uint64_t out[4] = {0, 0, 0, 0};
    const uint64_t rep[] = {5, 6, 5};
    kvr_norm_event e = store(rep, 3, false, 0, tok, 3);
    e.duplicate_ids = true;
    assert_int_equal(kvr_convert_store(c, &e, out), KVR_DROP_DUPLICATE_IDS);
    assert_int_equal(out[0], 0);
    e.duplicate_ids = false;
    assert_int_equal(kvr_convert_store(c, &e, out), KVR_DROP_NONE);
    assert_int_equal(out[0], kvr_hash_tokens(tok, 1, KVR_HASH_SEED));
    kvr_converter_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_vectors),
        cmocka_unit_test(test_lora_from_worker_vs_event),
        cmocka_unit_test(test_salt_and_both_vectors),
        cmocka_unit_test(test_salt_propagates_to_children),
        cmocka_unit_test(test_eagle_windows),
        cmocka_unit_test(test_duplicate_ids_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
