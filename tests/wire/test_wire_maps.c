/* Map-encoded events (vLLM style) in every key order, the keys that name
 * the same thing, and the tagged removal's optional tail. */
#include "wire_build.h"

#include "wire_assert.h"

/* "type" last: the decoder must find fields by position first */
static void test_type_key_last(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b,
                                    "[%lf [{%s [%d %d] %s [%d %d %d %d] %s %d %s %s %s %s}] %d]",
                                    1.0, "block_hashes", 5, 6, "token_ids", 1, 2, 3, 4,
                                    "block_size", 2, "medium", "CPU_TIER2", "type", "BlockStored",
                                    1),
                     KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_int_equal(e->tier, KVR_TIER_DISK);
    assert_int_equal(e->n_block_hashes, 2);
    assert_int_equal(e->block_hashes[1], 6);
    assert_int_equal(e->n_token_ids, 4);
    assert_int_equal(e->token_ids[3], 4);
    assert_int_equal(e->block_size, 2);
    assert_false(e->has_parent);
}

/* the same event with "type" first and last decodes identically */
static void test_key_order_does_not_matter(void **state)
{
    (void)state;
    const char *first = "[%lf [{%s %s %s [%d] %s %d %s [[%d %d] [%d %d]] %s %d %s %s %s %s "
                        "%s %d %s %s %s %d %s %s %s %s}]]";
    const char *last = "[%lf [{%s [%d] %s %d %s [[%d %d] [%d %d]] %s %d %s %s %s %s "
                       "%s %d %s %s %s %d %s %s %s %s %s %s}]]";
    kvr_raw_event a;
    uint64_t hashes[1], tokens[3];
    assert_int_equal(kvr_decode_fmt(&g_b, first, 1.0, "type", "BlockStored", "block_hashes", 9,
                                    "parent_block_hash", 8, "token_ids", 1, 2, 2, 3,
                                    "block_size", 2, "lora_name", "ad", "cache_salt", "salt",
                                    "group_idx", 3, "kv_cache_spec_kind", "mla_attention",
                                    "kv_cache_spec_sliding_window", 128, "locality", "LOCAL",
                                    "session_id", "sess"),
                     KVR_BATCH_OK);
    a = g_ev.ev[0];
    /* copy out: the next decode reuses the buffers (strings borrow from the
     * static mp_format buffer, which the next call overwrites too) */
    memcpy(hashes, a.block_hashes, sizeof hashes);
    memcpy(tokens, a.token_ids, sizeof tokens);
    a.block_hashes = hashes;
    a.token_ids = tokens;
    assert_int_equal(a.type, KVR_EV_STORED);
    assert_true(a.eagle);
    assert_int_equal(a.n_token_ids, 3);
    assert_int_equal(a.parent, 8);
    assert_int_equal(a.sliding_window, 128);
    assert_int_equal(a.group_idx, 3);
    char saved[5][16];
    kvr_str *strs[5] = {&a.lora_name, &a.cache_salt, &a.kv_cache_spec_kind, &a.locality,
                        &a.session_id};
    for (int i = 0; i < 5; i++) {
        assert_true(strs[i]->len < sizeof saved[i]);
        memcpy(saved[i], strs[i]->ptr, strs[i]->len);
        strs[i]->ptr = saved[i];
    }
    assert_true(kvr_str_eq(a.cache_salt, "salt"));
    assert_true(kvr_str_eq(a.session_id, "sess"));

    assert_int_equal(kvr_decode_fmt(&g_b, last, 1.0, "block_hashes", 9, "parent_block_hash", 8,
                                    "token_ids", 1, 2, 2, 3, "block_size", 2, "lora_name", "ad",
                                    "cache_salt", "salt", "group_idx", 3, "kv_cache_spec_kind",
                                    "mla_attention", "kv_cache_spec_sliding_window", 128,
                                    "locality", "LOCAL", "session_id", "sess", "type",
                                    "BlockStored"),
                     KVR_BATCH_OK);
    kvr_assert_event_equal(&g_ev.ev[0], &a);
}

/* top-level cache_salt wins over the metadata map; "metadata" names the
 * position-7 map; unknown and non-string keys are ignored */
static void test_metadata_and_top_level_salt(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b,
                                    "[%lf [{%s %s %s {%s %s %s %s} %d %s %s [%d] %s [%d] "
                                    "%s %s %s %s}]]",
                                    1.0, "type", "BlockStored", "metadata", "cache_salt", "inner",
                                    "session_id", "s9", 77, "ignored", "block_hashes", 1,
                                    "token_ids", 2, "cache_salt", "outer", "future_key", "x"),
                     KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_true(kvr_str_eq(e->cache_salt, "outer"));
    assert_true(kvr_str_eq(e->session_id, "s9"));
    assert_int_equal(e->block_size, 0);
    /* nil top-level salt keeps the map's */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [{%s %s %s NIL %s [%d] %s [%d] %s {%s %s}}]]",
                                    1.0, "type", "BlockStored", "cache_salt", "block_hashes", 1,
                                    "token_ids", 2, "lora_name", "cache_salt", "inner"),
                     KVR_BATCH_OK);
    assert_true(kvr_str_eq(g_ev.ev[0].cache_salt, "inner"));
}

/* a removal map ignores store-only keys, even malformed ones */
static void test_removal_map_ignores_store_keys(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [{%s %s %s [%d] %s %s %s %d} {%s [%d] %s %s}]]",
                                    1.0, "type", "BlockRemoved", "block_hashes", 4, "token_ids",
                                    "junk", "group_idx", 2, "block_hashes", 5, "type",
                                    "BlockRemoved"),
                     KVR_BATCH_OK);
    assert_int_equal(g_b.tally.dropped, 0);
    assert_int_equal(g_ev.ev[0].type, KVR_EV_REMOVED);
    assert_int_equal(g_ev.ev[0].block_hashes[0], 4);
    assert_int_equal(g_ev.ev[0].group_idx, 2);
    assert_int_equal(g_ev.ev[1].type, KVR_EV_REMOVED);
    assert_int_equal(g_ev.ev[1].block_hashes[0], 5);
}

/* type first but unknown, or cleared with extra keys */
static void test_map_type_variants(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [{%s %s %s [%d]} {%s %s %s %d} {%d %d}]]", 1.0,
                                    "type", "Evicted", "block_hashes", 1, "type",
                                    "AllBlocksCleared", "extra", 1, 1, 2),
                     KVR_BATCH_OK);
    assert_int_equal(g_b.n_events, 3);
    assert_int_equal(g_ev.ev[0].drop_reason, KVR_DROP_UNKNOWN_EVENT);
    assert_int_equal(g_ev.ev[1].type, KVR_EV_CLEARED);
    assert_int_equal(g_ev.ev[2].drop_reason, KVR_DROP_MALFORMED_EVENT);
    assert_int_equal(g_b.tally.dropped, 2);
}

/* tagged BlockRemoved: [tag, hashes, medium, group_idx, kind, window, locality, ...] */
static void test_tagged_removal_tail(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [[%s [%d] %s %d %s %d %s %s]]]", 1.0,
                                    "BlockRemoved", 3, "shared", 4, "sliding_window", 1024,
                                    "REMOTE", "future"),
                     KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_REMOVED);
    assert_int_equal(e->tier, KVR_TIER_EXTERNAL);
    assert_int_equal(e->group_idx, 4);
    assert_true(kvr_str_eq(e->kv_cache_spec_kind, "sliding_window"));
    assert_int_equal(e->sliding_window, 1024);
    assert_true(kvr_str_eq(e->locality, "REMOTE"));
    /* a removal without a medium is on the gpu */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [[%s [%d]]]]", 1.0, "BlockRemoved", 3),
                     KVR_BATCH_OK);
    assert_int_equal(g_ev.ev[0].tier, KVR_TIER_GPU);
    assert_false(g_ev.ev[0].has_group_idx);
}

/* a tagged store carries every field through position 12 */
static void test_tagged_store_all_fields(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b,
                                    "[%lf [[%s [%d] %d [%d] %d %d %s %s [NIL] %d %s NIL %s %d]]]",
                                    1.0, "BlockStored", 1, 2, 3, 1, -1, "NVME", "lora-x", 0,
                                    "sink_full_attention", "LOCAL", 99),
                     KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_int_equal(e->tier, KVR_TIER_DISK);
    assert_int_equal(e->lora_id, -1);
    assert_true(kvr_str_eq(e->lora_name, "lora-x"));
    assert_false(kvr_str_present(e->cache_salt));
    assert_true(e->has_group_idx);
    assert_int_equal(e->group_idx, 0);
    assert_true(kvr_str_eq(e->kv_cache_spec_kind, "sink_full_attention"));
    assert_false(e->has_sliding_window);
    assert_true(kvr_str_eq(e->locality, "LOCAL"));
}

/* SPEC §3: a tagged store may end after any field from index 4 on. The
 * full store of test_tagged_store_all_fields cut to 5..13 elements: each
 * decodes as a store, with the fields it kept and the defaults of the
 * fields it lost (gpu medium, no lora, no extra_keys, group 0, no kind, no
 * locality). */
static void test_tagged_store_ends_after_any_field_from_4(void **state)
{
    (void)state;
    for (uint32_t len = 5; len <= 13; len++) {
        char buf[256], *p = buf;
        p = mp_encode_array(p, 2);
        p = mp_encode_double(p, 1.0);
        p = mp_encode_array(p, 1);
        p = mp_encode_array(p, len);
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 1);
        p = mp_encode_uint(p, 2); /* parent */
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 3);
        p = mp_encode_uint(p, 1); /* block_size: index 4 */
        if (len > 5)
            p = mp_encode_int(p, -1); /* lora_id */
        if (len > 6)
            p = mp_encode_str(p, "NVME", 4);
        if (len > 7)
            p = mp_encode_str(p, "lora-x", 6);
        if (len > 8) {
            p = mp_encode_array(p, 1); /* extra_keys: one block, nil */
            p = mp_encode_nil(p);
        }
        if (len > 9)
            p = mp_encode_uint(p, 2); /* group_idx */
        if (len > 10)
            p = mp_encode_str(p, "sink_full_attention", 19);
        if (len > 11)
            p = mp_encode_nil(p); /* sliding window */
        if (len > 12)
            p = mp_encode_str(p, "LOCAL", 5);
        assert_int_equal(kvr_decode_copy(&g_b, buf, (size_t)(p - buf)), KVR_BATCH_OK);
        assert_int_equal(g_b.tally.dropped, 0);
        const kvr_raw_event *e = &g_ev.ev[0];
        assert_int_equal(e->type, KVR_EV_STORED);
        assert_int_equal(e->block_hashes[0], 1);
        assert_true(e->has_parent);
        assert_int_equal(e->parent, 2);
        assert_int_equal(e->n_token_ids, 1);
        assert_int_equal(e->token_ids[0], 3);
        assert_int_equal(e->block_size, 1);
        assert_int_equal(e->has_lora_id, len > 5);
        assert_int_equal(e->tier, len > 6 ? KVR_TIER_DISK : KVR_TIER_GPU);
        assert_int_equal(kvr_str_eq(e->lora_name, "lora-x"), len > 7);
        assert_int_equal(e->extra_keys != NULL, len > 8);
        assert_int_equal(e->has_group_idx, len > 9);
        if (len > 9)
            assert_int_equal(e->group_idx, 2);
        assert_int_equal(kvr_str_eq(e->kv_cache_spec_kind, "sink_full_attention"), len > 10);
        assert_false(e->has_sliding_window);
        assert_int_equal(kvr_str_eq(e->locality, "LOCAL"), len > 12);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_key_last),
        cmocka_unit_test(test_key_order_does_not_matter),
        cmocka_unit_test(test_metadata_and_top_level_salt),
        cmocka_unit_test(test_removal_map_ignores_store_keys),
        cmocka_unit_test(test_map_type_variants),
        cmocka_unit_test(test_tagged_removal_tail),
        cmocka_unit_test(test_tagged_store_all_fields),
        cmocka_unit_test(test_tagged_store_ends_after_any_field_from_4),
    };
    return cmocka_run_group_tests(tests, kvr_wire_setup, kvr_wire_teardown);
}
