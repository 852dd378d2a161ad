/* `kvrouter serve` started the way a manifest written for Dynamo's
 * standalone indexer starts it (SPEC §7.1): --port (every interface, with a
 * warning), --threads, --block-size/--workers without --model-name (model
 * "default", as Dynamo), --routing-group, --access-log, and
 * DYN_ROUTER_MIN_INITIAL_WORKERS from the environment, --peers. */
#include "test_support.h"

#include "../server/net_helpers.h"
#include "child.h"

#define WAIT 10000

static void test_dynamo_flags_and_the_port_warning(void **state)
{
    (void)state;
    th_engine e;
    th_engine_start(&e);
    char workers[256], log_path[] = "/tmp/kvr_cli_access_XXXXXX";
    int fd = mkstemp(log_path);
    assert_true(fd >= 0);
    close(fd);
    snprintf(workers, sizeof workers, "42:0=%s", e.endpoint);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--port", "0", "--threads", "3",
                    "--block-size", "4", "--workers", workers, "--routing-group", "pool-a",
                    "--access-log", log_path, NULL};
    kvr_child *c = calloc(1, sizeof *c);
    kvr_child_spawn(c, argv);
    char addr[64];
    int port = kvr_child_read_listen(c, addr, sizeof addr);
    assert_true(port > 0);
    assert_string_equal(addr, "0.0.0.0");
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    long st;
    json_t *w = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(st, 200);
    json_t *w0 = json_array_get(w, 0);
    assert_string_equal(json_string_value(json_object_get(w0, "model_name")), "default");
    assert_string_equal(json_string_value(json_object_get(w0, "routing_group")), "pool-a");
    assert_int_equal(json_integer_value(json_object_get(w0, "block_size")), 4);
    json_decref(w);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    assert_non_null(strstr(c->err, "beyond loopback"));
    free(c);
    /* The access log has the /workers request. */
    size_t len;
    char *log = kvr_test_read_file(log_path, &len);
    assert_non_null(log);
    json_t *line = json_loads(log, JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(line);
    assert_string_equal(json_string_value(json_object_get(line, "path")), "/workers");
    json_decref(line);
    free(log);
    unlink(log_path);
    th_engine_stop(&e);
}

static void test_min_initial_workers_from_the_environment(void **state)
{
    (void)state;
    setenv("DYN_ROUTER_MIN_INITIAL_WORKERS", "1", 1);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--listen", "127.0.0.1:0", NULL};
    char base[64];
    kvr_child *c = kvr_child_serve(argv, base, sizeof base);
    unsetenv("DYN_ROUTER_MIN_INITIAL_WORKERS");
    const char *q = "{\"model_name\": \"m\", \"token_ids\": [1, 2]}";
    long st;
    json_decref(th_json("POST", base, "/query", q, &st));
    assert_int_equal(st, 503);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 1, \"endpoint\": \"tcp://127.0.0.1:6998\", "
                                 "\"model_name\": \"m\", \"block_size\": 4}",
                                 NULL),
                     201);
    json_decref(th_json("POST", base, "/query", q, &st));
    assert_int_equal(st, 200);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    free(c);

    /* A bad value in the environment is a usage error naming it. */
    setenv("DYN_ROUTER_MIN_INITIAL_WORKERS", "two", 1);
    char line[512];
    snprintf(line, sizeof line, "'%s' serve 2>&1 >/dev/null", kvr_test_binary());
    int status;
    char *out = kvr_test_run(line, &status);
    unsetenv("DYN_ROUTER_MIN_INITIAL_WORKERS");
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "DYN_ROUTER_MIN_INITIAL_WORKERS"));
    free(out);
}

/* --peers as a manifest passes it: a second kvrouter started with the first
 * one's URL recovers its workers and its index before it serves. */
static void test_peers_flag_recovers_from_a_running_kvrouter(void **state)
{
    (void)state;
    th_engine e;
    th_engine_start(&e);
    char workers[256];
    snprintf(workers, sizeof workers, "42=%s", e.endpoint);
    char *argv_a[] = {(char *)kvr_test_binary(), "serve", "--listen", "127.0.0.1:0",
                      "--block-size", "4", "--model-name", "m", "--workers", workers, NULL};
    char base_a[64], base_b[64];
    kvr_child *a = kvr_child_serve(argv_a, base_a, sizeof base_a);
    assert_true(th_engine_wait_sub(&e, WAIT));
    uint64_t tokens[8] = {5, 6, 7, 8, 9, 10, 11, 12}, hashes[2] = {1, 2}, local[2];
    th_local_hashes(tokens, 8, 4, local, 2);
    kvr_raw_event ev = th_store(hashes, 2, 0, tokens, 4);
    th_send_events(&e, 0, &ev, 1, true);
    assert_int_equal(th_wait_score(base_a, "m", local, 2, 42, 0, 8, WAIT), 8);

    char *argv_b[] = {(char *)kvr_test_binary(), "serve", "--listen", "127.0.0.1:0", "--peers",
                      base_a, NULL};
    kvr_child *b = kvr_child_serve(argv_b, base_b, sizeof base_b);
    /* Serving means recovered: the worker and its blocks are there at once. */
    assert_int_equal(th_score(base_b, "m", local, 2, 42, 0), 8);
    long st;
    json_t *w = th_json("GET", base_b, "/workers", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(w), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(w, 0), "instance_id")), 42);
    json_decref(w);
    json_t *peers = th_json("GET", base_b, "/peers", NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_array_get(peers, 0)), base_a);
    json_decref(peers);
    assert_int_equal(kvr_child_stop(b, SIGTERM), 0);
    assert_int_equal(kvr_child_stop(a, SIGTERM), 0);
    free(a);
    free(b);
    th_engine_stop(&e);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamo_flags_and_the_port_warning),
        cmocka_unit_test(test_min_initial_workers_from_the_environment),
        cmocka_unit_test(test_peers_flag_recovers_from_a_running_kvrouter),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
