/* No client can exhaust the HTTP server (SPEC §12), with a real client
 * holding real slow connections on loopback: thousands of connections that
 * trickle their headers or bodies leave /health and /query answering (on the
 * old server about 1,020 of them starved it: libmicrohttpd's default limit of
 * FD_SETSIZE - 4 stopped accepting, and later clients waited in the backlog);
 * one connection more than max_connections, or than max_connections_per_ip
 * from one address, is closed at once and counted; a request that has not
 * arrived in full within connection_timeout_s is closed (a trickle that
 * defeats an inactivity timeout too), and so is an idle keep-alive
 * connection. */
#include "test_support.h"

#include "kvrouter/server.h"
#include "net_helpers.h"
#include "slow_clients.h"

#define BS 4
#define WAIT 10000

/* Polls th_metric(key) until it is at least want; returns the last value. */
static double wait_metric(const char *base, const char *key, double want)
{
    double end = th_now() + WAIT / 1000.0, v;
    while ((v = th_metric(base, key)) < want && th_now() < end)
        th_sleep_ms(20);
    return v;
}

static kvr_server *start(kvr_server_config *cfg, char *base, size_t cap)
{
    cfg->port = 0;
    kvr_server *srv = th_server_start(cfg, base, cap);
    assert_non_null(srv);
    return srv;
}

static void test_slow_connections_leave_health_and_query_answering(void **state)
{
    (void)state;
    /* Client and server share this process: two descriptors a connection. */
    size_t soft = sc_raise_fd_limit();
    size_t n = soft > 600 ? (soft - 300) / 2 : 100;
    if (n > 3000)
        n = 3000;
    if (n < 3000)
        fprintf(stderr, "note: RLIMIT_NOFILE %zu allows %zu slow connections, not 3000\n", soft,
                n);
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    char base[64];
    kvr_server *srv = start(&cfg, base, sizeof base);
    int port = kvr_server_port(srv);
    th_engine e;
    th_engine_start(&e);
    uint64_t local[1];
    assert_int_equal(th_index_one_block(base, &e, 5, local), BS);

    int *fds = calloc(n, sizeof *fds);
    assert_non_null(fds);
    for (size_t i = 0; i < n; i++) {
        fds[i] = sc_open(port, NULL, i % 2 ? sc_partial_body : sc_partial_headers);
        assert_true(fds[i] >= 0);
    }
    assert_true(wait_metric(base, "kvr_http_connections", (double)n) >= (double)n);
    char url[96];
    snprintf(url, sizeof url, "%s/health", base);
    const char *query = "{\"model_name\": \"m\", \"token_ids\": [1, 2, 3, 4]}";
    for (int round = 0; round < 5; round++) {
        for (size_t i = 0; i < n; i++)
            sc_trickle(fds[i]);
        char *out = NULL;
        assert_int_equal(th_http("GET", url, NULL, 0, &out), 200);
        assert_non_null(strstr(out, "\"status\""));
        free(out);
        long st = 0;
        json_t *r = th_json("POST", base, "/query", query, &st);
        assert_int_equal(st, 200);
        json_t *score = json_object_get(json_object_get(json_object_get(r, "scores"), "5"), "0");
        assert_int_equal(json_integer_value(score), BS);
        json_decref(r);
    }
    /* every slow client is still being served, none was refused */
    for (size_t i = 0; i < n; i++)
        assert_true(sc_open_now(fds[i]));
    assert_true(th_metric(base, "kvr_http_connections_refused_total{limit=\"max_connections\"}") ==
                0);
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    th_engine_stop(&e);
    kvr_server_stop(srv);
}

/* Waits until exactly one of fds[0..n) is closed by the server; its index,
 * or -1. */
static int one_closed(const int *fds, size_t n)
{
    double end = th_now() + WAIT / 1000.0;
    while (th_now() < end)
        for (size_t i = 0; i < n; i++)
            if (sc_closed_by_server(fds[i], 5))
                return (int)i;
    return -1;
}

static void test_one_connection_above_max_connections_is_closed_and_counted(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.max_connections = 8;
    char base[64];
    kvr_server *srv = start(&cfg, base, sizeof base);
    int fds[9];
    for (int i = 0; i < 9; i++)
        assert_true((fds[i] = sc_open(kvr_server_port(srv), NULL, sc_partial_body)) >= 0);
    int closed = one_closed(fds, 9);
    assert_true(closed >= 0);
    for (int i = 0; i < 9; i++)
        if (i != closed)
            assert_true(sc_open_now(fds[i]));
    for (int i = 0; i < 9; i++)
        close(fds[i]);
    /* the slots come back as the server sees the closes (each refused try of
     * the scrape counts too) */
    assert_true(wait_metric(base, "kvr_http_connections_refused_total{limit=\"max_connections\"}",
                            1) >= 1);
    assert_true(th_metric(base, "kvr_http_connections_max") == 8);
    assert_true(th_metric(base, "kvr_http_connections_peak") == 8);
    kvr_server_stop(srv);
}

static void test_per_address_limit_leaves_other_addresses_alone(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.max_connections_per_ip = 2;
    char base[64];
    kvr_server *srv = start(&cfg, base, sizeof base);
    int port = kvr_server_port(srv), a[3], b[2];
    for (int i = 0; i < 3; i++)
        assert_true((a[i] = sc_open(port, "127.0.0.1", sc_partial_headers)) >= 0);
    int closed = one_closed(a, 3);
    assert_true(closed >= 0);
    for (int i = 0; i < 2; i++) /* another address has its own two */
        assert_true((b[i] = sc_open(port, "127.0.0.2", sc_partial_headers)) >= 0);
    /* closed once only: a second close could hit a descriptor the server
     * (same process) took meanwhile, and libmicrohttpd aborts on it */
    int gone = closed == 0 ? 1 : 0;
    close(a[gone]);
    a[gone] = -1;
    /* a slot for 127.0.0.1 again (each refused try counts too) */
    assert_true(wait_metric(base,
                            "kvr_http_connections_refused_total{limit=\"max_connections_per_ip\"}",
                            1) >= 1);
    for (int i = 0; i < 2; i++)
        assert_true(sc_open_now(b[i]));
    for (int i = 0; i < 3; i++)
        if (a[i] >= 0)
            close(a[i]);
    for (int i = 0; i < 2; i++)
        close(b[i]);
    kvr_server_stop(srv);
}

static void test_a_trickled_request_and_an_idle_connection_time_out(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.connection_timeout_s = 1;
    char base[64];
    kvr_server *srv = start(&cfg, base, sizeof base);
    int port = kvr_server_port(srv);
    /* a byte every 50 ms: never idle, never complete */
    int slow = sc_open(port, NULL, sc_partial_body);
    assert_true(slow >= 0);
    double end = th_now() + 15;
    bool closed = false;
    while (!closed && th_now() < end) {
        sc_trickle(slow);
        closed = sc_closed_by_server(slow, 50);
    }
    assert_true(closed);
    close(slow);
    /* a keep-alive connection that answered one request, then idles */
    int idle = sc_open(port, NULL, "GET /health HTTP/1.1\r\nHost: kvrouter\r\n\r\n");
    assert_true(idle >= 0);
    assert_true(sc_closed_by_server(idle, 15000));
    close(idle);
    assert_true(wait_metric(base, "kvr_http_connections_timed_out_total", 2) >= 2);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_connections_leave_health_and_query_answering),
        cmocka_unit_test(test_one_connection_above_max_connections_is_closed_and_counted),
        cmocka_unit_test(test_per_address_limit_leaves_other_addresses_alone),
        cmocka_unit_test(test_a_trickled_request_and_an_idle_connection_time_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
