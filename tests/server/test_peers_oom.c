/* Out of memory copying the peer list (kvr_server_peer_list, read by GET
 * /peers and by the recovery from a peer at start): all or nothing, so
 * /peers answers 500 {"error": "out of memory"} rather than 200 with a
 * peer silently left out, and the recovery says it has no list. One
 * peer's copy is made to fail (tests/support/fail_alloc.h: the armed
 * string's copy fails once). */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_list_without_memory_is_500),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
