/* encode -> decode round trips for both wire styles (SGLang tagged arrays,
 * vLLM maps): every field of every event type survives. */
#include "wire_assert.h"
#include "batch_collect.h"

#include "kvrouter/wire_encode.h"

static const uint64_t hashes_a[] = {1, 0xFFFFFFFFFFFFFFFBull, 0x8000000000000000ull};
static const uint64_t hashes_b[] = {42};
static const uint64_t wide_tokens[] = {11, 12, 13, 14, 4294967303ull, 4611686018427387915ull,
                                       1099511627779ull, 9223372036854775792ull};
static const uint64_t eagle_tokens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

static void build_events(kvr_raw_event ev[8])
{
    memset(ev, 0, 8 * sizeof *ev);
    /* wide tokens, parent, lora id, metadata map with salt + session + lora */
    ev[0].type = KVR_EV_STORED;
    ev[0].tier = KVR_TIER_GPU;
    ev[0].has_parent = true;
    ev[0].parent = 0xFEDCBA9876543210ull;
    ev[0].block_hashes = hashes_a;
    ev[0].n_block_hashes = 2;
    ev[0].token_ids = wide_tokens;
    ev[0].n_token_ids = 8;
    ev[0].block_size = 4;
    ev[0].has_lora_id = true;
    ev[0].lora_id = 7;
    ev[0].lora_name = kvr_s("adapter-a");
    ev[0].cache_salt = kvr_s("tenant-a");
    ev[0].session_id = kvr_s("s1");
    /* Eagle bigram form, cpu tier, group fields */
    ev[1].type = KVR_EV_STORED;
    ev[1].tier = KVR_TIER_CPU;
    ev[1].block_hashes = hashes_a;
    ev[1].n_block_hashes = 2;
    ev[1].token_ids = eagle_tokens;
    ev[1].n_token_ids = 9;
    ev[1].eagle = true;
    ev[1].block_size = 4;
    ev[1].has_group_idx = true;
    ev[1].group_idx = 1;
    ev[1].kv_cache_spec_kind = kvr_s("sliding_window");
    ev[1].has_sliding_window = true;
    ev[1].sliding_window = 4096;
    ev[1].locality = kvr_s("LOCAL");
    /* vLLM lora_name only, negative lora id */
    ev[2].type = KVR_EV_STORED;
    ev[2].tier = KVR_TIER_DISK;
    ev[2].block_hashes = hashes_b;
    ev[2].n_block_hashes = 1;
    ev[2].token_ids = wide_tokens;
    ev[2].n_token_ids = 4;
    ev[2].block_size = 4;
    ev[2].has_lora_id = true;
    ev[2].lora_id = -3;
    ev[2].lora_name = kvr_s("adapter-b");
    /* removals on each tier, the last with group fields */
    for (int t = 0; t < KVR_TIER_COUNT; t++) {
        ev[3 + t].type = KVR_EV_REMOVED;
        ev[3 + t].tier = (kvr_tier)t;
        ev[3 + t].block_hashes = hashes_a;
        ev[3 + t].n_block_hashes = 3;
    }
    ev[6].has_group_idx = true;
    ev[6].group_idx = 0;
    ev[6].kv_cache_spec_kind = kvr_s("full_attention");
    ev[7].type = KVR_EV_CLEARED;
}

static void round_trip(kvr_wire_style style)
{
    kvr_raw_event ev[8];
    build_events(ev);
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_wire_encode_batch(&w, style, 1700000000.25, ev, 8, true, 3);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, w.data, w.len), KVR_BATCH_OK);
    assert_true(b.ts == 1700000000.25);
    assert_true(b.has_dp_rank);
    assert_int_equal(b.dp_rank, 3);
    assert_int_equal(b.n_events, 8);
    for (int i = 0; i < 8; i++)
        kvr_assert_event_equal(kvr_batch_next(&b), &ev[i]);
    assert_null(kvr_batch_next(&b));
    assert_int_equal(b.tally.dropped, 0);

    /* the struct is reusable: a second batch without rank */
    kvr_wbuf_reset(&w);
    kvr_wire_encode_batch(&w, style, 2.0, &ev[7], 1, false, 0);
    assert_int_equal(kvr_batch_decode(&b, w.data, w.len), KVR_BATCH_OK);
    assert_false(b.has_dp_rank);
    assert_int_equal(b.n_events, 1);
    assert_int_equal(kvr_batch_next(&b)->type, KVR_EV_CLEARED);
    kvr_batch_free(&b);
    kvr_wbuf_free(&w);
}

static void test_round_trip_sglang(void **state)
{
    (void)state;
    round_trip(KVR_WIRE_SGLANG);
}

static void test_round_trip_vllm(void **state)
{
    (void)state;
    round_trip(KVR_WIRE_VLLM);
}

/* Many events with long token lists, read one at a time: each event's
 * arrays are its own whatever came before. */
static void test_round_trip_buffer_growth(void **state)
{
    (void)state;
    enum { N = 300, T = 64 };
    static uint64_t toks[N][T], hs[N][4];
    kvr_raw_event ev[N];
    memset(ev, 0, sizeof ev);
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < T; k++)
            toks[i][k] = (uint64_t)i * 1000003u + (uint64_t)k;
        for (int k = 0; k < 4; k++)
            hs[i][k] = (uint64_t)i << 32 | (uint64_t)k;
        ev[i].type = KVR_EV_STORED;
        ev[i].block_hashes = hs[i];
        ev[i].n_block_hashes = 4;
        ev[i].token_ids = toks[i];
        ev[i].n_token_ids = T;
        ev[i].block_size = 16;
        ev[i].has_parent = i > 0;
        ev[i].parent = i > 0 ? hs[i - 1][3] : 0;
    }
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_wire_encode_batch(&w, KVR_WIRE_SGLANG, 0.5, ev, N, false, 0);
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, w.data, w.len), KVR_BATCH_OK);
    assert_int_equal(b.n_events, N);
    for (int i = 0; i < N; i++)
        kvr_assert_event_equal(kvr_batch_next(&b), &ev[i]);
    /* one event's worth of scratch, not the batch's */
    assert_true(kvr_batch_bytes(&b) <= 8 * (4 + T + 1024));
    kvr_batch_free(&b);
    kvr_wbuf_free(&w);
}

/* The buffer moves between an event's hashes and its tokens (1000 + 100
 * u64s: the hashes take 1024 rounded up, the tokens need more): the
 * event's own hash pointer must follow, in both styles. */
static void test_growth_inside_one_event(void **state)
{
    (void)state;
    static uint64_t hs[1000], toks[100];
    for (int i = 0; i < 1000; i++)
        hs[i] = 0xABCD000000000000ull + (uint64_t)i;
    for (int i = 0; i < 100; i++)
        toks[i] = (uint64_t)i * 7;
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_STORED;
    ev.block_hashes = hs;
    ev.n_block_hashes = 1000;
    ev.token_ids = toks;
    ev.n_token_ids = 100;
    ev.block_size = 1;
    for (int style = KVR_WIRE_SGLANG; style <= KVR_WIRE_VLLM; style++) {
        kvr_wbuf w;
        kvr_batch b;
        kvr_wbuf_init(&w);
        kvr_batch_init(&b);
        kvr_wire_encode_batch(&w, (kvr_wire_style)style, 0.0, &ev, 1, false, 0);
        assert_int_equal(kvr_batch_decode(&b, w.data, w.len), KVR_BATCH_OK);
        kvr_assert_event_equal(kvr_batch_next(&b), &ev);
        assert_true(kvr_batch_bytes(&b) >= 1100 * 8);
        kvr_batch_free(&b);
        kvr_wbuf_free(&w);
    }
}

static void test_encode_seq(void **state)
{
    (void)state;
    unsigned char out[8];
    kvr_wire_encode_seq(0x0102030405060708ull, out);
    const unsigned char want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_memory_equal(out, want, 8);
    uint64_t seq = 0;
    assert_int_equal(kvr_frame_parse(3, out, 8, &seq), KVR_FRAME_OK);
    assert_int_equal(seq, 0x0102030405060708ull);
    kvr_wire_encode_seq(UINT64_MAX, out);
    assert_int_equal(kvr_frame_parse(3, out, 8, &seq), KVR_FRAME_OK);
    assert_int_equal(seq, UINT64_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_sglang),
        cmocka_unit_test(test_round_trip_vllm),
        cmocka_unit_test(test_round_trip_buffer_growth),
        cmocka_unit_test(test_growth_inside_one_event),
        cmocka_unit_test(test_encode_seq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
