/* Routing settings over HTTP: max_bookings answers 429 naming the limit
 * (and /metrics counts it); a worker registered with kv_events false is
 * routed by prefix from what kvrouter sent it (/metrics shows the
 * approximate index and the learning figures), each of its dp ranks as
 * itself; bad values of the new fields
 * get a 400 naming the field. */
#include "test_support.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/server.h"
#include "net_helpers.h"

static kvr_server *start(char *base, size_t cap, uint64_t max_bookings)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.router.rng_seed = 3;
    cfg.router.max_bookings = max_bookings;
    kvr_server *srv = th_server_start(&cfg, base, cap);
    assert_non_null(srv);
    return srv;
}

static const char *const route_fmt =
    "{\"model_name\": \"m\", \"request_id\": \"%s\", \"token_ids\": [%s]%s}";

static long route(const char *base, const char *id, const char *tokens, const char *extra,
                  json_t **reply)
{
    char body[1024];
    snprintf(body, sizeof body, route_fmt, id, tokens, extra ? extra : "");
    long st = 0;
    json_t *r = th_json("POST", base, "/route", body, &st);
    if (reply)
        *reply = r;
    else
        json_decref(r);
    return st;
}

static void test_max_bookings_is_429_naming_the_limit(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base, 2);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 4}",
                                 NULL),
                     201);
    assert_int_equal(route(base, "a", "1,2,3,4,5", NULL, NULL), 200);
    assert_int_equal(route(base, "b", "1,2,3,4,5", NULL, NULL), 200);
    json_t *r = NULL;
    assert_int_equal(route(base, "c", "1,2,3,4,5", NULL, &r), 429);
    const char *err = json_string_value(json_object_get(r, "error"));
    assert_non_null(err);
    assert_non_null(strstr(err, "max_bookings"));
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_router_bookings_rejected_total"), 1);
    assert_int_equal(th_metric(base, "kvr_router_bookings_active"), 2);
    long st = 0;
    json_decref(th_json("POST", base, "/free", "{\"request_id\": \"a\"}", &st));
    assert_int_equal(st, 200);
    assert_int_equal(route(base, "c", "1,2,3,4,5", NULL, NULL), 200);
    kvr_server_stop(srv);
}

/* The ttft model's error is in /metrics: at a registered rate every
 * /prefill_done is a timing, none counts as an error until 16 are in, and
 * reported first tokens far slower than predicted read as a large ratio. */
static void test_ttft_error_is_measured_from_prefill_done(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base, 0);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"model_name\": \"m\", \"block_size\": 4, "
                                 "\"kv_events\": false, \"prefill_tps\": 1000}",
                                 NULL),
                     201);
    for (int i = 0; i < 16; i++) {
        char id[16], tokens[64], body[96];
        snprintf(id, sizeof id, "r%d", i);
        /* a prompt of its own: a cached one would be predicted no prefill */
        snprintf(tokens, sizeof tokens, "%d,2,3,4,5,6,7,8", 100 + i);
        assert_int_equal(route(base, id, tokens, NULL, NULL), 200);
        snprintf(body, sizeof body, "{\"request_id\": \"%s\", \"ttft_ms\": 10000}", id);
        long st = 0;
        json_decref(th_json("POST", base, "/prefill_done", body, &st));
        assert_int_equal(st, 200);
        assert_int_equal(th_metric(base, "kvr_router_ttft_error_samples_total"), i + 1);
        if (i < 15)
            assert_true(th_metric(base, "kvr_router_ttft_error_ratio") == 0);
    }
    /* 10 s against a prediction well under one */
    assert_true(th_metric(base, "kvr_router_ttft_error_ratio") > 1);
    kvr_server_stop(srv);
}

/* Worker 2 publishes nothing (kv_events false). A request pinned to it
 * makes what it sent its cache, so a follow-up sharing the first two blocks
 * goes there with 8 tokens of overlap, although worker 1 is as idle. */
static void test_worker_without_events_routes_by_prefix(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base, 0);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 4, \"kv_events\": true}",
                                 NULL),
                     201);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 2, \"endpoint\": \"tcp://127.0.0.1:2\", "
                                 "\"model_name\": \"m\", \"block_size\": 4, \"kv_events\": false, "
                                 "\"prefill_tps\": 20000}",
                                 NULL),
                     201);
    assert_int_equal(route(base, "first", "1,2,3,4,5,6,7,8,9,10,11,12", ", \"worker_id\": 2",
                           NULL),
                     200);
    long st = 0;
    json_decref(th_json("POST", base, "/prefill_done",
                        "{\"request_id\": \"first\", \"ttft_ms\": 12.5}", &st));
    assert_int_equal(st, 200);
    json_decref(th_json("POST", base, "/free", "{\"request_id\": \"first\"}", &st));
    assert_int_equal(st, 200);
    /* what it sent stays in the approximate index after the /free; the
     * router's learning figures are in /metrics (a 12-token request is too
     * short to be a rate sample) */
    assert_int_equal(th_metric(base, "kvr_router_approx_workers"), 1);
    assert_int_equal(th_metric(base, "kvr_router_approx_blocks"), 3);
    assert_int_equal(th_metric(base, "kvr_router_approx_pruned_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_approx_lost_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_rate_samples_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_rate_samples_lost_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_fit_samples_lost_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_decode_samples_lost_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_rates_learned"), 0);
    assert_int_equal(th_metric(base, "kvr_router_rates_evicted_total"), 0);
    /* worker 2's rate is registered, so its one timing is a sample */
    assert_int_equal(th_metric(base, "kvr_router_ttft_error_samples_total"), 1);
    assert_int_equal(th_metric(base, "kvr_router_ttft_error_ratio"), 0);
    assert_int_equal(th_metric(base, "kvr_router_bookings_aged_out_total"), 0);
    /* lru_edge off: no edge kept, nothing counted (the series are there) */
    assert_int_equal(th_metric(base, "kvr_router_edge_prompts_total{outcome=\"returned\"}"), 0);
    assert_int_equal(th_metric(base, "kvr_router_edge_prompts_total{outcome=\"aged_out\"}"), 0);
    assert_int_equal(th_metric(base, "kvr_router_edge_lost_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_edge_limit_drops_total"), 0);
    /* nothing ran out of memory (the series are there) */
    assert_int_equal(th_metric(base, "kvr_router_copy_cost_lost_total"), 0);
    assert_int_equal(th_metric(base, "kvr_router_work_lost_total"), 0);
    json_t *r = NULL;
    assert_int_equal(route(base, "next", "1,2,3,4,5,6,7,8,90,91,92,93", NULL, &r), 200);
    assert_int_equal(json_integer_value(json_object_get(r, "worker_id")), 2);
    assert_int_equal(json_integer_value(json_object_get(r, "overlap_tokens")), 8);
    json_decref(r);
    kvr_server_stop(srv);
}

static long post_status(const char *base, const char *path, const char *body)
{
    long st = 0;
    json_decref(th_json("POST", base, path, body, &st));
    return st;
}

/* An engine without events registered at dp ranks 0 and 3: each rank is a
 * candidate of its own (the router used to take ranks from the index, which
 * holds no state for a rank that publishes nothing, and scored the worker
 * as rank 0 alone). A request pinned to rank 3 is routed there, and the
 * follow-up sharing its first two blocks goes back to rank 3. */
static void test_worker_without_events_keeps_its_dp_ranks(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base, 0);
    for (int rank = 0; rank <= 3; rank += 3) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"instance_id\": 2, \"model_name\": \"m\", \"block_size\": 4, "
                 "\"kv_events\": false, \"dp_rank\": %d}",
                 rank);
        long st = th_register(base, body, NULL);
        assert_true(st == 200 || st == 201);
    }
    json_t *r = NULL;
    assert_int_equal(route(base, "first", "1,2,3,4,5,6,7,8,9,10,11,12",
                           ", \"worker_id\": 2, \"dp_rank\": 3", &r),
                     200);
    assert_int_equal(json_integer_value(json_object_get(r, "dp_rank")), 3);
    json_decref(r);
    assert_int_equal(post_status(base, "/free", "{\"request_id\": \"first\"}"), 200);
    assert_int_equal(route(base, "next", "1,2,3,4,5,6,7,8,90,91,92,93", NULL, &r), 200);
    assert_int_equal(json_integer_value(json_object_get(r, "dp_rank")), 3);
    assert_int_equal(json_integer_value(json_object_get(r, "overlap_tokens")), 8);
    json_decref(r);
    kvr_server_stop(srv);
}

static json_t *only_worker(const char *base, json_t **root)
{
    long st = 0;
    *root = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(*root), 1);
    return json_array_get(*root, 0);
}

/* An engine that publishes nothing has no endpoint to give: kv_events
 * false registers without one (no listener; /workers active with empty
 * endpoints, /ready not waiting for it) and routes by prefix all the same.
 * Any other worker still needs its endpoint. */
static void test_worker_without_events_needs_no_endpoint(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base, 0);
    const char *no_ep = "{\"instance_id\": 2, \"model_name\": \"m\", \"block_size\": 4, "
                        "\"kv_events\": false}";
    json_t *r = NULL;
    assert_int_equal(th_register(base, no_ep, &r), 201);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "created");
    json_decref(r);
    assert_int_equal(th_register(base, no_ep, &r), 200);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "unchanged");
    json_decref(r);
    const char *bad[][2] = {
        {"{\"instance_id\": 3, \"model_name\": \"m\", \"block_size\": 4}", "endpoint"},
        {"{\"instance_id\": 3, \"model_name\": \"m\", \"block_size\": 4, \"kv_events\": "
         "\"auto\"}",
         "endpoint"},
        {"{\"instance_id\": 3, \"model_name\": \"m\", \"block_size\": 4, \"kv_events\": "
         "false, \"replay_endpoint\": \"tcp://127.0.0.1:9\"}",
         "replay_endpoint"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(th_register(base, bad[i][0], &r), 400);
        assert_non_null(strstr(json_string_value(json_object_get(r, "error")), bad[i][1]));
        json_decref(r);
    }
    json_t *root;
    json_t *w = only_worker(base, &root);
    assert_string_equal(json_string_value(json_object_get(w, "status")), "active");
    assert_int_equal(json_object_size(json_object_get(w, "endpoints")), 0);
    assert_int_equal(json_object_size(json_object_get(w, "listeners")), 0);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(w, "capabilities"), "kv_events")),
        "off");
    json_decref(root);
    long st = 0;
    json_decref(th_json("GET", base, "/ready", NULL, &st));
    assert_int_equal(st, 200);

    /* Routed by prefix from what kvrouter sent it (worker 1 is as idle). */
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 4, \"kv_events\": true}",
                                 NULL),
                     201);
    assert_int_equal(route(base, "first", "1,2,3,4,5,6,7,8,9,10,11,12", ", \"worker_id\": 2",
                           NULL),
                     200);
    json_decref(th_json("POST", base, "/free", "{\"request_id\": \"first\"}", &st));
    assert_int_equal(st, 200);
    assert_int_equal(route(base, "next", "1,2,3,4,5,6,7,8,90,91,92,93", NULL, &r), 200);
    assert_int_equal(json_integer_value(json_object_get(r, "worker_id")), 2);
    assert_int_equal(json_integer_value(json_object_get(r, "overlap_tokens")), 8);
    json_decref(r);
    assert_int_equal(post_status(base, "/unregister",
                                    "{\"instance_id\": 1, \"model_name\": \"m\"}"),
                     200);

    /* An endpoint given later starts a listener; taken away, it stops. */
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 2, \"endpoint\": \"tcp://127.0.0.1:2\", "
                                 "\"model_name\": \"m\", \"block_size\": 4, \"kv_events\": false}",
                                 NULL),
                     201);
    w = only_worker(base, &root);
    assert_string_equal(json_string_value(json_object_get(json_object_get(w, "endpoints"), "0")),
                        "tcp://127.0.0.1:2");
    json_decref(root);
    assert_int_equal(th_register(base, no_ep, &r), 200);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "listener_restarted");
    json_decref(r);
    w = only_worker(base, &root);
    assert_int_equal(json_object_size(json_object_get(w, "listeners")), 0);
    json_decref(root);
    assert_int_equal(post_status(base, "/unregister",
                                    "{\"instance_id\": 2, \"model_name\": \"m\"}"),
                     200);
    r = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(json_array_size(r), 0);
    json_decref(r);
    kvr_server_stop(srv);
}

/* SPEC 7.1 with max_total_num_tokens (the KV capacity, an extra field): a
 * new worker is 201 "created", its /workers capabilities show it, the same
 * registration again is 200 "unchanged", a new capacity (or none: left out
 * is unknown) is 200 "updated" without a reset, and the index the worker
 * built is kept. */
static void test_capacity_reregistration_keeps_the_worker(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base, 0);
    const char *fmt = "{\"instance_id\": 2, \"model_name\": \"m\", \"block_size\": 4, "
                      "\"kv_events\": false%s}";
    const char *with[] = {", \"max_total_num_tokens\": 523776",
                          ", \"max_total_num_tokens\": 523776",
                          ", \"max_total_num_tokens\": 65536", ""};
    const long want_status[] = {201, 200, 200, 200};
    const char *want_result[] = {"created", "unchanged", "updated", "updated"};
    const json_int_t want_caps[] = {523776, 523776, 65536, 0};
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, fmt, with[i]);
        json_t *r = NULL;
        assert_int_equal(th_register(base, body, &r), want_status[i]);
        assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
        assert_string_equal(json_string_value(json_object_get(r, "result")), want_result[i]);
        assert_true(json_is_false(json_object_get(r, "reset")));
        json_decref(r);
        json_t *root;
        json_t *caps = json_object_get(only_worker(base, &root), "capabilities");
        json_t *cap = json_object_get(caps, "max_total_num_tokens");
        json_t *used = json_object_get(caps, "kv_capacity_tokens");
        json_t *from = json_object_get(caps, "kv_capacity_source");
        if (want_caps[i]) {
            assert_int_equal(json_integer_value(cap), want_caps[i]);
            assert_int_equal(json_integer_value(used), want_caps[i]);
            assert_string_equal(json_string_value(from), "registered");
        } else {
            /* no events to estimate from: unknown */
            assert_true(json_is_null(cap) && json_is_null(used) && json_is_null(from));
        }
        json_decref(root);
        if (i == 0) /* something for the approximate index to keep */
            assert_int_equal(route(base, "first", "1,2,3,4,5,6,7,8,9", NULL, NULL), 200);
    }
    assert_int_equal(post_status(base, "/free", "{\"request_id\": \"first\"}"), 200);
    json_t *r = NULL;
    assert_int_equal(route(base, "next", "1,2,3,4,5,6,7,8,90", NULL, &r), 200);
    assert_int_equal(json_integer_value(json_object_get(r, "overlap_tokens")), 8);
    json_decref(r);
    kvr_server_stop(srv);
}

static void test_bad_values_name_the_field(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(base, sizeof base, 0);
    json_t *r = NULL;
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 4, \"kv_events\": \"x\"}",
                                 &r),
                     400);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "kv_events"));
    json_decref(r);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 4, \"prefill_tps\": 0}",
                                 &r),
                     400);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "prefill_tps"));
    json_decref(r);
    const char *caps[] = {"0", "-1", "\"lots\"", "1.5", "1099511627777"};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", \"model_name\": "
                 "\"m\", \"block_size\": 4, \"max_total_num_tokens\": %s}",
                 caps[i]);
        assert_int_equal(th_register(base, body, &r), 400);
        const char *msg = json_string_value(json_object_get(r, "error"));
        if (!msg || !strstr(msg, "max_total_num_tokens"))
            fail_msg("max_total_num_tokens %s: %s", caps[i], msg ? msg : "(no error)");
        json_decref(r);
    }
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 4}",
                                 NULL),
                     201);
    assert_int_equal(route(base, "a", "1,2,3,4,5", NULL, NULL), 200);
    long st = 0;
    r = th_json("POST", base, "/prefill_done", "{\"request_id\": \"a\", \"ttft_ms\": -1}", &st);
    assert_int_equal(st, 400);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "ttft_ms"));
    json_decref(r);
    assert_int_equal(route(base, "b", "1,2,3,4,5", ", \"time_s\": \"soon\"", &r), 400);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "time_s"));
    json_decref(r);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_bookings_is_429_naming_the_limit),
        cmocka_unit_test(test_ttft_error_is_measured_from_prefill_done),
        cmocka_unit_test(test_worker_without_events_routes_by_prefix),
        cmocka_unit_test(test_worker_without_events_needs_no_endpoint),
        cmocka_unit_test(test_worker_without_events_keeps_its_dp_ranks),
        cmocka_unit_test(test_capacity_reregistration_keeps_the_worker),
        cmocka_unit_test(test_bad_values_name_the_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
