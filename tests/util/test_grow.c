/* kvr_grow, the one grow-by-doubling step: it doubles from the larger of the
 * current and minimum capacity, and refuses sizes that overflow without
 * touching the buffer. */
#include "test_support.h"

#include <stdint.h>
#include <stdlib.h>

#include "util/grow.h"

static void test_doubles_from_the_minimum(void **state)
{
    (void)state;
    uint32_t *v = NULL;
    size_t cap = 0;
    assert_int_equal(KVR_GROW(v, cap, 1), 0);
    assert_int_equal(cap, 8);
    v[7] = 7;
    assert_int_equal(KVR_GROW(v, cap, 8), 0); /* fits: nothing moves */
    assert_int_equal(cap, 8);
    assert_int_equal(KVR_GROW(v, cap, 9), 0);
    assert_int_equal(cap, 16);
    assert_int_equal(v[7], 7);
    assert_int_equal(KVR_GROW(v, cap, 100), 0);
    assert_int_equal(cap, 128);
    free(v);
    char *b = NULL;
    size_t bc = 0;
    assert_int_equal(kvr_grow((void **)&b, &bc, 5000, 1, 4096), 0);
    assert_int_equal(bc, 8192);
    free(b);
}

static void test_overflow_is_refused_untouched(void **state)
{
    (void)state;
    uint64_t *v = NULL;
    size_t cap = 0;
    assert_int_equal(KVR_GROW(v, cap, 4), 0);
    uint64_t *before = v;
    /* need * sizeof overflows size_t */
    assert_int_equal(KVR_GROW(v, cap, SIZE_MAX / 4), -1);
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 8);
    /* doubling itself would overflow */
    assert_int_equal(kvr_grow((void **)&v, &cap, SIZE_MAX, 1, 8), -1);
    assert_int_equal(cap, 8);
    assert_int_equal(kvr_grow((void **)&v, &cap, 10, 0, 8), -1); /* zero-size elements */
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doubles_from_the_minimum),
        cmocka_unit_test(test_overflow_is_refused_untouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
