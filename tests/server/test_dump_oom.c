/* Out of memory while loading a peer's dump (dump_load.c): a cursor or a
 * registration the loader has no memory to keep is counted as a skipped
 * record with "out of memory" as the loader's first error, as a store
 * record already was, instead of vanishing from what peer_sync.c resumes
 * and registers. The cursor list's first growth (8 records) is made to
 * fail by linking this test with -Wl,--wrap=realloc. */
#include "test_support.h"

#include <string.h>

#include "server/dump_load.h"

void *__real_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size);

static size_t fail_size; /* the next realloc to this size fails */
static int failed;

void *__wrap_realloc(void *p, size_t size)
{
    if (fail_size && size == fail_size) {
        fail_size = 0;
        failed++;
        return NULL;
    }
    return __real_realloc(p, size);
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
    fail_size = 8 * sizeof(kvr_dump_cursor_rec);
    assert_true(kvr_dump_loader_feed(&l, dump, strlen(dump), true));
    assert_true(kvr_dump_loader_finish(&l));
    assert_int_equal(failed, 1);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cursor_without_memory_is_skipped_and_said),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
