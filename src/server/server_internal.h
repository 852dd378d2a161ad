/* The server object shared by the HTTP core and the handlers. */
#ifndef KVR_SERVER_INTERNAL_H
#define KVR_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "kvrouter/server.h"
#include "server/api.h"
#include "server/json_util.h"
#include "server/sbuf.h"
#include "server/trim.h"

/* Share of a routed prompt cached on the chosen worker (metrics.h). */
#define KVR_CACHED_SHARE_BOUNDS 11
typedef struct {
    _Atomic uint64_t buckets[KVR_CACHED_SHARE_BOUNDS + 1]; /* non-cumulative, last = +Inf */
    _Atomic uint64_t sum_micro;     /* sum of shares x 1e6 */
    _Atomic uint64_t prompt_tokens; /* of every routed request */
    _Atomic uint64_t cached_tokens; /* of those, cached on the chosen worker */
} kvr_route_cache_stats;

/* Latency histogram buckets (seconds) of every endpoint. */
#define KVR_LAT_BUCKETS 14
extern const double kvr_lat_bounds[KVR_LAT_BUCKETS];

/* Who may call an endpoint (SPEC §12). Once a token is configured, the
 * scope (kvr_auth_scope) decides which classes need it: ADMIN always,
 * QUERY from `--auth query`, OPEN only with `--auth all`. One check of the
 * class (http.c, auth.h) runs when a request's headers are in. */
typedef enum {
    KVR_ACCESS_OPEN = 0, /* /health, /ready, /metrics, /workers, /peers: probes and scrapers */
    KVR_ACCESS_QUERY,    /* /query /query_by_hash /route /prefill_done /free: the gateway's */
    KVR_ACCESS_ADMIN     /* mutating and bulk: /register /unregister /dump /reopen_logs ... */
} kvr_access;

/* One row of the endpoint table (http.c): adding an endpoint is one row. */
typedef struct {
    const char *method;
    const char *path;
    kvr_api_fn fn;                     /* plain handler: body as a jansson tree */
    kvr_api_body_fn body_fn;           /* set: called instead of fn with the parsed body */
    const kvr_json_body_opts *opts;    /* body_fn's parse options (json_body.h) */
    kvr_access access;
    bool early; /* answers while the server waits for min_initial_workers */
} kvr_endpoint_def;

extern const kvr_endpoint_def kvr_endpoint_table[];
extern const size_t kvr_endpoint_table_len;

/* A server's counters of one table row. */
typedef struct {
    const kvr_endpoint_def *def;
    const char *method, *path; /* def's, for the metrics writer */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
    _Atomic uint64_t buckets[KVR_LAT_BUCKETS]; /* non-cumulative */
    _Atomic uint64_t status_4xx, status_5xx;
} kvr_endpoint;

/* The server's own counters, one list (field of kvr_server, /metrics
 * series, help): the struct and kvr_metrics_http expand it, so a new
 * counter is one line here and its README row. */
#define KVR_SERVER_COUNTERS(X)                                                             \
    X(requests_413, "kvr_http_body_too_large_total", "Requests refused with 413")           \
    X(requests_404, "kvr_http_not_found_total", "Requests for a path no endpoint serves")  \
    X(bodies_oom, "kvr_http_body_out_of_memory_total",                                     \
      "Request bodies (or a GET's query arguments) answered 500: no memory to parse them") \
    X(replies_oom, "kvr_http_reply_out_of_memory_total",                                   \
      "Replies whose body could not be built or queued: no memory (sent as 500 out of "    \
      "memory; an error reply keeps its status)")                                          \
    X(access_lines_lost, "kvr_http_access_log_lines_lost_total",                           \
      "Access-log lines not written: no memory to build them, or the write failed")        \
    X(peer_checks_failed, "kvr_peer_recovery_listener_checks_failed_total",                \
      "Peer-recovery checks of the held listeners' connections that had no memory to list "\
      "them (the wait goes on to its deadline)")                                           \
    X(dump_records_loaded, "kvr_dump_records_loaded_total", "Store records loaded from peers")

typedef struct kvr_sweeper kvr_sweeper;
/* sweeper.c: expires router bookings about once a second. */
kvr_sweeper *kvr_sweeper_start(kvr_server *srv);
void kvr_sweeper_stop(kvr_sweeper *sw);

struct kvr_server {
    kvr_indexer *ix;
    struct kvr_router *router;
    kvr_source *src;
    kvr_registry *registry;
    kvr_sweeper *sweeper;
    struct MHD_Daemon *mhd;
    struct kvr_conns *conns;       /* HTTP connection limits (http_conns.h) */
    struct kvr_auth *auth;         /* bearer tokens (auth.h) */
    unsigned connection_timeout_s; /* effective */
    size_t fd_reserve;             /* descriptors listeners leave to HTTP (source.h) */
    kvr_trim_state trim;           /* the housekeeping thread's (trim.h) */
    int port;
    size_t max_body;
    double started_at;
    kvr_endpoint *endpoints; /* one per kvr_endpoint_table row */
    size_t n_endpoints;
    struct kvr_access_log *access_log; /* NULL: none */
    char *trace_id_header;
    size_t min_initial_workers;
    _Atomic bool serving_all;          /* the initial-workers wait is over */
    struct {
        kvr_server_reload_fn fn;
        void *user;
    } reload_hooks[8];
    size_t n_reload_hooks;
    _Atomic uint64_t reloads[2]; /* [0] applied, [1] failed (kvr_server_count_reload) */
#define KVR_SERVER_COUNTER_(field, series, help) _Atomic uint64_t field;
    KVR_SERVER_COUNTERS(KVR_SERVER_COUNTER_)
#undef KVR_SERVER_COUNTER_
    pthread_mutex_t peers_mu; /* guards the peer list (api_peers.c) */
    char **peers;
    size_t n_peers, cap_peers;
    bool metrics_per_worker;
    kvr_route_cache_stats route_cache; /* observed by /route, written by /metrics */
    kvr_cluster *cluster;    /* NULL without --nats */
    _Atomic bool started;    /* kvr_server_start finished: /ready may say yes */
    char peer_url[512];      /* the peer recovered from ("" none), for /ready */
    long peer_records;       /* its records loaded, -1 when its dump failed */
    kvr_discovery *discovery;          /* engine discovery (api_engines.c) */
    double engine_post_wait_s;         /* POST /engines waits this long for the first poll */
};

/* server.c: true once min_initial_workers are (or were) registered. */
bool kvr_server_serving_all(kvr_server *srv);


/* cluster_link.c: the cluster layer started with the server's codec and
 * readiness (0, or -1 with err), and the peer recovery that prefers a
 * ready replica of the cluster. true when a peer's dump was loaded. */
int kvr_server_cluster_start(kvr_server *srv, const kvr_server_config *cfg, char *err,
                             size_t err_len);
bool kvr_server_recover_from_cluster(kvr_server *srv);

/* api_ready.c: whether /ready says 200; reason (when not) names what is
 * missing. */
bool kvr_server_ready(kvr_server *srv, char *reason, size_t cap);

/* http.c */
int kvr_http_start(kvr_server *srv, const char *addr, int port, unsigned threads, char *err,
                   size_t err_len);
void kvr_http_stop(kvr_server *srv);
/* Allocates srv->endpoints from the table; -1 when out of memory. */
int kvr_http_init_endpoints(kvr_server *srv);

/* api_registry.c: kvr_server_parse_registration with the handlers' error
 * type. */
bool kvr_api_parse_registration(json_t *body, const kvr_registration *defaults,
                                kvr_registration *reg, kvr_json_err *e);
/* reg as /register JSON (malloc'd; NULL when out of memory): the format
 * of the cluster's registrations bucket. */
char *kvr_api_format_registration(const kvr_registration *reg);
/* The HTTP status of a registry result (201, 200, 400, 409, 503, 500). */
int kvr_api_registry_status(kvr_registry_result r);

/* api_peers.c: the peer list recovery tries (SPEC §7.1 /register_peer). */
typedef enum {
    KVR_PEER_ADDED = 0,
    KVR_PEER_KNOWN,     /* already listed: nothing changed */
    KVR_PEER_INVALID,   /* not an http(s) URL, or too long */
    KVR_PEER_FULL,      /* KVR_MAX_PEERS listed */
    KVR_PEER_NO_MEMORY
} kvr_peer_result;
kvr_peer_result kvr_server_add_peer(kvr_server *srv, const char *url);
bool kvr_server_remove_peer(kvr_server *srv, const char *url);
/* A copy of the list, in order (free with kvr_server_free_peer_list);
 * NULL with *n 0 out of memory. */
char **kvr_server_peer_list(kvr_server *srv, size_t *n);
void kvr_server_free_peer_list(char **list, size_t n);

/* Handlers of this layer. */
void kvr_api_register_peer(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_deregister_peer(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_peers(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_register(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_unregister(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_workers(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_query_by_hash(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_dump(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_health(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_reopen_logs(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_metrics(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_ready(kvr_server *srv, json_t *body, kvr_api_reply *reply);

#endif
