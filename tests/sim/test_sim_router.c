/* A mock engine against a real `kvrouter serve`: batches published before
 * the router subscribed are recovered through the engine's replay socket,
 * and the router's index then answers /query with the engine's cached
 * prefix. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "test_support.h"

#include "mock/engine.h"
#include "sim/router_client.h"

static json_t *get_json(kvr_sim_http *h, const char *path, const char *body, long want)
{
    kvr_sim_buf resp = {0};
    long status = 0;
    assert_int_equal(kvr_sim_http_call(h, path, body, body ? strlen(body) : 0, &status, &resp), 0);
    if (status != want)
        fail_msg("%s: HTTP %ld: %s", path, status, resp.data);
    json_t *j = json_loadb(resp.data, resp.len, 0, NULL);
    kvr_sim_buf_free(&resp);
    assert_non_null(j);
    return j;
}

static json_t *rank0(json_t *workers)
{
    json_t *w = json_array_get(workers, 0);
    assert_non_null(w);
    return json_object_get(json_object_get(w, "ranks"), "0");
}

static void test_router_replays_missed_batches(void **state)
{
    (void)state;
    char url[128], err[256];
    pid_t pid;
    assert_int_equal(kvr_sim_router_spawn(kvr_test_binary(), 1, NULL, 0, url, sizeof url, &pid,
                                          10000, err, sizeof err),
                     0);
    kvr_sim_http *h = kvr_sim_http_create(url);
    assert_non_null(h);
    void *zctx = zmq_ctx_new();
    kvr_sim_engine_config ec = {.block_size = 16, .gpu_capacity = 64, .zctx = zctx,
                                .pub_bind = "tcp://127.0.0.1:*",
                                .replay_bind = "tcp://127.0.0.1:*"};
    kvr_sim_engine *e = kvr_sim_engine_create(&ec, err, sizeof err);
    assert_non_null(e);

    /* Three batches nobody hears: seq 0, 1, 2. */
    uint64_t t[3][64];
    kvr_sim_hit hit;
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 64; i++)
            t[r][i] = (uint64_t)(1000 * (r + 1) + i);
        assert_int_equal(kvr_sim_engine_serve(e, t[r], 64, &hit), 0);
    }
    assert_int_equal(kvr_sim_engine_last_seq(e), 2);

    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\":7,\"endpoint\":\"%s\",\"replay_endpoint\":\"%s\","
             "\"model_name\":\"m\",\"block_size\":16}",
             kvr_sim_engine_endpoint(e), kvr_sim_engine_replay_endpoint(e));
    json_decref(get_json(h, "/register", body, 201));
    assert_true(kvr_sim_engine_wait_subscriber(e, 30000));
    /* The first batch the router hears is seq 3: it asks for 0.. first. */
    uint64_t more[32];
    for (int i = 0; i < 32; i++)
        more[i] = (uint64_t)(9000 + i);
    assert_int_equal(kvr_sim_engine_serve(e, more, 32, &hit), 0);

    int64_t last = -1;
    for (int tries = 0; tries < 500 && last != 3; tries++) {
        json_t *w = get_json(h, "/workers", NULL, 200);
        json_t *seq = json_object_get(rank0(w), "last_seq");
        last = json_is_integer(seq) ? json_integer_value(seq) : -1;
        json_decref(w);
        if (last != 3) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    assert_int_equal(last, 3);
    assert_true(kvr_sim_engine_replays_served(e) >= 1);
    json_t *w = get_json(h, "/workers", NULL, 200);
    json_t *src = json_object_get(rank0(w), "source");
    assert_true(json_integer_value(json_object_get(src, "replays_ok")) >= 1);
    assert_true(json_integer_value(json_object_get(src, "replayed_batches")) >= 3);
    json_decref(w);

    /* Batch 1 (recovered by replay) is in the index: all 4 blocks match. */
    kvr_sim_buf q = {0};
    kvr_sim_buf_printf(&q, "{\"model_name\":\"m\",\"token_ids\":[");
    for (int i = 0; i < 64; i++)
        kvr_sim_buf_printf(&q, "%s%" PRIu64, i ? "," : "", t[1][i]);
    kvr_sim_buf_printf(&q, "]}");
    json_t *res = get_json(h, "/query", q.data, 200);
    json_t *score = json_object_get(json_object_get(json_object_get(res, "scores"), "7"), "0");
    assert_true(json_is_integer(score));
    assert_int_equal(json_integer_value(score), 64);
    json_decref(res);
    kvr_sim_buf_free(&q);

    kvr_sim_engine_destroy(e);
    zmq_ctx_term(zctx);
    kvr_sim_http_destroy(h);
    kvr_sim_router_stop(pid);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_replays_missed_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
