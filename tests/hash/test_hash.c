/* Every vector of fixtures/hash_vectors.json, plus the block-window rules. */
#include "test_support.h"

#include <string.h>

#include "kvrouter/hash.h"

static kvr_str opt_str(json_t *j)
{
    kvr_str s = {NULL, 0};
    if (json_is_string(j)) {
        s.ptr = json_string_value(j);
        s.len = (uint32_t)json_string_length(j);
    }
    return s;
}

static void test_block_hash_vectors(void **state)
{
    (void)state;
    json_t *root = kvr_test_load_json("fixtures/hash_vectors.json");
    json_t *vectors = json_object_get(root, "block_hashes");
    assert_true(json_array_size(vectors) >= 5);
    size_t i;
    json_t *v;
    json_array_foreach(vectors, i, v) {
        json_t *toks = json_object_get(v, "tokens");
        uint32_t tokens[16];
        size_t n = json_array_size(toks);
        for (size_t k = 0; k < n; k++)
            tokens[k] = (uint32_t)json_integer_value(json_array_get(toks, k));
        uint64_t seed = kvr_hash_seed(opt_str(json_object_get(v, "lora_name")),
                                      opt_str(json_object_get(v, "cache_salt")));
        uint64_t want = kvr_test_u64(json_string_value(json_object_get(v, "hash")));
        assert_int_equal(kvr_hash_tokens(tokens, n, seed), want);
        /* the block API gives the same value for a one-block sequence */
        uint64_t out[2] = {0, 0};
        assert_int_equal(kvr_hash_blocks(tokens, n, (uint32_t)n, false, seed, out, 2), 1);
        assert_int_equal(out[0], want);
    }
    json_decref(root);
}

static void test_seed_vectors(void **state)
{
    (void)state;
    json_t *root = kvr_test_load_json("fixtures/hash_vectors.json");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(root, "seeds"), i, v) {
        uint64_t seed = kvr_hash_seed(opt_str(json_object_get(v, "lora_name")),
                                      opt_str(json_object_get(v, "cache_salt")));
        assert_int_equal(seed, kvr_test_u64(json_string_value(json_object_get(v, "seed"))));
    }
    assert_int_equal(i, 3);
    /* empty strings do not change the seed */
    kvr_str empty = {"", 0}, none = {NULL, 0};
    assert_int_equal(kvr_hash_seed(empty, empty), KVR_HASH_SEED);
    assert_int_equal(kvr_hash_seed(none, none), KVR_HASH_SEED);
    json_decref(root);
}

/* Every entry of the bytes, chain, eagle_window and pad_value lists, each
 * read whole from the fixture (tokens included). */
static void test_bytes_chain_eagle_pad_vectors(void **state)
{
    (void)state;
    json_t *root = kvr_test_load_json("fixtures/hash_vectors.json");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(root, "bytes"), i, v) {
        const char *utf8 = json_string_value(json_object_get(v, "utf8"));
        assert_non_null(utf8);
        assert_int_equal(kvr_hash_bytes(utf8, strlen(utf8),
                                        (uint64_t)json_integer_value(json_object_get(v, "seed"))),
                         kvr_test_u64(json_string_value(json_object_get(v, "hash"))));
    }
    json_array_foreach(json_object_get(root, "chain"), i, v) {
        assert_int_equal(
            kvr_hash_chain(kvr_test_u64(json_string_value(json_object_get(v, "parent"))),
                           kvr_test_u64(json_string_value(json_object_get(v, "block")))),
            kvr_test_u64(json_string_value(json_object_get(v, "hash"))));
    }
    json_array_foreach(json_object_get(root, "eagle_window"), i, v) {
        json_t *toks = json_object_get(v, "tokens");
        uint32_t b = (uint32_t)json_integer_value(json_object_get(v, "block_size"));
        uint32_t tokens[64];
        size_t n = json_array_size(toks);
        assert_true(n == b + 1 && n <= 64); /* one Eagle window: B + 1 tokens */
        for (size_t k = 0; k < n; k++)
            tokens[k] = (uint32_t)json_integer_value(json_array_get(toks, k));
        uint64_t out[2] = {0, 0};
        assert_int_equal(kvr_hash_blocks(tokens, n, b, true, KVR_HASH_SEED, out, 2), 1);
        assert_int_equal(out[0], kvr_test_u64(json_string_value(json_object_get(v, "hash"))));
    }
    json_array_foreach(json_object_get(root, "pad_value"), i, v) {
        uint64_t h = kvr_test_u64(json_string_value(json_object_get(v, "mm_hash")));
        assert_int_equal(kvr_pad_value(h), json_integer_value(json_object_get(v, "pad")));
    }
    /* every list has entries: an emptied one checks nothing */
    static const char *const lists[] = {"bytes", "chain", "eagle_window", "pad_value"};
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++)
        assert_true(json_array_size(json_object_get(root, lists[k])) > 0);
    json_decref(root);
}

/* The fixture holds only the kinds of vector the tests above check: a new
 * list added to it without a test fails here. */
static void test_every_vector_list_has_a_test(void **state)
{
    (void)state;
    static const char *const checked[] = {"seed",  "block_hashes", "seeds",     "bytes",
                                          "chain", "eagle_window", "pad_value", "notes"};
    json_t *root = kvr_test_load_json("fixtures/hash_vectors.json");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        size_t k = 0;
        while (k < sizeof checked / sizeof checked[0] && strcmp(checked[k], key) != 0)
            k++;
        if (k == sizeof checked / sizeof checked[0])
            fail_msg("fixtures/hash_vectors.json: '%s' has no test", key);
    }
    /* the seed every vector without lora or salt uses */
    assert_int_equal(json_integer_value(json_object_get(root, "seed")), KVR_HASH_SEED);
    json_decref(root);
}

static void test_whole_blocks_only(void **state)
{
    (void)state;
    uint32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    uint64_t out[4];
    assert_int_equal(kvr_hash_blocks(toks, 9, 4, false, KVR_HASH_SEED, out, 4), 2);
    assert_int_equal(out[0], 14643705804678351452ull);
    assert_int_equal(out[1], 16777012769546811212ull);
    assert_int_equal(kvr_hash_blocks(toks, 3, 4, false, KVR_HASH_SEED, out, 4), 0);
    /* Eagle: n tokens give floor((n-1)/B) blocks with stride B */
    assert_int_equal(kvr_hash_blocks(toks, 8, 4, true, KVR_HASH_SEED, out, 4), 1);
    assert_int_equal(kvr_hash_blocks(toks, 9, 4, true, KVR_HASH_SEED, out, 4), 2);
    assert_int_equal(out[0], 1914873892905420881ull);
    assert_int_equal(out[1], kvr_hash_tokens(toks + 4, 5, KVR_HASH_SEED));
    assert_int_equal(kvr_hash_block_count(0, 4, true), 0);
    assert_int_equal(kvr_hash_block_count(16, 0, false), 0);
    /* one and two pages are counted without a division: the SPEC formula
     * around those bounds, for both layouts and several block sizes */
    for (uint32_t b = 1; b <= 33; b += 4)
        for (size_t n = 0; n <= 3 * (size_t)b + 2; n++) {
            assert_int_equal(kvr_hash_block_count(n, b, false), n / b);
            assert_int_equal(kvr_hash_block_count(n, b, true), n == 0 ? 0 : (n - 1) / b);
        }
    /* cap bounds what is written but the count is still reported */
    out[1] = 77;
    assert_int_equal(kvr_hash_blocks(toks, 9, 4, false, KVR_HASH_SEED, out, 1), 2);
    assert_int_equal(out[1], 77);
}

static void test_pad_value_range(void **state)
{
    (void)state;
    assert_int_equal(kvr_pad_value(0), 1000000u);
    assert_int_equal(kvr_pad_value(UINT64_MAX), 1000000u + (1u << 30) - 1);
    assert_true(kvr_pad_value(UINT64_MAX) < KVR_WIDE_SENTINEL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_hash_vectors),
        cmocka_unit_test(test_seed_vectors),
        cmocka_unit_test(test_bytes_chain_eagle_pad_vectors),
        cmocka_unit_test(test_every_vector_list_has_a_test),
        cmocka_unit_test(test_whole_blocks_only),
        cmocka_unit_test(test_pad_value_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
