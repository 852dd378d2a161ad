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

#include <dirent.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

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

/* The process's eventfds (each ZeroMQ socket's mailbox) and its sockets
 * connected to 127.0.0.1:port. */
static void count_fds(int port, int *eventfds, int *to_port)
{
    *eventfds = *to_port = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        char path[300], link[128] = "";
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(d) || readlink(path, link, sizeof link - 1) < 0)
            continue;
        if (strcmp(link, "anon_inode:[eventfd]") == 0)
            (*eventfds)++;
        struct sockaddr_in peer;
        socklen_t len = sizeof peer;
        if (strncmp(link, "socket:", 7) == 0 &&
            getpeername(fd, (struct sockaddr *)&peer, &len) == 0 && peer.sin_family == AF_INET &&
            ntohs(peer.sin_port) == port)
            (*to_port)++;
    }
    closedir(d);
}

/* Rank 0's listener_state of the only worker. */
static bool listener_is(const char *base, const char *state)
{
    json_t *w = th_json("GET", base, "/workers", NULL, NULL);
    const char *st = json_string_value(json_object_get(
        json_object_get(json_object_get(json_array_get(w, 0), "ranks"), "0"), "listener_state"));
    bool is = st && strcmp(st, state) == 0;
    json_decref(w);
    return is;
}

/* kvr_listener_descriptors moves by what a replay really opens: the
 * DEALER, its monitor pair (an eventfd each, as for the SUB) and its
 * connection, 4 in all (KVR_LISTENER_FDS counts them so); it read 2, the
 * count from before the replay DEALER had a monitor. The replay endpoint
 * is an engine double's that never answers, so the replay stays open. */
static void test_listener_descriptors_count_what_a_replay_opens(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.source.replay_timeout_ms = 600000;
    char base[64];
    kvr_server *srv = th_server_start(&cfg, base, sizeof base);
    assert_non_null(srv);
    th_engine e;
    th_engine_start(&e);
    th_engine_set_mute(&e, true);
    int port = atoi(strrchr(e.replay_endpoint, ':') + 1);
    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\": 5, \"endpoint\": \"%s\", \"replay_endpoint\": \"%s\", "
             "\"model_name\": \"m\", \"block_size\": 4}",
             e.endpoint, e.replay_endpoint);
    assert_int_equal(th_register(base, body, NULL), 201);
    assert_true(th_engine_wait_sub(&e, 20000));
    /* the SUB connected (its descriptor counted), nothing published yet;
     * and the connection the registration's endpoint check made to the
     * replay port (kvr_source_endpoint_valid: a DEALER connected, then
     * closed at once) is gone: ZeroMQ's I/O thread closes it a moment
     * later, long enough under TSan to be counted as the replay's own. */
    int ev0 = 0, to0 = 0;
    double g0 = -1, end = th_now() + 20;
    do {
        th_sleep_ms(50);
        g0 = th_metric(base, "kvr_listener_descriptors");
        count_fds(port, &ev0, &to0);
    } while ((g0 != 4 || to0 != 0) && th_now() < end);
    assert_true(g0 == 4);
    assert_int_equal(to0, 0);

    /* a first message past 0: a replay from 0, which gets no answer */
    uint64_t hashes[1] = {1}, tokens[4] = {1, 2, 3, 4};
    kvr_raw_event ev = th_store(hashes, 1, 0, tokens, 4);
    th_send_events(&e, 3, &ev, 1, true);
    int ev1 = 0, to1 = 0;
    end = th_now() + 20;
    do {
        th_sleep_ms(50);
        count_fds(port, &ev1, &to1);
    } while ((to1 < 1 || ev1 < ev0 + 3 || !listener_is(base, "replaying")) && th_now() < end);
    assert_true(listener_is(base, "replaying"));
    double g1 = th_metric(base, "kvr_listener_descriptors");
    fprintf(stderr, "replay opened %d eventfds and %d connection; the gauge moved %.0f\n",
            ev1 - ev0, to1 - to0, g1 - g0);
    assert_int_equal(to1 - to0, 1);
    assert_int_equal(ev1 - ev0, 3);
    assert_true(g1 - g0 == (ev1 - ev0) + (to1 - to0));
    kvr_server_stop(srv);
    th_engine_stop(&e);
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
        /* first: the next one lowers RLIMIT_NOFILE for good */
        cmocka_unit_test(test_listener_descriptors_count_what_a_replay_opens),
        cmocka_unit_test(test_out_of_descriptors_is_a_503_and_http_keeps_accepting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
