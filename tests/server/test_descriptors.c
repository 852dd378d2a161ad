/* Running out of file descriptors (SPEC §12) with a low RLIMIT_NOFILE, so
 * the limit is reached in seconds: registrations go on until a new
 * listener would take descriptors kept for HTTP connections, and then get a
 * clear 503 naming the resource ("limit": "descriptors"), counted in
 * /metrics; never a 400 blaming the endpoint (the old server's answer, after
 * which accepting HTTP connections stalled). HTTP keeps accepting many
 * connections at once, and a worker that leaves makes room again. Its own
 * executable: it lowers the process's hard limit too (for good: the server
 * raises the soft limit to the hard one at start). */
#include "test_support.h"

#include <sys/resource.h>

#include "kvrouter/server.h"
#include "net_helpers.h"
#include "slow_clients.h"

#define SOFT_LIMIT 512

static long reg(const char *base, int id, json_t **reply)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"instance_id\": %d, \"endpoint\": \"tcp://127.0.0.1:1\", \"model_name\": \"m\", "
             "\"block_size\": 16}",
             id);
    return th_register(base, body, reply);
}

static void test_out_of_descriptors_is_a_503_and_http_keeps_accepting(void **state)
{
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(rl.rlim_max >= SOFT_LIMIT);
    rl.rlim_cur = rl.rlim_max = SOFT_LIMIT;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);

    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    int id = 1;
    long st = 0;
    json_t *r = NULL;
    for (; id <= SOFT_LIMIT; id++) {
        json_decref(r);
        r = NULL;
        st = reg(base, id, &r);
        if (st != 201)
            break;
    }
    /* a real number of workers first, then the limit by name */
    fprintf(stderr, "registered %d workers before the 503\n", id - 1);
    assert_true(id > 20);
    assert_int_equal(st, 503);
    assert_string_equal(json_string_value(json_object_get(r, "limit")), "descriptors");
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "RLIMIT_NOFILE"));
    json_decref(r);
    assert_true(th_metric(base, "kvr_registrations_refused_total{limit=\"descriptors\"}") >= 1);
    assert_true(th_metric(base, "process_max_fds") == SOFT_LIMIT);
    assert_true(th_metric(base, "kvr_listener_descriptors") >= 3.0 * (id - 1));

    /* HTTP keeps accepting: 100 connections at once, each answered */
    enum { N = 100 };
    int fds[N];
    for (int i = 0; i < N; i++)
        assert_true((fds[i] = sc_open(kvr_server_port(srv), NULL,
                                      "GET /health HTTP/1.1\r\nHost: kvrouter\r\n\r\n")) >= 0);
    for (int i = 0; i < N; i++) {
        char buf[64] = "";
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        assert_int_equal(poll(&p, 1, 10000), 1);
        assert_true(recv(fds[i], buf, sizeof buf - 1, 0) > 12);
        assert_memory_equal(buf, "HTTP/1.1 200", 12);
        close(fds[i]);
    }

    /* workers leaving make room for a new one */
    for (int w = 1; w <= 3; w++) {
        char body[128];
        snprintf(body, sizeof body, "{\"instance_id\": %d, \"model_name\": \"m\"}", w);
        json_decref(th_json("POST", base, "/unregister", body, &st));
        assert_int_equal(st, 200);
    }
    /* ZeroMQ's reaper thread closes their descriptors shortly after */
    double end = th_now() + 10;
    while ((st = reg(base, id, NULL)) == 503 && th_now() < end)
        th_sleep_ms(20);
    assert_int_equal(st, 201);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_descriptors_is_a_503_and_http_keeps_accepting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
