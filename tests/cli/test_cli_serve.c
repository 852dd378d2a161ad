/* The real `kvrouter serve` and `kvrouter tap` binaries: start them, feed
 * them real ZeroMQ batches, talk to serve over HTTP, stop it with SIGTERM. */
#include "test_support.h"

#include <signal.h>
#include <sys/wait.h>

#include "../server/net_helpers.h"

#define BS 4
#define WAIT 5000

typedef struct {
    pid_t pid;
    FILE *out; /* child's stdout */
} child_t;

static void spawn(child_t *c, char *const argv[])
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    c->out = fdopen(fds[0], "r");
}

static int stop(child_t *c, int sig)
{
    kill(c->pid, sig);
    int status = 0;
    waitpid(c->pid, &status, 0);
    fclose(c->out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Reads the "listening on http://ADDR:PORT" line. */
static int read_port(child_t *c)
{
    char line[512];
    if (!fgets(line, sizeof line, c->out))
        return -1;
    const char *p = strstr(line, "http://127.0.0.1:");
    return p ? atoi(p + strlen("http://127.0.0.1:")) : -1;
}

static void test_serve_binary_end_to_end(void **state)
{
    (void)state;
    th_engine e;
    th_engine_start(&e);
    char workers[256];
    snprintf(workers, sizeof workers, "42=%s", e.endpoint);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--listen", "127.0.0.1:0", "--workers",
                    workers, "--model-name", "m", "--block-size", "4", "--router-opt",
                    "temperature=0", NULL};
    child_t c;
    spawn(&c, argv);
    int port = read_port(&c);
    assert_true(port > 0);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    assert_true(th_engine_wait_sub(&e, WAIT));
    uint64_t tokens[8] = {5, 6, 7, 8, 9, 10, 11, 12}, hashes[2] = {1, 2}, local[2];
    th_local_hashes(tokens, 8, BS, local, 2);
    kvr_raw_event ev = th_store(hashes, 2, 0, tokens, BS);
    th_send_events(&e, 0, &ev, 1, true);
    assert_int_equal(th_wait_score(base, "m", local, 2, 42, 0, 2 * BS, WAIT), 2 * BS);
    long st;
    json_t *w = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(st, 200);
    json_t *w0 = json_array_get(w, 0);
    assert_int_equal(json_integer_value(json_object_get(w0, "instance_id")), 42);
    assert_string_equal(json_string_value(json_object_get(w0, "status")), "active");
    json_decref(w);
    assert_int_equal(stop(&c, SIGTERM), 0);
    th_engine_stop(&e);
}

/* --metrics-per-worker turns the kvr_worker_* families on; without it no
 * series names a worker. */
static void test_serve_metrics_per_worker_flag(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        char *argv[] = {(char *)kvr_test_binary(), "serve", "--listen", "127.0.0.1:0",
                        "--workers", "5=tcp://127.0.0.1:1", "--model-name", "m",
                        "--block-size", "4", on ? "--metrics-per-worker" : NULL, NULL};
        child_t c;
        spawn(&c, argv);
        int port = read_port(&c);
        assert_true(port > 0);
        char url[96], *m = NULL;
        snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
        assert_int_equal(th_http("GET", url, NULL, 0, &m), 200);
        assert_non_null(strstr(m, "kvr_workers{model=\"m\",group=\"default\"} 1\n"));
        const char *series = "kvr_worker_active_requests{model=\"m\",group=\"default\","
                             "worker=\"5\",rank=\"0\"} 0\n";
        if (on)
            assert_non_null(strstr(m, series));
        else
            assert_null(strstr(m, "worker=\""));
        free(m);
        assert_int_equal(stop(&c, SIGTERM), 0);
    }
}

static void test_serve_config_file_and_bad_args(void **state)
{
    (void)state;
    th_engine e;
    th_engine_start(&e);
    char path[] = "/tmp/kvr_serve_cfgXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f,
            "{\"listen\": \"127.0.0.1:0\", \"router\": {\"overlap_score_credit\": 2.0},"
            " \"workers\": [{\"instance_id\": 7, \"dp_rank\": 0, \"endpoint\": \"%s\","
            " \"mm_identity\": \"engine_wide\"}]}",
            e.endpoint);
    fclose(f);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--config", path, "--model-name", "cm",
                    "--block-size", "4", NULL};
    child_t c;
    spawn(&c, argv);
    int port = read_port(&c);
    assert_true(port > 0);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    json_t *w = th_json("GET", base, "/workers", NULL, NULL);
    json_t *w0 = json_array_get(w, 0);
    assert_string_equal(json_string_value(json_object_get(w0, "model_name")), "cm");
    assert_string_equal(json_string_value(
                            json_object_get(json_object_get(w0, "capabilities"), "mm_identity")),
                        "engine_wide");
    json_decref(w);
    assert_int_equal(stop(&c, SIGINT), 0);
    unlink(path);

    /* Usage errors exit 2 without serving. */
    char *bad[] = {(char *)kvr_test_binary(), "serve", "--workers", "1=tcp://127.0.0.1:1", NULL};
    spawn(&c, bad);
    int status = 0;
    waitpid(c.pid, &status, 0);
    fclose(c.out);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
    th_engine_stop(&e);
}

static void test_tap_prints_events_with_seq(void **state)
{
    (void)state;
    th_engine e;
    th_engine_start(&e);
    char *argv[] = {(char *)kvr_test_binary(), "tap", e.endpoint, "--count", "1", NULL};
    child_t c;
    spawn(&c, argv);
    assert_true(th_engine_wait_sub(&e, WAIT));
    uint64_t tokens[4] = {1, 2, 3, 1ull << 40}, hashes[1] = {77};
    kvr_raw_event ev = th_store(hashes, 1, 0, tokens, BS);
    th_send_events(&e, 5, &ev, 1, true);
    char line[1024] = "";
    assert_non_null(fgets(line, sizeof line, c.out));
    json_t *j = json_loads(line, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "seq")), 5);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "stored");
    assert_non_null(strstr(line, "1099511627776")); /* the wide id, exact */
    json_decref(j);
    int status = 0;
    waitpid(c.pid, &status, 0);
    fclose(c.out);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    th_engine_stop(&e);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_binary_end_to_end),
        cmocka_unit_test(test_serve_metrics_per_worker_flag),
        cmocka_unit_test(test_serve_config_file_and_bad_args),
        cmocka_unit_test(test_tap_prints_events_with_seq),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
