/* extra_keys at the wire (SPEC §3): kept as sent and checked (entries nil or
 * arrays, bounded), read back per block with media items classified, the
 * cache_salt vLLM hides in the first block's entry, and the encoder writing
 * them back byte for byte. */
#include "wire_assert.h"
#include "wire_build.h"

#include "kvrouter/wire_encode.h"

#define HEX64 "2f97f006c0e2eb2e000000000000000000000000000000000000000000000000"

static void test_entries_checked_and_kept(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b,
                                    "[%d [{%s %s %s [%d] %s [%d %d %d %d] %s [NIL [[%s %d]]]}]]", 1,
                                    "type", "BlockStored", "block_hashes", 5, "token_ids", 1, 2, 3,
                                    4, "extra_keys", HEX64, -2),
                     KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_int_equal(e->n_extra_keys, 2);
    kvr_extra_keys x;
    kvr_extra_keys_begin(&x, e);
    kvr_extra_items it;
    kvr_extra_summary sum;
    assert_true(kvr_extra_keys_next(&x, e->lora_name, &it, &sum)); /* nil */
    assert_int_equal(sum.n_media, 0);
    assert_true(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
    assert_int_equal(sum.n_media, 1);
    assert_false(sum.opaque);
    uint64_t id;
    assert_true(kvr_extra_items_next_media(&it, &id));
    assert_true(id == 0x2f97f006c0e2eb2eull);
    assert_false(kvr_extra_items_next_media(&it, &id));
    assert_false(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
    /* an entry that is neither nil nor an array drops the event alone */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [[%s [%d] NIL [%d] %d NIL NIL NIL [%d]] [%s]]]", 1,
                                    "BlockStored", 1, 1, 1, 7, "AllBlocksCleared"),
                     KVR_BATCH_OK);
    assert_int_equal(g_ev.ev[0].type, KVR_EV_DROPPED);
    assert_int_equal(g_ev.ev[0].drop_reason, KVR_DROP_MALFORMED_EVENT);
    assert_int_equal(g_ev.ev[1].type, KVR_EV_CLEARED);
    /* extra_keys itself a string: malformed */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [[%s [%d] NIL [%d] %d NIL NIL NIL %s]]]", 1,
                                    "BlockStored", 1, 1, 1, "x"),
                     KVR_BATCH_OK);
    assert_int_equal(g_ev.ev[0].drop_reason, KVR_DROP_MALFORMED_EVENT);
    /* nil extra_keys: none */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [[%s [%d] NIL [%d] %d NIL NIL NIL NIL]]]", 1,
                                    "BlockStored", 1, 1, 1),
                     KVR_BATCH_OK);
    assert_null(g_ev.ev[0].extra_keys);
}

/* Item kinds: a pair with any int offset and a bare 64-hex string that is
 * not the LoRA name are media; other strings are not; a bin, a number or a
 * malformed pair is opaque. */
static void test_item_kinds(void **state)
{
    (void)state;
    assert_int_equal(
        kvr_decode_fmt(&g_b,
                       "[%d [[%s [%d %d] NIL [%d] %d NIL NIL %s [[%s %s [%s %u] %s] [%s %d] [[%s]] "
                       "[%lf] [[%d %d]]]]]]",
                       1, "BlockStored", 1, 2, 1, 1, HEX64, HEX64, "tenant", "img", 4000000000u,
                       "2f97f006c0e2eb2e000000000000000000000000000000000000000000000001",
                       "lora", 7, "img", 1.5, 1, 2),
        KVR_BATCH_OK);
    const kvr_raw_event *e = &g_ev.ev[0];
    assert_int_equal(e->type, KVR_EV_STORED);
    assert_true(kvr_str_eq(e->lora_name, HEX64));
    kvr_extra_keys x;
    kvr_extra_keys_begin(&x, e);
    kvr_extra_items it;
    kvr_extra_summary sum;
    uint64_t id;
    /* the lora (64 hex here), "tenant", a pair, a bare 64-hex identifier */
    assert_true(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
    assert_int_equal(sum.n_media, 2);
    assert_false(sum.opaque);
    assert_true(kvr_extra_items_next_media(&it, &id));
    assert_true(id == kvr_media_id(kvr_s("img")));
    assert_true(kvr_extra_items_next_media(&it, &id));
    assert_true(id == 0x2f97f006c0e2eb2eull);
    /* a number item: opaque */
    assert_true(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
    assert_int_equal(sum.n_media, 0);
    assert_true(sum.opaque);
    /* [[str]]: a one-element array is no pair */
    assert_true(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
    assert_true(sum.opaque);
    /* a float; a pair of ints */
    assert_true(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
    assert_true(sum.opaque);
    assert_true(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
    assert_true(sum.opaque);
    assert_false(kvr_extra_keys_next(&x, e->lora_name, &it, &sum));
}

/* vLLM names a request's salt only in its first block's extra keys (after
 * the LoRA name and the media): an event without a salt of its own takes
 * it; a salt of its own wins. */
static void test_salt_from_first_entry(void **state)
{
    (void)state;
    assert_int_equal(kvr_decode_fmt(&g_b,
                                    "[%d [{%s %s %s [%d] %s [%d] %s %s %s [[%s [%s %d] %s] [%s]]}]]",
                                    1, "type", "BlockStored", "block_hashes", 5, "token_ids", 1,
                                    "lora_name", "lora-x", "extra_keys", "lora-x", HEX64, 0,
                                    "tenant-vllm", "later"),
                     KVR_BATCH_OK);
    assert_true(kvr_str_eq(g_ev.ev[0].cache_salt, "tenant-vllm"));
    /* a 64-hex string is media, not a salt; the LoRA name is not one either */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [{%s %s %s [%d] %s [%d] %s %s %s [[%s %s]]}]]", 1,
                                    "type", "BlockStored", "block_hashes", 5, "token_ids", 1,
                                    "lora_name", "lora-x", "extra_keys", "lora-x", HEX64),
                     KVR_BATCH_OK);
    assert_false(kvr_str_present(g_ev.ev[0].cache_salt));
    /* the event's own salt wins */
    assert_int_equal(kvr_decode_fmt(&g_b, "[%d [{%s %s %s [%d] %s [%d] %s %s %s [[%s]]}]]", 1,
                                    "type", "BlockStored", "block_hashes", 5, "token_ids", 1,
                                    "cache_salt", "winner", "extra_keys", "loser"),
                     KVR_BATCH_OK);
    assert_true(kvr_str_eq(g_ev.ev[0].cache_salt, "winner"));
}

/* The encoder writes extra_keys back as it got them, in both styles. */
/* SPEC §3 bounds: extra_keys holds at most 65 536 entries (one per block,
 * as many as the hashes). One more drops the event alone as oversized; a
 * removal after it still decodes. */
static void test_entry_count_bounded(void **state)
{
    (void)state;
    for (uint32_t n = KVR_WIRE_MAX_HASHES; n <= KVR_WIRE_MAX_HASHES + 1; n++) {
        size_t cap = 128 + (size_t)n;
        char *buf = malloc(cap), *p = buf;
        p = mp_encode_array(p, 2);
        p = mp_encode_double(p, 1.0);
        p = mp_encode_array(p, 2);
        p = mp_encode_array(p, 9);
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 1);
        p = mp_encode_nil(p);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 1);
        p = mp_encode_uint(p, 1);
        for (int k = 0; k < 3; k++)
            p = mp_encode_nil(p); /* lora_id, medium, position 7 */
        p = mp_encode_array(p, n);
        memset(p, 0xc0, n); /* n nil entries */
        p += n;
        p = mp_encode_array(p, 2);
        p = mp_encode_str(p, "BlockRemoved", 12);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 9);
        assert_true((size_t)(p - buf) <= cap);
        assert_int_equal(kvr_decode_copy(&g_b, buf, (size_t)(p - buf)), KVR_BATCH_OK);
        free(buf);
        assert_int_equal(g_b.n_events, 2);
        if (n == KVR_WIRE_MAX_HASHES) {
            assert_int_equal(g_ev.ev[0].type, KVR_EV_STORED);
            assert_int_equal(g_ev.ev[0].n_extra_keys, n);
        } else {
            assert_int_equal(g_ev.ev[0].type, KVR_EV_DROPPED);
            assert_int_equal(g_ev.ev[0].drop_reason, KVR_DROP_OVERSIZED_EVENT);
        }
        assert_int_equal(g_ev.ev[1].type, KVR_EV_REMOVED);
        assert_int_equal(g_ev.ev[1].block_hashes[0], 9);
    }
}

static void test_encoder_round_trip(void **state)
{
    (void)state;
    char entries[256];
    size_t n = mp_format(entries, sizeof entries, "[[[%s %d]] NIL [%s]]", HEX64, 2, "lora");
    const char *p = entries;
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    uint64_t h[3] = {1, 2, 3}, tok[12] = {0};
    ev.type = KVR_EV_STORED;
    ev.block_hashes = h;
    ev.n_block_hashes = 3;
    ev.token_ids = tok;
    ev.n_token_ids = 12;
    ev.block_size = 4;
    ev.n_extra_keys = mp_decode_array(&p);
    ev.extra_keys = p;
    for (int style = KVR_WIRE_SGLANG; style <= KVR_WIRE_VLLM; style++) {
        kvr_wbuf w;
        kvr_wbuf_init(&w);
        kvr_wire_encode_batch(&w, (kvr_wire_style)style, 1.0, &ev, 1, false, 0);
        assert_int_equal(kvr_decode_copy(&g_b, w.data, w.len), KVR_BATCH_OK);
        const kvr_raw_event *e = &g_ev.ev[0];
        assert_int_equal(e->n_extra_keys, 3);
        assert_memory_equal(e->extra_keys, ev.extra_keys, n - (size_t)(ev.extra_keys - entries));
        kvr_assert_event_equal(e, &ev);
        kvr_wbuf_free(&w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_checked_and_kept),
        cmocka_unit_test(test_item_kinds),
        cmocka_unit_test(test_salt_from_first_entry),
        cmocka_unit_test(test_encoder_round_trip),
        cmocka_unit_test(test_entry_count_bounded),
    };
    return cmocka_run_group_tests(tests, kvr_wire_setup, kvr_wire_teardown);
}
