/* The id allocator of the prefix index (src/index/tree_ids.h): single and
 * range takes and puts, mixed at random across word and level boundaries
 * (ids up to ~300 k need three levels), always agree with a plain array of
 * used ids: the lowest free id comes next, a range take stops at the first
 * used id, the count and the top follow, and the bitmap shrinks back when
 * the top half empties. */
#include "test_support.h"

#include <stdlib.h>

#include "index/tree_ids.h"

/* ids in use stay under LIVE, so the bitmap (cap at most 2^17) stays
 * inside the reference array of N; 100 k ids take three levels */
enum { N = 300000, LIVE = 100000 };

static uint64_t next(uint64_t *rng)
{
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return *rng >> 33;
}

/* The lowest free id, at or above lo (no id below lo is free). */
static uint32_t lowest_free(const bool *used, uint32_t lo)
{
    while (used[lo])
        lo++;
    return lo;
}

static void check(const kvr_ids *a, const bool *used, uint32_t count)
{
    uint32_t top = 0;
    for (uint32_t i = 0; i < N; i++) {
        assert_int_equal(kvr_ids_used(a, i), used[i]);
        if (used[i])
            top = i + 1;
    }
    assert_int_equal(a->count, count);
    assert_int_equal(a->top, top);
    assert_true(count == 0 || a->cap >= top);
}

static void test_ranges_agree_with_single_ids(void **state)
{
    (void)state;
    bool *used = calloc(N + 1, sizeof *used);
    assert_non_null(used);
    kvr_ids a;
    kvr_ids_init(&a);
    uint64_t rng = 11;
    uint32_t count = 0, lo = 0;
    for (int step = 0; step < 4000; step++) {
        uint32_t op = (uint32_t)next(&rng) % 4, len = 1 + (uint32_t)next(&rng) % 200;
        if (count < 1000 || op == 0) {
            for (uint32_t k = 0; k < len && count < LIVE; k++) {
                uint32_t want = lowest_free(used, lo), got = kvr_ids_get(&a);
                assert_int_equal(got, want);
                used[got] = true;
                lo = got + 1;
                count++;
            }
        } else if (op == 1) {
            /* a range take from anywhere below the top: up to the first
             * used id, the cap or len */
            uint32_t at = (uint32_t)next(&rng) % (a.top + 1), expect = 0;
            while (expect < len && at + expect < a.cap && !used[at + expect])
                expect++;
            assert_int_equal(kvr_ids_take_range(&a, at, len), expect);
            for (uint32_t k = 0; k < expect; k++)
                used[at + k] = true;
            count += expect;
        } else {
            /* free the used stretch around a random used id: one range put
             * (op 2) or id by id (op 3) */
            uint32_t at = (uint32_t)next(&rng) % a.top;
            while (!used[at])
                at++;
            uint32_t n = 0;
            while (n < len && used[at + n])
                n++;
            if (op == 2) {
                kvr_ids_put_range(&a, at, n);
            } else {
                for (uint32_t k = 0; k < n; k++)
                    kvr_ids_put(&a, at + k);
            }
            for (uint32_t k = 0; k < n; k++)
                used[at + k] = false;
            count -= n;
            lo = at < lo ? at : lo;
        }
        if (step % 97 == 0)
            check(&a, used, count);
    }
    check(&a, used, count);
    /* everything freed in ranges: the allocator is empty again */
    for (uint32_t i = 0; i < N;) {
        if (!used[i]) {
            i++;
            continue;
        }
        uint32_t n = 0;
        while (used[i + n])
            n++;
        kvr_ids_put_range(&a, i, n);
        for (uint32_t k = 0; k < n; k++)
            used[i + k] = false;
        count -= n;
        i += n;
    }
    check(&a, used, 0);
    assert_int_equal(a.cap, 0);
    kvr_ids_free(&a);
    free(used);
}

static void test_range_take_spans_words_and_fills_levels(void **state)
{
    (void)state;
    kvr_ids a;
    kvr_ids_init(&a);
    for (uint32_t i = 0; i < 4300; i++)
        assert_int_equal(kvr_ids_get(&a), i);
    /* ids 1..4105 free again, then taken as one range: the first 64 leaf
     * words fill again, and unless the level above learns it, the next
     * kvr_ids_get descends into them */
    kvr_ids_put_range(&a, 1, 4105);
    assert_int_equal(a.count, 4300 - 4105);
    assert_int_equal(kvr_ids_take_range(&a, 1, 5000), 4105);
    assert_int_equal(a.count, 4300);
    assert_int_equal(kvr_ids_get(&a), 4300);
    /* a range take stops at a used id inside a word, or takes nothing */
    kvr_ids_put_range(&a, 100, 50);
    assert_int_equal(kvr_ids_take_range(&a, 90, 1000), 0);
    assert_int_equal(kvr_ids_take_range(&a, 120, 1000), 30);
    assert_int_equal(kvr_ids_get(&a), 100);
    kvr_ids_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranges_agree_with_single_ids),
        cmocka_unit_test(test_range_take_spans_words_and_fills_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
