/* Decoding memory (SPEC §12, issue 10 "wire amplification"): the decoder
 * holds one event at a time, so what it allocates is proportional to the
 * largest event (8 bytes per hash and token, each at least one payload
 * byte), never to the number of events, and it gives back what passed the
 * keep threshold once the batch has been read. The byte limit refuses a
 * payload before anything looks at it. Asserted on kvr_batch_bytes, the
 * decoder's own accounting (RSS is the service's, see the README). */
#include "wire_build.h"

/* [0, [nil x n]]: the cheapest events there are (one byte each). Before,
 * each took a whole decoded-event slot: 2^20 of them held 184 MiB. */
static void test_nil_events_take_no_memory(void **state)
{
    (void)state;
    size_t n = KVR_WIRE_MAX_EVENTS, len;
    char *buf = kvr_nil_batch(n, &len);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OK);
    assert_int_equal(b.n_events, n);
    size_t peak = 0, seen = 0;
    for (const kvr_raw_event *e; (e = kvr_batch_next(&b)); seen++) {
        assert_int_equal(e->type, KVR_EV_DROPPED);
        if (kvr_batch_bytes(&b) > peak)
            peak = kvr_batch_bytes(&b);
    }
    assert_int_equal(seen, n);
    assert_int_equal(b.tally.dropped, n);
    assert_int_equal(peak, 0);
    kvr_batch_free(&b);
    free(buf);
}

/* k stores of t one-byte tokens and one hash each. */
static char *stores(uint32_t k, uint32_t t, size_t *len)
{
    size_t cap = (size_t)k * (t + 64) + 64;
    char *buf = malloc(cap), *p = buf;
    p = mp_encode_array(p, 2);
    p = mp_encode_double(p, 1.0);
    p = mp_encode_array(p, k);
    for (uint32_t i = 0; i < k; i++) {
        p = mp_encode_array(p, 5);
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, i + 1);
        p = mp_encode_nil(p);
        p = mp_encode_array(p, t);
        memset(p, 7, t); /* positive fixint 7 */
        p += t;
        p = mp_encode_uint(p, 16);
    }
    *len = (size_t)(p - buf);
    assert_true(*len <= cap);
    return buf;
}

/* Stores of 2^20 one-byte tokens: the scratch is one event's (8 bytes per
 * token, at most 8x the payload), whatever the number of stores, and it is
 * given back at the end of the batch. Before, every store's tokens stayed
 * (63 such stores left 512 MiB). */
static void test_big_stores_one_event_at_a_time(void **state)
{
    (void)state;
    uint32_t t = KVR_WIRE_MAX_TOKENS;
    size_t len;
    char *buf = stores(4, t, &len);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OK);
    size_t peak = 0;
    for (const kvr_raw_event *e; (e = kvr_batch_next(&b));) {
        assert_int_equal(e->type, KVR_EV_STORED);
        assert_int_equal(e->n_token_ids, t);
        assert_int_equal(e->token_ids[t - 1], 7);
        if (kvr_batch_bytes(&b) > peak)
            peak = kvr_batch_bytes(&b);
    }
    size_t one_event = 8 * ((size_t)t + 1);
    print_message("payload %zu bytes, decoder peak %zu bytes (%.2fx), after %zu\n", len, peak,
                  (double)peak / (double)len, kvr_batch_bytes(&b));
    assert_true(peak >= one_event);
    assert_true(peak <= one_event + 8 * 1024);
    assert_true(peak <= 8 * len / 4 + 8 * 1024); /* one store of four */
    assert_int_equal(kvr_batch_bytes(&b), 0);   /* given back: past the keep threshold */
    kvr_batch_free(&b);
    free(buf);
}

/* Small batches keep their scratch (no allocation per batch), below the
 * threshold. */
static void test_small_scratch_kept_between_batches(void **state)
{
    (void)state;
    size_t len;
    char *buf = stores(3, 64, &len);
    kvr_batch b;
    kvr_batch_init(&b);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OK);
        while (kvr_batch_next(&b))
            ;
        assert_true(kvr_batch_bytes(&b) > 0);
        assert_true(kvr_batch_bytes(&b) <= KVR_WIRE_SCRATCH_KEEP_BYTES);
    }
    kvr_batch_free(&b);
    free(buf);
}

/* A batch abandoned midway gives its large scratch back at the next decode. */
static void test_abandoned_batch_released_at_next_decode(void **state)
{
    (void)state;
    size_t len, small_len;
    char *big = stores(2, 1u << 18, &len), *small = stores(1, 4, &small_len);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, big, len), KVR_BATCH_OK);
    assert_non_null(kvr_batch_next(&b));
    assert_true(kvr_batch_bytes(&b) > KVR_WIRE_SCRATCH_KEEP_BYTES);
    assert_int_equal(kvr_batch_decode(&b, small, small_len), KVR_BATCH_OK);
    assert_true(kvr_batch_bytes(&b) <= KVR_WIRE_SCRATCH_KEEP_BYTES);
    kvr_batch_free(&b);
    free(big);
    free(small);
}

/* The per-message byte limit: exactly at it decodes, one byte above is
 * OVER_LIMIT and nothing is handed out. */
static void test_byte_limit(void **state)
{
    (void)state;
    size_t len;
    char *buf = stores(2, 100, &len);
    kvr_batch b;
    kvr_batch_init(&b);
    kvr_batch_set_max_bytes(&b, len);
    assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OK);
    assert_int_equal(b.n_events, 2);
    kvr_batch_set_max_bytes(&b, len - 1);
    assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OVER_LIMIT);
    assert_int_equal(b.n_events, 0);
    assert_null(kvr_batch_next(&b));
    assert_string_equal(kvr_batch_error_name(KVR_BATCH_OVER_LIMIT), "over_byte_limit");
    kvr_batch_set_max_bytes(&b, 0); /* the default */
    assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OK);
    kvr_batch_free(&b);
    free(buf);
}

/* Rewinding hands out the same events again. */
static void test_rewind(void **state)
{
    (void)state;
    size_t len;
    char *buf = stores(3, 8, &len);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, buf, len), KVR_BATCH_OK);
    for (int pass = 0; pass < 2; pass++) {
        uint64_t h = 1;
        for (const kvr_raw_event *e; (e = kvr_batch_next(&b)); h++)
            assert_int_equal(e->block_hashes[0], h);
        assert_int_equal(b.tally.stored, 3);
        assert_int_equal(b.tally.blocks_stored, 3);
        kvr_batch_rewind(&b);
    }
    kvr_batch_free(&b);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nil_events_take_no_memory),
        cmocka_unit_test(test_big_stores_one_event_at_a_time),
        cmocka_unit_test(test_small_scratch_kept_between_batches),
        cmocka_unit_test(test_abandoned_batch_released_at_next_decode),
        cmocka_unit_test(test_byte_limit),
        cmocka_unit_test(test_rewind),
    };
    return cmocka_run_group_tests(tests, kvr_wire_setup, kvr_wire_teardown);
}
