/* Golden wire vectors (fixtures/wire/payloads.json) decoded and applied
 * through the facade, then matched: what SPEC §3's field rules mean for the
 * index, not only for the decoded fields. */
#include "indexer_fixture.h"

static kvr_batch decode_fixture(const char *name, unsigned char **bytes)
{
    json_t *root = kvr_test_load_json("fixtures/wire/payloads.json");
    size_t i;
    json_t *v;
    const char *hex = NULL;
    json_array_foreach(json_object_get(root, "payloads"), i, v) {
        if (strcmp(json_string_value(json_object_get(v, "name")), name) == 0)
            hex = json_string_value(json_object_get(v, "hex"));
    }
    assert_non_null(hex);
    size_t len;
    *bytes = kvr_test_hex(hex, &len);
    json_decref(root);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, *bytes, len), KVR_BATCH_OK);
    return b;
}

/* cache_salt "" is no salt: both children inherit tenant-a from the first
 * store, so the whole chain matches under tenant-a's seed. */
static void test_empty_cache_salt_inherits_parent_namespace(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *w = reg_ok(ix, &s, KVR_REG_CREATED);
    unsigned char *bytes;
    kvr_batch b = decode_fixture("empty_cache_salt", &bytes);
    kvr_indexer_apply(ix, w, 0, &b);
    uint32_t tokens[12];
    text32(tokens, 12, 1);
    kvr_str none = {NULL, 0};
    uint64_t tenant = kvr_hash_seed(none, S("tenant-a"));
    assert_int_equal(match_seed(ix, 1, 0, tokens, 12, tenant).gpu, 3);
    /* and nothing was indexed under the unsalted or the "" seed */
    assert_int_equal(match_gpu(ix, 1, 0, tokens, 12), 0);
    kvr_batch_free(&b);
    free(bytes);
    kvr_indexer_destroy(ix);
}

/* A string in the group_idx slot is the attention kind of group 0: the
 * full-attention store is indexed, the sliding-window one is filtered, and
 * the removal in the same layout applies. */
static void test_group_idx_slot_string_is_the_kind(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *w = reg_ok(ix, &s, KVR_REG_CREATED);
    unsigned char *bytes;
    kvr_batch b = decode_fixture("group_idx_slot_string", &bytes);
    kvr_indexer_apply(ix, w, 0, &b);
    kvr_worker_info *info = info_of(ix, w);
    const kvr_rank_info *r = rank_of(info, 0);
    assert_non_null(r);
    assert_int_equal(r->norm.drops[KVR_DROP_MALFORMED_EVENT], 0);
    assert_int_equal(r->norm.drops[KVR_DROP_NON_MAIN_ATTENTION], 1);
    assert_int_equal(r->blocks_stored, 2);
    assert_int_equal(r->blocks_removed, 1);
    uint32_t tokens[8];
    text32(tokens, 8, 1);
    assert_int_equal(match_gpu(ix, 1, 0, tokens, 8), 1);
    uint32_t sliding[4];
    text32(sliding, 4, 9);
    assert_int_equal(match_gpu(ix, 1, 0, sliding, 4), 0);
    free(info);
    kvr_batch_free(&b);
    free(bytes);
    kvr_indexer_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_cache_salt_inherits_parent_namespace),
        cmocka_unit_test(test_group_idx_slot_string_is_the_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
