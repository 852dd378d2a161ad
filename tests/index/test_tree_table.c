/* The fingerprint/id table of the prefix index (src/index/tree_table.h):
 * every id stays findable under its fingerprint through inserts, deletes
 * that shift entries back (also across the end of the array), replaces,
 * in-place growth and shrinking, and rebuilds into a new array; several
 * ids may share a fingerprint. Checked against a plain array of what
 * should be there. */
#include "test_support.h"

#include <stdlib.h>

#include "index/tree_table.h"
#include "util/u64map.h"

/* Whether slot s is in t, probing from its home up to an empty slot (the
 * only place linear probing may put it). */
static bool present(const kvr_idtab *t, uint64_t s)
{
    if (!t->cap)
        return false;
    for (uint32_t i = kvr_idtab_home(t, kvr_idtab_fp(s)); t->slot[i]; i = kvr_probe_next(i, t->cap))
        if (t->slot[i] == s)
            return true;
    return false;
}

static size_t occupied(const kvr_idtab *t)
{
    size_t n = 0;
    for (uint32_t i = 0; i < t->cap; i++)
        n += t->slot[i] != 0;
    return n;
}

/* Fingerprints from a small range, so many ids share one and clusters
 * form; ids distinct. */
static uint64_t slot_of(uint32_t id, uint32_t fps)
{
    uint32_t fp = (uint32_t)(kvr_mix64(id % fps) >> 32) | 1;
    return kvr_idtab_slot(fp, id);
}

static void test_random_adds_and_deletes_stay_findable(void **state)
{
    (void)state;
    enum { N = 3000 };
    static bool in[N];
    kvr_idtab t;
    kvr_idtab_init(&t);
    uint64_t rng = 7;
    size_t live = 0;
    for (int step = 0; step < 60000; step++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t id = 1 + (uint32_t)(rng >> 33) % (N - 1);
        uint64_t s = slot_of(id, 97);
        if (in[id]) {
            kvr_idtab_del(&t, s);
            in[id] = false;
            live--;
        } else {
            assert_int_equal(kvr_idtab_add(&t, s), 0);
            in[id] = true;
            live++;
        }
        assert_int_equal(t.len, live);
        if (step % 997 == 0) {
            /* sized for the live entries, as kvr_tree_fit does before events */
            assert_int_equal(kvr_idtab_reserve(&t, 0), 0);
            assert_true(live == 0 || (t.cap && live * 5 <= (uint64_t)t.cap * 4));
            assert_true(live == 0 || live * 8 >= t.cap || t.cap <= 8);
        }
        if (step % 251 == 0) {
            assert_int_equal(occupied(&t), live);
            for (uint32_t x = 1; x < N; x++)
                assert_int_equal(present(&t, slot_of(x, 97)), in[x]);
        }
    }
    kvr_idtab_free(&t);
}

static void test_delete_shifts_back_across_the_end(void **state)
{
    (void)state;
    kvr_idtab t;
    kvr_idtab_init(&t);
    assert_int_equal(kvr_idtab_reserve(&t, 6), 0);
    uint32_t cap = t.cap;
    /* fingerprints whose home is the last slot: the cluster wraps */
    uint32_t fp = UINT32_MAX;
    assert_int_equal(kvr_idtab_home(&t, fp), cap - 1);
    for (uint32_t id = 1; id <= 4; id++)
        assert_int_equal(kvr_idtab_add(&t, kvr_idtab_slot(fp, id)), 0);
    assert_int_equal(t.cap, cap);
    assert_int_equal(t.slot[cap - 1], kvr_idtab_slot(fp, 1));
    assert_int_equal(t.slot[0], kvr_idtab_slot(fp, 2));
    kvr_idtab_del(&t, kvr_idtab_slot(fp, 1));
    /* the rest moved back, the one from slot 0 into the last slot */
    assert_int_equal(t.slot[cap - 1], kvr_idtab_slot(fp, 2));
    for (uint32_t id = 2; id <= 4; id++)
        assert_true(present(&t, kvr_idtab_slot(fp, id)));
    assert_int_equal(t.slot[2], 0);
    kvr_idtab_replace(&t, kvr_idtab_slot(fp, 3), kvr_idtab_slot(fp, 9));
    assert_true(present(&t, kvr_idtab_slot(fp, 9)));
    assert_false(present(&t, kvr_idtab_slot(fp, 3)));
    kvr_idtab_del(&t, kvr_idtab_slot(fp, 2));
    kvr_idtab_del(&t, kvr_idtab_slot(fp, 9));
    kvr_idtab_del(&t, kvr_idtab_slot(fp, 4));
    /* emptied: the array goes */
    assert_int_equal(t.len, 0);
    assert_null(t.slot);
    assert_int_equal(kvr_idtab_bytes(&t), 0);
}

static void test_rehash_copies_and_install_returns_old(void **state)
{
    (void)state;
    kvr_idtab t;
    kvr_idtab_init(&t);
    for (uint32_t id = 1; id <= 1000; id++)
        assert_int_equal(kvr_idtab_add(&t, slot_of(id, 1000)), 0);
    uint32_t big = kvr_idtab_fit_cap(&t, 5000);
    assert_true(big > t.cap && 5000u * 5 <= (uint64_t)big * 4);
    uint64_t *s = kvr_idtab_rehash(&t, big);
    assert_non_null(s);
    uint64_t *old = t.slot;
    assert_ptr_equal(kvr_idtab_install(&t, s, big), old);
    free(old);
    assert_int_equal(t.cap, big);
    assert_int_equal(occupied(&t), 1000);
    for (uint32_t id = 1; id <= 1000; id++)
        assert_true(present(&t, slot_of(id, 1000)));
    /* with few entries left the capacity halves back */
    for (uint32_t id = 1; id <= 990; id++)
        kvr_idtab_del(&t, slot_of(id, 1000));
    assert_true(kvr_idtab_fit_cap(&t, t.len) < big / 8);
    assert_int_equal(kvr_idtab_fit_cap(&t, 0), 0);
    kvr_idtab_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_adds_and_deletes_stay_findable),
        cmocka_unit_test(test_delete_shifts_back_across_the_end),
        cmocka_unit_test(test_rehash_copies_and_install_returns_old),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
