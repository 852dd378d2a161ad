/* /query, /route, /prefill_done, /free over real HTTP, with index state
 * ingested from engine doubles publishing real msgpack over ZeroMQ. */
#include "test_support.h"

#include <inttypes.h>

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define N 16
#define WAIT 3000
#define MM_HASH 9533257059414191570ull

typedef struct {
    kvr_server *srv;
    char base[64];
    th_engine legacy, wide, idle;
    char hash16[17];
    char hash64[65];
    char tokens_json[256];
} fixture;

static void reg(fixture *f, uint64_t id, const th_engine *e, const char *extra)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": %" PRIu64 ", \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": %d%s}",
             id, e->endpoint, BS, extra);
    assert_int_equal(th_register(f->base, body, NULL), 201);
}

/* text 100..107 | image 8..11 | text 200..203, as each engine build sees
 * it: a legacy pad value, or Kimi's four wide ids cycled over the image. */
static void publish(th_engine *e, bool wide)
{
    uint64_t t[N], h[N / BS];
    for (uint32_t i = 0; i < N; i++)
        t[i] = i < 8 ? 100 + i
                     : (i < 12 ? (wide ? (1ull << 40) + i % 4 : kvr_pad_value(MM_HASH))
                               : 200 + i - 12);
    for (uint32_t i = 0; i < N / BS; i++)
        h[i] = 1000 + i;
    kvr_raw_event ev = th_store(h, N / BS, 0, t, BS);
    th_send_events(e, 0, &ev, 1, true);
}

static json_t *post(fixture *f, const char *path, const char *body, long *status)
{
    return th_json("POST", f->base, path, body, status);
}

static long long score(json_t *reply, const char *id)
{
    json_t *v = json_object_get(json_object_get(json_object_get(reply, "scores"), id), "0");
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.router.rng_seed = 11;
    f->srv = th_server_start(&cfg, f->base, sizeof f->base);
    if (!f->srv)
        return -1;
    snprintf(f->hash16, sizeof f->hash16, "%016" PRIx64, (uint64_t)MM_HASH);
    /* A 64-hex identity (e.g. SHA-256): the last 16 digits are the u64. */
    snprintf(f->hash64, sizeof f->hash64, "%s%s", "0123456789abcdef0123456789abcdef0123456789abcdef",
             f->hash16);
    size_t k = 0;
    for (uint32_t i = 0; i < N; i++)
        k += (size_t)snprintf(f->tokens_json + k, sizeof f->tokens_json - k, "%s%u", i ? "," : "",
                              i < 8 ? 100 + i : (i < 12 ? 999 : 200 + i - 12));

    th_engine_start(&f->legacy);
    th_engine_start(&f->wide);
    th_engine_start(&f->idle);
    reg(f, 1, &f->legacy, "");
    reg(f, 2, &f->wide, ", \"mm_identity\": \"engine_wide\"");
    reg(f, 3, &f->idle, "");
    assert_true(th_engine_wait_sub(&f->legacy, WAIT));
    assert_true(th_engine_wait_sub(&f->wide, WAIT));
    publish(&f->legacy, false);
    publish(&f->wide, true);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kvr_server_stop(f->srv);
    th_engine_stop(&f->legacy);
    th_engine_stop(&f->wide);
    th_engine_stop(&f->idle);
    free(f);
    return 0;
}

static char *query_body(fixture *f, const char *mm_hash_json, const char *extra)
{
    char *b = malloc(1024);
    snprintf(b, 1024,
             "{\"model_name\": \"m\", \"token_ids\": [%s], \"mm_items\": [{\"start\": 8, "
             "\"end\": 12%s%s}]%s}",
             f->tokens_json, mm_hash_json ? ", \"mm_hash\": " : "", mm_hash_json ? mm_hash_json : "",
             extra);
    return b;
}

/* Polls /query until both engines' stores are visible. */
static json_t *wait_query(fixture *f, const char *body)
{
    double end = th_now() + WAIT / 1000.0;
    for (;;) {
        long st;
        json_t *r = post(f, "/query", body, &st);
        assert_int_equal(st, 200);
        if ((score(r, "1") == 16 && score(r, "2") == 8) || th_now() > end)
            return r;
        json_decref(r);
        th_sleep_ms(5);
    }
}

static void test_query_reply_shape_per_capability(void **state)
{
    fixture *f = *state;
    char hashq[80];
    snprintf(hashq, sizeof hashq, "\"%s\"", f->hash64);
    char *body = query_body(f, hashq, "");
    json_t *r = wait_query(f, body);
    /* Legacy worker: pad-substituted, all 4 blocks. Kimi worker: text prefix,
     * 2 blocks. Idle worker matched nothing and is absent. */
    json_t *want = json_pack(
        "{s:{s:{s:i},s:{s:i}},s:[i,i,i,i],s:{s:{s:i,s:i,s:i,s:i,s:{s:i},s:{s:{s:i,s:i,s:i}}},"
        "s:{s:i,s:i,s:i,s:i,s:{s:i},s:{s:{s:i,s:i,s:i}}}}}",
        "scores", "1", "0", 16, "2", "0", 8, "frequencies", 2, 2, 1, 1, "instances", "1",
        "longest_matched", 16, "gpu", 16, "cpu", 16, "disk", 16, "dp", "0", 16, "dp_tiers", "0",
        "gpu", 16, "cpu", 16, "disk", 16, "2", "longest_matched", 8, "gpu", 8, "cpu", 8, "disk", 8,
        "dp", "0", 8, "dp_tiers", "0", "gpu", 8, "cpu", 8, "disk", 8);
    if (!json_equal(r, want)) {
        char *s = json_dumps(r, JSON_SORT_KEYS);
        fail_msg("unexpected /query reply: %s", s);
    }
    json_decref(want);
    json_decref(r);
    free(body);

    /* Same identity as a 16-hex string and as a JSON integer (its i64 bits). */
    snprintf(hashq, sizeof hashq, "\"%s\"", f->hash16);
    body = query_body(f, hashq, "");
    long st;
    r = post(f, "/query", body, &st);
    assert_int_equal(score(r, "1"), 16);
    json_decref(r);
    free(body);
    snprintf(hashq, sizeof hashq, "%" PRId64, (int64_t)MM_HASH);
    body = query_body(f, hashq, "");
    r = post(f, "/query", body, &st);
    assert_int_equal(score(r, "1"), 16);
    json_decref(r);
    free(body);
    /* Without a hash nobody can reproduce the image: text prefix for all. */
    body = query_body(f, NULL, "");
    r = post(f, "/query", body, &st);
    assert_int_equal(score(r, "1"), 8);
    assert_int_equal(score(r, "2"), 8);
    json_decref(r);
    free(body);
}

static void test_route_forwarding_and_bookings(void **state)
{
    fixture *f = *state;
    char hashq[80];
    snprintf(hashq, sizeof hashq, "\"%s\"", f->hash64);
    char *qb = query_body(f, hashq, "");
    json_decref(wait_query(f, qb));
    free(qb);

    long st;
    char *body = query_body(f, hashq, ", \"request_id\": \"req-1\", \"debug\": true");
    json_t *r = post(f, "/route", body, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_integer_value(json_object_get(r, "worker_id")), 1);
    assert_int_equal(json_integer_value(json_object_get(r, "dp_rank")), 0);
    assert_int_equal(json_integer_value(json_object_get(r, "overlap_tokens")), 16);
    assert_int_equal(json_integer_value(json_object_get(r, "routing_tokens")), 16);
    assert_true(json_is_true(json_object_get(r, "forward_mm_hashes")));
    assert_string_equal(json_string_value(json_object_get(r, "reason")), "best_cost");
    json_t *mh = json_object_get(r, "mm_hashes");
    assert_int_equal(json_array_size(mh), 1);
    assert_string_equal(json_string_value(json_array_get(mh, 0)), f->hash16);
    assert_int_equal(json_array_size(json_object_get(r, "costs")), 3);
    json_decref(r);

    r = post(f, "/route", body, &st);
    assert_int_equal(st, 409);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "request_id"));
    json_decref(r);
    free(body);

    /* Pinned to the Kimi worker: never told to forward identities. */
    body = query_body(f, hashq, ", \"request_id\": \"req-2\", \"worker_id\": 2");
    r = post(f, "/route", body, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_integer_value(json_object_get(r, "worker_id")), 2);
    assert_false(json_is_true(json_object_get(r, "forward_mm_hashes")));
    assert_null(json_object_get(r, "mm_hashes"));
    assert_int_equal(json_integer_value(json_object_get(r, "routing_tokens")), 8);
    assert_string_equal(json_string_value(json_object_get(r, "reason")), "pinned");
    assert_null(json_object_get(r, "costs"));
    json_decref(r);
    free(body);

    /* req-3, the same prompt pinned to the idle worker 3, which caches
     * none of it: 16 uncached prefill tokens. */
    body = query_body(f, hashq, ", \"request_id\": \"req-3\", \"worker_id\": 3");
    r = post(f, "/route", body, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_integer_value(json_object_get(r, "worker_id")), 3);
    json_decref(r);
    free(body);

    /* req-1 (16 tokens, 4 blocks) on worker 1 and req-3 on worker 3: their
     * load shows in the next request's debug costs, prefill leaves on
     * /prefill_done, and everything is gone after /free. Pending prefill
     * is the uncached tokens: none for req-1, which worker 1 caches whole
     * (16 when whole prompts were booked). */
    const char *step[] = {NULL, "/prefill_done", "/free"};
    const uint64_t seen_workers[] = {1, 3};
    long want_prefill[2][3] = {{0, 0, 0}, {16, 0, 0}}, want_blocks[] = {4, 4, 0};
    for (int i = 0; i < 3; i++) {
        if (step[i]) {
            r = post(f, step[i], "{\"request_id\": \"req-1\"}", &st);
            assert_int_equal(st, 200);
            json_decref(r);
            r = post(f, step[i], "{\"request_id\": \"req-3\"}", &st);
            assert_int_equal(st, 200);
            json_decref(r);
        }
        body = query_body(f, hashq, ", \"debug\": true, \"request_id\": \"probe\"");
        r = post(f, "/route", body, &st);
        assert_int_equal(st, 200);
        json_t *costs = json_object_get(r, "costs"), *c;
        size_t k;
        int seen = 0;
        json_array_foreach(costs, k, c) {
            json_int_t wid = json_integer_value(json_object_get(c, "worker_id"));
            for (int w = 0; w < 2; w++) {
                if (wid != (json_int_t)seen_workers[w])
                    continue;
                seen++;
                assert_int_equal(json_integer_value(json_object_get(c, "active_prefill_tokens")),
                                 want_prefill[w][i]);
                assert_int_equal(json_integer_value(json_object_get(c, "active_decode_blocks")),
                                 want_blocks[i]);
            }
        }
        assert_int_equal(seen, 2);
        json_decref(r);
        free(body);
        json_decref(post(f, "/free", "{\"request_id\": \"probe\"}", &st));
        assert_int_equal(st, 200);
    }
    r = post(f, "/free", "{\"request_id\": \"req-1\"}", &st);
    assert_int_equal(st, 404);
    json_decref(r);
    r = post(f, "/prefill_done", "{\"request_id\": \"never\"}", &st);
    assert_int_equal(st, 404);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "request_id"));
    json_decref(r);
    r = post(f, "/free", "{}", &st);
    assert_int_equal(st, 400);
    json_decref(r);
}

static void expect_400(fixture *f, const char *path, const char *body, const char *field)
{
    long st;
    json_t *r = post(f, path, body, &st);
    const char *err = json_string_value(json_object_get(r, "error"));
    if (st != 400 || !err || !strstr(err, field))
        fail_msg("%s %s: status %ld error '%s' (want 400 naming %s)", path, body, st,
                 err ? err : "(none)", field);
    json_decref(r);
}

static void test_bad_requests_name_the_field(void **state)
{
    fixture *f = *state;
    char b[1024];
    snprintf(b, sizeof b,
             "{\"model_name\": \"m\", \"token_ids\": [%s], \"mm_items\": [{\"start\": 0, "
             "\"end\": 2}, {\"start\": 8, \"end\": 17}]}",
             f->tokens_json);
    expect_400(f, "/query", b, "mm_items[1].end");
    snprintf(b, sizeof b,
             "{\"model_name\": \"m\", \"token_ids\": [%s], \"mm_items\": [{\"start\": 4, "
             "\"end\": 9}, {\"start\": 8, \"end\": 12}]}",
             f->tokens_json);
    expect_400(f, "/query", b, "mm_items[1].start");
    snprintf(b, sizeof b,
             "{\"model_name\": \"m\", \"token_ids\": [%s], \"mm_items\": [{\"start\": 8, "
             "\"end\": 12, \"mm_hash\": \"xyz\"}]}",
             f->tokens_json);
    expect_400(f, "/query", b, "mm_items[0].mm_hash");
    expect_400(f, "/query", "{\"model_name\": \"m\", \"token_ids\": [1, 2, -3]}", "token_ids[2]");
    expect_400(f, "/query", "{\"model_name\": \"m\", \"token_ids\": [1, 4294967296]}",
               "token_ids[1]");
    expect_400(f, "/query", "{\"token_ids\": [1]}", "model_name");
    expect_400(f, "/route", "{\"model_name\": \"m\", \"token_ids\": [1]}", "request_id");
    expect_400(f, "/route",
               "{\"model_name\": \"m\", \"token_ids\": [1], \"request_id\": \"x\", "
               "\"temperature\": \"hot\"}",
               "temperature");
    expect_400(f, "/route",
               "{\"model_name\": \"m\", \"token_ids\": [1], \"request_id\": \"x\", "
               "\"allowed_workers\": [99]}",
               "allowed_workers");
    long st;
    json_t *r = post(f, "/query", "{\"model_name\": \"nope\", \"token_ids\": [1]}", &st);
    assert_int_equal(st, 404);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "model_name"));
    json_decref(r);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_query_reply_shape_per_capability, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_forwarding_and_bookings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests_name_the_field, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
