/* SPEC §7.1, the read side, through real HTTP as a client written to
 * Dynamo's standalone-indexer documentation reads it: GET /workers (bare
 * array, listeners and status vocabulary, filters), POST /query and
 * /query_by_hash (scores, frequencies, instances with integer dp), an empty
 * prompt, and cache_salt on /query_by_hash. */
#include "test_support.h"

#include "kvrouter/server.h"
#include "net_helpers.h"
#include "server/workers_snapshot.h"

#define BS 4
#define WAIT 5000

typedef struct {
    kvr_server *srv;
    char base[64];
} srv_t;

static void start(srv_t *s)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    s->srv = th_server_start(&cfg, s->base, sizeof s->base);
    assert_non_null(s->srv);
}

static long reg_at(const srv_t *s, uint64_t id, uint32_t rank, const char *model,
                   const char *group, const char *endpoint)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": %llu, \"dp_rank\": %u, \"endpoint\": \"%s\", \"model_name\": "
             "\"%s\", \"routing_group\": \"%s\", \"block_size\": %d}",
             (unsigned long long)id, rank, endpoint, model, group, BS);
    return th_register(s->base, body, NULL);
}

static void reg(const srv_t *s, uint64_t id, uint32_t rank, const char *model, const char *group,
                const th_engine *e)
{
    assert_int_equal(reg_at(s, id, rank, model, group, e->endpoint), 201);
}

static bool is_status_name(const char *s)
{
    return s && (strcmp(s, "pending") == 0 || strcmp(s, "active") == 0 ||
                 strcmp(s, "paused") == 0 || strcmp(s, "failed") == 0);
}

static bool is_status(const json_t *v) { return is_status_name(json_string_value(v)); }

/* The element of /workers for (id, group); fails when absent. */
static json_t *find_worker(json_t *arr, uint64_t id, const char *group)
{
    size_t i;
    json_t *w;
    json_array_foreach(arr, i, w)
    {
        if ((uint64_t)json_integer_value(json_object_get(w, "instance_id")) == id &&
            strcmp(json_string_value(json_object_get(w, "routing_group")), group) == 0)
            return w;
    }
    fail_msg("worker %llu/%s not in /workers", (unsigned long long)id, group);
    return NULL;
}

/* Every element has Dynamo's fields with Dynamo's types. */
static void check_worker_shape(json_t *w)
{
    assert_true(json_is_integer(json_object_get(w, "instance_id")));
    assert_string_equal(json_string_value(json_object_get(w, "source")), "zmq");
    assert_true(is_status(json_object_get(w, "status")));
    assert_true(json_is_string(json_object_get(w, "model_name")));
    assert_true(json_is_string(json_object_get(w, "routing_group")));
    assert_true(json_is_integer(json_object_get(w, "block_size")));
    json_t *eps = json_object_get(w, "endpoints");
    json_t *ls = json_object_get(w, "listeners");
    assert_true(json_is_object(eps) && json_object_size(eps) > 0);
    assert_int_equal(json_object_size(ls), json_object_size(eps));
    const char *rank;
    json_t *v;
    json_object_foreach(eps, rank, v)
    {
        assert_true(json_is_string(v));
        json_t *l = json_object_get(ls, rank);
        assert_string_equal(json_string_value(json_object_get(l, "endpoint")),
                            json_string_value(v));
        assert_true(is_status(json_object_get(l, "status")));
        json_t *err = json_object_get(l, "last_error");
        assert_true(!err || json_is_string(err));
    }
    /* kvrouter's extras stay beside them. */
    assert_true(json_is_object(json_object_get(w, "counters")));
    assert_true(json_is_object(json_object_get(w, "capabilities")));
}

static const char *listener_status(json_t *w, const char *rank)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(w, "listeners"), rank), "status"));
}

/* Polls /workers until worker (id, group) has status want. */
static bool wait_worker_status(const srv_t *s, uint64_t id, const char *group, const char *want)
{
    double end = th_now() + WAIT / 1000.0;
    for (;;) {
        json_t *arr = th_json("GET", s->base, "/workers", NULL, NULL);
        bool ok = strcmp(json_string_value(json_object_get(find_worker(arr, id, group), "status")),
                         want) == 0;
        json_decref(arr);
        if (ok)
            return true;
        if (th_now() > end)
            return false;
        th_sleep_ms(5);
    }
}

static size_t workers_count(const srv_t *s, const char *query)
{
    char path[256];
    snprintf(path, sizeof path, "/workers%s", query);
    long st;
    json_t *arr = th_json("GET", s->base, path, NULL, &st);
    assert_int_equal(st, 200);
    assert_true(json_is_array(arr));
    size_t n = json_array_size(arr);
    json_decref(arr);
    return n;
}

static void send_one_block(th_engine *e, uint64_t seq, uint64_t hash, uint64_t first_token)
{
    uint64_t tokens[BS];
    for (int i = 0; i < BS; i++)
        tokens[i] = first_token + (uint64_t)i;
    kvr_raw_event ev = th_store(&hash, 1, 0, tokens, BS);
    th_send_events(e, seq, &ev, 1, true);
}

/* Polls /workers until listener `rank` of worker (id, "default") has status
 * want; returns that worker's element (caller decrefs *root). */
static json_t *wait_listener(const srv_t *s, uint64_t id, const char *rank, const char *want,
                             json_t **root)
{
    double end = th_now() + WAIT / 1000.0;
    for (;;) {
        *root = th_json("GET", s->base, "/workers", NULL, NULL);
        json_t *w = find_worker(*root, id, "default");
        if (strcmp(listener_status(w, rank), want) == 0)
            return w;
        json_decref(*root);
        if (th_now() > end)
            fail_msg("listener %s of worker %llu never became %s", rank,
                     (unsigned long long)id, want);
        th_sleep_ms(5);
    }
}

static void test_workers_bare_array_with_dynamo_fields(void **state)
{
    (void)state;
    srv_t s;
    start(&s);
    th_engine e[4];
    for (int i = 0; i < 4; i++)
        th_engine_start(&e[i]);
    /* Worker 1: rank 0 on a live (idle) engine, rank 1 where nothing listens. */
    reg(&s, 1, 0, "m", "default", &e[0]);
    assert_int_equal(reg_at(&s, 1, 1, "m", "default", "tcp://127.0.0.1:1"), 201);
    reg(&s, 2, 0, "m", "g2", &e[2]);
    reg(&s, 3, 0, "other", "default", &e[3]);

    long st;
    json_t *arr = th_json("GET", s.base, "/workers", NULL, &st);
    assert_int_equal(st, 200);
    assert_true(json_is_array(arr));
    assert_int_equal(json_array_size(arr), 3);
    size_t i;
    json_t *w;
    json_array_foreach(arr, i, w) check_worker_shape(w);
    json_t *w1 = find_worker(arr, 1, "default");
    json_t *eps = json_object_get(w1, "endpoints");
    assert_int_equal(json_object_size(eps), 2);
    assert_string_equal(json_string_value(json_object_get(eps, "0")), e[0].endpoint);
    assert_string_equal(json_string_value(json_object_get(eps, "1")), "tcp://127.0.0.1:1");
    assert_int_equal(json_integer_value(json_object_get(w1, "block_size")), BS);
    json_decref(arr);

    /* Rank 0 connects to its engine: active before it publishes anything;
     * rank 1 cannot connect: pending, and so is the worker (the worst). */
    w1 = wait_listener(&s, 1, "0", "active", &arr);
    assert_string_equal(listener_status(w1, "1"), "pending");
    assert_string_equal(json_string_value(json_object_get(w1, "status")), "pending");
    json_decref(arr);

    /* Rank 1 moves to a live engine: both active, the worker active. */
    assert_int_equal(reg_at(&s, 1, 1, "m", "default", e[1].endpoint), 200);
    assert_true(wait_worker_status(&s, 1, "default", "active"));

    /* Rank 0's engine publishes, then goes away: failed, saying why, and the
     * worker with it. */
    assert_true(th_engine_wait_sub(&e[0], WAIT));
    send_one_block(&e[0], 0, 11, 100);
    assert_int_equal(th_wait_counter(s.base, 1, "m", "batches", 1, WAIT), 1);
    th_engine_stop(&e[0]);
    w1 = wait_listener(&s, 1, "0", "failed", &arr);
    const char *err = json_string_value(json_object_get(
        json_object_get(json_object_get(w1, "listeners"), "0"), "last_error"));
    assert_non_null(err);
    assert_non_null(strstr(err, "lost"));
    assert_string_equal(json_string_value(json_object_get(w1, "status")), "failed");
    assert_string_equal(listener_status(w1, "1"), "active");
    json_decref(arr);

    /* Filters: ?model_name=, ?routing_group=, both; empty means any. */
    assert_int_equal(workers_count(&s, "?model_name=m"), 2);
    assert_int_equal(workers_count(&s, "?model_name=m&routing_group=g2"), 1);
    assert_int_equal(workers_count(&s, "?routing_group=default"), 2);
    assert_int_equal(workers_count(&s, "?model_name=nope"), 0);
    assert_int_equal(workers_count(&s, "?model_name="), 3);
    arr = th_json("GET", s.base, "/workers?model_name=m&routing_group=g2", NULL, NULL);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(arr, 0), "instance_id")),
                     2);
    json_decref(arr);
    for (int k = 1; k < 4; k++)
        th_engine_stop(&e[k]);
    kvr_server_stop(s.srv);
}

/* The one mapping from listener state to Dynamo's words, and the worst-of
 * rule for a worker (failed > pending > active > paused). */
static void test_listener_status_mapping(void **state)
{
    (void)state;
    kvr_listener_info l[3];
    memset(l, 0, sizeof l);
    snprintf(l[0].endpoint, sizeof l[0].endpoint, "tcp://e:1");
    char err[128] = "x";
    /* Never connected: pending, no error. */
    l[0].state = KVR_LISTENER_CONNECTING;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_PENDING);
    assert_string_equal(err, "");
    /* Connected: active before the first message too (an idle engine). */
    l[0].connected = true;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_ACTIVE);
    l[0].state = KVR_LISTENER_LIVE;
    l[0].has_seq = true;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_ACTIVE);
    l[0].state = KVR_LISTENER_REPLAYING;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_ACTIVE);
    assert_string_equal(err, "");
    /* A failing replay endpoint leaves the live feed active, with the reason. */
    l[0].replay_state = KVR_REPLAY_BACKOFF;
    snprintf(l[0].replay_endpoint, sizeof l[0].replay_endpoint, "tcp://h:1");
    snprintf(l[0].replay_error, sizeof l[0].replay_error, "timeout");
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_ACTIVE);
    assert_string_equal(err, "replay endpoint tcp://h:1: timeout");
    l[0].replay_state = KVR_REPLAY_FAILING;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_ACTIVE);
    assert_string_equal(err, "replay endpoint tcp://h:1: timeout");
    l[0].replay_state = KVR_REPLAY_OK;
    /* The engine went away after it published: failed, saying why. */
    l[0].state = KVR_LISTENER_LIVE;
    l[0].connected = false;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_FAILED);
    assert_string_equal(err, "connection to tcp://e:1 lost; reconnecting");
    /* Held for a peer dump: pending whatever the connection. */
    l[0].state = KVR_LISTENER_HELD;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_PENDING);
    l[0].connected = true;
    assert_int_equal(kvr_listener_status(&l[0], err, sizeof err), KVR_LSTATUS_PENDING);
    for (int st = 0; st < KVR_LISTENER_STATE_COUNT; st++) {
        l[0].state = (kvr_listener_state)st;
        assert_true(is_status_name(kvr_lstatus_name(kvr_listener_status(&l[0], NULL, 0))));
    }
    assert_true(KVR_LSTATUS_FAILED > KVR_LSTATUS_PENDING);
    assert_true(KVR_LSTATUS_PENDING > KVR_LSTATUS_ACTIVE);
    assert_true(KVR_LSTATUS_ACTIVE > KVR_LSTATUS_PAUSED);
    assert_string_equal(kvr_lstatus_name(KVR_LSTATUS_PAUSED), "paused");
    assert_string_equal(kvr_lstatus_name(KVR_LSTATUS_FAILED), "failed");
    /* Worst of: active + active = active; + pending = pending; + failed. */
    memset(l, 0, sizeof l);
    l[0].connected = l[1].connected = true;
    l[0].state = KVR_LISTENER_LIVE;
    l[1].state = KVR_LISTENER_REPLAYING;
    assert_int_equal(kvr_worker_status(l, 2), KVR_LSTATUS_ACTIVE);
    assert_int_equal(kvr_worker_status(l, 3), KVR_LSTATUS_PENDING);
    assert_int_equal(kvr_worker_status(l + 2, 1), KVR_LSTATUS_PENDING);
    l[1].connected = false;
    l[1].has_seq = true;
    assert_int_equal(kvr_worker_status(l, 3), KVR_LSTATUS_FAILED);
    assert_int_equal(kvr_worker_status(l, 0), KVR_LSTATUS_PENDING);
}

/* Three workers over one 4-block prompt: w1 holds all 4 blocks on gpu, w2
 * the first 2 on gpu, w3 the first 3 on the host (cpu) tier only. */
typedef struct {
    srv_t s;
    th_engine e[3];
    uint64_t tokens[4 * BS];
    uint64_t local[4];
} fleet;

static void fleet_start(fleet *f)
{
    start(&f->s);
    for (int i = 0; i < 4 * BS; i++)
        f->tokens[i] = 500 + (uint64_t)i;
    th_local_hashes(f->tokens, 4 * BS, BS, f->local, 4);
    const uint32_t n[3] = {4, 2, 3};
    for (int w = 0; w < 3; w++) {
        th_engine_start(&f->e[w]);
        reg(&f->s, (uint64_t)w + 1, 0, "m", "default", &f->e[w]);
        assert_true(th_engine_wait_sub(&f->e[w], WAIT));
        uint64_t h[4];
        for (uint32_t b = 0; b < 4; b++)
            h[b] = (uint64_t)(w + 1) * 1000 + b;
        kvr_raw_event ev = th_store(h, n[w], 0, f->tokens, BS);
        if (w == 2)
            ev.tier = KVR_TIER_CPU;
        th_send_events(&f->e[w], 0, &ev, 1, true);
    }
    assert_int_equal(th_wait_score(f->s.base, "m", f->local, 4, 1, 0, 4 * BS, WAIT), 4 * BS);
    assert_int_equal(th_wait_score(f->s.base, "m", f->local, 4, 2, 0, 2 * BS, WAIT), 2 * BS);
    assert_int_equal(th_wait_score(f->s.base, "m", f->local, 4, 3, 0, 0, WAIT), 0);
}

static void fleet_stop(fleet *f)
{
    for (int w = 0; w < 3; w++)
        th_engine_stop(&f->e[w]);
    kvr_server_stop(f->s.srv);
}

static char *query_body(const fleet *f, size_t n_tokens, bool by_hash, const char *extra)
{
    json_t *arr = json_array();
    if (by_hash)
        for (size_t i = 0; i < n_tokens / BS; i++)
            json_array_append_new(arr, json_integer((json_int_t)f->local[i]));
    else
        for (size_t i = 0; i < n_tokens; i++)
            json_array_append_new(arr, json_integer((json_int_t)f->tokens[i]));
    json_t *q = json_pack("{s:o,s:s}", by_hash ? "block_hashes" : "token_ids", arr, "model_name",
                          "m");
    char *body = json_dumps(q, JSON_COMPACT);
    json_decref(q);
    if (extra) {
        size_t n = strlen(body);
        char *b2 = malloc(n + strlen(extra) + 4);
        body[n - 1] = 0;
        sprintf(b2, "%s,%s}", body, extra);
        free(body);
        body = b2;
    }
    return body;
}

static void test_query_reply_dynamo_shape(void **state)
{
    (void)state;
    fleet f;
    fleet_start(&f);
    char *body = query_body(&f, 4 * BS, false, NULL);
    long st;
    json_t *r = th_json("POST", f.s.base, "/query", body, &st);
    free(body);
    assert_int_equal(st, 200);
    json_t *want = json_pack(
        "{s:{s:{s:i},s:{s:i},s:{s:i}},s:[i,i,i,i],s:{"
        "s:{s:i,s:i,s:i,s:i,s:{s:i},s:{s:{s:i,s:i,s:i}}},"
        "s:{s:i,s:i,s:i,s:i,s:{s:i},s:{s:{s:i,s:i,s:i}}},"
        "s:{s:i,s:i,s:i,s:i,s:{s:i},s:{s:{s:i,s:i,s:i}}}}}",
        "scores", "1", "0", 4 * BS, "2", "0", 2 * BS, "3", "0", 0,
        /* owners of blocks 0..3 on gpu: w1 and w2, w1 and w2, w1, w1 (w3's
         * host copies do not count) */
        "frequencies", 2, 2, 1, 1, "instances",
        "1", "longest_matched", 4 * BS, "gpu", 4 * BS, "cpu", 4 * BS, "disk", 4 * BS, "dp", "0",
        4 * BS, "dp_tiers", "0", "gpu", 4 * BS, "cpu", 4 * BS, "disk", 4 * BS,
        "2", "longest_matched", 2 * BS, "gpu", 2 * BS, "cpu", 2 * BS, "disk", 2 * BS, "dp", "0",
        2 * BS, "dp_tiers", "0", "gpu", 2 * BS, "cpu", 2 * BS, "disk", 2 * BS,
        "3", "longest_matched", 3 * BS, "gpu", 0, "cpu", 3 * BS, "disk", 3 * BS, "dp", "0", 0,
        "dp_tiers", "0", "gpu", 0, "cpu", 3 * BS, "disk", 3 * BS);
    if (!json_equal(r, want)) {
        char *got = json_dumps(r, JSON_SORT_KEYS);
        fail_msg("unexpected /query reply: %s", got);
    }
    /* /query_by_hash with the same blocks answers the same body. */
    body = query_body(&f, 4 * BS, true, NULL);
    json_t *r2 = th_json("POST", f.s.base, "/query_by_hash", body, &st);
    free(body);
    assert_int_equal(st, 200);
    assert_true(json_equal(r2, want));
    json_decref(r2);
    json_decref(r);

    /* A shorter prompt: the list stops at the matched prefix. */
    body = query_body(&f, BS, false, NULL);
    r = th_json("POST", f.s.base, "/query", body, &st);
    free(body);
    json_t *freq = json_object_get(r, "frequencies");
    assert_int_equal(json_array_size(freq), 1);
    assert_int_equal(json_integer_value(json_array_get(freq, 0)), 2);
    json_decref(r);
    json_decref(want);
    fleet_stop(&f);
}

static void expect_status(const char *base, const char *path, const char *body, long want,
                          const char *field)
{
    long st;
    json_t *r = th_json("POST", base, path, body, &st);
    const char *err = json_string_value(json_object_get(r, "error"));
    if (st != want || (field && (!err || !strstr(err, field))))
        fail_msg("%s %s -> %ld '%s' (want %ld naming '%s')", path, body, st, err ? err : "",
                 want, field ? field : "");
    json_decref(r);
}

static void test_empty_prompt_and_salt_on_hashes(void **state)
{
    (void)state;
    fleet f;
    fleet_start(&f);
    long st;
    json_t *r = th_json("POST", f.s.base, "/query", "{\"model_name\":\"m\",\"token_ids\":[]}", &st);
    assert_int_equal(st, 200);
    json_t *want = json_pack("{s:{},s:[],s:{}}", "scores", "frequencies", "instances");
    assert_true(json_equal(r, want));
    json_decref(r);
    /* Empty hash list: the same. */
    r = th_json("POST", f.s.base, "/query_by_hash", "{\"model_name\":\"m\",\"block_hashes\":[]}",
                &st);
    assert_int_equal(st, 200);
    assert_true(json_equal(r, want));
    json_decref(r);
    json_decref(want);
    /* Still a 404 for a model nobody registered, still a 400 for media
     * items outside the (empty) prompt. */
    expect_status(f.s.base, "/query", "{\"model_name\":\"nope\",\"token_ids\":[]}", 404,
                  "model_name");
    expect_status(f.s.base, "/query",
                  "{\"model_name\":\"m\",\"token_ids\":[],\"mm_items\":[{\"start\":0,\"end\":1}]}",
                  400, "mm_items");
    /* /route has nothing to route: 400, nothing booked. */
    expect_status(f.s.base, "/route", "{\"model_name\":\"m\",\"request_id\":\"x\",\"token_ids\":[]}",
                  400, "token_ids");
    expect_status(f.s.base, "/free", "{\"request_id\":\"x\"}", 404, "request_id");

    /* cache_salt on /query_by_hash: the hashes are already salted. */
    char *body = query_body(&f, 4 * BS, true, "\"cache_salt\":\"tenant-a\"");
    expect_status(f.s.base, "/query_by_hash", body, 400, "cache_salt");
    free(body);
    body = query_body(&f, 4 * BS, true, "\"cache_salt\":\"\"");
    expect_status(f.s.base, "/query_by_hash", body, 400, "cache_salt");
    free(body);
    body = query_body(&f, 4 * BS, true, "\"cache_salt\":null");
    expect_status(f.s.base, "/query_by_hash", body, 200, NULL);
    free(body);
    /* On /query a salt is part of the hash: nothing indexed unsalted matches. */
    body = query_body(&f, 4 * BS, false, "\"cache_salt\":\"tenant-a\"");
    r = th_json("POST", f.s.base, "/query", body, &st);
    free(body);
    assert_int_equal(st, 200);
    assert_int_equal(json_object_size(json_object_get(r, "scores")), 0);
    json_decref(r);
    fleet_stop(&f);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workers_bare_array_with_dynamo_fields),
        cmocka_unit_test(test_listener_status_mapping),
        cmocka_unit_test(test_query_reply_dynamo_shape),
        cmocka_unit_test(test_empty_prompt_and_salt_on_hashes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
