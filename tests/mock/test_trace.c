/* Trace loading and deterministic token expansion (SPEC §9). */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mock/trace.h"

static void test_load_fields(void **state)
{
    (void)state;
    const char *p = kvr_test_write_tmp("{\"timestamp\": 12.5, \"input_length\": 700, \"output_length\": 9, "
                        "\"hash_ids\": [4, 9]}\n\n"
                        "{\"timestamp\": 30, \"input_length\": 100, \"hash_ids\": [4]}\n");
    kvr_trace t;
    char err[256];
    assert_int_equal(kvr_trace_load(p, 0, &t, err, sizeof err), 0);
    unlink(p);
    assert_int_equal(t.n, 2);
    assert_true(t.reqs[0].timestamp_ms == 12.5);
    assert_int_equal(t.reqs[0].input_length, 700);
    assert_int_equal(t.reqs[0].output_length, 9);
    assert_int_equal(t.reqs[0].n_hash_ids, 2);
    assert_int_equal(t.reqs[0].hash_ids[1], 9);
    assert_true(t.reqs[1].timestamp_ms == 30.0);
    assert_int_equal(t.reqs[1].output_length, 0);
    kvr_trace_free(&t);
    assert_null(t.reqs);
}

static void test_load_errors_name_line(void **state)
{
    (void)state;
    kvr_trace t;
    char err[256];
    const char *p = kvr_test_write_tmp("{\"input_length\": 1, \"hash_ids\": [1]}\n{\"input_length\": 1, "
                        "\"hash_ids\": [-3]}\n");
    assert_int_equal(kvr_trace_load(p, 0, &t, err, sizeof err), -1);
    unlink(p);
    assert_non_null(strstr(err, ":2:"));
    assert_non_null(strstr(err, "hash_ids"));
    assert_int_equal(t.n, 0);
    p = kvr_test_write_tmp("{\"input_length\": 1, \"hash_ids\": [1]}\nnot json\n");
    assert_int_equal(kvr_trace_load(p, 0, &t, err, sizeof err), -1);
    unlink(p);
    assert_non_null(strstr(err, ":2:"));
    p = kvr_test_write_tmp("{\"hash_ids\": [1]}\n");
    assert_int_equal(kvr_trace_load(p, 0, &t, err, sizeof err), -1);
    unlink(p);
    assert_non_null(strstr(err, "input_length"));
    assert_int_equal(kvr_trace_load("/nonexistent/x.jsonl", 0, &t, err, sizeof err), -1);
}

static void test_load_real_trace_with_limit(void **state)
{
    (void)state;
    kvr_trace t;
    char err[256];
    assert_int_equal(
        kvr_trace_load(kvr_test_path("data/conversation_trace.jsonl"), 5, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 5);
    /* first line of the bundled trace */
    assert_int_equal(t.reqs[0].input_length, 6758);
    assert_int_equal(t.reqs[0].n_hash_ids, 14);
    assert_int_equal(t.reqs[0].hash_ids[13], 13);
    kvr_trace_free(&t);
}

/* A slice is the same requests as the whole file's, from the skip on. */
static void test_slice_skips_requests(void **state)
{
    (void)state;
    kvr_trace all, part;
    char err[256];
    const char *path = kvr_test_path("data/conversation_trace.jsonl");
    assert_int_equal(kvr_trace_load(path, 10, &all, err, sizeof err), 0);
    assert_int_equal(kvr_trace_load_slice(path, 4, 3, &part, err, sizeof err), 0);
    assert_int_equal(part.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(part.reqs[i].input_length, all.reqs[4 + i].input_length);
        assert_true(part.reqs[i].timestamp_ms == all.reqs[4 + i].timestamp_ms);
        assert_int_equal(part.reqs[i].n_hash_ids, all.reqs[4 + i].n_hash_ids);
    }
    kvr_trace_free(&part);
    kvr_trace_free(&all);
}

static void test_tokens_shared_prefix_and_truncation(void **state)
{
    (void)state;
    uint64_t a_ids[] = {7, 8, 9}, b_ids[] = {7, 8, 10};
    kvr_trace_request a = {0, 1300, 0, 3, a_ids}, b = {0, 5000, 0, 3, b_ids};
    static uint32_t ta[4096], tb[4096];
    assert_int_equal(kvr_trace_tokens(&a, ta, 4096), 1300);
    /* input_length beyond the ids: stop at n_hash_ids * 512 */
    assert_int_equal(kvr_trace_tokens(&b, tb, 4096), 1536);
    assert_memory_equal(ta, tb, 1024 * sizeof(uint32_t));
    size_t same = 0;
    for (size_t i = 1024; i < 1300; i++) {
        assert_true(ta[i] < 1000000);
        same += ta[i] == tb[i];
    }
    assert_true(same < 10); /* different id, different tokens */
    /* tokens depend only on (id, position) */
    assert_int_equal(ta[512 + 3], kvr_trace_token(8, 3));
    /* positions inside a block differ */
    size_t repeats = 0;
    for (size_t i = 1; i < 512; i++)
        repeats += ta[i] == ta[i - 1];
    assert_true(repeats < 5);
    /* cap bounds the writes but not the count */
    uint32_t small[10];
    small[9] = 0xdeadbeef;
    assert_int_equal(kvr_trace_tokens(&a, small, 9), 1300);
    assert_int_equal(small[9], 0xdeadbeef);
    assert_int_equal(small[8], ta[8]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_fields),
        cmocka_unit_test(test_load_errors_name_line),
        cmocka_unit_test(test_load_real_trace_with_limit),
        cmocka_unit_test(test_slice_skips_requests),
        cmocka_unit_test(test_tokens_shared_prefix_and_truncation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
