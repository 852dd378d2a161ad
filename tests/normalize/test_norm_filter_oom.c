/* A store teaches the filter its attention group's kind (filter.c): when
 * the map of learned kinds cannot grow, the store is still judged by its
 * own kind, and the kind not learned is counted (group_kinds_lost), as a
 * group past the learned bound is (groups_over_limit). Until then the
 * failure was dropped, and the group's later events that name no kind (a
 * removal, as engines send them) were taken for an unknown group's with
 * nothing to say why. Allocation failure is injected with
 * tests/support/fail_alloc.h (the map's slots): the armed calloc fails once. */
#include "norm_fixture.h"
#include "normalize/filter.h"
#include "util/u64map.h"
#include "fail_alloc.h"

static const uint64_t H[] = {1};

static void test_kind_not_learned_is_counted(void **state)
{
    (void)state;
    kvr_norm_filter f;
    kvr_norm_filter_init(&f, 16);
    kvr_raw_event s = in_group(base_ev(KVR_EV_STORED, H, 1), 3, "full_attention");
    kvr_raw_event r = in_group(base_ev(KVR_EV_REMOVED, H, 1), 3, NULL);
    kvr_fail_reset();
    kvr_fail_calloc(0, sizeof(kvr_u64map_slot));
    assert_int_equal(kvr_norm_filter_check_all(&f, &s), KVR_DROP_NONE); /* its own kind */
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(f.group_kinds_lost, 1);
    assert_int_equal(f.groups_over_limit, 0);
    assert_int_equal(kvr_u64map_len(&f.group_kinds), 0);
    /* what the count explains: group 3 is unknown to the removal */
    assert_int_equal(kvr_norm_filter_check_all(&f, &r), KVR_DROP_NON_MAIN_ATTENTION);
    /* memory back: the next store learns the kind, the removal passes */
    assert_int_equal(kvr_norm_filter_check_all(&f, &s), KVR_DROP_NONE);
    assert_int_equal(kvr_norm_filter_check_all(&f, &r), KVR_DROP_NONE);
    assert_int_equal(f.group_kinds_lost, 1);
    kvr_norm_filter_free(&f);
}

/* The normalizer's counters carry it (/workers, /metrics render them). */
static void test_normalizer_counts_it(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[4];
    text(tok, 4, 100);
    kvr_raw_event s = in_group(store_ev(H, 1, false, 0, tok, 4), 3, "full_attention");
    kvr_norm_event out;
    kvr_fail_reset();
    kvr_fail_calloc(0, sizeof(kvr_u64map_slot));
    kvr_normalize(n, &s, &out);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    assert_int_equal(counters(n).group_kinds_lost, 1);
    assert_int_equal(counters(n).groups_over_limit, 0);
    kvr_normalizer_destroy(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind_not_learned_is_counted),
        cmocka_unit_test(test_normalizer_counts_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
