/* Engine discovery end to end (SPEC §11): mock engines (a real HTTP server
 * answering the fixtures of fixtures/discovery/, real ZeroMQ publishers on
 * the ports they advertise) and a real kvrouter server. kvrouter finds the
 * event sources itself: SGLang with two dp ranks (events of both ranks
 * indexed, /query sees them), Kimi (auto identity, no caller hashes, Eagle,
 * page x dcp block size), vLLM (sources, /metrics block size, /v1/models);
 * a restart with a changed setting is re-registered and resets the worker
 * (SPEC §5 rule 9), one without keeps it; failed polls keep the last answer
 * registered until the grace period, then the engine is unregistered;
 * kv_events null, invalid answers and block-size conflicts are reported in
 * /engines; POST and DELETE /engines; the counters in /metrics. Every wait
 * is a condition polled with a deadline. */
#include "test_support.h"

#include "mock_engine_http.h"

#define BS 16
#define WAIT 20000

typedef struct {
    kvr_server *srv;
    char base[64];
} srv_t;

static void start_with(srv_t *s, const kvr_engine_spec *engines, size_t n,
                       const kvr_discovery_config *dc)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.engines = engines;
    cfg.n_engines = n;
    cfg.discovery = *dc;
    s->srv = th_server_start(&cfg, s->base, sizeof s->base);
    assert_non_null(s->srv);
}

static void start(srv_t *s, const kvr_engine_spec *engines, size_t n, double grace_s,
                  size_t max_engines)
{
    kvr_discovery_config dc = {.poll_s = 0.1, .grace_s = grace_s, .timeout_s = 2,
                               .max_engines = max_engines};
    start_with(s, engines, n, &dc);
}

static kvr_engine_spec spec_of(const char *url)
{
    kvr_engine_spec e = {.url = url, .mm_identity = -1, .accepts_mm_hashes = -1,
                         .origin = KVR_ORIGIN_CLI};
    return e;
}

/* GET /engines?url=: the engine's object (the caller decrefs the reply). */
static json_t *engine_get(srv_t *s, const char *url, json_t **reply)
{
    char path[256];
    snprintf(path, sizeof path, "/engines?url=%s", url);
    *reply = th_json("GET", s->base, path, NULL, NULL);
    return json_array_get(json_object_get(*reply, "engines"), 0);
}

static const char *state_of(const json_t *e)
{
    const char *st = json_string_value(json_object_get(e, "state"));
    return st ? st : "";
}

/* Waits until the engine's state is want; fails with its last answer. */
static void wait_state(srv_t *s, const char *url, const char *want)
{
    double end = th_now() + WAIT / 1000.0;
    for (;;) {
        json_t *r, *e = engine_get(s, url, &r);
        bool ok = strcmp(state_of(e), want) == 0;
        if (!ok && th_now() > end) {
            char *t = json_dumps(e, JSON_INDENT(1));
            fail_msg("engine %s not %s: %s", url, want, t);
        }
        json_decref(r);
        if (ok)
            return;
        th_sleep_ms(20);
    }
}

/* An integer field of the engine's object. */
static long long engine_int(srv_t *s, const char *url, const char *key)
{
    json_t *r, *e = engine_get(s, url, &r);
    long long v = json_integer_value(json_object_get(e, key));
    json_decref(r);
    return v;
}

/* Waits until the engine has finished at least n more polls. */
static void wait_polls(srv_t *s, const char *url, int n)
{
    long long want = engine_int(s, url, "polls") + n;
    double end = th_now() + WAIT / 1000.0;
    while (engine_int(s, url, "polls") < want)
        if (th_now() > end)
            fail_msg("engine %s: no %d more polls", url, n);
        else
            th_sleep_ms(20);
}

/* An instance_id as /workers and /engines write it (integer, or a decimal
 * string above 2^63). */
static uint64_t id_of(const json_t *v)
{
    return json_is_string(v) ? strtoull(json_string_value(v), NULL, 10)
                             : (uint64_t)json_integer_value(v);
}

/* The /workers element of worker id (model), or NULL; *all owns it. */
static json_t *worker_of(srv_t *s, uint64_t id, json_t **all)
{
    *all = th_json("GET", s->base, "/workers", NULL, NULL);
    size_t i;
    json_t *w;
    json_array_foreach(*all, i, w)
    {
        if (id_of(json_object_get(w, "instance_id")) == id)
            return w;
    }
    return NULL;
}

/* n tokens from seed: distinct prefixes per test. */
static void tokens(uint64_t *t, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        t[i] = seed * 1000 + i + 1;
}

/* Publishes a parentless store of blocks blocks on rank and waits until
 * /query_by_hash sees all of them for (id, rank). */
static void store_and_see(srv_t *s, mock_pubs *p, int rank, kvr_wire_style style,
                          const char *model, uint64_t id, uint64_t seed, uint32_t blocks)
{
    uint64_t t[8 * BS], hashes[8], local[8];
    tokens(t, blocks * BS, seed);
    for (uint32_t b = 0; b < blocks; b++)
        hashes[b] = seed * 100 + b + 1;
    kvr_raw_event ev = th_store(hashes, blocks, 0, t, BS);
    assert_int_equal(th_local_hashes(t, blocks * BS, BS, local, 8), blocks);
    /* A restarted listener may need a moment: publish until it is seen. */
    double end = th_now() + WAIT / 1000.0;
    long v = -1;
    while (v != (long)(blocks * BS) && th_now() < end) {
        mock_pubs_send(p, rank, style, &ev, 1);
        v = th_wait_score(s->base, model, local, blocks, id, (uint32_t)rank, (long)(blocks * BS),
                          300);
    }
    assert_int_equal(v, blocks * BS);
}

static long score_of(srv_t *s, const char *model, uint64_t id, int rank, uint64_t seed,
                     uint32_t blocks)
{
    uint64_t t[8 * BS], local[8];
    tokens(t, blocks * BS, seed);
    th_local_hashes(t, blocks * BS, BS, local, 8);
    return th_score(s->base, model, local, blocks, id, (uint32_t)rank);
}

/* One SGLang engine (qwen2.5-7b, block 16) with dp ranks, discovered by a
 * server with the given grace period: indexed and subscribed on return. */
typedef struct {
    mock_pubs p;
    mock_http m;
    srv_t s;
    uint64_t id;
} world;

static void world_start(world *w, int dp, double grace_s)
{
    mock_pubs_start(&w->p, dp);
    mock_sglang_engine(&w->m, &w->p, "sglang_server_info_dp2.json", "sglang_model_info_qwen.json",
                       dp, NULL);
    kvr_engine_spec e = spec_of(w->m.url);
    start(&w->s, &e, 1, grace_s, 0);
    wait_state(&w->s, w->m.url, "indexed");
    w->id = kvr_engine_worker_id(w->m.url);
    for (int r = 0; r < dp; r++)
        assert_true(mock_pubs_wait_sub(&w->p, r, WAIT));
}

static void world_stop(world *w)
{
    kvr_server_stop(w->s.srv);
    mock_http_stop(&w->m);
    mock_pubs_stop(&w->p);
}

/* ---------------------------------------------------------------- tests */

static void test_sglang_two_dp_ranks_are_found_and_indexed(void **state)
{
    (void)state;
    world w;
    world_start(&w, 2, 30);
    srv_t *s = &w.s;
    json_t *r, *en = engine_get(s, w.m.url, &r);
    assert_true(id_of(json_object_get(en, "instance_id")) == w.id);
    assert_int_equal(json_integer_value(json_object_get(en, "ranks_registered")), 2);
    json_t *read = json_object_get(en, "read");
    assert_string_equal(json_string_value(json_object_get(read, "kind")), "sglang");
    assert_int_equal(json_integer_value(json_object_get(read, "block_size")), BS);
    /* Wildcard host -> the engine's; rank r on base + r; replay offset too. */
    for (int k = 0; k < 2; k++) {
        json_t *rk = json_array_get(json_object_get(en, "ranks"), (size_t)k);
        char want[64];
        snprintf(want, sizeof want, "tcp://127.0.0.1:%d", w.p.base + k);
        assert_string_equal(json_string_value(json_object_get(rk, "endpoint")), want);
        snprintf(want, sizeof want, "tcp://127.0.0.1:%d", w.p.base + 100 + k);
        assert_string_equal(json_string_value(json_object_get(rk, "replay_endpoint")), want);
    }
    json_decref(r);
    store_and_see(s, &w.p, 0, KVR_WIRE_SGLANG, "qwen2.5-7b", w.id, 1, 2);
    store_and_see(s, &w.p, 1, KVR_WIRE_SGLANG, "qwen2.5-7b", w.id, 2, 3);
    assert_int_equal(score_of(s, "qwen2.5-7b", w.id, 1, 1, 2), -1); /* rank 0's blocks only */
    /* /workers: the worker, its listeners, and where it came from. */
    json_t *all, *wk = worker_of(s, w.id, &all);
    assert_non_null(wk);
    assert_int_equal(json_object_size(json_object_get(wk, "listeners")), 2);
    json_t *disc = json_object_get(wk, "discovery");
    assert_string_equal(json_string_value(json_object_get(disc, "url")), w.m.url);
    assert_string_equal(json_string_value(json_object_get(disc, "state")), "indexed");
    json_t *caps = json_object_get(wk, "capabilities");
    assert_string_equal(json_string_value(json_object_get(caps, "mm_identity")), "legacy");
    assert_string_equal(json_string_value(json_object_get(caps, "engine")), "sglang");
    /* the capacity the engine reports reaches the registration */
    assert_int_equal(json_integer_value(json_object_get(caps, "max_total_num_tokens")), 523776);
    assert_int_equal(json_integer_value(json_object_get(caps, "kv_capacity_tokens")), 523776);
    assert_string_equal(json_string_value(json_object_get(caps, "kv_capacity_source")),
                        "discovered");
    json_decref(all);
    world_stop(&w);
}

static void test_kimi_gets_auto_identity_no_hashes_eagle_and_page_times_dcp(void **state)
{
    (void)state;
    mock_pubs p;
    mock_pubs_start(&p, 1);
    mock_http m;
    mock_http_start(&m);
    char *si = mock_sglang_info("sglang_server_info_kimi_eagle_hicache.json", "0.0.0.0", p.base,
                                1, 0, NULL);
    char *mi = mock_fixture_text("sglang_model_info_kimi_k25.json");
    mock_http_set(&m, "/server_info", 200, si);
    mock_http_set(&m, "/model_info", 200, mi);
    free(si);
    free(mi);
    kvr_engine_spec e = spec_of(m.url);
    e.kind = KVR_ENGINE_KIND_SGLANG;
    srv_t s;
    start(&s, &e, 1, 30, 0);
    wait_state(&s, m.url, "indexed");
    json_t *all, *w = worker_of(&s, kvr_engine_worker_id(m.url), &all);
    assert_non_null(w);
    assert_string_equal(json_string_value(json_object_get(w, "model_name")), "kimi-k2.5");
    assert_int_equal(json_integer_value(json_object_get(w, "block_size")), 128);
    assert_true(json_is_true(json_object_get(w, "is_eagle")));
    json_t *caps = json_object_get(w, "capabilities");
    assert_string_equal(json_string_value(json_object_get(caps, "mm_identity")), "auto");
    assert_false(json_is_true(json_object_get(caps, "accepts_mm_hashes")));
    assert_true(json_is_true(json_object_get(caps, "accepts_mm_hashes_explicit")));
    char want[64];
    snprintf(want, sizeof want, "tcp://127.0.0.1:%d", p.base);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(w, "endpoints"), "0")), want);
    json_decref(all);
    json_t *r, *en = engine_get(&s, m.url, &r);
    json_t *read = json_object_get(en, "read");
    assert_true(json_is_true(json_object_get(read, "hicache")));
    assert_string_equal(json_string_value(json_object_get(read, "model_type")), "kimi_k25");
    assert_string_equal(json_string_value(json_object_get(read, "speculative_algorithm")),
                        "EAGLE3");
    json_decref(r);
    kvr_server_stop(s.srv);
    mock_http_stop(&m);
    mock_pubs_stop(&p);
}

/* vLLM: found by its kind's endpoints (the entry says auto), events in
 * vLLM's map form indexed. */
static void test_vllm_sources_metrics_and_models(void **state)
{
    (void)state;
    mock_pubs p;
    mock_pubs_start(&p, 1);
    mock_http m;
    mock_http_start(&m);
    char sources[256];
    snprintf(sources, sizeof sources,
             "[{\"data_parallel_rank\": 0, \"endpoint\": \"tcp://*:%d\", "
             "\"replay_endpoint\": null, \"topic\": \"\"}]",
             p.base);
    char *metrics = mock_fixture_text("vllm_metrics.txt");
    char *models = mock_fixture_text("vllm_v1_models.json");
    mock_http_set(&m, "/kv_event_sources", 200, sources);
    mock_http_set(&m, "/metrics", 200, metrics);
    mock_http_set(&m, "/v1/models", 200, models);
    free(metrics);
    free(models);
    kvr_engine_spec e = spec_of(m.url);
    e.has_image_token_id = true; /* Qwen-VL's placeholder: the entry says it */
    e.image_token_id = 151655;
    srv_t s;
    start(&s, &e, 1, 30, 0);
    wait_state(&s, m.url, "indexed");
    uint64_t id = kvr_engine_worker_id(m.url);
    const char *model = "Qwen/Qwen2.5-VL-7B-Instruct";
    json_t *all, *w = worker_of(&s, id, &all);
    assert_non_null(w);
    assert_string_equal(json_string_value(json_object_get(w, "model_name")), model);
    assert_int_equal(json_integer_value(json_object_get(w, "block_size")), BS);
    json_t *caps = json_object_get(w, "capabilities");
    assert_string_equal(json_string_value(json_object_get(caps, "engine")), "vllm");
    assert_int_equal(json_integer_value(json_object_get(caps, "image_token_id")), 151655);
    /* num_gpu_blocks 28672 x block_size 16 */
    assert_int_equal(json_integer_value(json_object_get(caps, "max_total_num_tokens")), 458752);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(w, "discovery"), "kind")), "vllm");
    json_decref(all);
    assert_true(mock_pubs_wait_sub(&p, 0, WAIT));
    store_and_see(&s, &p, 0, KVR_WIRE_VLLM, model, id, 3, 2);
    kvr_server_stop(s.srv);
    mock_http_stop(&m);
    mock_pubs_stop(&p);
}

/* SPEC §5 rule 9 through discovery: the same answer again keeps the
 * worker's listener and index; an engine back with Eagle windows on is a
 * changed effective setting: re-registered, its state cleared. */
static void test_restarted_engine_with_changed_setting_is_reregistered(void **state)
{
    (void)state;
    world w;
    world_start(&w, 1, 30);
    srv_t *s = &w.s;
    store_and_see(s, &w.p, 0, KVR_WIRE_SGLANG, "qwen2.5-7b", w.id, 4, 2);
    /* Unchanged answers, including a full resync: nothing reset. */
    wait_polls(s, w.m.url, 14);
    json_t *all, *wk = worker_of(s, w.id, &all);
    assert_int_equal(json_integer_value(json_object_get(wk, "resets")), 0);
    json_decref(all);
    assert_int_equal(score_of(s, "qwen2.5-7b", w.id, 0, 4, 2), 2 * BS);
    /* "Restart" with EAGLE: re-registered with Eagle windows, index cleared. */
    char *si = mock_sglang_info("sglang_server_info_dp2.json", "*", w.p.base, 1, w.p.base + 100,
                                "EAGLE");
    mock_http_set(&w.m, "/server_info", 200, si);
    free(si);
    double end = th_now() + WAIT / 1000.0;
    for (;;) {
        wk = worker_of(s, w.id, &all);
        if (wk && json_is_true(json_object_get(wk, "is_eagle"))) {
            assert_int_equal(json_integer_value(json_object_get(wk, "resets")), 1);
            json_decref(all);
            break;
        }
        json_decref(all);
        assert_true(th_now() < end);
        th_sleep_ms(20);
    }
    assert_int_equal(score_of(s, "qwen2.5-7b", w.id, 0, 4, 2), -1);
    wait_state(s, w.m.url, "indexed");
    world_stop(&w);
}

/* Failed polls (refused connections, 500s, garbage) are not a vanish: the
 * last answer stays registered and indexed, the engine says stale, and a
 * good answer brings it back to indexed with nothing reset. */
static void test_failed_polls_keep_the_worker_within_the_grace_period(void **state)
{
    (void)state;
    world w;
    world_start(&w, 1, 600);
    srv_t *s = &w.s;
    mock_http *mp = &w.m;
    uint64_t id = w.id;
    store_and_see(s, &w.p, 0, KVR_WIRE_SGLANG, "qwen2.5-7b", id, 5, 2);
    const char *bad[] = {"{\"kv_events\": {\"publisher\": \"zmq\", \"endpoint_port_base\": -4}}",
                         "<html>502 Bad Gateway</html>"};
    int status[] = {200, 502};
    for (int k = 0; k < 2; k++) {
        mock_http_set(mp, "/server_info", status[k], bad[k]);
        wait_state(s, mp->url, "stale");
        wait_polls(s, mp->url, 3);
        json_t *all, *wk = worker_of(s, id, &all);
        assert_non_null(wk);
        json_decref(all);
        assert_int_equal(score_of(s, "qwen2.5-7b", id, 0, 5, 2), 2 * BS);
        json_t *r, *en = engine_get(s, mp->url, &r);
        assert_non_null(strstr(json_string_value(json_object_get(en, "last_error")),
                               k == 0 ? "endpoint_port_base" : "HTTP status 502"));
        assert_true(json_integer_value(json_object_get(en, "consecutive_failures")) >= 3);
        json_decref(r);
        char *si = mock_sglang_info("sglang_server_info_dp2.json", "*", w.p.base, 1,
                                    w.p.base + 100, NULL);
        mock_http_set(mp, "/server_info", 200, si);
        free(si);
        wait_state(s, mp->url, "indexed");
    }
    mock_http_pause(mp); /* connection refused */
    wait_state(s, mp->url, "stale");
    wait_polls(s, mp->url, 3);
    mock_http_resume(mp);
    wait_state(s, mp->url, "indexed");
    json_t *all, *wk = worker_of(s, id, &all);
    assert_int_equal(json_integer_value(json_object_get(wk, "resets")), 0);
    json_decref(all);
    assert_int_equal(score_of(s, "qwen2.5-7b", id, 0, 5, 2), 2 * BS);
    json_t *r = th_json("GET", s->base, "/engines", NULL, NULL);
    json_t *c = json_object_get(r, "counters");
    assert_true(json_integer_value(json_object_get(c, "invalid_responses")) >= 3);
    assert_int_equal(json_integer_value(json_object_get(c, "engines_expired")), 0);
    json_decref(r);
    world_stop(&w);
}

static void test_stopped_engine_is_unregistered_after_the_grace_period(void **state)
{
    (void)state;
    world w;
    world_start(&w, 1, 0.5);
    srv_t *s = &w.s;
    mock_http *mp = &w.m;
    uint64_t id = w.id;
    json_t *all;
    assert_non_null(worker_of(s, id, &all));
    json_decref(all);
    mock_http_pause(mp);
    wait_state(s, mp->url, "unreachable");
    assert_null(worker_of(s, id, &all));
    json_decref(all);
    json_t *r, *en = engine_get(s, mp->url, &r);
    assert_non_null(strstr(json_string_value(json_object_get(en, "reason")), "grace"));
    json_decref(r);
    char *metrics = NULL;
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", s->base);
    assert_int_equal(th_http("GET", url, NULL, 0, &metrics), 200);
    assert_non_null(strstr(metrics, "kvr_discovery_engines_expired_total 1\n"));
    assert_non_null(strstr(metrics, "kvr_discovery_engines{state=\"unreachable\"} 1\n"));
    assert_non_null(strstr(metrics, "kvr_discovery_unregistrations_total 1\n"));
    free(metrics);
    /* Back: registered again. */
    mock_http_resume(mp);
    wait_state(s, mp->url, "indexed");
    assert_non_null(worker_of(s, id, &all));
    json_decref(all);
    world_stop(&w);
}

static void test_kv_events_null_invalid_answers_and_conflicts_are_reported(void **state)
{
    (void)state;
    mock_pubs p;
    mock_pubs_start(&p, 1);
    mock_http silent, bad, conflict;
    mock_http_start(&silent);
    char *t = mock_fixture_text("sglang_server_info_kv_events_null.json");
    mock_http_set(&silent, "/server_info", 200, t);
    free(t);
    mock_http_start(&bad);
    t = mock_fixture_text("invalid_sglang_port.json");
    mock_http_set(&bad, "/server_info", 200, t);
    free(t);
    mock_sglang_engine(&conflict, &p, "sglang_server_info_dp2.json", "sglang_model_info_qwen.json", 1,
                NULL);
    srv_t s;
    start(&s, NULL, 0, 30, 0);
    /* Another worker of the model binds block size 32 first. */
    assert_int_equal(th_register(s.base,
                                 "{\"instance_id\": 9, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"qwen2.5-7b\", \"block_size\": 32}",
                                 NULL),
                     201);
    const char *urls[] = {silent.url, bad.url, conflict.url};
    const char *states[] = {"no_kv_events", "invalid", "rejected"};
    const char *reasons[] = {"kv_events is null", "endpoint_port_base", "block_size_conflict"};
    for (int k = 0; k < 3; k++) {
        char body[128];
        snprintf(body, sizeof body, "{\"url\": \"%s\"}", urls[k]);
        long st;
        json_t *r = th_json("POST", s.base, "/engines", body, &st);
        assert_int_equal(st, 201);
        json_decref(r);
        wait_state(&s, urls[k], states[k]);
        json_t *en = engine_get(&s, urls[k], &r);
        if (!strstr(json_string_value(json_object_get(en, "reason")), reasons[k]))
            fail_msg("%s: reason %s", states[k], json_string_value(json_object_get(en, "reason")));
        json_decref(r);
    }
    json_t *all;
    assert_null(worker_of(&s, kvr_engine_worker_id(silent.url), &all));
    json_decref(all);
    assert_null(worker_of(&s, kvr_engine_worker_id(bad.url), &all));
    json_decref(all);
    json_t *r = th_json("GET", s.base, "/engines", NULL, NULL);
    json_t *st = json_object_get(r, "states");
    assert_int_equal(json_integer_value(json_object_get(st, "no_kv_events")), 1);
    assert_int_equal(json_integer_value(json_object_get(st, "invalid")), 1);
    assert_int_equal(json_integer_value(json_object_get(st, "rejected")), 1);
    json_decref(r);
    kvr_server_stop(s.srv);
    mock_http_stop(&silent);
    mock_http_stop(&bad);
    mock_http_stop(&conflict);
    mock_pubs_stop(&p);
}

static void test_post_and_delete_engines(void **state)
{
    (void)state;
    mock_pubs p;
    mock_pubs_start(&p, 2);
    mock_http m;
    mock_sglang_engine(&m, &p, "sglang_server_info_dp2.json", "sglang_model_info_qwen.json", 2, NULL);
    srv_t s;
    start(&s, NULL, 0, 30, 1);
    char body[256];
    long st;
    snprintf(body, sizeof body, "{\"url\": \"%s/\", \"instance_id\": 4242}", m.url);
    json_t *r = th_json("POST", s.base, "/engines", body, &st);
    assert_int_equal(st, 201);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "added");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "engine"), "url")),
                        m.url);
    json_decref(r);
    wait_state(&s, m.url, "indexed");
    json_t *all;
    assert_non_null(worker_of(&s, 4242, &all));
    json_decref(all);
    r = th_json("POST", s.base, "/engines", body, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "unchanged");
    json_decref(r);
    /* Bad entries name the field; the engine limit names itself. */
    const char *bad[] = {"{}", "{\"url\": \"ftp://x\"}", "{\"url\": \"http://h:1\", \"kind\": 3}",
                         "{\"url\": \"http://h:1\", \"colour\": 1}",
                         "{\"url\": \"http://h:1\", \"kind\": \"tgi\"}",
                         "{\"url\": \"http://h:1\", \"image_token_id\": 4294967295}"};
    const char *field[] = {"url", "url", "kind", "colour", "kind", "image_token_id"};
    for (int k = 0; k < 6; k++) {
        r = th_json("POST", s.base, "/engines", bad[k], &st);
        assert_int_equal(st, 400);
        assert_non_null(strstr(json_string_value(json_object_get(r, "error")), field[k]));
        json_decref(r);
    }
    r = th_json("POST", s.base, "/engines", "{\"url\": \"http://127.0.0.1:1\"}", &st);
    assert_int_equal(st, 503);
    assert_string_equal(json_string_value(json_object_get(r, "limit")), "max_engines");
    json_decref(r);
    /* Changed entry: updated; the worker moves to the new id. */
    snprintf(body, sizeof body, "{\"url\": \"%s\", \"instance_id\": 4343}", m.url);
    r = th_json("POST", s.base, "/engines", body, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "updated");
    json_decref(r);
    double end = th_now() + WAIT / 1000.0;
    for (;;) {
        json_t *w_new = worker_of(&s, 4343, &all);
        bool moved = w_new != NULL;
        json_decref(all);
        json_t *w_old = worker_of(&s, 4242, &all);
        moved = moved && !w_old;
        json_decref(all);
        if (moved)
            break;
        assert_true(th_now() < end);
        th_sleep_ms(20);
    }
    /* DELETE: gone at once, with its registrations. */
    snprintf(body, sizeof body, "{\"url\": \"%s\"}", m.url);
    r = th_json("DELETE", s.base, "/engines", body, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_integer_value(json_object_get(r, "ranks_removed")), 2);
    json_decref(r);
    assert_null(worker_of(&s, 4343, &all));
    json_decref(all);
    r = th_json("DELETE", s.base, "/engines", body, &st);
    assert_int_equal(st, 404);
    json_decref(r);
    /* The query-argument form. */
    snprintf(body, sizeof body, "{\"url\": \"%s\", \"kind\": \"sglang\"}", m.url);
    r = th_json("POST", s.base, "/engines", body, &st);
    assert_int_equal(st, 201);
    json_decref(r);
    char path[256];
    snprintf(path, sizeof path, "/engines?url=%s", m.url);
    r = th_json("DELETE", s.base, path, NULL, &st);
    assert_int_equal(st, 200);
    json_decref(r);
    r = th_json("GET", s.base, "/engines", NULL, &st);
    assert_int_equal(json_array_size(json_object_get(r, "engines")), 0);
    json_decref(r);
    kvr_server_stop(s.srv);
    mock_http_stop(&m);
    mock_pubs_stop(&p);
}

/* Every request has a deadline and a body limit: an engine that answers
 * too late or too much fails its own poll, and the others are polled (and
 * indexed) meanwhile. */
static void test_slow_and_oversized_answers_fail_alone(void **state)
{
    (void)state;
    mock_pubs p;
    mock_pubs_start(&p, 1);
    mock_http good, slow, big;
    mock_sglang_engine(&good, &p, "sglang_server_info_dp2.json", "sglang_model_info_qwen.json", 1,
                       NULL);
    mock_sglang_engine(&slow, &p, "sglang_server_info_dp2.json", "sglang_model_info_qwen.json", 1,
                       NULL);
    char *si = mock_sglang_info("sglang_server_info_dp2.json", "*", p.base, 1, 0, NULL);
    mock_http_set_slow(&slow, "/server_info", 200, si, 1500);
    free(si);
    mock_http_start(&big);
    char huge[8192];
    memset(huge, ' ', sizeof huge - 3);
    memcpy(huge, "{}", 2);
    huge[sizeof huge - 1] = 0;
    mock_http_set(&big, "/server_info", 200, huge);
    kvr_engine_spec e[3] = {spec_of(slow.url), spec_of(big.url), spec_of(good.url)};
    kvr_discovery_config dc = {.poll_s = 0.1, .grace_s = 30, .timeout_s = 0.3,
                               .max_response_bytes = 4096};
    srv_t s;
    start_with(&s, e, 3, &dc);
    wait_state(&s, good.url, "indexed");
    wait_state(&s, slow.url, "unreachable");
    wait_state(&s, big.url, "unreachable");
    json_t *r, *en = engine_get(&s, slow.url, &r);
    assert_non_null(strstr(json_string_value(json_object_get(en, "last_error")), "timed out"));
    json_decref(r);
    en = engine_get(&s, big.url, &r);
    assert_non_null(strstr(json_string_value(json_object_get(en, "last_error")),
                           "larger than 4096 bytes"));
    json_decref(r);
    /* The good one kept being polled while the slow one timed out. */
    wait_polls(&s, good.url, 5);
    kvr_server_stop(s.srv);
    mock_http_stop(&slow);
    mock_http_stop(&big);
    mock_http_stop(&good);
    mock_pubs_stop(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sglang_two_dp_ranks_are_found_and_indexed),
        cmocka_unit_test(test_kimi_gets_auto_identity_no_hashes_eagle_and_page_times_dcp),
        cmocka_unit_test(test_vllm_sources_metrics_and_models),
        cmocka_unit_test(test_restarted_engine_with_changed_setting_is_reregistered),
        cmocka_unit_test(test_failed_polls_keep_the_worker_within_the_grace_period),
        cmocka_unit_test(test_stopped_engine_is_unregistered_after_the_grace_period),
        cmocka_unit_test(test_kv_events_null_invalid_answers_and_conflicts_are_reported),
        cmocka_unit_test(test_post_and_delete_engines),
        cmocka_unit_test(test_slow_and_oversized_answers_fail_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
