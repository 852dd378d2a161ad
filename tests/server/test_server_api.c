/* HTTP API contract: registry semantics (201/200/reset/409/404), 4xx
 * answers naming the field, 413, /query and /query_by_hash agreeing, /dump
 * and peer recovery, /health and /metrics. */
#include "test_support.h"

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT 3000

typedef struct {
    kvr_server *srv;
    char base[64];
} srv_t;

static void start(srv_t *s, size_t max_body, const char *const *peers, size_t n_peers,
                  const char *workers_json)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.max_body = max_body;
    cfg.peers = peers;
    cfg.n_peers = n_peers;
    cfg.workers_json = workers_json;
    s->srv = th_server_start(&cfg, s->base, sizeof s->base);
    assert_non_null(s->srv);
}

static long post(const srv_t *s, const char *path, const char *body, char *err_out, size_t cap)
{
    long st;
    json_t *r = th_json("POST", s->base, path, body, &st);
    const char *e = json_string_value(json_object_get(r, "error"));
    if (err_out)
        snprintf(err_out, cap, "%s", e ? e : "");
    json_decref(r);
    return st;
}

static void reg_body(char *out, size_t cap, uint64_t id, const th_engine *e, int bs,
                     const char *extra)
{
    snprintf(out, cap,
             "{\"instance_id\": %llu, \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": %d%s}",
             (unsigned long long)id, e->endpoint, bs, extra ? extra : "");
}

static void expect_error(const srv_t *s, const char *path, const char *body, long status,
                         const char *field)
{
    char err[512];
    long st = post(s, path, body, err, sizeof err);
    if (st != status || !strstr(err, field))
        fail_msg("%s %s -> %ld '%s' (want %ld naming '%s')", path, body, st, err, status, field);
}

static void test_bad_requests_name_the_field(void **state)
{
    (void)state;
    srv_t s;
    start(&s, 0, NULL, 0, NULL);
    expect_error(&s, "/register", "{not json", 400, "JSON");
    expect_error(&s, "/register", "[1,2]", 400, "object");
    expect_error(&s, "/register", "{\"endpoint\":\"tcp://127.0.0.1:1\",\"model_name\":\"m\","
                                  "\"block_size\":4}", 400, "instance_id");
    expect_error(&s, "/register", "{\"instance_id\":-3,\"endpoint\":\"tcp://127.0.0.1:1\","
                                  "\"model_name\":\"m\",\"block_size\":4}", 400, "instance_id");
    expect_error(&s, "/register", "{\"instance_id\":1,\"model_name\":\"m\",\"block_size\":4}",
                 400, "endpoint");
    expect_error(&s, "/register", "{\"instance_id\":1,\"endpoint\":\"nowhere\","
                                  "\"model_name\":\"m\",\"block_size\":4}", 400, "endpoint");
    expect_error(&s, "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\","
                                  "\"block_size\":4}", 400, "model_name");
    expect_error(&s, "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\","
                                  "\"model_name\":\"m\",\"block_size\":\"4\"}", 400, "block_size");
    expect_error(&s, "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\","
                                  "\"model_name\":\"m\",\"block_size\":0}", 400, "block_size");
    expect_error(&s, "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\","
                                  "\"model_name\":\"m\",\"block_size\":4,\"mm_identity\":\"x\"}",
                 400, "mm_identity");
    expect_error(&s, "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\","
                                  "\"model_name\":\"m\",\"block_size\":4,"
                                  "\"accepts_mm_hashes\":\"yes\"}", 400, "accepts_mm_hashes");
    expect_error(&s, "/register", "{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\","
                                  "\"model_name\":\"m\",\"block_size\":4,\"dp_rank\":-1}", 400,
                 "dp_rank");
    expect_error(&s, "/query_by_hash", "{\"model_name\":\"m\"}", 400, "block_hashes");
    expect_error(&s, "/query_by_hash", "{\"model_name\":\"m\",\"block_hashes\":[1,\"x\"]}", 400,
                 "block_hashes[1]");
    expect_error(&s, "/query_by_hash", "{\"block_hashes\":[1]}", 400, "model_name");
    expect_error(&s, "/query_by_hash", "{\"model_name\":\"nope\",\"block_hashes\":[1]}", 404,
                 "model_name");
    expect_error(&s, "/unregister", "{\"instance_id\":5,\"model_name\":\"m\"}", 404,
                 "instance_id");
    expect_error(&s, "/unregister", "{\"model_name\":\"m\"}", 400, "instance_id");
    /* No registration survived any of that. */
    json_t *w = th_json("GET", s.base, "/workers", NULL, NULL);
    assert_int_equal(json_array_size(w), 0);
    json_decref(w);
    long st;
    json_decref(th_json("GET", s.base, "/nope", NULL, &st));
    assert_int_equal(st, 404);
    json_decref(th_json("GET", s.base, "/register", NULL, &st));
    assert_int_equal(st, 405);
    kvr_server_stop(s.srv);
}

static void test_body_limit_413(void **state)
{
    (void)state;
    srv_t s;
    start(&s, 1024, NULL, 0, NULL);
    size_t n = 4096;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = 0;
    char url[128];
    snprintf(url, sizeof url, "%s/query_by_hash", s.base);
    char *out = NULL;
    long st = th_http("POST", url, big, n, &out);
    assert_int_equal(st, 413);
    assert_non_null(strstr(out, "error"));
    free(out);
    free(big);
    /* Under the limit still works. */
    long st2;
    json_decref(th_json("GET", s.base, "/health", NULL, &st2));
    assert_int_equal(st2, 200);
    kvr_server_stop(s.srv);
}

static void test_register_semantics(void **state)
{
    (void)state;
    srv_t s;
    start(&s, 0, NULL, 0, NULL);
    th_engine e;
    th_engine_start(&e);
    char body[1024];
    json_t *r;
    reg_body(body, sizeof body, 1, &e, BS, NULL);
    assert_int_equal(th_register(s.base, body, &r), 201);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(r, "result")), "created");
    json_decref(r);
    assert_true(th_engine_wait_sub(&e, WAIT));
    uint64_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8}, hashes[2] = {11, 12}, local[2];
    th_local_hashes(tokens, 8, BS, local, 2);
    kvr_raw_event ev = th_store(hashes, 2, 0, tokens, BS);
    th_send_events(&e, 0, &ev, 1, true);
    assert_int_equal(th_wait_score(s.base, "m", local, 2, 1, 0, 2 * BS, WAIT), 2 * BS);

    /* Same settings (explicit defaults included): unchanged, state kept. */
    reg_body(body, sizeof body, 1, &e, BS,
             ", \"mm_identity\": \"legacy\", \"routing_group\": \"default\", \"is_eagle\": false");
    assert_int_equal(th_register(s.base, body, &r), 200);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(r, "result")), "unchanged");
    assert_true(json_is_false(json_object_get(r, "reset")));
    json_decref(r);
    assert_int_equal(th_score(s.base, "m", local, 2, 1, 0), 2 * BS);

    /* Another worker with a different block size in the same group: 409. */
    th_engine e2;
    th_engine_start(&e2);
    char err[512];
    reg_body(body, sizeof body, 2, &e2, 8, NULL);
    assert_int_equal(post(&s, "/register", body, err, sizeof err), 409);
    assert_non_null(strstr(err, "block_size"));

    /* A failed request touches nothing: changed settings with an endpoint
     * (or replay endpoint) no socket can connect to. */
    snprintf(body, sizeof body,
             "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1\", \"model_name\": \"m\", "
             "\"block_size\": %d, \"mm_identity\": \"engine_wide\"}", BS);
    assert_int_equal(post(&s, "/register", body, err, sizeof err), 400);
    assert_non_null(strstr(err, "'endpoint'"));
    reg_body(body, sizeof body, 1, &e, BS,
             ", \"mm_identity\": \"engine_wide\", \"replay_endpoint\": \"bogus://x\"");
    assert_int_equal(post(&s, "/register", body, err, sizeof err), 400);
    assert_non_null(strstr(err, "'replay_endpoint'"));
    assert_int_equal(th_score(s.base, "m", local, 2, 1, 0), 2 * BS);

    /* Changed mm_identity: reset, said so, state cleared. */
    reg_body(body, sizeof body, 1, &e, BS, ", \"mm_identity\": \"engine_wide\"");
    assert_int_equal(th_register(s.base, body, &r), 200);
    assert_true(json_is_true(json_object_get(r, "reset")));
    assert_non_null(json_string_value(json_object_get(r, "message")));
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(r, "result")), "reset");
    json_decref(r);
    assert_int_equal(th_score(s.base, "m", local, 2, 1, 0), -1);
    /* The listener kept running: new events still arrive. */
    th_send_events(&e, 1, &ev, 1, true);
    assert_int_equal(th_wait_score(s.base, "m", local, 2, 1, 0, 2 * BS, WAIT), 2 * BS);

    /* A second rank of the same worker is a new listener: 201. */
    snprintf(body, sizeof body,
             "{\"instance_id\": 1, \"dp_rank\": 1, \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": %d, \"mm_identity\": \"engine_wide\"}",
             e2.endpoint, BS);
    assert_int_equal(th_register(s.base, body, NULL), 201);

    /* Same settings, new endpoint: the listener moves, the index stays. */
    th_engine e3;
    th_engine_start(&e3);
    snprintf(body, sizeof body,
             "{\"instance_id\": 1, \"dp_rank\": 1, \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": %d, \"mm_identity\": \"engine_wide\"}",
             e3.endpoint, BS);
    assert_int_equal(th_register(s.base, body, &r), 200);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(r, "result")), "listener_restarted");
    json_decref(r);
    assert_int_equal(th_score(s.base, "m", local, 2, 1, 0), 2 * BS);
    th_engine_stop(&e3);

    /* Unregister rank 1 only, then the whole worker. */
    assert_int_equal(post(&s, "/unregister", "{\"instance_id\":1,\"model_name\":\"m\","
                                             "\"routing_group\":\"default\",\"dp_rank\":1}",
                          NULL, 0),
                     200);
    assert_int_equal(th_score(s.base, "m", local, 2, 1, 0), 2 * BS);
    assert_int_equal(post(&s, "/unregister", "{\"instance_id\":1,\"model_name\":\"m\"}", NULL, 0),
                     200);
    assert_int_equal(th_score(s.base, "m", local, 2, 1, 0), -1);
    assert_int_equal(post(&s, "/unregister", "{\"instance_id\":1,\"model_name\":\"m\"}", NULL, 0),
                     404);
    json_t *w = th_json("GET", s.base, "/workers", NULL, NULL);
    assert_int_equal(json_array_size(w), 0);
    json_decref(w);
    th_engine_stop(&e2);
    th_engine_stop(&e);
    kvr_server_stop(s.srv);
}

/* A fresh server with worker `id` on a fresh engine, holding one store of
 * n blocks of tokens (engine hashes id*100+1..); local gets their router
 * hashes. */
static void start_with_blocks(srv_t *s, th_engine *e, uint64_t id, const uint64_t *tokens,
                              uint32_t n, uint64_t *local)
{
    start(s, 0, NULL, 0, NULL);
    th_engine_start(e);
    char body[1024];
    reg_body(body, sizeof body, id, e, BS, NULL);
    assert_int_equal(th_register(s->base, body, NULL), 201);
    assert_true(th_engine_wait_sub(e, WAIT));
    uint64_t hashes[16];
    for (uint32_t i = 0; i < n; i++)
        hashes[i] = id * 100 + i + 1;
    th_local_hashes(tokens, n * BS, BS, local, n);
    kvr_raw_event ev = th_store(hashes, n, 0, tokens, BS);
    th_send_events(e, 0, &ev, 1, true);
    assert_int_equal(th_wait_score(s->base, "m", local, n, id, 0, n * BS, WAIT), n * BS);
}

static void test_query_matches_query_by_hash(void **state)
{
    (void)state;
    srv_t s;
    th_engine e;
    uint64_t tokens[12], local[3];
    for (int i = 0; i < 12; i++)
        tokens[i] = 40 + (uint64_t)i;
    start_with_blocks(&s, &e, 3, tokens, 3, local);
    /* /query with tokens (plus a partial block) gives the same reply body. */
    json_t *toks = json_array();
    for (int i = 0; i < 12; i++)
        json_array_append_new(toks, json_integer((json_int_t)tokens[i]));
    json_array_append_new(toks, json_integer(999));
    json_t *q = json_pack("{s:o,s:s}", "token_ids", toks, "model_name", "m");
    char *qs = json_dumps(q, JSON_COMPACT);
    long st;
    json_t *r = th_json("POST", s.base, "/query", qs, &st);
    assert_int_equal(st, 200);
    json_t *sc = json_object_get(json_object_get(json_object_get(r, "scores"), "3"), "0");
    assert_int_equal(json_integer_value(sc), 3 * BS);
    json_t *inst = json_object_get(json_object_get(r, "instances"), "3");
    assert_int_equal(json_integer_value(json_object_get(inst, "longest_matched")), 3 * BS);
    assert_int_equal(json_integer_value(json_object_get(inst, "gpu")), 3 * BS);
    json_decref(r);
    free(qs);
    json_decref(q);
    /* u64 above 2^63 travels as a decimal string. */
    json_t *r2 = th_json("POST", s.base, "/query_by_hash",
                         "{\"model_name\":\"m\",\"block_hashes\":[\"18446744073709551615\"]}", &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_object_size(json_object_get(r2, "scores")), 0);
    json_decref(r2);
    th_engine_stop(&e);
    kvr_server_stop(s.srv);
}

static void test_dump_and_peer_recovery(void **state)
{
    (void)state;
    srv_t a;
    start(&a, 0, NULL, 0, NULL);
    th_engine e1, e2;
    th_engine_start(&e1);
    th_engine_start(&e2);
    char body[1024];
    reg_body(body, sizeof body, 1, &e1, BS, NULL);
    assert_int_equal(th_register(a.base, body, NULL), 201);
    reg_body(body, sizeof body, 2, &e2, BS, NULL);
    assert_int_equal(th_register(a.base, body, NULL), 201);
    assert_true(th_engine_wait_sub(&e1, WAIT));
    assert_true(th_engine_wait_sub(&e2, WAIT));
    uint64_t tokens[16], local[4];
    for (int i = 0; i < 16; i++)
        tokens[i] = 70 + (uint64_t)i;
    th_local_hashes(tokens, 16, BS, local, 4);
    /* Engine hashes above 2^63 must survive the dump exactly. */
    uint64_t h1[4] = {UINT64_MAX - 1, UINT64_MAX - 2, UINT64_MAX - 3, UINT64_MAX - 4};
    kvr_raw_event s1 = th_store(h1, 2, 0, tokens, BS);
    kvr_raw_event s2 = th_store(h1 + 2, 2, h1[1], tokens + 2 * BS, BS);
    th_send_events(&e1, 0, &s1, 1, true);
    th_send_events(&e1, 1, &s2, 1, true);
    uint64_t h2[1] = {5};
    kvr_raw_event s3 = th_store(h2, 1, 0, tokens, BS);
    th_send_events(&e2, 0, &s3, 1, true);
    assert_int_equal(th_wait_score(a.base, "m", local, 4, 1, 0, 4 * BS, WAIT), 4 * BS);
    assert_int_equal(th_wait_score(a.base, "m", local, 4, 2, 0, BS, WAIT), BS);

    char url[128], *dump = NULL;
    snprintf(url, sizeof url, "%s/dump?format=ndjson", a.base);
    assert_int_equal(th_http("GET", url, NULL, 0, &dump), 200);
    /* JSON lines: the two workers' registrations, their cursors, their chains */
    size_t lines = 0;
    for (const char *p = dump; (p = strchr(p, '\n')); p++)
        lines++;
    assert_true(lines >= 2 + 2 + 2);
    assert_non_null(strstr(dump, "\"18446744073709551614\""));
    free(dump);

    /* Server B recovers from A before its own (silent) listeners start. */
    char workers[1024];
    snprintf(workers, sizeof workers,
             "[{\"instance_id\":1,\"endpoint\":\"tcp://127.0.0.1:1\",\"model_name\":\"m\","
             "\"block_size\":%d}]", BS);
    const char *peers[1] = {a.base};
    srv_t b;
    start(&b, 0, peers, 1, workers);
    assert_int_equal(th_score(b.base, "m", local, 4, 1, 0), 4 * BS);
    assert_int_equal(th_score(b.base, "m", local, 4, 2, 0), BS);
    uint64_t half[2] = {local[0], local[1]};
    assert_int_equal(th_score(b.base, "m", half, 2, 1, 0), 2 * BS);
    /* Removal by the engine's handle works on the recovered state too:
     * the handles came across exactly. */
    snprintf(url, sizeof url, "%s/dump", b.base);
    char *dump_b = NULL;
    assert_int_equal(th_http("GET", url, NULL, 0, &dump_b), 200);
    assert_non_null(strstr(dump_b, "\"block_hash\":18446744073709551611,"));
    free(dump_b);
    kvr_server_stop(b.srv);
    th_engine_stop(&e1);
    th_engine_stop(&e2);
    kvr_server_stop(a.srv);
}

static void test_health_and_metrics(void **state)
{
    (void)state;
    srv_t s;
    start(&s, 0, NULL, 0, NULL);
    th_engine e;
    th_engine_start(&e);
    char body[1024];
    reg_body(body, sizeof body, 9, &e, BS, NULL);
    assert_int_equal(th_register(s.base, body, NULL), 201);
    long st;
    json_t *h = th_json("GET", s.base, "/health", NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(h, "status")), "ok");
    json_decref(h);
    char url[128], *m = NULL;
    snprintf(url, sizeof url, "%s/metrics", s.base);
    assert_int_equal(th_http("GET", url, NULL, 0, &m), 200);
    assert_non_null(strstr(m, "kvr_workers{model=\"m\",group=\"default\"} 1\n"));
    assert_non_null(strstr(m, "kvr_http_request_duration_seconds_count{endpoint=\"/register\"} 1"));
    assert_non_null(strstr(m, "kvr_drops_total{reason=\"parent_not_found\"} 0\n"));
    assert_non_null(strstr(m, "kvr_mm_blocks_excluded_total 0\n"));
    /* One listener: pending until its SUB connects, active after. */
    assert_true(strstr(m, "kvr_listeners{status=\"pending\"} 1\n") ||
                strstr(m, "kvr_listeners{status=\"active\"} 1\n"));
    assert_non_null(strstr(m, "kvr_listeners{status=\"failed\"} 0\n"));
    assert_non_null(strstr(m, "kvr_index_bytes{model=\"m\",group=\"default\"}"));
    free(m);
    th_engine_stop(&e);
    kvr_server_stop(s.srv);
}

/* Every field of every POST endpoint set to every wrong JSON type: never a
 * 5xx, never a crash, and what is indexed stays indexed. */
static void test_wrong_types_never_touch_state(void **state)
{
    (void)state;
    srv_t s;
    th_engine e;
    uint64_t tokens[8] = {9, 8, 7, 6, 5, 4, 3, 2}, local[2];
    start_with_blocks(&s, &e, 4, tokens, 2, local);

    const char *paths[] = {"/register", "/unregister", "/query_by_hash", "/query", "/route",
                           "/free", "/prefill_done"};
    const char *fields[] = {"instance_id", "endpoint", "model_name", "block_size",
                            "routing_group", "dp_rank", "replay_endpoint", "topic",
                            "lora_name", "mm_identity", "accepts_mm_hashes", "is_eagle",
                            "block_hashes", "token_ids", "mm_items", "request_id", "cache_salt",
                            "osl", "temperature", "worker_id"};
    const char *values[] = {"null", "true", "-1", "1.5", "18446744073709551616", "\"\"",
                            "\"x\"", "[]", "[null]", "[-1]", "[\"a\"]", "{}", "[[1,2]]",
                            "[{\"start\":5,\"end\":1}]"};
    /* A valid base so each request fails on the one field under test. */
    char valid[512];
    snprintf(valid, sizeof valid,
             "{\"instance_id\":99,\"endpoint\":\"%s\",\"model_name\":\"m\",\"block_size\":%d,"
             "\"block_hashes\":[1],\"token_ids\":[1,2,3,4],\"request_id\":\"r\"}",
             e.endpoint, BS);
    json_t *base_obj = json_loads(valid, JSON_DECODE_ANY, NULL);
    int n5xx = 0, n = 0;
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++)
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++)
            for (size_t v = 0; v < sizeof values / sizeof *values; v++) {
                /* The valid base without the field, then the field as text
                 * (some values are beyond what jansson can hold). */
                json_t *copy = json_deep_copy(base_obj);
                json_object_del(copy, fields[f]);
                char *rest = json_dumps(copy, JSON_COMPACT);
                json_decref(copy);
                char b[1024], b2[256];
                rest[strlen(rest) - 1] = 0; /* drop the closing brace */
                snprintf(b, sizeof b, "%s,\"%s\":%s}", rest, fields[f], values[v]);
                free(rest);
                snprintf(b2, sizeof b2, "{\"%s\":%s}", fields[f], values[v]);
                const char *bodies[2] = {b, b2};
                for (int k = 0; k < 2; k++) {
                    char err[512];
                    long st = post(&s, paths[p], bodies[k], err, sizeof err);
                    n++;
                    if (st >= 500 || st == 0) {
                        fprintf(stderr, "%s %s -> %ld %s\n", paths[p], bodies[k], st, err);
                        n5xx++;
                    }
                    if (st >= 400 && !err[0])
                        fail_msg("%s %s -> %ld without an error message", paths[p], bodies[k],
                                 st);
                }
            }
    json_decref(base_obj);
    assert_true(n > 1000);
    assert_int_equal(n5xx, 0);
    /* Worker 4 and its blocks are untouched (some requests registered and
     * then unregistered worker 99; none may touch worker 4). */
    assert_int_equal(th_score(s.base, "m", local, 2, 4, 0), 2 * BS);
    th_engine_stop(&e);
    kvr_server_stop(s.srv);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_requests_name_the_field),
        cmocka_unit_test(test_body_limit_413),
        cmocka_unit_test(test_register_semantics),
        cmocka_unit_test(test_query_matches_query_by_hash),
        cmocka_unit_test(test_dump_and_peer_recovery),
        cmocka_unit_test(test_health_and_metrics),
        cmocka_unit_test(test_wrong_types_never_touch_state),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
