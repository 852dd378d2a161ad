/* Out of memory while parsing a request body (json_body.h
 * KVR_JSON_BODY_NOMEM). The fast path falls back to jansson on the
 * original text, which still parses a body without integers above
 * INT64_MAX; one with such an integer in a u64 field, or a body jansson
 * itself has no memory for, is not refused as bad JSON (400 "too big
 * integer", before) but answered as the server answers other
 * out-of-memory failures, 500 {"error": "out of memory"}, and counted in
 * kvr_http_body_out_of_memory_total. The fast path's first value buffer
 * (4096 json_int_t) is made to fail with tests/support/fail_alloc.h's
 * armed realloc; jansson's own allocations through json_set_alloc_funcs.
 * A GET's query arguments, its handler's body, likewise: one jansson has
 * no memory to hold is a 500, one that is not UTF-8 a 400. */
#include "test_support.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/server.h"
#include "server/json_body.h"
#include "net_helpers.h"
#include "fail_alloc.h"

#define BIG "18446744073709551615" /* 2^64 - 1 */
#define VALS_BYTES (4096 * sizeof(json_int_t)) /* the fast path's first value buffer */

static const char *const vec_keys[] = {"token_ids", NULL};
static const kvr_json_body_opts opts = {vec_keys};

/* {<more>"worker_id": <id>, "token_ids": [1..40]} (long enough for the
 * fast path) */
static void body_with(char *out, size_t cap, const char *more, const char *id)
{
    int o = snprintf(out, cap, "{%s\"worker_id\":%s,\"token_ids\":[1", more, id);
    for (int i = 2; i <= 40; i++)
        o += snprintf(out + o, cap - (size_t)o, ",%d", i);
    snprintf(out + o, cap - (size_t)o, "]}");
}

static void test_fast_path_out_of_memory_is_not_bad_json(void **state)
{
    (void)state;
    char body[512];
    body_with(body, sizeof body, "", BIG);
    kvr_json_body b;
    json_error_t err;
    assert_int_equal(kvr_json_body_parse(body, strlen(body), 0, &opts, &b, &err), 0);
    kvr_json_body_free(&b);

    kvr_fail_reset();
    kvr_fail_realloc(VALS_BYTES);
    int rc = kvr_json_body_parse(body, strlen(body), 0, &opts, &b, &err);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(rc, KVR_JSON_BODY_NOMEM); /* before: -1, "too big integer" */
    assert_string_equal(err.text, "out of memory");
    assert_int_equal(json_error_code(&err), json_error_out_of_memory);
    assert_null(b.root);

    /* Without an integer above INT64_MAX jansson takes the body as it is:
     * the same tree, the vector left in it. */
    body_with(body, sizeof body, "", "7");
    kvr_fail_realloc(VALS_BYTES);
    assert_int_equal(kvr_json_body_parse(body, strlen(body), 0, &opts, &b, &err), 0);
    assert_int_equal(kvr_fail_count(), 2);
    json_t *want = json_loads(body, 0, NULL);
    assert_true(json_equal(b.root, want));
    assert_int_equal(b.n_vecs, 0);
    json_decref(want);
    kvr_json_body_free(&b);
}

static _Atomic int jansson_fails; /* jansson's allocations fail while set */

static void *jansson_malloc(size_t n) { return jansson_fails ? NULL : malloc(n); }

/* A short body (no fast path) jansson has no memory for is out of memory
 * too, not a 400 about its text. */
static void test_jansson_out_of_memory_is_not_bad_json(void **state)
{
    (void)state;
    json_set_alloc_funcs(jansson_malloc, free);
    kvr_json_body b;
    json_error_t err;
    const char *body = "{\"model_name\":\"m\",\"token_ids\":[1,2,3]}";
    jansson_fails = 1;
    int rc = kvr_json_body_parse(body, strlen(body), 0, NULL, &b, &err);
    jansson_fails = 0;
    assert_int_equal(rc, KVR_JSON_BODY_NOMEM);
    assert_string_equal(err.text, "out of memory");
    assert_int_equal(json_error_code(&err), json_error_out_of_memory);
    assert_int_equal(kvr_json_body_parse(body, strlen(body), 0, NULL, &b, &err), 0);
    kvr_json_body_free(&b);
    json_set_alloc_funcs(malloc, free);
}

/* Over HTTP: /route with worker_id 2^64 - 1, the fast path out of memory:
 * 500 {"error": "out of memory"}, counted; memory back, the same body is
 * parsed (and answered for what it asks). */
static void test_route_body_out_of_memory_answers_500(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    char body[512];
    body_with(body, sizeof body, "\"model_name\":\"m\",\"request_id\":\"r\",", BIG);
    json_t *check = json_loads(body, 0, NULL);
    assert_null(check); /* jansson alone refuses it (too big integer) */
    assert_int_equal(th_metric(base, "kvr_http_body_out_of_memory_total"), 0);

    kvr_fail_reset();
    kvr_fail_realloc(VALS_BYTES);
    long st = 0;
    json_t *r = th_json("POST", base, "/route", body, &st);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(st, 500);
    assert_string_equal(json_string_value(json_object_get(r, "error")), "out of memory");
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_http_body_out_of_memory_total"), 1);

    r = th_json("POST", base, "/route", body, &st);
    const char *e = json_string_value(json_object_get(r, "error"));
    assert_true(st != 500 && (!e || !strstr(e, "malformed JSON")));
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_http_body_out_of_memory_total"), 1);
    kvr_server_stop(srv);
}

static int json_allocs;

static void *count_malloc(size_t n)
{
    json_allocs++;
    return malloc(n);
}

/* A GET's query arguments are its body (api.h): one jansson has no memory
 * to hold is a 500 counted with the bodies, and one that is not UTF-8 a
 * 400, where either was left out (GET /dump?format=ndjson answered 200 in
 * Dynamo's form). The value's string, the allocation after the argument
 * object (counted at run time), is made to fail. */
static void test_query_argument_not_held_is_an_error(void **state)
{
    (void)state;
    json_set_alloc_funcs(count_malloc, free);
    json_allocs = 0;
    json_t *args = json_object();
    int before_value = json_allocs;
    json_decref(args);
    json_set_alloc_funcs(kvr_fail_json_malloc, free);
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "%s/dump?format=ndjson", base);
    assert_int_equal(th_http("GET", url, NULL, 0, &out), 200);
    assert_string_equal(out, ""); /* an empty server's lines */
    free(out);

    kvr_fail_reset();
    kvr_fail_json_nth(before_value + 1);
    long st = 0;
    json_t *r = th_json("GET", base, "/dump?format=ndjson", NULL, &st);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(st, 500); /* before: 200 and "{}" */
    assert_string_equal(json_string_value(json_object_get(r, "error")), "out of memory");
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_http_body_out_of_memory_total"), 1);

    r = th_json("GET", base, "/dump?format=%FF", NULL, &st);
    assert_int_equal(st, 400); /* before: 200 and "{}" */
    assert_string_equal(json_string_value(json_object_get(r, "error")),
                        "query argument 'format' is not valid UTF-8");
    json_decref(r);
    kvr_server_stop(srv);
    json_set_alloc_funcs(malloc, free);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_path_out_of_memory_is_not_bad_json),
        cmocka_unit_test(test_jansson_out_of_memory_is_not_bad_json),
        cmocka_unit_test(test_route_body_out_of_memory_answers_500),
        cmocka_unit_test(test_query_argument_not_held_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
