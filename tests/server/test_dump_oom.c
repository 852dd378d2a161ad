/* Out of memory while loading a peer's dump (dump_load.c): a cursor or a
 * registration the loader has no memory to keep is counted as a skipped
 * record with "out of memory" as the loader's first error, as a store
 * record already was, instead of vanishing from what peer_sync.c resumes
 * and registers; a record with no memory to parse is skipped with that
 * error too, and a Dynamo group's cursors that could not be read count as
 * skipped. The cursor list's first growth (8 records), or the body
 * parser's value buffer (4096 json_int_t), is made to fail with
 * tests/support/fail_alloc.h's armed realloc. */
#include "test_support.h"

#include <string.h>

#include "server/dump_load.h"
#include "fail_alloc.h"

/* The next realloc to size fails (0: none). */
static void arm(size_t size)
{
    kvr_fail_reset();
    kvr_fail_realloc(size);
}

#define CURSOR(worker, seq)                                                                   \
    "{\"model\":\"m\",\"group\":\"default\",\"cursor\":{\"worker\":\"" worker "\",\"rank\":0," \
    "\"seq\":\"" seq "\"}}\n"

static void test_cursor_without_memory_is_skipped_and_said(void **state)
{
    (void)state;
    const char *dump = CURSOR("1", "5") CURSOR("2", "9");
    kvr_dump_loader l;
    kvr_dump_loader_init(&l, NULL, false); /* registrations and cursors only */
    arm(8 * sizeof(kvr_dump_cursor_rec));
    assert_true(kvr_dump_loader_feed(&l, dump, strlen(dump), true));
    assert_true(kvr_dump_loader_finish(&l));
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(l.n_cursors, 1); /* memory back for the second */
    assert_int_equal(l.cursors[0].worker_id, 2);
    assert_int_equal(l.cursors[0].seq, 9);
    assert_int_equal(l.skipped, 1);
    assert_string_equal(l.err, "out of memory");
    kvr_dump_loader_free(&l);

    kvr_dump_loader_init(&l, NULL, false);
    assert_true(kvr_dump_loader_feed(&l, dump, strlen(dump), true));
    assert_true(kvr_dump_loader_finish(&l));
    assert_int_equal(l.n_cursors, 2);
    assert_int_equal(l.skipped, 0);
    assert_string_equal(l.err, "");
    kvr_dump_loader_free(&l);
}

#define BIG "18446744073709551615" /* 2^64 - 1: through the parser's fast path */
#define VALS_BYTES (4096 * sizeof(json_int_t))

/* A registration line whose instance_id is 2^64 - 1 as a JSON number
 * (kept through the parser's fast path): without memory to parse it the
 * line is skipped, and the first error says why (before: a skip with no
 * reason, jansson's "too big integer" swallowed). */
static void test_record_without_memory_to_parse_is_said(void **state)
{
    (void)state;
    const char *dump = "{\"model\":\"m\",\"group\":\"default\",\"registration\":{"
                       "\"instance_id\":" BIG ",\"endpoint\":\"tcp://127.0.0.1:1\"}}\n";
    kvr_dump_loader l;
    for (int pass = 0; pass < 2; pass++) {
        kvr_dump_loader_init(&l, NULL, false);
        arm(pass ? 0 : VALS_BYTES);
        assert_true(kvr_dump_loader_feed(&l, dump, strlen(dump), true));
        assert_true(kvr_dump_loader_finish(&l));
        assert_int_equal(kvr_fail_count(), !pass);
        assert_int_equal(json_array_size(l.regs), pass);
        assert_int_equal(l.skipped, !pass);
        assert_string_equal(l.err, pass ? "" : "out of memory");
        kvr_dump_loader_free(&l);
    }
}

/* Dynamo's form: a group's "cursors" that is no object (or that could
 * not be parsed for want of memory) loses the group's cursors: one
 * skipped (before: nothing counted). */
static void test_dynamo_cursors_not_read_are_skipped(void **state)
{
    (void)state;
    const char *bad = "{\"m:default\":{\"block_size\":4,\"cursors\":5}}";
    const char *good = "{\"m:default\":{\"block_size\":4,\"cursors\":{\"1/0\":5}}}";
    kvr_dump_loader l;
    for (int pass = 0; pass < 2; pass++) {
        const char *dump = pass ? good : bad;
        kvr_dump_loader_init(&l, NULL, false);
        assert_true(kvr_dump_loader_feed(&l, dump, strlen(dump), false));
        assert_true(kvr_dump_loader_finish(&l));
        assert_int_equal(l.n_cursors, pass);
        assert_int_equal(l.skipped, !pass);
        kvr_dump_loader_free(&l);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cursor_without_memory_is_skipped_and_said),
        cmocka_unit_test(test_record_without_memory_to_parse_is_said),
        cmocka_unit_test(test_dynamo_cursors_not_read_are_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
