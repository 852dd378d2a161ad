/* JSON edge over real HTTP (SPEC §7.1, issue 10): u64 fields take JSON
 * integers up to 2^64 - 1 on every endpoint (the one body parser), decimal
 * strings still work, and a body that is not JSON is a 400 with nothing
 * changed, however the fast path rewrote it. */
#include "test_support.h"

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT 10000
#define BIG "18446744073709551615" /* 2^64 - 1 */

static kvr_server *start(char *base, size_t cap)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    kvr_server *srv = th_server_start(&cfg, base, cap);
    assert_non_null(srv);
    return srv;
}

static long post(const char *base, const char *path, const char *body, json_t **reply)
{
    long st;
    json_t *r = th_json("POST", base, path, body, &st);
    if (reply)
        *reply = r;
    else
        json_decref(r);
    return st;
}

/* The raw reply text of method path (body may be NULL); malloc'd. */
static char *raw(const char *method, const char *base, const char *path, const char *body)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", base, path);
    char *out = NULL;
    assert_int_equal(th_http(method, url, body, body ? strlen(body) : 0, &out), 200);
    return out;
}

/* A u64 in a reply as th_json reads it: a JSON integer, or above
 * INT64_MAX the bare number th_json hands over as its decimal string. */
static bool reply_u64(const json_t *v, uint64_t *out)
{
    if (json_is_integer(v)) {
        *out = (uint64_t)json_integer_value(v);
        return json_integer_value(v) >= 0;
    }
    if (!json_is_string(v))
        return false;
    *out = kvr_test_u64(json_string_value(v));
    return true;
}

/* Text tokens whose first block's router hash is above INT64_MAX, so the
 * /query_by_hash below has to send a number jansson refuses. */
static void tokens_with_big_hash(uint64_t *tokens, uint64_t *local)
{
    for (uint64_t base = 1;; base += BS) {
        for (int i = 0; i < BS; i++)
            tokens[i] = base + (uint64_t)i;
        th_local_hashes(tokens, BS, BS, local, 1);
        if (local[0] > (uint64_t)INT64_MAX)
            return;
    }
}

static void test_u64_numbers_on_every_endpoint(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base);
    th_engine e;
    th_engine_start(&e);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": " BIG ", \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": %d}",
             e.endpoint, BS);
    json_t *r = NULL;
    long st = post(base, "/register", body, &r);
    if (st != 201)
        fail_msg("register: %ld %s", st, json_string_value(json_object_get(r, "error")));
    json_decref(r);
    assert_true(th_engine_wait_sub(&e, WAIT));
    uint64_t tokens[BS], local[1], engine_hash = 77;
    tokens_with_big_hash(tokens, local);
    kvr_raw_event ev = th_store(&engine_hash, 1, 0, tokens, BS);
    th_send_events(&e, 0, &ev, 1, true);
    /* decimal strings (th_score) and plain JSON numbers agree */
    assert_int_equal(th_wait_score(base, "m", local, 1, UINT64_MAX, 0, BS, WAIT), BS);
    snprintf(body, sizeof body, "{\"model_name\":\"m\",\"block_hashes\":[%llu]}",
             (unsigned long long)local[0]);
    assert_int_equal(post(base, "/query_by_hash", body, &r), 200);
    json_t *score = json_object_get(json_object_get(json_object_get(r, "scores"), BIG), "0");
    assert_int_equal(json_integer_value(score), BS);
    json_decref(r);
    /* /route pinned to the worker by a u64 number, and allowed_workers */
    const char *route = "{\"model_name\":\"m\",\"request_id\":\"r1\",\"token_ids\":[1,2,3,4],"
                        "\"worker_id\":" BIG ",\"allowed_workers\":[" BIG "]}";
    assert_int_equal(post(base, "/route", route, &r), 200);
    uint64_t chosen = 0;
    assert_true(reply_u64(json_object_get(r, "worker_id"), &chosen));
    assert_true(chosen == UINT64_MAX);
    json_decref(r);
    /* ids above INT64_MAX are written as JSON numbers, as Dynamo writes them
     * (before: decimal strings), in /route, /workers, /engines-free replies */
    const char *route2 = "{\"model_name\":\"m\",\"request_id\":\"r2\",\"token_ids\":[1,2,3,4],\"debug\":true}";
    char *text = raw("POST", base, "/route", route2);
    if (!strstr(text, "{\"worker_id\":" BIG ",") || !strstr(text, "\"costs\":[{\"worker_id\":" BIG ","))
        fail_msg("/route: %s", text);
    free(text);
    text = raw("GET", base, "/workers", NULL);
    if (!strstr(text, "[{\"instance_id\":" BIG ",") || strstr(text, "\"" BIG "\""))
        fail_msg("/workers: %s", text);
    free(text);
    json_t *w = th_json("GET", base, "/workers", NULL, NULL);
    assert_true(reply_u64(json_object_get(json_array_get(w, 0), "instance_id"), &chosen));
    assert_true(chosen == UINT64_MAX);
    json_decref(w);
    /* /unregister by the number: the worker goes */
    assert_int_equal(post(base, "/unregister", "{\"instance_id\":" BIG ",\"model_name\":\"m\"}", NULL),
                     200);
    assert_int_equal(post(base, "/unregister", "{\"instance_id\":\"" BIG "\",\"model_name\":\"m\"}",
                          NULL),
                     404);
    /* a number above 2^64 - 1 is still too big */
    assert_int_equal(post(base, "/unregister",
                          "{\"instance_id\":18446744073709551616,\"model_name\":\"m\"}", &r),
                     400);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "too big integer"));
    json_decref(r);
    th_engine_stop(&e);
    kvr_server_stop(srv);
}

/* Invalid JSON is a 400 whatever the fast path did with it, and nothing is
 * registered (before: an array written as a key was taken as a string key
 * and the worker registered with 201). */
static void test_invalid_json_is_400_and_changes_nothing(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base);
    char keyarr[256];
    size_t o = (size_t)snprintf(keyarr, sizeof keyarr, "[");
    for (int i = 0; i < 32; i++)
        o += (size_t)snprintf(keyarr + o, sizeof keyarr - o, "%s%d", i ? "," : "", i);
    snprintf(keyarr + o, sizeof keyarr - o, "]");
    const char *rest = "\"instance_id\":77,\"endpoint\":\"tcp://127.0.0.1:1\",\"model_name\":\"m\","
                       "\"block_size\":4}";
    char body[1024];
    const char *shapes[] = {"{%s:1,%s", "{%s:[1],%s", "{" BIG ":1,%.0s%s"};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        snprintf(body, sizeof body, shapes[i], keyarr, rest);
        json_t *r = NULL;
        long st = post(base, "/register", body, &r);
        const char *err = json_string_value(json_object_get(r, "error"));
        if (st != 400 || !err || !strstr(err, "malformed JSON body"))
            fail_msg("%s -> %ld %s", body, st, err ? err : "");
        json_decref(r);
    }
    json_t *w = th_json("GET", base, "/workers", NULL, NULL);
    assert_int_equal(json_array_size(w), 0);
    json_decref(w);
    /* a big number in a field that is not a u64 stays jansson's 400 */
    json_t *r = NULL;
    assert_int_equal(post(base, "/register",
                          "{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\",\"model_name\":\"m\","
                          "\"block_size\":" BIG "}",
                          &r),
                     400);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "too big integer"));
    json_decref(r);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64_numbers_on_every_endpoint),
        cmocka_unit_test(test_invalid_json_is_400_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
