/* HTTP core: libmicrohttpd daemon (epoll, a thread pool, the connection
 * limits and deadlines of http_conns.h), authentication before a body is
 * read (auth.h), body accumulation with a size limit, the endpoint table
 * (method + path -> handler, with its access class), JSON replies, latency
 * histograms per endpoint. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "kvrouter/log.h"
#include "server/access_log.h"
#include "server/api_engines.h"
#include "server/auth.h"
#include "server/http_conns.h"
#include "server/json_body.h"
#include "server/server_internal.h"
#include "util/clock.h"
#include "util/grow.h"
#include "util/json_text.h"

/* Route-layer handlers (/query, /route, /prefill_done, /free) live in
 * api_route.c; an endpoint with no handler answers 501. */

/* libmicrohttpd's memory per connection (headers, its read buffer, the
 * reply's headers). It zeroes the whole pool after every request of a
 * keep-alive connection, so this is a per-request cost: 256 KiB was 14 % of
 * a 64-worker /route's CPU (perf). Bodies do not need to fit: on_request
 * copies each piece as it arrives. 32 KiB is libmicrohttpd's default. */
#define KVR_HTTP_CONN_MEMORY (32u * 1024)

const double kvr_lat_bounds[KVR_LAT_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                 0.005,  0.01,    0.025,  0.05,  0.1,
                                                 0.25,   0.5,     1.0,    5.0};

typedef struct {
    char *buf;
    size_t len, cap;
    size_t received; /* body bytes, kept ones or not */
    bool too_large;
    double t_wall, t_mono; /* arrival, for the access log */
    kvr_endpoint *ep;      /* the row of (method, path); NULL: none */
    bool path_known;       /* some row has the path */
    kvr_endpoint *timed;   /* the row whose histogram takes the reply; NULL: none */
    double handler_s;      /* its handler's time */
} req_ctx;

void kvr_api_error(kvr_api_reply *reply, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    reply->status = status;
    json_decref(reply->body);
    reply->body = json_pack("{s:s}", "error", msg);
}

/* The one place body text becomes JSON: true with out holding a JSON
 * object (free with kvr_json_body_free), else false with a 400 reply (500
 * and counted when there was no memory to parse it). */
static bool parse_body(kvr_server *srv, const char *buf, size_t len,
                       const kvr_json_body_opts *opts, kvr_json_body *out, kvr_api_reply *reply)
{
    json_error_t jerr;
    int rc = kvr_json_body_parse(buf ? buf : "", buf ? len : 0, JSON_REJECT_DUPLICATES, opts, out,
                                 &jerr);
    if (rc == KVR_JSON_BODY_NOMEM) {
        atomic_fetch_add(&srv->bodies_oom, 1);
        kvr_api_error(reply, 500, "out of memory");
        return false;
    }
    if (rc < 0) {
        kvr_api_error(reply, 400, "malformed JSON body: %s (line %d, column %d)", jerr.text,
                      jerr.line, jerr.column);
        return false;
    }
    if (!json_is_object(out->root)) {
        kvr_json_body_free(out);
        kvr_api_error(reply, 400, "request body must be a JSON object");
        return false;
    }
    return true;
}

/* Every endpoint, one row each. Rows without a handler answer 501. */
const kvr_endpoint_def kvr_endpoint_table[] = {
    /* method, path, handler, body handler, body options, access, answers early */
    {"POST", "/register", kvr_api_register, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"POST", "/unregister", kvr_api_unregister, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"GET", "/workers", kvr_api_workers, NULL, NULL, KVR_ACCESS_OPEN, true},
    {"POST", "/query", NULL, kvr_api_query, &kvr_api_route_body_opts, KVR_ACCESS_QUERY, false},
    {"POST", "/query_by_hash", kvr_api_query_by_hash, NULL, NULL, KVR_ACCESS_QUERY, false},
    {"POST", "/route", NULL, kvr_api_route, &kvr_api_route_body_opts, KVR_ACCESS_QUERY, false},
    {"POST", "/prefill_done", kvr_api_prefill_done, NULL, NULL, KVR_ACCESS_QUERY, false},
    {"POST", "/free", kvr_api_free, NULL, NULL, KVR_ACCESS_QUERY, false},
    {"GET", "/dump", kvr_api_dump, NULL, NULL, KVR_ACCESS_ADMIN, false},
    {"GET", "/health", kvr_api_health, NULL, NULL, KVR_ACCESS_OPEN, true},
    {"GET", "/ready", kvr_api_ready, NULL, NULL, KVR_ACCESS_OPEN, true},
    {"GET", "/metrics", kvr_api_metrics, NULL, NULL, KVR_ACCESS_OPEN, true},
    {"POST", "/reopen_logs", kvr_api_reopen_logs, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"GET", "/engines", kvr_api_engines_get, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"POST", "/engines", kvr_api_engines_post, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"DELETE", "/engines", kvr_api_engines_delete, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"POST", "/register_peer", kvr_api_register_peer, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"POST", "/deregister_peer", kvr_api_deregister_peer, NULL, NULL, KVR_ACCESS_ADMIN, true},
    {"GET", "/peers", kvr_api_peers, NULL, NULL, KVR_ACCESS_OPEN, true},
};
const size_t kvr_endpoint_table_len = sizeof kvr_endpoint_table / sizeof kvr_endpoint_table[0];

int kvr_http_init_endpoints(kvr_server *srv)
{
    srv->endpoints = calloc(kvr_endpoint_table_len, sizeof *srv->endpoints);
    if (!srv->endpoints)
        return -1;
    for (size_t i = 0; i < kvr_endpoint_table_len; i++) {
        srv->endpoints[i].def = &kvr_endpoint_table[i];
        srv->endpoints[i].method = kvr_endpoint_table[i].method;
        srv->endpoints[i].path = kvr_endpoint_table[i].path;
    }
    srv->n_endpoints = kvr_endpoint_table_len;
    return 0;
}

static void observe(kvr_endpoint *e, double secs, int status)
{
    atomic_fetch_add_explicit(&e->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->sum_us, (uint64_t)(secs * 1e6), memory_order_relaxed);
    size_t b = 0;
    while (b < KVR_LAT_BUCKETS && secs > kvr_lat_bounds[b])
        b++;
    if (b < KVR_LAT_BUCKETS)
        atomic_fetch_add_explicit(&e->buckets[b], 1, memory_order_relaxed);
    if (status >= 400 && status < 500)
        atomic_fetch_add_explicit(&e->status_4xx, 1, memory_order_relaxed);
    else if (status >= 500)
        atomic_fetch_add_explicit(&e->status_5xx, 1, memory_order_relaxed);
}

static const char oom_body[] = "{\"error\":\"out of memory\"}";

/* The reply when the handler's could not be built or queued (its JSON
 * body is NULL: json_pack or json_dumps out of memory): 500 {"error": "out
 * of memory"}, counted; an error reply keeps its status, the body says why
 * its message is missing. Static text: only libmicrohttpd's response is
 * allocated; when even that fails the connection is cut, still recorded as
 * the 500 it was. */
static enum MHD_Result send_oom(kvr_server *srv, struct MHD_Connection *conn,
                                kvr_api_reply *reply, size_t *bytes)
{
    atomic_fetch_add(&srv->replies_oom, 1);
    if (reply->status < 400)
        reply->status = 500;
    *bytes = 0;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        sizeof oom_body - 1, (void *)oom_body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    *bytes = sizeof oom_body - 1;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (reply->www_authenticate)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, reply->www_authenticate);
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)reply->status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* A streamed reply: the handler's reader behind libmicrohttpd's, which
 * calls it only when the socket can take more, so a slow client costs the
 * stream's own state, never a whole body. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    kvr_api_stream *s = cls;
    long n = s->read(s->user, buf, max);
    return n > 0 ? (ssize_t)n : n == -1 ? MHD_CONTENT_READER_END_OF_STREAM
                                        : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls)
{
    kvr_api_stream *s = cls;
    if (s->done)
        s->done(s->user);
    free(s);
}

#define KVR_STREAM_BLOCK (64 * 1024)

/* Out of memory before the stream's headers are queued, the client gets
 * send_oom's 500 (the status observe() and the access log take). */
static enum MHD_Result send_stream(kvr_server *srv, struct MHD_Connection *conn,
                                   kvr_api_reply *reply, size_t *bytes)
{
    kvr_api_stream *s = malloc(sizeof *s);
    if (!s) {
        reply->stream.done(reply->stream.user);
        reply->stream.read = NULL;
        return send_oom(srv, conn, reply, bytes);
    }
    *s = reply->stream;
    reply->stream.read = NULL; /* the response owns it now */
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, KVR_STREAM_BLOCK, stream_read, s, stream_free);
    if (!resp) {
        stream_free(s);
        return send_oom(srv, conn, reply, bytes);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            reply->content_type ? reply->content_type : "application/json");
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)reply->status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* Queues the reply; *bytes gets the body length (0 for a stream: unknown
 * when it starts). reply->status ends as the status queued. */
static enum MHD_Result send_reply(kvr_server *srv, struct MHD_Connection *conn,
                                  kvr_api_reply *reply, size_t *bytes)
{
    *bytes = 0;
    if (reply->stream.read)
        return send_stream(srv, conn, reply, bytes);
    char *text = reply->text;
    const char *ctype = reply->content_type;
    if (!text && reply->body) {
        text = kvr_json_dumps(reply->body, JSON_COMPACT);
        ctype = "application/json";
    }
    reply->text = NULL;
    if (!text)
        return send_oom(srv, conn, reply, bytes);
    *bytes = strlen(text);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(*bytes, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return send_oom(srv, conn, reply, bytes);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            ctype ? ctype : "application/json");
    if (reply->www_authenticate)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, reply->www_authenticate);
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)reply->status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* A GET's query arguments as a flat object of strings. */
typedef struct {
    json_t *args;
    const char *bad; /* set: the argument that is not UTF-8 */
    bool bad_name;   /* its name is the part that is not (then not quoted back) */
    bool nomem;
} arg_collect;

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    arg_collect *a = cls;
    value = value ? value : "";
    bool name_ok = kvr_utf8_valid(key);
    if (!name_ok || !kvr_utf8_valid(value)) {
        a->bad = key;
        a->bad_name = !name_ok;
        return MHD_NO;
    }
    if (json_object_set_new(a->args, key, json_string(value)) != 0) {
        a->nomem = true;
        return MHD_NO;
    }
    return MHD_YES;
}

/* The query arguments of conn, or NULL with reply set: an argument jansson
 * cannot hold (not UTF-8) is a 400 rather than one left out, and no memory
 * for them a 500 counted as a body without memory is. */
static json_t *query_args(kvr_server *srv, struct MHD_Connection *conn, kvr_api_reply *reply)
{
    arg_collect a = {json_object(), NULL, false, false};
    a.nomem = a.args == NULL;
    if (a.args)
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_arg, &a);
    if (a.bad && a.bad_name) {
        kvr_api_error(reply, 400, "query argument is not valid UTF-8");
    } else if (a.bad) {
        kvr_api_error(reply, 400, "query argument '%s' is not valid UTF-8", a.bad);
    } else if (a.nomem) {
        atomic_fetch_add(&srv->bodies_oom, 1);
        kvr_api_error(reply, 500, "out of memory");
    } else {
        return a.args;
    }
    json_decref(a.args);
    return NULL;
}

/* The row of (method, url); *path_known says whether any row has the path
 * (405 rather than 404). */
static kvr_endpoint *find_endpoint(kvr_server *srv, const char *url, const char *method,
                                   bool *path_known)
{
    kvr_endpoint *match = NULL;
    *path_known = false;
    for (size_t i = 0; i < srv->n_endpoints; i++) {
        if (strcmp(srv->endpoints[i].path, url) != 0)
            continue;
        *path_known = true;
        if (strcmp(srv->endpoints[i].method, method) == 0)
            match = &srv->endpoints[i];
    }
    return match;
}

/* "a.b.c.d:port" of the client, "" when unknown. */
static void remote_of(struct MHD_Connection *conn, char *buf, size_t cap)
{
    buf[0] = 0;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr || ci->client_addr->sa_family != AF_INET)
        return;
    const struct sockaddr_in *sa = (const struct sockaddr_in *)ci->client_addr;
    char ip[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof ip))
        snprintf(buf, cap, "%s:%u", ip, (unsigned)ntohs(sa->sin_port));
}

/* Authentication (SPEC §12), once the headers are in and before any body
 * is read: true when the endpoint's access class needs no token or the
 * right one came; else reply is the 401 with its challenge. */
static bool authorized(kvr_server *srv, struct MHD_Connection *conn, const kvr_endpoint *e,
                       kvr_api_reply *reply)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    kvr_auth_result r = kvr_auth_check(srv->auth, e->def->access, h);
    if (r == KVR_AUTH_OK)
        return true;
    char remote[64];
    remote_of(conn, remote, sizeof remote);
    KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "401 %s %s from %s: %s bearer token", e->method,
                    e->path, remote[0] ? remote : "?",
                    r == KVR_AUTH_MISSING ? "no" : "a wrong");
    kvr_api_error(reply, 401, "%s %s needs authentication: %s (send 'Authorization: Bearer "
                  "<token>', the token of --auth-token-file)", e->method, e->path,
                  r == KVR_AUTH_MISSING ? "no bearer token" : "the bearer token is not valid");
    reply->www_authenticate = r == KVR_AUTH_MISSING
                                  ? "Bearer realm=\"kvrouter\""
                                  : "Bearer realm=\"kvrouter\", error=\"invalid_token\"";
    return false;
}

static void dispatch(kvr_server *srv, struct MHD_Connection *conn, const char *url,
                     const char *method, req_ctx *rc, kvr_api_reply *reply)
{
    kvr_endpoint *match = rc->ep;
    if (!rc->path_known) {
        atomic_fetch_add(&srv->requests_404, 1);
        kvr_api_error(reply, 404, "no endpoint %s", url);
        return;
    }
    if (!match) {
        kvr_api_error(reply, 405, "method %s not allowed on %s", method, url);
        return;
    }
    /* Authentication (SPEC §12) passed already: on_request checks def->access
     * when the headers arrive, so an unauthenticated body is never read. */
    const kvr_endpoint_def *def = match->def;
    if (!def->early && !kvr_server_serving_all(srv)) {
        kvr_api_error(reply, 503,
                      "waiting for %zu initial workers (%zu registered; min_initial_workers, "
                      "DYN_ROUTER_MIN_INITIAL_WORKERS)",
                      srv->min_initial_workers, kvr_registry_workers(srv->registry));
        rc->timed = match;
        return;
    }
    double t0 = kvr_source_now();
    if (rc->too_large) {
        atomic_fetch_add(&srv->requests_413, 1);
        kvr_api_error(reply, 413, "request body larger than the limit of %zu bytes",
                      srv->max_body);
    } else if (!def->fn && !def->body_fn) {
        kvr_api_error(reply, 501, "%s is not built into this server", url);
    } else if (def->body_fn) {
        kvr_json_body jb;
        if (parse_body(srv, rc->buf, rc->len, def->opts, &jb, reply)) {
            reply->status = 200;
            def->body_fn(srv, &jb, reply);
            kvr_json_body_free(&jb);
        }
    } else {
        json_t *body = NULL;
        bool with_body = strcmp(method, "POST") == 0 ||
                         (strcmp(method, "DELETE") == 0 && rc->received > 0);
        if (with_body && rc->received == 0) {
            body = json_object(); /* `curl -X POST` without -d: an empty object */
        } else if (with_body) {
            kvr_json_body jb;
            if (parse_body(srv, rc->buf, rc->len, NULL, &jb, reply))
                body = jb.root; /* a plain tree holds nothing else */
        } else {
            /* GET handlers (and DELETE without a body) take their query
             * arguments as a flat object. */
            body = query_args(srv, conn, reply);
        }
        if (body) {
            reply->status = 200;
            def->fn(srv, body, reply);
            json_decref(body);
        }
    }
    rc->timed = match;
    rc->handler_s = kvr_source_now() - t0;
}


static void log_access(kvr_server *srv, struct MHD_Connection *conn, const char *url,
                       const char *method, const req_ctx *rc, int status, size_t bytes)
{
    char remote[64];
    remote_of(conn, remote, sizeof remote);
    kvr_access_record rec = {
        .time = rc->t_wall,
        .method = method,
        .path = url,
        .status = status,
        .duration_s = kvr_clock_mono() - rc->t_mono,
        .bytes_in = rc->received,
        .bytes_out = bytes,
        .remote = remote,
        .trace_id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, srv->trace_id_header),
    };
    if (kvr_access_log_write(srv->access_log, &rec) != 0)
        atomic_fetch_add(&srv->access_lines_lost, 1);
}

/* Queues the reply, counts it in its endpoint's histogram (rc->timed) and
 * access-log line with the status queued, and frees it. */
static enum MHD_Result respond(kvr_server *srv, struct MHD_Connection *conn, const char *url,
                               const char *method, const req_ctx *rc, kvr_api_reply *reply)
{
    kvr_conns_replying(srv->conns, conn);
    size_t bytes = 0;
    enum MHD_Result r = send_reply(srv, conn, reply, &bytes);
    if (rc->timed)
        observe(rc->timed, rc->handler_s, reply->status);
    if (srv->access_log)
        log_access(srv, conn, url, method, rc, reply->status, bytes);
    json_decref(reply->body);
    free(reply->text);
    if (reply->stream.read && reply->stream.done)
        reply->stream.done(reply->stream.user); /* never queued */
    return r;
}

/* The first call of a request (its headers are in): its context, and the
 * 401 when it is not authorized, answered before any body is read (the
 * connection then closes, since the body is not read). */
static enum MHD_Result on_headers(kvr_server *srv, struct MHD_Connection *conn,
                                  const char *url, const char *method, void **con_cls)
{
    req_ctx *rc = calloc(1, sizeof *rc);
    if (!rc)
        return MHD_NO;
    rc->t_wall = kvr_clock_wall();
    rc->t_mono = kvr_clock_mono();
    *con_cls = rc;
    rc->ep = find_endpoint(srv, url, method, &rc->path_known);
    kvr_api_reply reply = {0};
    if (rc->ep && !authorized(srv, conn, rc->ep, &reply)) {
        rc->timed = rc->ep;
        return respond(srv, conn, url, method, rc, &reply);
    }
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > srv->max_body)
        rc->too_large = true;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    kvr_server *srv = cls;
    req_ctx *rc = *con_cls;
    if (!rc)
        return on_headers(srv, conn, url, method, con_cls);
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        rc->received += n;
        if (rc->too_large || rc->len + n > srv->max_body) {
            /* Keep reading (and discarding) so the client gets the 413. */
            rc->too_large = true;
            free(rc->buf);
            rc->buf = NULL;
            rc->len = rc->cap = 0;
            return MHD_YES;
        }
        if (kvr_grow((void **)&rc->buf, &rc->cap, rc->len + n, 1, 4096) != 0)
            return MHD_NO;
        memcpy(rc->buf + rc->len, upload_data, n);
        rc->len += n;
        return MHD_YES;
    }
    kvr_api_reply reply = {0};
    dispatch(srv, conn, url, method, rc, &reply);
    return respond(srv, conn, url, method, rc, &reply);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    kvr_server *srv = cls;
    kvr_conns_reply_done(srv->conns, conn, toe);
    req_ctx *rc = *con_cls;
    if (rc) {
        free(rc->buf);
        free(rc);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's own messages, through the log sink and rate-limited (a
 * client can make it repeat them). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = 0;
    KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "libmicrohttpd: %s", msg);
}

int kvr_http_start(kvr_server *srv, const char *addr, int port, unsigned threads, char *err,
                   size_t err_len)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        snprintf(err, err_len, "listen address '%s' is not an IPv4 address", addr);
        return -1;
    }
    threads = threads ? threads : 2;
    /* The limits are http_conns.c's: libmicrohttpd's own connection limit
     * (split between the pool's threads, each of which stops accepting at its
     * share and leaves clients waiting in the backlog) sits above ours, which
     * closes one too many at once. Its inactivity timeout sits above the
     * request deadline of the sweep, so the sweep is what closes a connection
     * waiting for a request (and counts it); libmicrohttpd's covers replies. */
    size_t mhd_limit = kvr_conns_max(srv->conns) + 4 * (size_t)threads + 16;
    unsigned mhd_timeout = srv->connection_timeout_s + 2;
    srv->mhd = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, kvr_conns_accept,
        srv->conns, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, kvr_conns_notify, srv->conns,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        mhd_timeout, MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)KVR_HTTP_CONN_MEMORY, MHD_OPTION_END);
    if (!srv->mhd) {
        snprintf(err, err_len, "cannot listen on %s:%d", addr, port);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : port;
    return 0;
}

void kvr_http_stop(kvr_server *srv)
{
    if (srv->mhd) {
        MHD_stop_daemon(srv->mhd);
        srv->mhd = NULL;
    }
}
