/* The server object shared by the HTTP core and the handlers. */
#ifndef KVR_SERVER_INTERNAL_H
#define KVR_SERVER_INTERNAL_H

#include <stdatomic.h>

#include "kvrouter/server.h"
#include "server/api.h"

/* Latency histogram buckets (seconds) of every endpoint. */
#define KVR_LAT_BUCKETS 14
extern const double kvr_lat_bounds[KVR_LAT_BUCKETS];

typedef struct {
    const char *method;
    const char *path;
    kvr_api_fn fn;                     /* NULL (and no body_fn): not built (501) */
    kvr_api_body_fn body_fn;           /* set: called instead of fn with the parsed body */
    const kvr_json_body_opts *opts;    /* body_fn's parse options (json_body.h) */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
    _Atomic uint64_t buckets[KVR_LAT_BUCKETS]; /* non-cumulative */
    _Atomic uint64_t status_4xx, status_5xx;
} kvr_endpoint;

#define KVR_MAX_ENDPOINTS 16

typedef struct kvr_sweeper kvr_sweeper;
/* sweeper.c: expires router bookings about once a second. */
kvr_sweeper *kvr_sweeper_start(kvr_server *srv);
void kvr_sweeper_stop(kvr_sweeper *sw);

struct kvr_server {
    kvr_indexer *ix;
    struct kvr_router *router;
    kvr_source *src;
    kvr_sweeper *sweeper;
    struct MHD_Daemon *mhd;
    int port;
    size_t max_body;
    double started_at;
    kvr_endpoint endpoints[KVR_MAX_ENDPOINTS];
    size_t n_endpoints;
    _Atomic uint64_t requests_413, requests_404;
    _Atomic uint64_t dump_records_loaded;
};

/* http.c */
int kvr_http_start(kvr_server *srv, const char *addr, int port, unsigned threads, char *err,
                   size_t err_len);
void kvr_http_stop(kvr_server *srv);
void kvr_http_init_endpoints(kvr_server *srv);

/* Handlers of this layer. */
void kvr_api_register(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_unregister(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_workers(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_query_by_hash(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_dump(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_health(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_metrics(kvr_server *srv, json_t *body, kvr_api_reply *reply);

/* Growable text buffer for non-JSON replies. */
typedef struct {
    char *data;
    size_t len, cap;
    bool failed;
} kvr_sbuf;
void kvr_sbuf_printf(kvr_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kvr_sbuf_append(kvr_sbuf *b, const char *s, size_t n);
/* Appends s as a JSON string literal (quoted, escaped). */
void kvr_sbuf_json_str(kvr_sbuf *b, const char *s);

#endif
