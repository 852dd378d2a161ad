/* SPEC §5 "vLLM media identity", event side, rule by rule: per-block pads
 * over runs of image_token_id from the block's extra_keys media (identifier
 * -> u64: a 64-hex identifier's first 16 digits, else XXH3 seed 0), runs past
 * the last item, the count restarting per block (negative offsets), LoRA
 * names and other strings never media, Eagle windows, and fail closed
 * (no image_token_id, media without a run, opaque keys) with
 * mm_unmapped_blocks counted. The extra_keys are real msgpack bytes. */
#include "norm_fixture.h"

#include <msgpuck.h>
#include <stdarg.h>
#include <xxhash.h>

#define P 151655u /* Qwen-VL's image placeholder */
#define ID_HEX "2f97f006c0e2eb2e000000000000000000000000000000000000000000000000"
#define ID_U64 0x2f97f006c0e2eb2eull
#define PAD 15871342u /* pad_value(ID_U64), SPEC §5's worked example */

static char g_buf[4096];

/* extra_keys from mp_format of "[entries...]": the event points past the
 * array header, as the decoder leaves it. */
static void set_extra(kvr_raw_event *ev, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = mp_vformat(g_buf, sizeof g_buf, fmt, ap);
    va_end(ap);
    assert_true(n <= sizeof g_buf);
    const char *p = g_buf;
    ev->n_extra_keys = mp_decode_array(&p);
    ev->extra_keys = p;
}

static kvr_normalizer *vllm_norm(uint32_t b, bool eagle, bool has_itid)
{
    kvr_normalizer_config cfg = {.block_size = b, .eagle = eagle, .mm_identity = KVR_MM_LEGACY,
                                 .worker_id = 9, .has_image_token_id = has_itid,
                                 .image_token_id = P};
    kvr_normalizer *n = kvr_normalizer_create(&cfg);
    assert_non_null(n);
    return n;
}

static void assert_tokens(const kvr_norm_event *out, const uint32_t *want, uint32_t n)
{
    assert_int_equal(out->n_tokens, n);
    for (uint32_t i = 0; i < n; i++)
        if (out->tokens[i] != want[i])
            fail_msg("token %u: %u, want %u", i, out->tokens[i], want[i]);
}

static const uint64_t H[] = {71, 72, 73, 74};

/* SPEC §5's worked example: one image of 6 tokens from prompt position 2. */
static void test_worked_example(void **state)
{
    (void)state;
    kvr_normalizer *n = vllm_norm(4, false, true);
    uint64_t tok[12] = {100, 151652, P, P, P, P, P, P, 151653, 200, 201, 202};
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    set_extra(&ev, "[[[%s %d]] [[%s %d]] NIL]", ID_HEX, 2, ID_HEX, -2);
    kvr_norm_event out;
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 3, 12);
    const uint32_t want[12] = {100, 151652, PAD, PAD, PAD, PAD, PAD, PAD, 151653, 200, 201, 202};
    assert_tokens(&out, want, 12);
    assert_int_equal(kvr_pad_value(kvr_media_id(S(ID_HEX))), PAD);
    assert_int_equal(counters(n).mm_unmapped_blocks, 0);
    kvr_normalizer_destroy(n);
}

/* A worker without image_token_id, or a block listing media without a
 * placeholder run: the store stops there, counted; blocks before it stay. */
static void test_fail_closed(void **state)
{
    (void)state;
    uint64_t tok[12] = {1, 2, 3, 4, 100, 151652, P, P, P, P, 151653, 5};
    kvr_norm_event out;
    kvr_normalizer *no_itid = vllm_norm(4, false, false);
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    set_extra(&ev, "[NIL [[%s %d]] [[%s %d]]]", ID_HEX, 2, ID_HEX, -2);
    kvr_normalize(no_itid, &ev, &out);
    assert_store_of(&out, H, 1, 4); /* the text block before the image */
    kvr_normalizer_counters c = counters(no_itid);
    assert_int_equal(c.mm_unmapped_blocks, 1);
    assert_int_equal(c.mm_stores_truncated, 1);
    assert_int_equal(c.mm_blocks_excluded, 2);
    kvr_normalizer_destroy(no_itid);

    /* media listed on block 0, whose tokens hold no placeholder */
    kvr_normalizer *n = vllm_norm(4, false, true);
    ev = store_ev(H, 3, false, 0, tok, 12);
    set_extra(&ev, "[[[%s %d]] NIL NIL]", ID_HEX, 6);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    assert_int_equal(counters(n).mm_unmapped_blocks, 1);
    /* prompt-embedding hashes (bin) cannot be reproduced either */
    static const char digest[32] = {1, 2, 3};
    char *p = mp_encode_array(g_buf, 2);
    p = mp_encode_nil(p);
    p = mp_encode_array(p, 1);
    mp_encode_bin(p, digest, sizeof digest);
    ev = store_ev(H, 2, false, 0, tok, 8);
    const char *q = g_buf;
    ev.n_extra_keys = mp_decode_array(&q);
    ev.extra_keys = q;
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 1, 4);
    assert_int_equal(counters(n).mm_unmapped_blocks, 2);
    kvr_normalizer_destroy(n);
}

/* Three runs, two items: the third run takes the last item. Two items in a
 * block, the second starting in it: each run its own item. */
static void test_runs_past_last_item_take_last(void **state)
{
    (void)state;
    kvr_normalizer *n = vllm_norm(8, false, true);
    uint64_t tok[8] = {P, P, 7, P, 8, P, P, 9};
    kvr_raw_event ev = store_ev(H, 1, false, 0, tok, 8);
    set_extra(&ev, "[[[%s %d] [%s %d]]]", "img-a", 0, "img-b", 3);
    kvr_norm_event out;
    kvr_normalize(n, &ev, &out);
    uint32_t a = kvr_pad_value(XXH3_64bits_withSeed("img-a", 5, 0));
    uint32_t b = kvr_pad_value(XXH3_64bits_withSeed("img-b", 5, 0));
    const uint32_t want[8] = {a, a, 7, b, 8, b, b, 9};
    assert_tokens(&out, want, 8);
    assert_true(a != b);
    kvr_normalizer_destroy(n);
}

/* An image spanning three blocks: each block lists it first (negative
 * offsets after the first), and a second image starting in the last block
 * is that block's second run. The count restarts in every block. */
static void test_count_restarts_per_block_negative_offsets(void **state)
{
    (void)state;
    kvr_normalizer *n = vllm_norm(4, false, true);
    uint64_t tok[12] = {5, P, P, P, P, P, P, P, P, 6, P, P};
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    set_extra(&ev, "[[[%s %d]] [[%s %d]] [[%s %d] [%s %d]]]", "x", 1, "x", -3, "x", -7, "y",
              2);
    kvr_norm_event out;
    kvr_normalize(n, &ev, &out);
    uint32_t x = kvr_pad_value(XXH3_64bits_withSeed("x", 1, 0));
    uint32_t y = kvr_pad_value(XXH3_64bits_withSeed("y", 1, 0));
    const uint32_t want[12] = {5, x, x, x, x, x, x, x, x, 6, y, y};
    assert_tokens(&out, want, 12);
    kvr_normalizer_destroy(n);
}

/* Strings in extra_keys: the LoRA name (even when it is 64 hex digits) and
 * any string that is not 64 hex digits are never media; a bare 64-hex
 * string that is not the LoRA name is (older vLLM). */
static void test_lora_and_other_strings_not_media(void **state)
{
    (void)state;
    kvr_normalizer *n = vllm_norm(4, false, true);
    const char *hex_lora = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
    uint64_t tok[8] = {P, P, P, P, P, P, P, P};
    kvr_raw_event ev = store_ev(H, 2, false, 0, tok, 8);
    ev.lora_name = S(hex_lora);
    set_extra(&ev, "[[%s %s] [%s %s]]", hex_lora, "tenant", hex_lora, ID_HEX);
    kvr_norm_event out;
    kvr_normalize(n, &ev, &out);
    /* block 0: no media, placeholders as sent; block 1: the bare identifier */
    const uint32_t want[8] = {P, P, P, P, PAD, PAD, PAD, PAD};
    assert_tokens(&out, want, 8);
    assert_int_equal(counters(n).mm_unmapped_blocks, 0);
    kvr_normalizer_destroy(n);
}

/* Eagle windows (B + 1): the overlap token is the next block's first and
 * takes what it gets there — a run continuing over the boundary keeps its
 * item; an image starting exactly there takes the next block's item 0 —
 * which is what the request side writes. With no entry for the next block,
 * a continuing run keeps its item and a new run cannot be known: the last
 * block is unsupported. */
static void test_eagle_window(void **state)
{
    (void)state;
    uint32_t x = kvr_pad_value(XXH3_64bits_withSeed("x", 1, 0));
    uint32_t y = kvr_pad_value(XXH3_64bits_withSeed("y", 1, 0));
    kvr_norm_event out;
    /* continuing run: 9 tokens = 2 Eagle blocks */
    kvr_normalizer *n = vllm_norm(4, true, true);
    uint64_t cont[9] = {1, 2, P, P, P, P, 3, 4, 5};
    kvr_raw_event ev = store_ev(H, 2, false, 0, cont, 9);
    set_extra(&ev, "[[[%s %d]] [[%s %d]]]", "x", 2, "x", -2);
    kvr_normalize(n, &ev, &out);
    const uint32_t want_cont[9] = {1, 2, x, x, x, x, 3, 4, 5};
    assert_tokens(&out, want_cont, 9);
    /* a new image at the boundary: block 0 lists only x, block 1 lists y */
    uint64_t fresh[9] = {1, P, P, 7, P, P, 3, 4, 5};
    ev = store_ev(H, 2, false, 0, fresh, 9);
    set_extra(&ev, "[[[%s %d]] [[%s %d]]]", "x", 1, "y", 0);
    kvr_normalize(n, &ev, &out);
    const uint32_t want_fresh[9] = {1, x, x, 7, y, y, 3, 4, 5};
    assert_tokens(&out, want_fresh, 9);
    /* one Eagle block (5 tokens) whose overlap token starts a new image the
     * event does not name: cut */
    uint64_t unknown[5] = {1, P, 6, 2, P};
    ev = store_ev(H, 1, false, 0, unknown, 5);
    set_extra(&ev, "[[[%s %d]]]", "x", 1);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    assert_int_equal(counters(n).mm_unmapped_blocks, 1);
    /* ... while a run that goes on over the boundary keeps its item */
    uint64_t on[5] = {1, 2, 3, P, P};
    ev = store_ev(H, 1, false, 0, on, 5);
    set_extra(&ev, "[[[%s %d]]]", "x", 3);
    kvr_normalize(n, &ev, &out);
    const uint32_t want_on[5] = {1, 2, 3, x, x};
    assert_tokens(&out, want_on, 5);
    assert_int_equal(counters(n).mm_unmapped_blocks, 1);
    kvr_normalizer_destroy(n);
}

/* Identifiers: 64 hex digits -> first 16; anything else XXH3_64 seed 0. */
static void test_identifier_to_u64(void **state)
{
    (void)state;
    assert_true(kvr_media_id(S(ID_HEX)) == ID_U64);
    const char *upper = "2F97F006C0E2EB2E000000000000000000000000000000000000000000000000";
    assert_true(kvr_media_id(S(upper)) == ID_U64);
    const char *short63 = ID_HEX + 1;
    assert_true(kvr_media_id(S(short63)) == XXH3_64bits_withSeed(short63, 63, 0));
    assert_true(kvr_media_id(S("uuid-1")) == XXH3_64bits_withSeed("uuid-1", 6, 0));
    assert_false(
        kvr_is_hex64(S("g97f006c0e2eb2e000000000000000000000000000000000000000000000000")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example),
        cmocka_unit_test(test_fail_closed),
        cmocka_unit_test(test_runs_past_last_item_take_last),
        cmocka_unit_test(test_count_restarts_per_block_negative_offsets),
        cmocka_unit_test(test_lora_and_other_strings_not_media),
        cmocka_unit_test(test_eagle_window),
        cmocka_unit_test(test_identifier_to_u64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
