/* The encoder is part of the installed library, so running out of memory
 * must be an error value, not an abort: kvr_wire_encode_batch returns false,
 * leaves the buffer exactly as it was before the call, and the buffer keeps
 * working once memory is back. Allocation failure is injected by linking
 * this test with -Wl,--wrap=realloc (the encoder's only allocator). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kvrouter/wire_encode.h"

void *__real_realloc(void *ptr, size_t size);
void *__wrap_realloc(void *ptr, size_t size);

static int failing_reallocs; /* > 0: fail this many realloc calls */
static int realloc_calls;

void *__wrap_realloc(void *ptr, size_t size)
{
    realloc_calls++;
    if (failing_reallocs > 0) {
        failing_reallocs--;
        return NULL;
    }
    return __real_realloc(ptr, size);
}

#define TOKENS 4096
static uint64_t tokens[TOKENS];
static uint64_t hashes[TOKENS / 16];

/* One store of n_blocks 16-token blocks. */
static kvr_raw_event store(uint32_t n_blocks)
{
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_STORED;
    ev.block_hashes = hashes;
    ev.n_block_hashes = n_blocks;
    ev.token_ids = tokens;
    ev.n_token_ids = n_blocks * 16;
    ev.block_size = 16;
    return ev;
}

static void setup_values(void)
{
    for (uint32_t i = 0; i < TOKENS; i++)
        tokens[i] = 1000 + i;
    for (uint32_t i = 0; i < TOKENS / 16; i++)
        hashes[i] = 0x9E3779B97F4A7C15ull * (i + 1);
}

static void expect_decodes_to(const char *data, size_t len, uint32_t n_tokens)
{
    kvr_batch b;
    kvr_batch_init(&b);
    assert_int_equal(kvr_batch_decode(&b, data, len), KVR_BATCH_OK);
    assert_int_equal(b.n_events, 1);
    const kvr_raw_event *ev = kvr_batch_next(&b);
    assert_non_null(ev);
    assert_int_equal(ev->type, KVR_EV_STORED);
    assert_int_equal(ev->n_token_ids, n_tokens);
    assert_true(ev->token_ids[n_tokens - 1] == tokens[n_tokens - 1]);
    assert_null(kvr_batch_next(&b));
    kvr_batch_free(&b);
}

static void out_of_memory_returns_false_and_keeps_buffer(void **state)
{
    (void)state;
    setup_values();
    for (int style = KVR_WIRE_SGLANG; style <= KVR_WIRE_VLLM; style++) {
        kvr_wbuf w;
        kvr_wbuf_init(&w);
        kvr_raw_event small = store(1), big = store(TOKENS / 16);
        assert_true(kvr_wire_encode_batch(&w, (kvr_wire_style)style, 1.0, &small, 1, true, 0));
        size_t len = w.len;
        char *before = malloc(len);
        memcpy(before, w.data, len);

        /* the big batch needs the buffer to grow: that allocation fails */
        failing_reallocs = 1000;
        realloc_calls = 0;
        assert_false(kvr_wire_encode_batch(&w, (kvr_wire_style)style, 2.0, &big, 1, true, 0));
        assert_true(realloc_calls > 0);
        assert_int_equal(w.len, len);
        assert_memory_equal(w.data, before, len);
        failing_reallocs = 0;
        expect_decodes_to(w.data, w.len, 16);

        /* memory back: the same buffer encodes the big batch after the first */
        assert_true(kvr_wire_encode_batch(&w, (kvr_wire_style)style, 2.0, &big, 1, true, 0));
        assert_true(w.len > len);
        assert_memory_equal(w.data, before, len);
        expect_decodes_to(w.data + len, w.len - len, TOKENS);
        free(before);
        kvr_wbuf_free(&w);
    }
}

static void first_allocation_failure_leaves_empty_buffer(void **state)
{
    (void)state;
    setup_values();
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_raw_event ev = store(2);
    failing_reallocs = 1;
    assert_false(kvr_wire_encode_batch(&w, KVR_WIRE_SGLANG, 1.0, &ev, 1, false, 0));
    assert_int_equal(w.len, 0);
    failing_reallocs = 0;
    assert_true(kvr_wire_encode_batch(&w, KVR_WIRE_SGLANG, 1.0, &ev, 1, false, 0));
    expect_decodes_to(w.data, w.len, 32);
    kvr_wbuf_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(out_of_memory_returns_false_and_keeps_buffer),
        cmocka_unit_test(first_allocation_failure_leaves_empty_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
