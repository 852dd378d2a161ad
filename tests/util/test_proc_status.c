/* kvr_proc_status_value, the one reader of /proc/self/status: a key matches
 * only whole (so "VmRS" is not "VmRSS"), its number is read, and a missing
 * key is a false, not a zero. */
#include "test_support.h"

#include <stdlib.h>

#include "util/proc_status.h"

static void test_reads_whole_keys(void **state)
{
    (void)state;
    double rss = -1, fdsize = -1;
    assert_true(kvr_proc_status_value("VmRSS", &rss));
    assert_true(rss > 0);
    assert_true(kvr_proc_status_value("FDSize", &fdsize));
    assert_true(fdsize >= 3); /* stdin, stdout, stderr fit */
    /* A key's prefix is a different key: the kernel has no "VmRS" line. */
    double v = 42;
    assert_false(kvr_proc_status_value("VmRS", &v));
    assert_false(kvr_proc_status_value("NoSuchKey", &v));
    assert_true(v == 42); /* untouched when absent */
}

static void test_follows_the_process(void **state)
{
    (void)state;
    double before, after;
    assert_true(kvr_proc_status_value("VmRSS", &before));
    size_t n = 64u << 20;
    char *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (char)i;
    assert_true(kvr_proc_status_value("VmRSS", &after));
    assert_true(after - before >= 32 * 1024); /* kB: at least half of the 64 MiB touched */
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_whole_keys),
        cmocka_unit_test(test_follows_the_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
