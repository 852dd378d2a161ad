/* Booking expiry over HTTP: a request whose /free never comes is expired by
 * the server's sweeper even when no later router call would expire it
 * lazily, and /metrics shows the router's booking gauges. */
#include "test_support.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/server.h"
#include "net_helpers.h"

static void test_lost_free_expires_without_router_calls(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.router.booking_ttl_s = 0.2;
    cfg.router.rng_seed = 3;
    char base[64];
    kvr_server *srv = th_server_start(&cfg, base, sizeof base);
    assert_non_null(srv);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 4}",
                                 NULL),
                     201);

    long st = 0;
    json_t *r = th_json("POST", base, "/route",
                        "{\"model_name\": \"m\", \"request_id\": \"lost\", \"debug\": true, "
                        "\"token_ids\": [1,2,3,4,5,6,7,8,9]}",
                        &st);
    assert_int_equal(st, 200);
    json_t *cost = json_array_get(json_object_get(r, "costs"), 0);
    /* 9 tokens with block size 4: two whole blocks the worker does not hold
     * plus one block for the partial tail. */
    assert_int_equal(json_integer_value(json_object_get(cost, "new_blocks")), 3);
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_router_bookings_active"), 1);
    assert_true(th_metric(base, "kvr_router_held_blocks") > 0);

    /* No router call from here on: only the sweeper can expire it. */
    double deadline = th_now() + 5.0;
    while (th_metric(base, "kvr_router_bookings_active") != 0 && th_now() < deadline)
        th_sleep_ms(100);
    assert_int_equal(th_metric(base, "kvr_router_bookings_active"), 0);
    assert_int_equal(th_metric(base, "kvr_router_bookings_ended_total{reason=\"expired\"}"), 1);
    assert_int_equal(th_metric(base, "kvr_router_held_blocks"), 0);

    r = th_json("POST", base, "/free", "{\"request_id\": \"lost\"}", &st);
    assert_int_equal(st, 404);
    json_decref(r);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_free_expires_without_router_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
