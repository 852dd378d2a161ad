/* The fast /query and /route body parse: same answers as the jansson path
 * for valid and invalid bodies, token errors named by index. */
#include "test_support.h"

#include <stdio.h>
#include <string.h>

#include "kvrouter/server.h"
#include "server/api.h"
#include "server/route_body.h"

static void parse_ok(const char *body, const uint32_t *want, size_t n)
{
    kvr_route_body b;
    if (kvr_route_body_parse(body, strlen(body), 1000, &b) != 0)
        fail_msg("parse failed for %s: %s", body, b.error);
    assert_int_equal(b.n_tokens, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(b.tokens[i], want[i]);
    json_t *t = json_object_get(b.rest, "token_ids");
    if (n)
        assert_int_equal(json_array_size(t), 0);
    assert_string_equal(json_string_value(json_object_get(b.rest, "model_name")), "m");
    kvr_route_body_free(&b);
}

static void parse_bad(const char *body, const char *needle)
{
    kvr_route_body b;
    assert_int_equal(kvr_route_body_parse(body, strlen(body), 1000, &b), -1);
    assert_int_equal(b.status, 400);
    if (!strstr(b.error, needle))
        fail_msg("error '%s' for %s lacks '%s'", b.error, body, needle);
}

static void test_tokens_scanned_rest_parsed(void **state)
{
    (void)state;
    uint32_t w[] = {1, 0, 4294967295u, 42};
    parse_ok("{\"model_name\":\"m\",\"token_ids\":[1,0,4294967295,42]}", w, 4);
    parse_ok(" { \"token_ids\" : [ 1 , 0 ,\n4294967295,\t42 ] , \"model_name\" : \"m\" } ", w, 4);
    /* token_ids elsewhere than the top level is not the request's. */
    parse_ok("{\"mm_items\":[{\"token_ids\":[9],\"s\":\"a\\\"]\"}],\"model_name\":\"m\","
             "\"x\":{\"y\":[1,{\"z\":\"}\"}]},\"token_ids\":[1,0,4294967295,42]}",
             w, 4);
    /* An escaped key is not recognized: the whole body goes to jansson. */
    kvr_route_body b;
    const char *esc = "{\"model_name\":\"m\",\"token\\u005fids\":[1]}";
    assert_int_equal(kvr_route_body_parse(esc, strlen(esc), 1000, &b), 0);
    assert_null(b.tokens);
    assert_int_equal(json_array_size(json_object_get(b.rest, "token_ids")), 1);
    kvr_route_body_free(&b);
}

static void test_u64_mm_hash_above_int64(void **state)
{
    (void)state;
    /* jansson refuses integers above INT64_MAX; the fast path hands them on
     * as the i64 with the same bits (the handler reads u64 bits back). */
    const char *body = "{\"model_name\":\"m\",\"token_ids\":[1,2],\"mm_items\":[{\"start\":0,"
                       "\"end\":1,\"mm_hash\" : 18446744073709551615},{\"start\":1,\"end\":2,"
                       "\"mm_hash\":9223372036854775808},{\"start\":2,\"end\":3,\"mm_hash\":5}],"
                       "\"note\":\"mm_hash\",\"x\":18446744073709551615}";
    kvr_route_body b;
    assert_int_equal(kvr_route_body_parse(body, strlen(body), 1000, &b), -1);
    /* Only mm_hash values are rewritten: the big "x" still fails in jansson. */
    assert_non_null(strstr(b.error, "malformed"));
    char ok[512];
    snprintf(ok, sizeof ok, "%.*s}", (int)(strstr(body, ",\"x\"") - body), body);
    assert_int_equal(kvr_route_body_parse(ok, strlen(ok), 1000, &b), 0);
    json_t *items = json_object_get(b.rest, "mm_items");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 0), "mm_hash")), -1);
    assert_true((uint64_t)json_integer_value(json_object_get(json_array_get(items, 1), "mm_hash")) ==
                9223372036854775808ull);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 2), "mm_hash")), 5);
    assert_string_equal(json_string_value(json_object_get(b.rest, "note")), "mm_hash");
    kvr_route_body_free(&b);
    /* Too big even for u64: jansson's error stands. */
    const char *huge = "{\"model_name\":\"m\",\"token_ids\":[1],\"mm_items\":[{\"start\":0,"
                       "\"end\":1,\"mm_hash\":18446744073709551616}]}";
    assert_int_equal(kvr_route_body_parse(huge, strlen(huge), 1000, &b), -1);
}

static void test_bad_tokens_and_json(void **state)
{
    (void)state;
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[1,-2]}", "token_ids[1]");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[1,2,3.5]}", "token_ids[2]");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[4294967296]}", "token_ids[0]");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[99999999999999999999999]}", "token_ids[0]");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[01]}", "token_ids[0]");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[1,\"2\"]}", "token_ids[1]");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[1e3]}", "token_ids[0]");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[1,2}", "malformed");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[1],\"token_ids\":[2]}", "malformed");
    parse_bad("{\"model_name\":\"m\",\"token_ids\":[1],}", "malformed");
    parse_bad("{\"model_name\":\"m\" \"token_ids\":[1]}", "malformed");
    parse_bad("[1,2]", "JSON object");
    parse_bad("", "malformed");
    char big[8000];
    size_t k = (size_t)snprintf(big, sizeof big, "{\"model_name\":\"m\",\"token_ids\":[");
    for (int i = 0; i < 1001; i++)
        k += (size_t)snprintf(big + k, sizeof big - k, "%s7", i ? "," : "");
    snprintf(big + k, sizeof big - k, "]}");
    parse_bad(big, "token_ids[1000]");
}

/* The raw and the jansson handlers answer alike. */
static void same_reply(kvr_server *srv, const char *body)
{
    kvr_api_reply a = {0}, b = {0};
    kvr_api_query_raw(srv, body, strlen(body), &a);
    json_error_t e;
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES, &e);
    if (j && json_is_object(j)) {
        b.status = 200;
        kvr_api_query(srv, j, &b);
    } else
        kvr_api_error(&b, 400, "malformed JSON body");
    json_decref(j);
    if (a.status != b.status)
        fail_msg("%s: raw %d, json %d", body, a.status, b.status);
    if (a.status == 200 && !json_equal(a.body, b.body))
        fail_msg("%s: replies differ", body);
    if (a.status != 200) {
        const char *ea = json_string_value(json_object_get(a.body, "error"));
        const char *eb = json_string_value(json_object_get(b.body, "error"));
        /* the same field named (up to the first ':' or ' must') */
        size_t n = strcspn(eb, ":");
        if (strncmp(ea, eb, n) != 0 && !strstr(eb, "malformed"))
            fail_msg("%s: errors differ: '%s' vs '%s'", body, ea, eb);
    }
    json_decref(a.body);
    json_decref(b.body);
}

static void test_raw_handlers_match_json_handlers(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    char err[256];
    kvr_server *srv = kvr_server_start(&cfg, err, sizeof err);
    assert_non_null(srv);
    assert_int_equal(kvr_server_register_json(srv,
                                              "{\"instance_id\": 1, \"endpoint\": "
                                              "\"tcp://127.0.0.1:1\", \"model_name\": \"m\", "
                                              "\"block_size\": 2}",
                                              err, sizeof err),
                     201);
    const char *bodies[] = {
        "{\"model_name\":\"m\",\"token_ids\":[1,2,3,4,5]}",
        "{\"model_name\":\"m\",\"token_ids\":[1,2,3,4,5],\"mm_items\":[{\"start\":2,\"end\":4,"
        "\"mm_hash\":\"00000000000000ff\"}]}",
        "{\"model_name\":\"m\",\"token_ids\":[]}",
        "{\"model_name\":\"m\",\"token_ids\":[1,-1]}",
        "{\"model_name\":\"m\"}",
        "{\"model_name\":\"nope\",\"token_ids\":[1]}",
        "{\"model_name\":\"m\",\"token_ids\":[1,2],\"mm_items\":[{\"start\":1,\"end\":3}]}",
        "{\"model_name\":\"m\",\"token_ids\":\"abc\"}",
        "{\"model_name\":7,\"token_ids\":[1]}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        same_reply(srv, bodies[i]);

    kvr_api_reply r = {0};
    const char *route = "{\"model_name\":\"m\",\"request_id\":\"a\",\"token_ids\":[1,2,3,4]}";
    kvr_api_route_raw(srv, route, strlen(route), &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.body, "worker_id")), 1);
    json_decref(r.body);
    memset(&r, 0, sizeof r);
    kvr_api_route_raw(srv, route, strlen(route), &r);
    assert_int_equal(r.status, 409);
    json_decref(r.body);

    /* A u64 identity above INT64_MAX as a JSON number still routes and is
     * forwarded as its 16 hex digits. */
    memset(&r, 0, sizeof r);
    const char *mm = "{\"model_name\":\"m\",\"request_id\":\"b\",\"token_ids\":[1,2,3,4],"
                     "\"mm_items\":[{\"start\":2,\"end\":4,\"mm_hash\":18446744073709551614}]}";
    kvr_api_route_raw(srv, mm, strlen(mm), &r);
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.body, "forward_mm_hashes")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(r.body, "mm_hashes"), 0)),
                        "fffffffffffffffe");
    json_decref(r.body);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_scanned_rest_parsed),
        cmocka_unit_test(test_bad_tokens_and_json),
        cmocka_unit_test(test_u64_mm_hash_above_int64),
        cmocka_unit_test(test_raw_handlers_match_json_handlers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
