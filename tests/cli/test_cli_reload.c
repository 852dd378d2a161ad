/* SIGHUP reloads `kvrouter serve --config` in a real process: workers the
 * file adds, removes and changes follow it (an unchanged worker keeps its
 * listener and indexed blocks, a changed mm_identity resets it, SPEC §5
 * rule 9), workers registered over HTTP stay, settings that need a restart
 * are named, and a bad file changes nothing and says why, in JSON log lines
 * (--log-format json). The config file's router settings apply to the
 * running router (kvr_router_set_config). */
#include "test_support.h"

#include "../server/net_helpers.h"
#include "child.h"

#define BS 4
#define WAIT 20000

static char *worker_json(char *buf, size_t cap, uint64_t id, const char *endpoint,
                         const char *extra)
{
    snprintf(buf, cap, "{\"instance_id\": %llu, \"endpoint\": \"%s\"%s}",
             (unsigned long long)id, endpoint, extra ? extra : "");
    return buf;
}

/* The sorted ids /workers lists, as "1,3,4". */
static void worker_ids(const char *base, char *out, size_t cap)
{
    json_t *w = th_json("GET", base, "/workers", NULL, NULL);
    uint64_t ids[16];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(w) && n < 16; i++)
        ids[n++] = (uint64_t)json_integer_value(json_object_get(json_array_get(w, i),
                                                                "instance_id"));
    json_decref(w);
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            uint64_t t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
        }
    size_t o = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%llu", i ? "," : "", (unsigned long long)ids[i]);
}

static bool wait_ids(const char *base, const char *want)
{
    char got[128];
    double end = th_now() + WAIT / 1000.0;
    do {
        worker_ids(base, got, sizeof got);
        if (strcmp(got, want) == 0)
            return true;
        th_sleep_ms(20);
    } while (th_now() < end);
    fail_msg("workers %s, wanted %s", got, want);
    return false;
}

static const char *mm_identity_of(const char *base, uint64_t id, char *buf, size_t cap)
{
    json_t *w = th_json("GET", base, "/workers", NULL, NULL);
    buf[0] = 0;
    for (size_t i = 0; i < json_array_size(w); i++) {
        json_t *x = json_array_get(w, i);
        if ((uint64_t)json_integer_value(json_object_get(x, "instance_id")) == id)
            snprintf(buf, cap, "%s",
                     json_string_value(json_object_get(json_object_get(x, "capabilities"),
                                                       "mm_identity")));
    }
    json_decref(w);
    return buf;
}

static void test_sighup_reloads_workers_and_keeps_a_bad_file_out(void **state)
{
    (void)state;
    th_engine ea, eb, ed;
    th_engine_start(&ea);
    th_engine_start(&eb);
    th_engine_start(&ed);
    char path[] = "/tmp/kvr_reloadXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char a[256], b[256], d[256], cfg[2048];
    worker_json(a, sizeof a, 1, ea.endpoint, NULL);
    worker_json(b, sizeof b, 2, eb.endpoint, NULL);
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"model_name\": \"m\", \"block_size\": %d, "
             "\"log_format\": \"json\", \"workers\": [%s, %s]}",
             BS, a, b);
    kvr_test_replace_file(path, cfg);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--config", path, NULL};
    char base[64];
    kvr_child *c = kvr_child_serve(argv, base, sizeof base);
    /* Worker 1 holds two blocks; worker 3 comes over HTTP. */
    assert_true(th_engine_wait_sub(&ea, WAIT));
    uint64_t tokens[8] = {5, 6, 7, 8, 9, 10, 11, 12}, hashes[2] = {1, 2}, local[2];
    th_local_hashes(tokens, 8, BS, local, 2);
    kvr_raw_event ev = th_store(hashes, 2, 0, tokens, BS);
    th_send_events(&ea, 0, &ev, 1, true);
    assert_int_equal(th_wait_score(base, "m", local, 2, 1, 0, 2 * BS, WAIT), 2 * BS);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 3, \"endpoint\": \"tcp://127.0.0.1:6997\", "
                                 "\"model_name\": \"m\", \"block_size\": 4}",
                                 NULL),
                     201);
    assert_true(wait_ids(base, "1,2,3"));

    /* v2: 2 gone, 4 new, 1 unchanged; max_body needs a restart. */
    worker_json(d, sizeof d, 4, ed.endpoint, NULL);
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"model_name\": \"m\", \"block_size\": %d, "
             "\"log_format\": \"json\", \"max_body\": 4096, \"workers\": [%s, %s]}",
             BS, a, d);
    kvr_test_replace_file(path, cfg);
    size_t mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(
        c, mark, "1 created, 0 changed, 1 unchanged, 1 ranks removed", WAIT));
    assert_true(wait_ids(base, "1,3,4"));
    assert_non_null(strstr(c->err + mark, "'max_body' changed"));
    assert_int_equal(th_score(base, "m", local, 2, 1, 0), 2 * BS); /* kept */

    /* v3: worker 1's mm_identity changes: reset, its blocks cleared. */
    worker_json(a, sizeof a, 1, ea.endpoint, ", \"mm_identity\": \"engine_wide\"");
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"model_name\": \"m\", \"block_size\": %d, "
             "\"log_format\": \"json\", \"workers\": [%s, %s]}",
             BS, a, d);
    kvr_test_replace_file(path, cfg);
    mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(
        c, mark, "0 created, 1 changed, 1 unchanged, 0 ranks removed", WAIT));
    char mm[32];
    assert_string_equal(mm_identity_of(base, 1, mm, sizeof mm), "engine_wide");
    assert_int_equal(th_score(base, "m", local, 2, 1, 0), -1);

    /* v4: a bad file: nothing changes, the log says why. */
    kvr_test_replace_file(path, "{\"listen\": \"127.0.0.1:0\", \"wrokers\": []}");
    mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(c, mark, "unknown key 'wrokers'", WAIT));
    assert_true(wait_ids(base, "1,3,4"));
    assert_string_equal(mm_identity_of(base, 1, mm, sizeof mm), "engine_wide");

    /* Every stderr line is one JSON object with time, level and message. */
    assert_true(kvr_child_wait_stderr(c, mark, "\n", WAIT));
    char *save = NULL;
    size_t n_lines = 0;
    for (char *l = strtok_r(c->err, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        if (!j)
            fail_msg("stderr line is not JSON: %s", l);
        assert_non_null(json_string_value(json_object_get(j, "time")));
        assert_non_null(json_string_value(json_object_get(j, "level")));
        assert_non_null(json_string_value(json_object_get(j, "message")));
        json_decref(j);
        n_lines++;
    }
    assert_true(n_lines >= 4);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    free(c);
    unlink(path);
    th_engine_stop(&ed);
    th_engine_stop(&eb);
    th_engine_stop(&ea);
}

/* What SIGHUP does besides the workers: the access log is reopened at its
 * path (rotation by rename, as with POST /reopen_logs) and max_workers
 * applies at once. */
static void test_sighup_reopens_the_access_log_and_applies_max_workers(void **state)
{
    (void)state;
    char path[] = "/tmp/kvr_reload_cfgXXXXXX", log[] = "/tmp/kvr_reload_logXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"access_log\": \"%s\", \"max_workers\": 0}", log);
    kvr_test_replace_file(path, cfg);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--config", path, NULL};
    char base[64];
    kvr_child *c = kvr_child_serve(argv, base, sizeof base);
    const char *reg = "{\"instance_id\": %d, \"endpoint\": \"tcp://127.0.0.1:%d\", "
                      "\"model_name\": \"m\", \"block_size\": 4}";
    char body[256];
    snprintf(body, sizeof body, reg, 1, 6991);
    assert_int_equal(th_register(base, body, NULL), 201);

    /* Rotate, lower the worker limit, reload. */
    char rotated[64];
    snprintf(rotated, sizeof rotated, "%s.1", log);
    assert_int_equal(rename(log, rotated), 0);
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"access_log\": \"%s\", \"max_workers\": 1}", log);
    kvr_test_replace_file(path, cfg);
    size_t mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(c, mark, "0 created, 0 changed, 0 unchanged", WAIT));
    snprintf(body, sizeof body, reg, 2, 6992);
    json_t *r = NULL;
    assert_int_equal(th_register(base, body, &r), 503);
    assert_string_equal(json_string_value(json_object_get(r, "limit")), "max_workers");
    json_decref(r);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    free(c);

    /* The request before the reload is in the rotated file, the one after
     * it in a new file at the path. */
    size_t len;
    char *old = kvr_test_read_file(rotated, &len);
    char *now = kvr_test_read_file(log, &len);
    assert_non_null(old);
    assert_non_null(now);
    assert_int_equal(strstr(old, "\"status\":201") != NULL, 1);
    assert_null(strstr(old, "\"status\":503"));
    assert_non_null(strstr(now, "\"status\":503"));
    free(old);
    free(now);
    unlink(rotated);
    unlink(log);
    unlink(path);
}

/* /route of a 9-token request with request_id id: the HTTP status, and
 * *cost the chosen worker's cost. */
static long route_once(const char *base, const char *id, double *cost)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"model_name\": \"m\", \"request_id\": \"%s\", \"debug\": true, "
             "\"token_ids\": [1,2,3,4,5,6,7,8,9]}",
             id);
    long st = 0;
    json_t *r = th_json("POST", base, "/route", body, &st);
    *cost = json_number_value(json_object_get(r, "cost"));
    json_decref(r);
    return st;
}

static void router_config(const char *path, const char *router)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"model_name\": \"m\", \"block_size\": %d, "
             "\"router\": {%s}, \"workers\": [{\"instance_id\": 1, "
             "\"endpoint\": \"tcp://127.0.0.1:6996\"}]}",
             BS, router);
    kvr_test_replace_file(path, cfg);
}

/* Before the router took its settings on reload, a changed max_bookings
 * or cost_model was logged as needing a restart and /route kept the old. */
static void test_sighup_applies_router_settings(void **state)
{
    (void)state;
    char path[] = "/tmp/kvr_reload_routerXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    router_config(path, "\"max_bookings\": 1, \"cost_model\": \"ttft\"");
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--config", path, NULL};
    char base[64];
    kvr_child *c = kvr_child_serve(argv, base, sizeof base);
    assert_true(wait_ids(base, "1"));

    /* ttft: a cost in seconds (9 tokens at 10,000 tokens/s); one booking
     * at most. */
    double cost = -1;
    assert_int_equal(route_once(base, "a", &cost), 200);
    assert_true(cost > 0 && cost < 0.01);
    assert_int_equal(route_once(base, "b", &cost), 429);

    /* dynamo: a cost in blocks (3 new blocks, at least); two bookings. */
    router_config(path, "\"max_bookings\": 2, \"cost_model\": \"dynamo\", "
                        "\"rng_seed\": 5");
    size_t mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(c, mark, "2 router settings applied", WAIT));
    /* The one setting read only at start is named. */
    assert_true(kvr_child_wait_stderr(c, mark, "router setting 'rng_seed' changed", WAIT));
    assert_null(strstr(c->err + mark, "'max_bookings' changed"));
    assert_int_equal(route_once(base, "b", &cost), 200);
    assert_true(cost >= 3);
    assert_int_equal(route_once(base, "c", &cost), 429);

    /* A bad router value changes nothing. */
    router_config(path, "\"max_bookings\": -1");
    mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(c, mark, "reload failed", WAIT));
    assert_int_equal(route_once(base, "c", &cost), 429);
    assert_true(th_metric(base, "kvr_reloads_total{result=\"applied\"}") == 1);
    assert_true(th_metric(base, "kvr_reloads_total{result=\"failed\"}") == 1);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    free(c);
    unlink(path);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sighup_reloads_workers_and_keeps_a_bad_file_out),
        cmocka_unit_test(test_sighup_reopens_the_access_log_and_applies_max_workers),
        cmocka_unit_test(test_sighup_applies_router_settings),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
