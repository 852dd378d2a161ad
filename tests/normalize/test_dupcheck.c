/* Repeat detection over {parent} ∪ block_hashes (SPEC §5 rule 1) on its own:
 * kvr_dupcheck_has_repeat has three ways to answer (the one-hash store in
 * the header, a pairwise scan up to 16 ids, a scratch table past that, with
 * key 0 kept aside), and each must give what sorting the values gives (an
 * oracle of another form than the pairwise scan, so the two cannot share a
 * mistake). Before this test only the index tests reached it, through stores. */
#include "test_support.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "normalize/dupcheck.h"
#include "util/rng.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The reference: {parent} ∪ h sorted, a repeat is two equal neighbours. */
static bool sorted_repeat(bool has_parent, uint64_t parent, const uint64_t *h, size_t n)
{
    uint64_t all[81];
    memcpy(all, h, n * sizeof *h);
    size_t m = n;
    if (has_parent)
        all[m++] = parent;
    qsort(all, m, sizeof *all, cmp_u64);
    for (size_t i = 1; i < m; i++)
        if (all[i] == all[i - 1])
            return true;
    return false;
}

static void test_small_cases(void **state)
{
    (void)state;
    kvr_dupcheck d;
    kvr_dupcheck_init(&d);
    const uint64_t h[] = {5, 5};
    assert_false(kvr_dupcheck_has_repeat(&d, false, 0, h, 0));
    assert_false(kvr_dupcheck_has_repeat(&d, true, 5, h, 0));
    assert_false(kvr_dupcheck_has_repeat(&d, false, 5, h, 1)); /* no parent: 5 once */
    assert_true(kvr_dupcheck_has_repeat(&d, true, 5, h, 1));   /* the hash is its parent */
    assert_false(kvr_dupcheck_has_repeat(&d, true, 6, h, 1));
    assert_true(kvr_dupcheck_has_repeat(&d, false, 0, h, 2));
    const uint64_t zero[] = {0};
    assert_true(kvr_dupcheck_has_repeat(&d, true, 0, zero, 1)); /* 0 is a hash like any */
    kvr_dupcheck_free(&d);
}

/* Random stores of 0 to 80 hashes from a small value range (so repeats,
 * the parent among them and 0 all come up), through one reused scratch. */
static void test_equals_a_sort(void **state)
{
    (void)state;
    kvr_dupcheck d;
    kvr_dupcheck_init(&d);
    uint64_t rng = 21, h[80];
    unsigned repeats = 0, hashed_repeats = 0, hashed_clean = 0;
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(kvr_splitmix64(&rng) % 81);
        /* half the stores from a few values (repeats, 0 among them), half
         * from all 64 bits (none, but a planted one) */
        uint64_t range = kvr_splitmix64(&rng) % 2 ? 1 + kvr_splitmix64(&rng) % (2 * n + 4) : 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t v = kvr_splitmix64(&rng);
            h[i] = range ? v % range : v;
        }
        if (!range && n > 1 && kvr_splitmix64(&rng) % 2)
            h[kvr_splitmix64(&rng) % n] = h[kvr_splitmix64(&rng) % n];
        bool has_parent = kvr_splitmix64(&rng) % 2;
        uint64_t parent = n && kvr_splitmix64(&rng) % 4 == 0 ? h[kvr_splitmix64(&rng) % n]
                                                             : kvr_splitmix64(&rng) % (range ? range : 7);
        bool want = sorted_repeat(has_parent, parent, h, n);
        bool got = kvr_dupcheck_has_repeat(&d, has_parent, parent, h, n);
        if (got != want)
            fail_msg("round %d: %zu hashes, parent %s%llu: dupcheck %d, sorted %d", round, n,
                     has_parent ? "" : "none/", (unsigned long long)parent, got, want);
        repeats += want;
        hashed_repeats += want && n + has_parent > 16;
        hashed_clean += !want && n + has_parent > 16;
    }
    /* every path answered both ways */
    assert_true(repeats > 2000);
    assert_true(hashed_repeats > 1000);
    assert_true(hashed_clean > 1000);
    kvr_dupcheck_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_cases),
        cmocka_unit_test(test_equals_a_sort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
