/* Batch-level decoding: every batch error, truncation of every fixture at
 * every byte, byte flips, forged counts, nesting depth, map batches with each
 * rank key, the frame layer and the medium table. */
#include "wire_build.h"

#include "kvrouter/wire_encode.h"

static void test_invalid_msgpack(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_copy(&g_b, "", 0), KVR_BATCH_INVALID_MSGPACK);
    assert_int_equal(kvr_batch_decode(&g_b, NULL, 0), KVR_BATCH_INVALID_MSGPACK);
    /* array of 3 with one element present */
    assert_int_equal(kvr_decode_copy(&g_b, "\x93\xc0", 2), KVR_BATCH_INVALID_MSGPACK);
    /* str8 claiming 200 bytes */
    assert_int_equal(kvr_decode_copy(&g_b, "\xd9\xc8" "ab", 4), KVR_BATCH_INVALID_MSGPACK);
    /* a valid batch followed by one trailing byte */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d []] %d", 1, 7), KVR_BATCH_INVALID_MSGPACK);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d []]", 1), KVR_BATCH_OK);
}

/* A forged 32-bit count wraps msgpuck's int element counter: mp_check then
 * accepts bytes whose declared counts run past the end. The structural walk
 * must still refuse them. */
static void test_forged_counts(void **state)
{
    (void)state;
    /* array32 of 0xFFFFFFFF elements, nothing after it */
    assert_int_equal(kvr_decode_copy(&g_b, "\xdd\xff\xff\xff\xff", 5),
                     KVR_BATCH_INVALID_MSGPACK);
    /* map32 of 0x80000001 pairs: 2 * count wraps to 2 */
    assert_int_equal(kvr_decode_copy(&g_b, "\xdf\x80\x00\x00\x01\x01\x02", 7),
                     KVR_BATCH_INVALID_MSGPACK);
    /* inside a batch: events array32 with a huge count */
    assert_int_equal(kvr_decode_copy(&g_b, "\x92\x01\xdd\xff\xff\xff\xff\xc0", 8),
                     KVR_BATCH_INVALID_MSGPACK);
    assert_int_equal(g_b.n_events, 0);
    /* a map32 count that brings mp_check's int counter just below INT_MAX,
     * then a fixmap: `k -= hint` overflows the int (undefined behaviour,
     * UBSan aborts) unless the payload is walked with honest counts first
     * (found by fuzz_wire) */
    assert_int_equal(kvr_decode_copy(&g_b, "\xdc\x00\x05\xdf\x3f\xff\xff\xfd\x83", 9),
                     KVR_BATCH_INVALID_MSGPACK);
    static const char fuzzed[] =
        "dc006d6564a9746fffffffffffffffffffffffffffffffffffffffffffffffff3fffff6b656e5f69647369ff"
        "ffffffffffffffffffffffffffffffffffffffdf3fffff6b656e5f69647369ffffffff838383838383838383"
        "8383838383838383838383838383838383838383838383838383838383838383838383838383838383838383"
        "83838383838383838383ffffffffffffffffffffffffffffffffffffffffffffffff756d21086262a0626266"
        "62dc00006262a06262ffffffffffffffffffffffffffffffff756d21086262a062626662dc00006262a06262"
        "666283a22f7473cb3ff000056687878787dfde5583a2";
    size_t n;
    unsigned char *bytes = kvr_test_hex(fuzzed, &n);
    assert_int_equal(n, 242);
    assert_int_equal(kvr_decode_copy(&g_b, bytes, n), KVR_BATCH_INVALID_MSGPACK);
    free(bytes);
}

static void test_bad_shape(void **state)
{
    (void)state;
    kvr_batch_error S = KVR_BATCH_BAD_SHAPE;
    assert_int_equal(kvr_decode_fmt(&g_b, "%d", 5), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "%s", "batch"), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "NIL"), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "[]"), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf]", 1.0), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%s []]", "1.0"), S);       /* ts string */
    assert_int_equal(kvr_decode_fmt(&g_b, "[NIL []]"), S);              /* ts nil */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf NIL]", 1.0), S);        /* events nil */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf {}]", 1.0), S);         /* events map */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf %d]", 1.0, 3), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [] %d]", 1.0, -1), S);  /* negative rank */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [] %llu]", 1.0, 1ull << 32), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [] %s]", 1.0, "0"), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [] %lf]", 1.0, 1.0), S);
    /* maps: missing events, missing ts, bad rank, bad ts */
    assert_int_equal(kvr_decode_fmt(&g_b, "{%s %lf}", "ts", 1.0), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "{%s []}", "events"), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "{%s %lf %s %d}", "ts", 1.0, "events", 1), S);
    assert_int_equal(kvr_decode_fmt(&g_b, "{%s %lf %s [] %s %d}", "ts", 1.0, "events",
                                    "dp_rank", -2),
                     S);
    assert_int_equal(kvr_decode_fmt(&g_b, "{%s %b %s []}", "ts", true, "events"), S);
    assert_false(g_b.has_dp_rank);
    assert_int_equal(g_b.n_events, 0);
}

static void test_ts_forms_and_extra_elements(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [[%s]] %d %s {%s %d}]", 42, "AllBlocksCleared", 5,
                                    "future", "x", 1),
                     KVR_BATCH_OK);
    assert_true(g_b.ts == 42.0);
    assert_int_equal(g_b.dp_rank, 5);
    assert_int_equal(g_b.n_events, 1);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%f []]", 2.5f), KVR_BATCH_OK);
    assert_true(g_b.ts == 2.5);
    assert_int_equal(g_b.n_events, 0);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [] %u]", -7, 4294967295u), KVR_BATCH_OK);
    assert_true(g_b.ts == -7.0);
    assert_int_equal(g_b.dp_rank, UINT32_MAX);
}

static void test_map_batch_rank_keys(void **state)
{
    (void)state;
    const char *keys[] = {"data_parallel_rank", "dp_rank", "attn_dp_rank"};
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(kvr_decode_fmt(&g_b, "{%s %s %s %lf %s [[%s [%d] %s]] %s %u}", "other",
                                        "ignored", "ts", 3.5, "events", "BlockRemoved", 9, "NVME",
                                        keys[i], i + 1),
                         KVR_BATCH_OK);
        assert_true(g_b.ts == 3.5);
        assert_true(g_b.has_dp_rank);
        assert_int_equal(g_b.dp_rank, i + 1);
        assert_int_equal(g_b.n_events, 1);
        assert_int_equal(g_ev.ev[0].type, KVR_EV_REMOVED);
        assert_int_equal(g_ev.ev[0].tier, KVR_TIER_DISK);
        assert_int_equal(g_ev.ev[0].block_hashes[0], 9);
    }
    /* nil rank and no rank */
    assert_int_equal(kvr_decode_fmt(&g_b, "{%s [] %s %d %s NIL}", "events", "ts", 1, "dp_rank"),
                     KVR_BATCH_OK);
    assert_false(g_b.has_dp_rank);
    assert_int_equal(kvr_decode_fmt(&g_b, "{%s [] %s %d %d %d}", "events", "ts", 1, 5, 6),
                     KVR_BATCH_OK);
    assert_false(g_b.has_dp_rank);
}

static void test_too_many_events(void **state)
{
    (void)state;
    size_t len;
    char *buf = kvr_nil_batch(KVR_WIRE_MAX_EVENTS + 1, &len);
    assert_int_equal(kvr_batch_decode(&g_b, buf, len), KVR_BATCH_TOO_LARGE);
    assert_int_equal(g_b.n_events, 0);
    /* nothing was sized from the count */
    assert_true(kvr_batch_bytes(&g_b) <= KVR_WIRE_SCRATCH_KEEP_BYTES);
    free(buf);
}

/* [0, [], nil, [[[...]]]]: `depth` containers deep (the batch array is 1) */
static kvr_batch_error decode_nested(size_t depth)
{
    char *buf = malloc(depth + 16), *p = buf;
    p = mp_encode_array(p, 4);
    p = mp_encode_uint(p, 0);
    p = mp_encode_array(p, 0);
    p = mp_encode_nil(p);
    memset(p, 0x91, depth - 2);
    p += depth - 2;
    p = mp_encode_array(p, 0);
    kvr_batch_error err = kvr_batch_decode(&g_b, buf, (size_t)(p - buf));
    free(buf);
    return err;
}

static void test_nesting_depth(void **state)
{
    (void)state;
    assert_int_equal(decode_nested(KVR_WIRE_MAX_DEPTH), KVR_BATCH_OK);
    assert_int_equal(decode_nested(KVR_WIRE_MAX_DEPTH + 1), KVR_BATCH_TOO_LARGE);
    assert_int_equal(decode_nested(100000), KVR_BATCH_TOO_LARGE);
    /* deep maps too: {0: {0: ...}} */
    size_t depth = 100000;
    char *buf = malloc(2 * depth + 8), *p = buf;
    for (size_t i = 0; i < depth; i++) {
        *p++ = (char)0x81;
        *p++ = 0;
    }
    *p++ = (char)0xc0;
    assert_int_equal(kvr_batch_decode(&g_b, buf, (size_t)(p - buf)), KVR_BATCH_TOO_LARGE);
    /* and a nested value inside an event is bounded the same way */
    p = buf;
    p = mp_encode_array(p, 2);
    p = mp_encode_uint(p, 0);
    p = mp_encode_array(p, 1);
    p = mp_encode_array(p, 2);
    p = mp_encode_str(p, "AllBlocksCleared", 16);
    memset(p, 0x91, 64);
    p += 64;
    *p++ = (char)0xc0;
    assert_int_equal(kvr_batch_decode(&g_b, buf, (size_t)(p - buf)), KVR_BATCH_TOO_LARGE);
    free(buf);
}

static json_t *load_payloads(json_t **root)
{
    *root = kvr_test_load_json("fixtures/wire/payloads.json");
    return json_object_get(*root, "payloads");
}

/* Every strict prefix of every golden payload is an error, read from an
 * exact-size copy so ASan catches any read past its end. */
static void test_truncation_every_offset(void **state)
{
    (void)state;
    json_t *root, *payloads = load_payloads(&root);
    size_t i, checked = 0;
    json_t *p;
    json_array_foreach(payloads, i, p) {
        size_t len;
        unsigned char *bytes = kvr_test_hex(json_string_value(json_object_get(p, "hex")), &len);
        for (size_t cut = 0; cut < len; cut++) {
            kvr_batch_error err = kvr_decode_copy(&g_b, bytes, cut);
            if (err == KVR_BATCH_OK)
                fail_msg("%s cut at %zu decoded", json_string_value(json_object_get(p, "name")),
                         cut);
            assert_int_equal(g_b.n_events, 0);
            checked++;
        }
        assert_int_equal(kvr_decode_copy(&g_b, bytes, len), KVR_BATCH_OK);
        free(bytes);
    }
    assert_true(checked > 500);
    json_decref(root);
}

/* Flip every byte of every golden to a few values: any result but a crash
 * (ASan/UBSan run this too). */
static void test_byte_flips_never_crash(void **state)
{
    (void)state;
    static const unsigned char values[] = {0x00, 0x7f, 0x80, 0x90, 0x9f, 0xc0, 0xc1, 0xc4,
                                           0xcf, 0xd3, 0xd9, 0xdc, 0xdd, 0xde, 0xdf, 0xff};
    json_t *root, *payloads = load_payloads(&root);
    size_t i, ok = 0, total = 0;
    json_t *p;
    json_array_foreach(payloads, i, p) {
        size_t len;
        unsigned char *bytes = kvr_test_hex(json_string_value(json_object_get(p, "hex")), &len);
        for (size_t at = 0; at < len; at++) {
            unsigned char keep = bytes[at];
            for (size_t v = 0; v < sizeof values; v++) {
                bytes[at] = values[v];
                kvr_batch_error err = kvr_decode_copy(&g_b, bytes, len);
                assert_true(err < KVR_BATCH_ERROR_COUNT);
                if (err == KVR_BATCH_OK) {
                    ok++;
                    assert_true(g_b.tally.dropped <= g_b.n_events);
                }
                total++;
            }
            bytes[at] = keep;
        }
        free(bytes);
    }
    assert_true(ok > 0 && ok < total);
    json_decref(root);
}

static void test_error_names(void **state)
{
    (void)state;
    assert_string_equal(kvr_batch_error_name(KVR_BATCH_OK), "ok");
    assert_string_equal(kvr_batch_error_name(KVR_BATCH_INVALID_MSGPACK), "invalid_msgpack");
    assert_string_equal(kvr_batch_error_name(KVR_BATCH_BAD_SHAPE), "bad_shape");
    assert_string_equal(kvr_batch_error_name(KVR_BATCH_TOO_LARGE), "too_large");
    assert_string_equal(kvr_batch_error_name(KVR_BATCH_NO_MEMORY), "no_memory");
    assert_string_equal(kvr_batch_error_name(KVR_BATCH_ERROR_COUNT), "unknown");
    assert_string_equal(kvr_frame_error_name(KVR_FRAME_WRONG_COUNT), "wrong_frame_count");
    assert_string_equal(kvr_frame_error_name(KVR_FRAME_BAD_SEQ_LENGTH), "bad_seq_length");
    assert_string_equal(kvr_frame_error_name((kvr_frame_error)99), "unknown");
}

static void test_frame_parse(void **state)
{
    (void)state;
    const unsigned char seq[9] = {0, 0, 0, 0, 0, 0, 1, 2, 3};
    uint64_t out = 77;
    assert_int_equal(kvr_frame_parse(3, seq, 8, &out), KVR_FRAME_OK);
    assert_int_equal(out, 0x0102);
    assert_int_equal(kvr_frame_parse(3, seq + 1, 8, &out), KVR_FRAME_OK);
    assert_int_equal(out, 0x010203);
    out = 77;
    assert_int_equal(kvr_frame_parse(2, seq, 8, &out), KVR_FRAME_WRONG_COUNT);
    assert_int_equal(kvr_frame_parse(4, seq, 8, &out), KVR_FRAME_WRONG_COUNT);
    assert_int_equal(kvr_frame_parse(0, NULL, 0, &out), KVR_FRAME_WRONG_COUNT);
    assert_int_equal(kvr_frame_parse(3, seq, 7, &out), KVR_FRAME_BAD_SEQ_LENGTH);
    assert_int_equal(kvr_frame_parse(3, seq, 9, &out), KVR_FRAME_BAD_SEQ_LENGTH);
    assert_int_equal(kvr_frame_parse(3, seq, 0, &out), KVR_FRAME_BAD_SEQ_LENGTH);
    assert_int_equal(out, 77);
}

static void test_medium_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int tier;
    } rows[] = {
        {"GPU", KVR_TIER_GPU},          {"DEVICE", KVR_TIER_GPU},       {"", KVR_TIER_GPU},
        {"gpu", KVR_TIER_GPU},          {"CPU", KVR_TIER_CPU},          {"CPU_PINNED", KVR_TIER_CPU},
        {"cpu_tier1", KVR_TIER_CPU},    {"CPU_TIER2", KVR_TIER_DISK},   {"DISK", KVR_TIER_DISK},
        {"NVME", KVR_TIER_DISK},        {"Storage", KVR_TIER_DISK},     {"EXTERNAL", KVR_TIER_EXTERNAL},
        {"NETWORK", KVR_TIER_EXTERNAL}, {"REMOTE", KVR_TIER_EXTERNAL},  {"SHARED", KVR_TIER_EXTERNAL},
        {"HBM", -1},                    {"CPU_TIER3", -1},              {"GPU ", -1},
        {"CP", -1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kvr_str s = {rows[i].name, (uint32_t)strlen(rows[i].name)};
        assert_int_equal(kvr_wire_medium_tier(s), rows[i].tier);
    }
    kvr_str nil = {NULL, 0};
    assert_int_equal(kvr_wire_medium_tier(nil), KVR_TIER_GPU);
    /* "GPU" with a NUL inside the length does not match */
    kvr_str nul = {"GPU\0X", 5};
    assert_int_equal(kvr_wire_medium_tier(nul), -1);
}

/* Reusing the struct: a big batch then a small one; an error empties it. */
static void test_reuse_and_reset(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [[%s [%d %d %d] NIL [%d %d %d %d] %d] [%s]] %d]",
                                    1, "BlockStored", 1, 2, 3, 4, 5, 6, 7, 4, "AllBlocksCleared",
                                    2),
                     KVR_BATCH_OK);
    assert_int_equal(g_b.n_events, 2);
    assert_true(g_b.has_dp_rank);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [[%s [%d] %s]]]", 2, "BlockRemoved", 9, "CPU"),
                     KVR_BATCH_OK);
    assert_int_equal(g_b.n_events, 1);
    assert_false(g_b.has_dp_rank);
    assert_int_equal(g_ev.ev[0].block_hashes[0], 9);
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d]", 1), KVR_BATCH_BAD_SHAPE);
    assert_int_equal(g_b.n_events, 0);
    assert_int_equal(g_b.tally.dropped, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_msgpack),
        cmocka_unit_test(test_forged_counts),
        cmocka_unit_test(test_bad_shape),
        cmocka_unit_test(test_ts_forms_and_extra_elements),
        cmocka_unit_test(test_map_batch_rank_keys),
        cmocka_unit_test(test_too_many_events),
        cmocka_unit_test(test_nesting_depth),
        cmocka_unit_test(test_truncation_every_offset),
        cmocka_unit_test(test_byte_flips_never_crash),
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_frame_parse),
        cmocka_unit_test(test_medium_table),
        cmocka_unit_test(test_reuse_and_reset),
    };
    return cmocka_run_group_tests(tests, kvr_wire_setup, kvr_wire_teardown);
}
