/* GET /ready without NATS (SPEC §10): 200 when every registered rank's
 * listener is live (or connected to an engine that has published nothing
 * yet), 503 naming the first that is not; /health answers 200 all along
 * (liveness, not readiness). */
#include "test_support.h"

#include "nats_server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT_MS 20000

static long ready(const char *base, json_t **body)
{
    long st;
    json_t *r = th_json("GET", base, "/ready", NULL, &st);
    if (body)
        *body = r;
    else
        json_decref(r);
    return st;
}

static void test_ready_follows_the_listeners(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    json_t *b = NULL;
    assert_int_equal(ready(base, &b), 200);
    assert_true(json_is_true(json_object_get(b, "ready")));
    assert_true(json_is_null(json_object_get(b, "cluster")));
    json_decref(b);

    /* A worker whose engine is not there: not ready, and /ready says why. */
    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\": 5, \"endpoint\": \"tcp://127.0.0.1:%d\", \"model_name\": \"m\", "
             "\"block_size\": %d}",
             th_free_port(), BS);
    assert_int_equal(th_register(base, body, NULL), 201);
    assert_int_equal(ready(base, &b), 503);
    const char *reason = json_string_value(json_object_get(b, "reason"));
    assert_non_null(reason);
    assert_non_null(strstr(reason, "worker 5 rank 0"));
    assert_non_null(strstr(reason, "no connection"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "listeners"), "total")),
                     1);
    json_decref(b);
    long st;
    json_decref(th_json("GET", base, "/health", NULL, &st));
    assert_int_equal(st, 200);

    /* The worker moves to a running engine: ready once connected, before
     * it has published anything, and ready still once it has. */
    th_engine e;
    th_engine_start(&e);
    assert_int_equal(th_register_engine(base, 5, e.endpoint, BS), 200);
    for (double end = th_now() + WAIT_MS / 1e3; ready(base, NULL) != 200;) {
        if (th_now() > end)
            fail_msg("/ready never turned 200");
        th_sleep_ms(10);
    }
    assert_true(th_engine_wait_sub(&e, WAIT_MS));
    uint64_t tok[4] = {1, 2, 3, 4}, h = 77;
    kvr_raw_event ev = th_store(&h, 1, 0, tok, BS);
    th_send_events(&e, 0, &ev, 1, true);
    assert_int_equal(ready(base, NULL), 200);
    kvr_server_stop(srv);
    th_engine_stop(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_follows_the_listeners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
