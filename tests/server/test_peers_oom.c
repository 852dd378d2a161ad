/* Out of memory copying the peer list (kvr_server_peer_list, read by GET
 * /peers and by the recovery from a peer at start): all or nothing, so
 * /peers answers 500 {"error": "out of memory"} rather than 200 with a
 * peer silently left out, and the recovery says it has no list. One
 * peer's copy is made to fail (tests/support/fail_alloc.h: the armed
 * string's copy fails once). And out of memory in the recovery's wait for
 * its held listeners' connections (peer_sync.c): an error counted, not
 * "all connected" (the armed malloc of the listener list). */
#include "test_support.h"

#include <stdatomic.h>
#include <string.h>

#include "kvrouter/server.h"
#include "net_helpers.h"
#include "fail_alloc.h"

#define PEER1 "http://127.0.0.1:1"
#define PEER2 "http://127.0.0.1:2"

static void test_peer_list_without_memory_is_500(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    long st = 0;
    json_t *r = th_json("POST", base, "/register_peer", "{\"url\":\"" PEER1 "\"}", &st);
    assert_int_equal(st, 201);
    json_decref(r);
    r = th_json("POST", base, "/register_peer", "{\"url\":\"" PEER2 "\"}", &st);
    assert_int_equal(st, 201);
    json_decref(r);
    r = th_json("GET", base, "/peers", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(r), 2);
    json_decref(r);

    kvr_fail_reset();
    kvr_fail_strdup(PEER2);
    r = th_json("GET", base, "/peers", NULL, &st);
    assert_int_equal(kvr_fail_count(), 1); /* the copy was asked for, and failed */
    assert_int_equal(st, 500); /* before: 200 and [PEER1] */
    assert_string_equal(json_string_value(json_object_get(r, "error")), "out of memory");
    json_decref(r);

    r = th_json("GET", base, "/peers", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(r), 2);
    json_decref(r);
    kvr_server_stop(srv);
}

/* Recovery from a peer holding one worker: the first check of the held
 * listener's connection has no memory to list it. Counted, and the wait
 * goes on (before: read as every listener connected, nothing counted);
 * the next check lists it and the recovery completes. */
static void test_recovery_listener_check_without_memory_is_counted(void **state)
{
    (void)state;
    char base_a[64], base_b[64];
    kvr_server *a = th_server_start_default(base_a, sizeof base_a);
    assert_non_null(a);
    th_engine e;
    th_engine_start(&e);
    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\": 7, \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": 16}",
             e.endpoint);
    assert_int_equal(th_register(base_a, body, NULL), 201);

    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    const char *peers[1] = {base_a};
    cfg.peers = peers;
    cfg.n_peers = 1;
    kvr_fail_reset();
    kvr_fail_malloc(sizeof(kvr_listener_info)); /* the list of the one held listener */
    kvr_server *b = th_server_start(&cfg, base_b, sizeof base_b);
    assert_non_null(b);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(th_metric(base_b, "kvr_peer_recovery_listener_checks_failed_total"), 1);
    assert_true(th_has_worker(base_b, 7));
    assert_int_equal(th_metric(base_a, "kvr_peer_recovery_listener_checks_failed_total"), 0);
    kvr_server_stop(b);
    kvr_server_stop(a);
    th_engine_stop(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_list_without_memory_is_500),
        cmocka_unit_test(test_recovery_listener_check_without_memory_is_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
