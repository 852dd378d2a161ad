/* The learned-rate table is bounded (src/route/rates.c): worker churn brings
 * new (worker, rank) ids, so past KVR_ROUTE_MAX_RATES the stalest rate is
 * dropped for each new one, and each drop is counted (the router's stats,
 * kvr_router_rates_evicted_total in /metrics). */
#include "route/internal.h"
#include "test_support.h"

#define INDEX ((uintptr_t)0x1000)

static void test_the_stalest_rate_goes_at_the_bound(void **state)
{
    (void)state;
    route_bookings b;
    route_bookings_init(&b, 60);
    /* worker w booked at time w: worker 0 is the stalest, then worker 1 */
    for (uint64_t w = 0; w < KVR_ROUTE_MAX_RATES; w++)
        route_rate_add_work(&b, INDEX, w, 0, 100, (double)w);
    assert_int_equal(b.n_rates, KVR_ROUTE_MAX_RATES);
    assert_int_equal(b.rates_evicted, 0);
    /* worker 0 touched again: now worker 1 is the stalest */
    route_rate_add_work(&b, INDEX, 0, 0, 100, 1e6);
    assert_int_equal(b.rates_evicted, 0);
    route_rate_add_work(&b, INDEX, KVR_ROUTE_MAX_RATES, 0, 100, 1e6 + 1);
    assert_int_equal(b.n_rates, KVR_ROUTE_MAX_RATES);
    assert_int_equal(b.rates_evicted, 1);
    assert_null(route_rate_find(&b, INDEX, 1, 0));
    assert_non_null(route_rate_find(&b, INDEX, 0, 0));
    assert_non_null(route_rate_find(&b, INDEX, 2, 0));
    assert_non_null(route_rate_find(&b, INDEX, KVR_ROUTE_MAX_RATES, 0));
    /* a new rank of a known worker is a new entry too */
    route_rate_add_work(&b, INDEX, 0, 1, 100, 1e6 + 2);
    assert_int_equal(b.rates_evicted, 2);
    assert_null(route_rate_find(&b, INDEX, 2, 0));
    route_bookings_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_stalest_rate_goes_at_the_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
