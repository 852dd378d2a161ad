/* Engine doubles for the discovery tests: a real HTTP server
 * (libmicrohttpd) answering an engine's discovery endpoints from a table a
 * test changes while it runs (a restart with other settings, an outage, a
 * bad answer), real ZeroMQ XPUB publishers bound on consecutive ports (rank
 * r on base + r, as SGLang binds them), and the fixtures of
 * fixtures/discovery/ rewritten to those ports. Header-only, like
 * net_helpers.h, for tests/server and tests/cli. */
#ifndef KVR_TEST_MOCK_ENGINE_HTTP_H
#define KVR_TEST_MOCK_ENGINE_HTTP_H

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include "net_helpers.h"

/* ---------------------------------------------------------------- HTTP */

#define MH_ROUTES 8

typedef struct {
    char path[64];
    int status;
    char *body;
    int delay_ms; /* answer this late (a slow engine) */
} mh_route;

typedef struct {
    struct MHD_Daemon *d;
    int port;
    char url[64];
    pthread_mutex_t mu;
    mh_route routes[MH_ROUTES];
    size_t n;
    _Atomic int hits;
} mock_http;

static enum MHD_Result mh_answer(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *up,
                                 size_t *up_size, void **con_cls)
{
    (void)method;
    (void)version;
    (void)up;
    (void)up_size;
    (void)con_cls;
    mock_http *m = cls;
    atomic_fetch_add(&m->hits, 1);
    int status = 404, delay_ms = 0;
    char *body = NULL;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->routes[i].path, url) == 0) {
            status = m->routes[i].status;
            delay_ms = m->routes[i].delay_ms;
            body = strdup(m->routes[i].body ? m->routes[i].body : "");
        }
    pthread_mutex_unlock(&m->mu);
    if (delay_ms)
        th_sleep_ms(delay_ms); /* a thread per connection: only this one waits */
    if (!body)
        body = strdup("{\"detail\": \"Not Found\"}");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

/* port 0: any free port; else that one (an engine restarting in place). */
static inline void mock_http_start_on(mock_http *m, int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION,
                            (uint16_t)port, NULL, NULL, mh_answer,
                            m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_END);
    assert_non_null(m->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info->port;
    snprintf(m->url, sizeof m->url, "http://127.0.0.1:%d", m->port);
}

static inline void mock_http_start(mock_http *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    mock_http_start_on(m, 0);
}

/* Answers again on the same port after mock_http_pause. */
static inline void mock_http_resume(mock_http *m) { mock_http_start_on(m, m->port); }

/* Stops answering (connections are refused) but keeps the routes. */
static inline void mock_http_pause(mock_http *m)
{
    if (m->d)
        MHD_stop_daemon(m->d);
    m->d = NULL;
}

/* Sets path's answer (body copied; NULL body: remove the route -> 404),
 * given after delay_ms. */
static inline void mock_http_set_slow(mock_http *m, const char *path, int status,
                                      const char *body, int delay_ms)
{
    pthread_mutex_lock(&m->mu);
    size_t i = 0;
    while (i < m->n && strcmp(m->routes[i].path, path) != 0)
        i++;
    if (i == m->n) {
        assert_true(m->n < MH_ROUTES);
        m->n++;
        snprintf(m->routes[i].path, sizeof m->routes[i].path, "%s", path);
    }
    free(m->routes[i].body);
    m->routes[i].body = body ? strdup(body) : NULL;
    m->routes[i].status = body ? status : 404;
    m->routes[i].delay_ms = delay_ms;
    pthread_mutex_unlock(&m->mu);
}

static inline void mock_http_set(mock_http *m, const char *path, int status, const char *body)
{
    mock_http_set_slow(m, path, status, body, 0);
}

static inline void mock_http_stop(mock_http *m)
{
    mock_http_pause(m);
    for (size_t i = 0; i < m->n; i++)
        free(m->routes[i].body);
    pthread_mutex_destroy(&m->mu);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- ZeroMQ */

#define MP_MAX 4

typedef struct {
    void *ctx;
    void *pub[MP_MAX];
    int n;
    int base;
    uint64_t seq[MP_MAX];
} mock_pubs;

/* n XPUBs on 127.0.0.1:base..base+n-1, base chosen at random until all bind. */
static inline void mock_pubs_start(mock_pubs *p, int n)
{
    memset(p, 0, sizeof *p);
    p->ctx = zmq_ctx_new();
    p->n = n;
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int attempt = 0; attempt < 200; attempt++) {
        int base = 20000 + (int)(rand_r(&seed) % 30000);
        int ok = 0;
        for (int i = 0; i < n; i++) {
            p->pub[i] = zmq_socket(p->ctx, ZMQ_XPUB);
            int zero = 0;
            zmq_setsockopt(p->pub[i], ZMQ_LINGER, &zero, sizeof zero);
            char ep[64];
            snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", base + i);
            if (zmq_bind(p->pub[i], ep) != 0)
                break;
            ok++;
        }
        if (ok == n) {
            p->base = base;
            return;
        }
        for (int i = 0; i <= ok && i < n; i++)
            zmq_close(p->pub[i]);
    }
    fail_msg("no %d consecutive free ports", n);
}

static inline bool mock_pubs_wait_sub(mock_pubs *p, int i, int timeout_ms)
{
    zmq_pollitem_t it = {.socket = p->pub[i], .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return false;
    char buf[256];
    int n = zmq_recv(p->pub[i], buf, sizeof buf, 0);
    return n >= 1 && buf[0] == 1;
}

/* One batch of events on rank i (its next sequence number). */
static inline void mock_pubs_send(mock_pubs *p, int i, kvr_wire_style style,
                                  const kvr_raw_event *evs, size_t n)
{
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    assert_true(kvr_wire_encode_batch(&w, style, 1.0, evs, n, true, (uint32_t)i));
    zmq_send(p->pub[i], "", 0, ZMQ_SNDMORE);
    th_send_seq(p->pub[i], p->seq[i]++, ZMQ_SNDMORE);
    zmq_send(p->pub[i], w.data, w.len, 0);
    kvr_wbuf_free(&w);
}

static inline void mock_pubs_stop(mock_pubs *p)
{
    for (int i = 0; i < p->n; i++)
        zmq_close(p->pub[i]);
    zmq_ctx_term(p->ctx);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- fixtures */

/* A fixture of fixtures/discovery/ as JSON text (malloc'd). */
static inline char *mock_fixture_text(const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "fixtures/discovery/%s", file);
    size_t len;
    char *t = kvr_test_read_file(kvr_test_path(rel), &len);
    assert_non_null(t);
    return t;
}

/* An SGLang /server_info fixture with its publisher moved to base (dp
 * ranks base..), its replay endpoint to replay_base (0: none), endpoint_host
 * `host` ("*" is SGLang's default) and, when spec is set, its
 * speculative_algorithm. Returns JSON text (malloc'd). */
static inline char *mock_sglang_info(const char *file, const char *host, int base, int dp,
                                     int replay_base, const char *spec)
{
    char rel[256];
    snprintf(rel, sizeof rel, "fixtures/discovery/%s", file);
    json_t *j = kvr_test_load_json(rel);
    json_t *kv = json_object_get(j, "kv_events");
    if (json_is_object(kv)) {
        json_object_set_new(kv, "endpoint_host", json_string(host));
        json_object_set_new(kv, "endpoint_port_base", json_integer(base));
        json_object_set_new(kv, "dp_size", json_integer(dp));
    }
    json_object_set_new(j, "dp_size", json_integer(dp));
    if (spec)
        json_object_set_new(j, "speculative_algorithm", json_string(spec));
    const char *cfg = json_string_value(json_object_get(j, "kv_events_config"));
    if (cfg) {
        json_t *c = json_loads(cfg, 0, NULL);
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://%s:%d", host, base);
        json_object_set_new(c, "endpoint", json_string(ep));
        if (replay_base) {
            snprintf(ep, sizeof ep, "tcp://%s:%d", host, replay_base);
            json_object_set_new(c, "replay_endpoint", json_string(ep));
        } else {
            json_object_del(c, "replay_endpoint");
        }
        char *ct = json_dumps(c, JSON_COMPACT);
        json_object_set_new(j, "kv_events_config", json_string(ct));
        free(ct);
        json_decref(c);
    }
    char *text = json_dumps(j, JSON_INDENT(1));
    json_decref(j);
    return text;
}

/* An SGLang engine double: /server_info from an info fixture moved to p's
 * ports (host "*", replay on base + 100), /model_info from a fixture. */
static inline void mock_sglang_engine(mock_http *m, const mock_pubs *p, const char *info,
                                      const char *model_info, int dp, const char *spec)
{
    mock_http_start(m);
    char *si = mock_sglang_info(info, "*", p->base, dp, p->base + 100, spec);
    char *mi = mock_fixture_text(model_info);
    mock_http_set(m, "/server_info", 200, si);
    mock_http_set(m, "/model_info", 200, mi);
    free(si);
    free(mi);
}

#endif
