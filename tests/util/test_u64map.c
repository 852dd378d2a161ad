/* u64map against a brute-force model under random churn. */
#include "test_support.h"

#include <stdlib.h>

#include "util/u64map.h"

#define KEYS 4096

static void test_model_churn(void **state)
{
    (void)state;
    static uint64_t model_val[KEYS];
    static bool model_has[KEYS];
    kvr_u64map m;
    kvr_u64map_init(&m);
    uint64_t rng = 42;
    size_t present = 0;
    for (int step = 0; step < 200000; step++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        /* keys 0..KEYS-1 include 0, which lives outside the slots */
        uint64_t k = (rng >> 33) % KEYS;
        int op = (int)((rng >> 20) % 3);
        if (op < 2) {
            int r = kvr_u64map_put(&m, k, rng);
            assert_int_equal(r, model_has[k] ? 1 : 0);
            if (!model_has[k])
                present++;
            model_has[k] = true;
            model_val[k] = rng;
        } else {
            uint64_t old = 0;
            bool had = kvr_u64map_del(&m, k, &old);
            assert_int_equal(had, model_has[k]);
            if (had) {
                assert_int_equal(old, model_val[k]);
                present--;
            }
            model_has[k] = false;
        }
        assert_int_equal(kvr_u64map_len(&m), present);
    }
    for (uint64_t k = 0; k < KEYS; k++) {
        uint64_t v = 0;
        assert_int_equal(kvr_u64map_get(&m, k, &v), model_has[k]);
        if (model_has[k])
            assert_int_equal(v, model_val[k]);
    }
    size_t it = 0, seen = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&m, &it, &k, &v)) {
        assert_true(model_has[k]);
        assert_int_equal(v, model_val[k]);
        seen++;
    }
    assert_int_equal(seen, present);
    kvr_u64map_free(&m);
}

static void test_drains_to_zero_bytes(void **state)
{
    (void)state;
    kvr_u64map m;
    kvr_u64map_init(&m);
    for (uint64_t k = 1; k <= 100000; k++)
        assert_int_equal(kvr_u64map_put(&m, k * 0x9E3779B97F4A7C15ULL, k), 0);
    assert_true(kvr_u64map_bytes(&m) >= 100000 * sizeof(kvr_u64map_slot));
    for (uint64_t k = 1; k <= 100000; k++)
        assert_true(kvr_u64map_del(&m, k * 0x9E3779B97F4A7C15ULL, NULL));
    assert_int_equal(kvr_u64map_len(&m), 0);
    assert_int_equal(kvr_u64map_bytes(&m), 0);
    kvr_u64map_free(&m);
}

static void test_reset_keeps_memory_and_forgets_keys(void **state)
{
    (void)state;
    kvr_u64map m;
    kvr_u64map_init(&m);
    for (int round = 0; round < 3; round++) {
        for (uint64_t k = 0; k < 1000; k++)
            assert_int_equal(kvr_u64map_put(&m, k * 7 + (uint64_t)round, k), 0);
        assert_int_equal(kvr_u64map_len(&m), 1000);
        size_t bytes = kvr_u64map_bytes(&m);
        kvr_u64map_reset(&m);
        assert_int_equal(kvr_u64map_len(&m), 0);
        assert_int_equal(kvr_u64map_bytes(&m), bytes);
        /* the previous round's keys, key 0 included, are gone */
        for (uint64_t k = 0; k < 1000; k++)
            assert_false(kvr_u64map_get(&m, k * 7 + (uint64_t)round, NULL));
    }
    kvr_u64map_free(&m);
}

/* A reserved map takes n entries without growing, and keeps what it held. */
static void test_reserve_fits_without_growing(void **state)
{
    (void)state;
    kvr_u64map m;
    kvr_u64map_init(&m);
    assert_int_equal(kvr_u64map_reserve(&m, 0), 0);
    assert_int_equal(kvr_u64map_bytes(&m), 0);
    assert_int_equal(kvr_u64map_put(&m, 5, 50), 0);
    assert_int_equal(kvr_u64map_reserve(&m, 125), 0);
    size_t bytes = kvr_u64map_bytes(&m);
    assert_int_equal(bytes, 256 * sizeof(kvr_u64map_slot)); /* 125 fit at load 3/4 */
    uint64_t v = 0;
    assert_true(kvr_u64map_get(&m, 5, &v));
    assert_int_equal(v, 50);
    for (uint64_t k = 1; k < 125; k++)
        assert_int_equal(kvr_u64map_put(&m, 1000 + k, k), 0);
    assert_int_equal(kvr_u64map_len(&m), 125);
    assert_int_equal(kvr_u64map_bytes(&m), bytes);
    assert_int_equal(kvr_u64map_reserve(&m, 10), 0); /* never shrinks */
    assert_int_equal(kvr_u64map_bytes(&m), bytes);
    kvr_u64map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_churn),
        cmocka_unit_test(test_drains_to_zero_bytes),
        cmocka_unit_test(test_reset_keeps_memory_and_forgets_keys),
        cmocka_unit_test(test_reserve_fits_without_growing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
