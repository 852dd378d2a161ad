/* Every per-event drop reason of the wire layer: the bad event keeps its
 * place as KVR_EV_DROPPED, is counted, and its neighbours still decode. */
#include "wire_build.h"

#include "wire_assert.h"

/* A batch [1.0, [good-store, <bad>, good-removal], 0] built from the event
 * format `bad`; asserts the middle one is dropped for `why`. */
#define GOOD_STORE "[%s [%d] NIL [%d %d] %d NIL %s]"
#define GOOD_REMOVE "[%s [%d] %s]"
static void expect_middle_dropped(kvr_drop_reason why, const char *bad, ...)
{
    char bad_bytes[2048];
    va_list ap;
    va_start(ap, bad);
    size_t bad_len = mp_vformat(bad_bytes, sizeof bad_bytes, bad, ap);
    va_end(ap);
    assert_true(bad_len <= sizeof bad_bytes);

    char buf[4096], *p = buf;
    p = mp_encode_array(p, 3);
    p = mp_encode_double(p, 1.0);
    p = mp_encode_array(p, 3);
    p += mp_format(p, 256, GOOD_STORE, "BlockStored", 7, 1, 2, 2, "GPU");
    memcpy(p, bad_bytes, bad_len);
    p += bad_len;
    p += mp_format(p, 256, GOOD_REMOVE, "BlockRemoved", 7, "CPU");
    p = mp_encode_uint(p, 0);

    assert_int_equal(kvr_decode_copy(&g_b, buf, (size_t)(p - buf)), KVR_BATCH_OK);
    assert_int_equal(g_b.n_events, 3);
    assert_int_equal(g_b.tally.dropped, 1);
    assert_int_equal(g_ev.ev[0].type, KVR_EV_STORED);
    assert_int_equal(g_ev.ev[0].n_token_ids, 2);
    assert_int_equal(g_ev.ev[0].token_ids[1], 2);
    assert_int_equal(g_ev.ev[1].type, KVR_EV_DROPPED);
    assert_int_equal(g_ev.ev[1].drop_reason, why);
    assert_int_equal(g_ev.ev[1].n_block_hashes, 0);
    assert_int_equal(g_ev.ev[2].type, KVR_EV_REMOVED);
    assert_int_equal(g_ev.ev[2].tier, KVR_TIER_CPU);
    assert_int_equal(g_ev.ev[2].block_hashes[0], 7);
}

static void test_unknown_event(void **state)
{
    (void)state;
    expect_middle_dropped(KVR_DROP_UNKNOWN_EVENT, "[%s %d %d]", "NoSuchEvent", 1, 2);
    expect_middle_dropped(KVR_DROP_UNKNOWN_EVENT, "[%s]", "blockstored");
    expect_middle_dropped(KVR_DROP_UNKNOWN_EVENT, "{%s %s %s [%d]}", "type", "BlockMoved",
                          "block_hashes", 1);
}

static void test_unknown_tier(void **state)
{
    (void)state;
    expect_middle_dropped(KVR_DROP_UNKNOWN_TIER, "[%s [%d] NIL [%d] %d NIL %s]", "BlockStored",
                          1, 5, 1, "HBM3_SOMETHING");
    expect_middle_dropped(KVR_DROP_UNKNOWN_TIER, "[%s [%d] %s]", "BlockRemoved", 1, "TAPE");
    expect_middle_dropped(KVR_DROP_UNKNOWN_TIER, "{%s %s %s [%d] %s %s}", "type",
                          "BlockRemoved", "block_hashes", 1, "medium", "GPU2");
}

static void test_malformed_shapes(void **state)
{
    (void)state;
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "%d", 5);
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "NIL");
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "[]");
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "[%d [%d]]", 1, 2);
    /* a store must reach block_size (index 4) */
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "[%s [%d] NIL [%d]]", "BlockStored", 1, 2);
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "[%s]", "BlockRemoved");
    /* maps: no type, non-string type, missing required fields */
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "{%s [%d]}", "block_hashes", 1);
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "{%s %d}", "type", 3);
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "{%s %s %s [%d]}", "type", "BlockStored",
                          "block_hashes", 1);
    expect_middle_dropped(KVR_DROP_MALFORMED_EVENT, "{%s %s}", "type", "BlockRemoved");
}

/* BlockStored with one field replaced by a value of the wrong type */
static void test_malformed_fields(void **state)
{
    (void)state;
    const char *S = "BlockStored";
    kvr_drop_reason M = KVR_DROP_MALFORMED_EVENT;
    expect_middle_dropped(M, "[%s %d NIL [%d] %d]", S, 1, 1, 1);           /* hashes int */
    expect_middle_dropped(M, "[%s NIL NIL [%d] %d]", S, 1, 1);             /* hashes nil */
    expect_middle_dropped(M, "[%s [%s] NIL [%d] %d]", S, "h", 1, 1);       /* hash str */
    expect_middle_dropped(M, "[%s [%lf] NIL [%d] %d]", S, 1.5, 1, 1);      /* hash float */
    expect_middle_dropped(M, "[%s [%d] %s [%d] %d]", S, 1, "p", 1, 1);     /* parent str */
    expect_middle_dropped(M, "[%s [%d] NIL %d %d]", S, 1, 1, 1);           /* tokens int */
    expect_middle_dropped(M, "[%s [%d] NIL NIL %d]", S, 1, 1);             /* tokens nil */
    expect_middle_dropped(M, "[%s [%d] NIL [%d %d] %d]", S, 1, 1, -2, 1);  /* negative */
    expect_middle_dropped(M, "[%s [%d] NIL [%lf] %d]", S, 1, 1.0, 1);      /* float token */
    expect_middle_dropped(M, "[%s [%d] NIL [%d [%d %d]] %d]", S, 1, 1, 1, 2, 1); /* mixed */
    expect_middle_dropped(M, "[%s [%d] NIL [[%d %d] %d] %d]", S, 1, 1, 2, 3, 1); /* mixed */
    expect_middle_dropped(M, "[%s [%d] %d [%d] %d]", S, 1, 1, 1, -4);      /* block_size < 0 */
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %llu]", S, 1, 1, 1ull << 32); /* > u32 */
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %s]", S, 1, 1, "16");
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d %s]", S, 1, 1, 1, "lora");
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL %d]", S, 1, 1, 1, 0); /* medium int */
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL NIL %d]", S, 1, 1, 1, 9); /* pos7 */
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL NIL {%s %d}]", S, 1, 1, 1, "cache_salt", 9);
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL NIL NIL NIL %lf]", S, 1, 1, 1, 0.5);
    /* after a kind in the group_idx slot the sliding window comes next */
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL NIL NIL NIL %s %s]", S, 1, 1, 1,
                          "full_attention", "w");
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL NIL NIL NIL %d %d]", S, 1, 1, 1, 0, 5);
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL NIL NIL NIL %d NIL %s]", S, 1, 1, 1, 0,
                          "big");
    expect_middle_dropped(M, "[%s [%d] NIL [%d] %d NIL NIL NIL NIL NIL NIL NIL %d]", S, 1, 1, 1,
                          1);
    /* an empty bin names no block */
    expect_middle_dropped(M, "[%s [%.*s] NIL [%d] %d]", S, 0, "", 1, 1);
    /* map form: top-level cache_salt must be a string */
    expect_middle_dropped(M, "{%s %s %s [%d] %s [%d] %s %d}", "type", S, "block_hashes", 1,
                          "token_ids", 1, "cache_salt", 4);
    /* removal: group_idx float */
    expect_middle_dropped(M, "[%s [%d] %s %lf]", "BlockRemoved", 1, "GPU", 0.5);
}

/* Eagle chains must link: (a_i, b_i) then (b_i, ...) */
static void test_malformed_bigrams(void **state)
{
    (void)state;
    const char *S = "BlockStored";
    kvr_drop_reason M = KVR_DROP_MALFORMED_EVENT;
    expect_middle_dropped(M, "[%s [%d] NIL [[%d %d] [%d %d]] %d]", S, 1, 1, 2, 3, 4, 1);
    expect_middle_dropped(M, "[%s [%d] NIL [[%d %d %d]] %d]", S, 1, 1, 2, 3, 1);
    expect_middle_dropped(M, "[%s [%d] NIL [[%d]] %d]", S, 1, 1, 1);
    expect_middle_dropped(M, "[%s [%d] NIL [[%d %d] [%d %d]] %d]", S, 1, 1, -2, -2, 3, 1);
    expect_middle_dropped(M, "[%s [%d] NIL [[%d %s]] %d]", S, 1, 1, "x", 1);
}

/* [0.0, [["BlockStored", nh hashes (i << 40), nil, nt tokens (i) or the
 * bigram form of 0..nt-1, 16]]] in a malloc'd buffer */
static char *big_store(uint32_t nh, uint32_t nt, bool bigrams, size_t *len)
{
    char *buf = malloc(32 + (size_t)nh * 9 + (size_t)nt * 19), *p = buf;
    p = mp_encode_array(p, 2);
    p = mp_encode_double(p, 0.0);
    p = mp_encode_array(p, 1);
    p = mp_encode_array(p, 5);
    p = mp_encode_str(p, "BlockStored", 11);
    p = mp_encode_array(p, nh);
    for (uint32_t i = 0; i < nh; i++)
        p = mp_encode_uint(p, (uint64_t)i << 40);
    p = mp_encode_nil(p);
    p = mp_encode_array(p, bigrams ? nt - 1 : nt);
    for (uint32_t i = 0; i + (bigrams ? 1 : 0) < nt; i++) {
        if (bigrams) {
            p = mp_encode_array(p, 2);
            p = mp_encode_uint(p, i);
            p = mp_encode_uint(p, i + 1);
        } else {
            p = mp_encode_uint(p, i);
        }
    }
    p = mp_encode_uint(p, 16);
    *len = (size_t)(p - buf);
    return buf;
}

/* Lengths are checked against the bounds before any u64 is stored: the
 * batch's buffer does not grow for the oversized event. */
static void check_oversized(uint32_t n_hashes, uint32_t n_tokens, bool bigrams)
{
    size_t len;
    char *buf = big_store(n_hashes, n_tokens, bigrams, &len);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OK);
    assert_int_equal(b.n_events, 1);
    const kvr_raw_event *e = kvr_batch_next(&b);
    assert_int_equal(e->type, KVR_EV_DROPPED);
    assert_int_equal(e->drop_reason, KVR_DROP_OVERSIZED_EVENT);
    /* hashes are read before tokens, so at most the hashes were stored */
    assert_true(kvr_batch_bytes(&b) <=
                8 * ((size_t)(n_hashes > KVR_WIRE_MAX_HASHES ? 0 : n_hashes) + 1024));
    assert_null(kvr_batch_next(&b));
    assert_int_equal(b.tally.dropped, 1);
    kvr_batch_free(&b);
    free(buf);
}

static void test_oversized_hashes(void **state)
{
    (void)state;
    check_oversized(KVR_WIRE_MAX_HASHES + 1, 4, false);
}

static void test_oversized_tokens(void **state)
{
    (void)state;
    check_oversized(1, KVR_WIRE_MAX_TOKENS + 1, false);
}

static void test_oversized_bigrams(void **state)
{
    (void)state;
    check_oversized(1, KVR_WIRE_MAX_TOKENS + 1, true);
}

/* exactly at the bounds is fine, in both token forms */
static void test_bounds_inclusive(void **state)
{
    (void)state;
    uint32_t nh = KVR_WIRE_MAX_HASHES, nt = KVR_WIRE_MAX_TOKENS;
    for (int bigrams = 0; bigrams < 2; bigrams++) {
        size_t len;
        char *buf = big_store(nh, nt, bigrams, &len);
        assert_int_equal(kvr_batch_decode(&g_b, buf, len), KVR_BATCH_OK);
        const kvr_raw_event *e = kvr_batch_next(&g_b);
        assert_int_equal(e->type, KVR_EV_STORED);
        assert_int_equal(e->eagle, bigrams);
        assert_int_equal(e->n_block_hashes, nh);
        assert_int_equal(e->n_token_ids, nt);
        assert_int_equal(e->block_hashes[nh - 1], (uint64_t)(nh - 1) << 40);
        assert_int_equal(e->token_ids[nt - 1], nt - 1);
        free(buf);
    }
}

/* [1.0, [["BlockStored", ... (5 fields follow) for hand-built bytes; the
 * batch array has batch_len elements (3: the caller appends a rank) */
static char *store_head(char *p, uint32_t batch_len)
{
    p = mp_encode_array(p, batch_len);
    p = mp_encode_double(p, 1.0);
    p = mp_encode_array(p, 1);
    p = mp_encode_array(p, 5);
    return mp_encode_str(p, "BlockStored", 11);
}

/* bin hashes: last 8 bytes big-endian; shorter bins zero-extend */
static void test_bin_hash_forms(void **state)
{
    (void)state;
    const char full[] = "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c";
    /* built by hand: mp_format has no bin specifier */
    char buf[256], *p = store_head(buf, 2);
    p = mp_encode_array(p, 3);
    p = mp_encode_bin(p, full, 12);
    p = mp_encode_bin(p, full, 8);
    p = mp_encode_bin(p, full + 9, 3);
    p = mp_encode_bin(p, full + 1, 2); /* parent */
    p = mp_encode_array(p, 0);
    p = mp_encode_uint(p, 4);
    assert_int_equal(kvr_decode_copy(&g_b, buf, (size_t)(p - buf)), KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_int_equal(e->block_hashes[0], 0x05060708090a0b0cull);
    assert_int_equal(e->block_hashes[1], 0x0102030405060708ull);
    assert_int_equal(e->block_hashes[2], 0x0a0b0cull);
    assert_true(e->has_parent);
    assert_int_equal(e->parent, 0x0203ull);
    assert_int_equal(e->n_token_ids, 0);
}

/* signed and unsigned formats of the same bits decode alike */
static void test_signed_hashes_and_positive_int_formats(void **state)
{
    (void)state;
    char buf[256], *p = store_head(buf, 3);
    p = mp_encode_array(p, 2);
    p = mp_encode_int(p, -1);
    p = mp_encode_uint(p, UINT64_MAX);
    p = mp_encode_nil(p);
    p = mp_encode_array(p, 2);
    /* 0xd0 0x05: a positive token in a signed format (other encoders do this) */
    *p++ = (char)0xd0;
    *p++ = 5;
    *p++ = (char)0xd3;
    memcpy(p, "\x00\x00\x00\x01\x00\x00\x00\x00", 8);
    p += 8;
    *p++ = (char)0xd1;
    *p++ = 0;
    *p++ = 16;
    *p++ = (char)0xd0; /* dp_rank 3 as int8 */
    *p++ = 3;
    assert_int_equal(kvr_decode_copy(&g_b, buf, (size_t)(p - buf)), KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_int_equal(e->block_hashes[0], UINT64_MAX);
    assert_int_equal(e->block_hashes[1], UINT64_MAX);
    assert_int_equal(e->token_ids[0], 5);
    assert_int_equal(e->token_ids[1], 1ull << 32);
    assert_int_equal(e->block_size, 16);
    assert_int_equal(g_b.dp_rank, 3);
}

/* empty token list: zero tokens, not Eagle */
static void test_empty_token_list(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b, "[%lf [[%s [] NIL [] %d]]]", 1.0, "BlockStored", 4),
                     KVR_BATCH_OK);
    assert_int_equal(g_ev.ev[0].type, KVR_EV_STORED);
    assert_int_equal(g_ev.ev[0].n_token_ids, 0);
    assert_int_equal(g_ev.ev[0].n_block_hashes, 0);
    assert_false(g_ev.ev[0].eagle);
}

/* A dropped event's u64s are rolled back: the next event's data is intact,
 * and many drops in one batch are all counted. */
static void test_many_drops_counted(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b,
                                    "[%lf [[%s [%d %d] NIL [%d %d %d] %d] %d [%s [%d] %s] "
                                    "[%s [%d %d] NIL [%d %d] %d] [%s]] NIL]",
                                    1.0, "BlockStored", 1, 2, 3, 4, -1, 2, 17, "BlockRemoved", 5,
                                    "FLOPPY", "BlockStored", 8, 9, 10, 11, 2, "Nope"),
                     KVR_BATCH_OK);
    assert_int_equal(g_b.n_events, 5);
    assert_int_equal(g_b.tally.dropped, 4);
    assert_int_equal(g_ev.ev[0].drop_reason, KVR_DROP_MALFORMED_EVENT);
    assert_int_equal(g_ev.ev[1].drop_reason, KVR_DROP_MALFORMED_EVENT);
    assert_int_equal(g_ev.ev[2].drop_reason, KVR_DROP_UNKNOWN_TIER);
    const kvr_raw_event *e = &g_ev.ev[3];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_int_equal(e->block_hashes[0], 8);
    assert_int_equal(e->block_hashes[1], 9);
    assert_int_equal(e->token_ids[0], 10);
    assert_int_equal(e->token_ids[1], 11);
    assert_int_equal(g_ev.ev[4].drop_reason, KVR_DROP_UNKNOWN_EVENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_event),
        cmocka_unit_test(test_unknown_tier),
        cmocka_unit_test(test_malformed_shapes),
        cmocka_unit_test(test_malformed_fields),
        cmocka_unit_test(test_malformed_bigrams),
        cmocka_unit_test(test_oversized_hashes),
        cmocka_unit_test(test_oversized_tokens),
        cmocka_unit_test(test_oversized_bigrams),
        cmocka_unit_test(test_bounds_inclusive),
        cmocka_unit_test(test_bin_hash_forms),
        cmocka_unit_test(test_signed_hashes_and_positive_int_formats),
        cmocka_unit_test(test_empty_token_list),
        cmocka_unit_test(test_many_drops_counted),
    };
    return cmocka_run_group_tests(tests, kvr_wire_setup, kvr_wire_teardown);
}
