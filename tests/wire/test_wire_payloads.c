/* Every golden payload of fixtures/wire/payloads.json, one cmocka test each.
 * The fixture states each payload as plain msgpack-as-JSON ("decoded"); the
 * comparator below applies SPEC §3 to that JSON independently of the C
 * decoder and asserts every field of every event against it. Each test also
 * asserts the fact its fixture note is about, by hand. */
#include "wire_assert.h"
#include "batch_collect.h"

#include <stdlib.h>

static json_t *g_root;

static json_t *find_payload(const char *name)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(g_root, "payloads"), i, p) {
        if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0)
            return p;
    }
    fail_msg("payload %s not in the fixture", name);
    return NULL;
}

/* --- SPEC §3 over the fixture's JSON (the reference side) --- */

/* int, {"int": "..."} (beyond 2^53) or {"bin_hex": "..."} -> u64 bits */
static uint64_t json_u64(json_t *v)
{
    if (json_is_integer(v))
        return (uint64_t)json_integer_value(v);
    json_t *big = json_object_get(v, "int");
    if (big)
        return kvr_test_u64(json_string_value(big));
    const char *hex = json_string_value(json_object_get(v, "bin_hex"));
    assert_non_null(hex);
    size_t n;
    unsigned char *bytes = kvr_test_hex(hex, &n);
    uint64_t out = 0;
    for (size_t i = n > 8 ? n - 8 : 0; i < n; i++)
        out = out << 8 | bytes[i];
    free(bytes);
    return out;
}

static int json_tier(json_t *medium)
{
    static const char *const names[][4] = {
        {"GPU", "DEVICE", "", NULL},
        {"CPU", "CPU_PINNED", "CPU_TIER1", NULL},
        {"CPU_TIER2", "DISK", "NVME", "STORAGE"},
        {"EXTERNAL", "NETWORK", "REMOTE", "SHARED"},
    };
    if (medium == NULL || json_is_null(medium))
        return KVR_TIER_GPU;
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 4 && names[t][k]; k++)
            if (strcmp(json_string_value(medium), names[t][k]) == 0)
                return t;
    return -1;
}

static kvr_str json_opt_str(json_t *v)
{
    kvr_str s = {NULL, 0};
    if (json_is_string(v)) {
        s.ptr = json_string_value(v);
        s.len = (uint32_t)json_string_length(v);
    }
    return s;
}

typedef struct {
    kvr_raw_event ev;
    uint64_t hashes[64];
    uint64_t tokens[64];
} expected;

/* field of a tagged array (by position) or a map event (by name) */
static json_t *field(json_t *e, size_t pos, const char *key)
{
    return json_is_array(e) ? json_array_get(e, pos) : json_object_get(e, key);
}

static void expect_hashes(expected *x, json_t *list)
{
    x->ev.n_block_hashes = (uint32_t)json_array_size(list);
    for (size_t i = 0; i < json_array_size(list); i++)
        x->hashes[i] = json_u64(json_array_get(list, i));
    x->ev.block_hashes = x->hashes;
}

static void expect_tokens(expected *x, json_t *list)
{
    size_t n = json_array_size(list);
    if (n && json_is_array(json_array_get(list, 0))) {
        x->ev.eagle = true;
        x->tokens[0] = json_u64(json_array_get(json_array_get(list, 0), 0));
        for (size_t i = 0; i < n; i++)
            x->tokens[i + 1] = json_u64(json_array_get(json_array_get(list, i), 1));
        n++;
    } else {
        for (size_t i = 0; i < n; i++)
            x->tokens[i] = json_u64(json_array_get(list, i));
    }
    x->ev.n_token_ids = (uint32_t)n;
    x->ev.token_ids = x->tokens;
}

static void expect_opt_int(json_t *v, bool *has, int64_t *out)
{
    *has = json_is_integer(v);
    *out = *has ? json_integer_value(v) : 0;
}

static void expect_event(expected *x, json_t *e)
{
    memset(x, 0, sizeof *x);
    kvr_raw_event *ev = &x->ev;
    const char *type = json_string_value(field(e, 0, "type"));
    bool removed = strcmp(type, "BlockRemoved") == 0;
    if (strcmp(type, "AllBlocksCleared") == 0) {
        ev->type = KVR_EV_CLEARED;
        return;
    }
    if (!removed && strcmp(type, "BlockStored") != 0) {
        ev->type = KVR_EV_DROPPED;
        ev->drop_reason = KVR_DROP_UNKNOWN_EVENT;
        return;
    }
    int tier = json_tier(field(e, removed ? 2 : 6, "medium"));
    if (tier < 0) {
        ev->type = KVR_EV_DROPPED;
        ev->drop_reason = KVR_DROP_UNKNOWN_TIER;
        return;
    }
    ev->type = removed ? KVR_EV_REMOVED : KVR_EV_STORED;
    ev->tier = (kvr_tier)tier;
    expect_hashes(x, field(e, 1, "block_hashes"));
    size_t g = removed ? 3 : 9;
    json_t *group = field(e, g, "group_idx");
    if (json_is_array(e) && json_is_string(group)) {
        /* a layout without group_idx: the kind sits in its slot, group 0 */
        ev->has_group_idx = true;
        ev->group_idx = 0;
        g--;
    } else {
        expect_opt_int(group, &ev->has_group_idx, &ev->group_idx);
    }
    ev->kv_cache_spec_kind = json_opt_str(field(e, g + 1, "kv_cache_spec_kind"));
    expect_opt_int(field(e, g + 2, "kv_cache_spec_sliding_window"), &ev->has_sliding_window,
                   &ev->sliding_window);
    ev->locality = json_opt_str(field(e, g + 3, "locality"));
    if (removed)
        return;
    json_t *parent = field(e, 2, "parent_block_hash");
    ev->has_parent = parent && !json_is_null(parent);
    if (ev->has_parent)
        ev->parent = json_u64(parent);
    expect_tokens(x, field(e, 3, "token_ids"));
    ev->block_size = (uint32_t)json_integer_value(field(e, 4, "block_size"));
    expect_opt_int(field(e, 5, "lora_id"), &ev->has_lora_id, &ev->lora_id);
    json_t *pos7 = field(e, 7, "lora_name");
    if (json_is_object(pos7)) {
        ev->cache_salt = json_opt_str(json_object_get(pos7, "cache_salt"));
        ev->session_id = json_opt_str(json_object_get(pos7, "session_id"));
    } else {
        ev->lora_name = json_opt_str(pos7);
    }
    json_t *top_salt = json_is_object(e) ? json_object_get(e, "cache_salt") : NULL;
    if (json_is_string(top_salt))
        ev->cache_salt = json_opt_str(top_salt); /* a top-level key wins */
}

/* Decodes the payload's hex and compares everything with its "decoded". */
static void check_payload(const char *name, kvr_batch *b, kvr_test_events *evs,
                          unsigned char **bytes)
{
    json_t *p = find_payload(name);
    size_t len;
    *bytes = kvr_test_hex(json_string_value(json_object_get(p, "hex")), &len);
    assert_non_null(*bytes);
    assert_int_equal(kvr_batch_decode(b, *bytes, len), KVR_BATCH_OK);

    json_t *d = json_object_get(p, "decoded");
    assert_true(b->ts == json_number_value(json_array_get(d, 0)));
    json_t *rank = json_array_get(d, 2);
    assert_int_equal(b->has_dp_rank, json_is_integer(rank));
    if (json_is_integer(rank))
        assert_int_equal(b->dp_rank, json_integer_value(rank));
    json_t *events = json_array_get(d, 1);
    assert_int_equal(b->n_events, json_array_size(events));
    kvr_test_collect(b, evs);
    assert_int_equal(evs->n, json_array_size(events));
    uint32_t dropped = 0;
    for (size_t i = 0; i < json_array_size(events); i++) {
        expected x;
        expect_event(&x, json_array_get(events, i));
        kvr_assert_event_equal(&evs->ev[i], &x.ev);
        dropped += x.ev.type == KVR_EV_DROPPED;
    }
    assert_int_equal(b->tally.dropped, dropped);
}

/* One named test per payload; `extra` holds the hand-written assertion. */
#define PAYLOAD_TEST(name, extra)                                                                 \
    static void test_##name(void **state)                                                         \
    {                                                                                             \
        (void)state;                                                                              \
        kvr_batch b;                                                                              \
        kvr_test_events evs = {0};                                                                \
        unsigned char *bytes;                                                                     \
        kvr_batch_init(&b);                                                                       \
        check_payload(#name, &b, &evs, &bytes);                                                   \
        const kvr_raw_event *e = evs.ev;                                                          \
        (void)e;                                                                                  \
        extra;                                                                                    \
        kvr_test_events_free(&evs);                                                               \
        kvr_batch_free(&b);                                                                       \
        free(bytes);                                                                              \
    }

PAYLOAD_TEST(sglang_stored_full, {
    assert_int_equal(e[0].block_hashes[0], 1234567890123ull);
    assert_int_equal(e[0].block_hashes[1], (uint64_t)-987654321);
    assert_int_equal(e[0].parent, 42);
    assert_int_equal(e[0].lora_id, 7);
    assert_int_equal(b.dp_rank, 2);
})
PAYLOAD_TEST(sglang_stored_nils, {
    assert_false(e[0].has_parent);
    assert_false(e[0].has_lora_id);
    assert_int_equal(e[0].tier, KVR_TIER_GPU);
    assert_false(b.has_dp_rank);
})
PAYLOAD_TEST(sglang_removed_disk, {
    assert_int_equal(e[0].type, KVR_EV_REMOVED);
    assert_int_equal(e[0].tier, KVR_TIER_DISK);
})
PAYLOAD_TEST(sglang_cleared, { assert_int_equal(e[0].type, KVR_EV_CLEARED); })
PAYLOAD_TEST(sglang_kimi_wide_tokens, {
    assert_int_equal(e[0].n_token_ids, 12);
    assert_int_equal(e[0].token_ids[8], 4294967303ull);
    assert_int_equal(e[0].token_ids[11], 9223372036854775792ull);
    assert_int_equal(e[0].block_hashes[0], (uint64_t)-5);
})
PAYLOAD_TEST(sglang_metadata_map_pos7, {
    assert_true(kvr_str_eq(e[0].cache_salt, "tenant-a"));
    assert_true(kvr_str_eq(e[0].session_id, "s1"));
    assert_false(kvr_str_present(e[0].lora_name));
    assert_int_equal(e[0].tier, KVR_TIER_CPU);
})
PAYLOAD_TEST(vllm_map_stored, {
    assert_int_equal(e[0].block_hashes[0], 15760518052499183552ull);
    assert_int_equal(e[0].n_token_ids, 16);
    assert_true(e[0].has_group_idx);
    assert_true(kvr_str_eq(e[0].kv_cache_spec_kind, "full_attention"));
})
PAYLOAD_TEST(vllm_map_removed_sliding, {
    /* the wire keeps it; filtering is the normalizer's job */
    assert_int_equal(e[0].type, KVR_EV_REMOVED);
    assert_int_equal(e[0].group_idx, 1);
    assert_true(kvr_str_eq(e[0].kv_cache_spec_kind, "sliding_window"));
})
PAYLOAD_TEST(eagle_bigram, {
    assert_true(e[0].eagle);
    assert_int_equal(e[0].n_token_ids, 9);
    for (uint32_t i = 0; i < 9; i++)
        assert_int_equal(e[0].token_ids[i], i + 1);
})
PAYLOAD_TEST(bin_hashes, { assert_int_equal(e[0].block_hashes[0], 0x18191a1b1c1d1e1full); })
PAYLOAD_TEST(batch_two_fields, {
    assert_false(b.has_dp_rank);
    assert_int_equal(e[0].type, KVR_EV_CLEARED);
})
PAYLOAD_TEST(batch_one_bad_event, {
    assert_int_equal(e[0].type, KVR_EV_STORED);
    assert_int_equal(e[1].type, KVR_EV_DROPPED);
    assert_int_equal(e[1].drop_reason, KVR_DROP_UNKNOWN_EVENT);
    assert_int_equal(e[2].type, KVR_EV_REMOVED);
    assert_int_equal(b.tally.dropped, 1);
})
PAYLOAD_TEST(empty_cache_salt, {
    /* the wire keeps what was sent: "" is present and empty */
    assert_true(kvr_str_eq(e[0].cache_salt, "tenant-a"));
    assert_true(kvr_str_present(e[1].cache_salt) && e[1].cache_salt.len == 0);
    assert_true(kvr_str_present(e[2].cache_salt) && e[2].cache_salt.len == 0);
    assert_int_equal(e[2].parent, 202);
})
PAYLOAD_TEST(group_idx_slot_string, {
    assert_int_equal(b.tally.dropped, 0); /* before: all three malformed_event */
    assert_true(e[0].has_group_idx);
    assert_int_equal(e[0].group_idx, 0);
    assert_true(kvr_str_eq(e[0].kv_cache_spec_kind, "full_attention"));
    assert_false(e[0].has_sliding_window);
    assert_true(kvr_str_eq(e[0].locality, "LOCAL"));
    assert_true(kvr_str_eq(e[1].kv_cache_spec_kind, "sliding_window"));
    assert_int_equal(e[1].sliding_window, 128);
    assert_int_equal(e[2].type, KVR_EV_REMOVED);
    assert_int_equal(e[2].group_idx, 0);
    assert_true(kvr_str_eq(e[2].kv_cache_spec_kind, "full_attention"));
})
PAYLOAD_TEST(unknown_medium, {
    assert_int_equal(e[0].type, KVR_EV_DROPPED);
    assert_int_equal(e[0].drop_reason, KVR_DROP_UNKNOWN_TIER);
    assert_int_equal(b.tally.dropped, 1);
})

static const struct CMUnitTest payload_tests[] = {
    cmocka_unit_test(test_sglang_stored_full),     cmocka_unit_test(test_sglang_stored_nils),
    cmocka_unit_test(test_sglang_removed_disk),    cmocka_unit_test(test_sglang_cleared),
    cmocka_unit_test(test_sglang_kimi_wide_tokens), cmocka_unit_test(test_sglang_metadata_map_pos7),
    cmocka_unit_test(test_vllm_map_stored),        cmocka_unit_test(test_vllm_map_removed_sliding),
    cmocka_unit_test(test_eagle_bigram),           cmocka_unit_test(test_bin_hashes),
    cmocka_unit_test(test_batch_two_fields),       cmocka_unit_test(test_batch_one_bad_event),
    cmocka_unit_test(test_unknown_medium),         cmocka_unit_test(test_empty_cache_salt),
    cmocka_unit_test(test_group_idx_slot_string),
};

/* A payload added to the fixture without its own test fails here. */
static void test_every_payload_has_a_test(void **state)
{
    (void)state;
    assert_int_equal(json_array_size(json_object_get(g_root, "payloads")),
                     sizeof payload_tests / sizeof payload_tests[0]);
}

static int load(void **state)
{
    (void)state;
    g_root = kvr_test_load_json("fixtures/wire/payloads.json");
    return 0;
}

static int unload(void **state)
{
    (void)state;
    json_decref(g_root);
    return 0;
}

int main(void)
{
    const struct CMUnitTest extra[] = {cmocka_unit_test(test_every_payload_has_a_test)};
    int failed = cmocka_run_group_tests_name("payloads", payload_tests, load, unload);
    failed += cmocka_run_group_tests_name("fixture", extra, load, unload);
    return failed;
}
