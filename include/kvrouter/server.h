/* The kvrouter service (SPEC §7): HTTP API over libmicrohttpd, the worker
 * registry, ZeroMQ sources, peer recovery from /dump. `kvrouter serve` is a
 * thin CLI around this; tests start it in-process. */
#ifndef KVROUTER_SERVER_H
#define KVROUTER_SERVER_H

#include "kvrouter/cluster.h"
#include "kvrouter/discovery.h"
#include "kvrouter/registry.h"
#include "kvrouter/route.h"
#include "kvrouter/source.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_server kvr_server;

#define KVR_DEFAULT_LISTEN_ADDR "127.0.0.1"
#define KVR_DEFAULT_PORT 8090
#define KVR_DEFAULT_MAX_BODY (8u << 20)
#define KVR_DEFAULT_MAX_CONNECTIONS 10000
#define KVR_DEFAULT_CONNECTION_TIMEOUT_S 30

/* Which endpoints need the bearer token once auth_token_file is set (SPEC
 * §12). Whatever the scope, an endpoint the scope leaves open answers
 * without a token, and a configured token is required from any address. */
typedef enum {
    KVR_AUTH_SCOPE_ADMIN = 0, /* the mutating and bulk endpoints: /register, /unregister,
                                 /engines, /register_peer, /deregister_peer, /dump,
                                 /reopen_logs (the default) */
    KVR_AUTH_SCOPE_QUERY,     /* those, and /query, /query_by_hash, /route, /prefill_done,
                                 /free; /health, /ready, /metrics, /workers, /peers open */
    KVR_AUTH_SCOPE_ALL        /* every endpoint */
} kvr_auth_scope;

typedef struct {
    const char *listen_addr;   /* NULL -> 127.0.0.1 */
    int port;                  /* 0 -> ephemeral (see kvr_server_port); -1 -> 8090 */
    size_t max_body;           /* 0 -> 8 MiB; larger bodies get 413 */
    unsigned http_threads;     /* 0 -> 2 */
    /* HTTP connections open at once (0 -> 10000); one more is closed as it
     * is accepted and counted. Lowered at start to half the descriptor limit
     * (RLIMIT_NOFILE) when it does not fit, so listeners keep the rest. */
    size_t max_connections;
    size_t max_connections_per_ip; /* the same per client address; 0: none */
    /* A connection is closed when a request has not arrived in full this
     * many seconds after the connection opened or its previous reply went
     * out (an idle keep-alive connection too), or when a reply makes no
     * progress for as long. 0 -> 30. */
    unsigned connection_timeout_s;
    /* Bearer-token authentication (SPEC §12): the file holding the token
     * (its trailing newline is not part of it); NULL: none. auth_scope (a
     * kvr_auth_scope) says which endpoints need it. Both are read again by
     * kvr_server_reload; a file that cannot be read then keeps the token in
     * use. */
    const char *auth_token_file;
    int auth_scope;
    /* The token sent to peers (--peers /dump fetches) as "Authorization:
     * Bearer"; NULL: auth_token_file's, if any. */
    const char *peer_token_file;
    /* Peers tried in order for recovery before HTTP starts, the first one
     * that answers wins (kvr_server_recover_from_peer); they seed GET /peers. */
    const char *const *peers;
    size_t n_peers;
    kvr_source_config source;  /* zeros -> defaults */
    kvr_router_config router;  /* filled by kvr_server_config_default */
    kvr_registry_config registry; /* zeros -> no worker limit */
    /* /metrics also writes every per-worker family (kvr_worker_*: counters
     * per worker, load and last event per (worker, rank)); off, a fleet of
     * any size costs a fixed number of series (fleet totals are always on). */
    bool metrics_per_worker;
    /* One JSON line per request appended here (NULL: none); reopened by
     * kvr_server_reopen_logs / POST /reopen_logs after a rotation. */
    const char *access_log;
    const char *trace_id_header; /* its value goes to the line's trace_id; NULL -> x-trace-id */
    /* Until this many workers are registered (from any origin: HTTP, the
     * workers below, config, discovery, cluster), only /register,
     * /unregister, /workers, /health, /metrics and /reopen_logs answer; every
     * other endpoint gets 503 saying how many are missing. 0: no wait. The
     * wait ends once; workers leaving later do not start it again. */
    size_t min_initial_workers;
    /* Registered before HTTP starts, in order (borrowed); each keeps its
     * origin. A failure stops the start with the entry's error. */
    const kvr_registration *workers;
    size_t n_workers;
    /* JSON array of /register objects registered after `workers`, with
     * origin "config" (borrowed; NULL for none). */
    const char *workers_json;
    /* Several replicas (SPEC §10, include/kvrouter/cluster.h): on when
     * cluster.nats_url is set (then cluster.name is required). The server
     * fills the codec, ready_fn and booking_ttl_s (the router's); an unset
     * replica_url is http://<listen address or, for 0.0.0.0, the host
     * name>:<port>, which needs a fixed port. The cluster starts before the
     * peer dump: a ready replica found in its membership bucket is the peer
     * recovered from, `peers` the fallback. */
    kvr_cluster_config cluster;
    /* Engine discovery (SPEC §11, discovery.h): engines listed at start
     * (borrowed; each keeps its origin; one the discovery refuses stops the
     * start with its error) and the poll settings (zeros: defaults). POST
     * and DELETE /engines change the list at run time; a reload makes the
     * config-origin engines exactly those of cfg. */
    const kvr_engine_spec *engines;
    size_t n_engines;
    kvr_discovery_config discovery;
} kvr_server_config;

void kvr_server_config_default(kvr_server_config *cfg);

/* Raises the process's soft RLIMIT_NOFILE to its hard limit and logs both
 * (`kvrouter serve` does it first: every HTTP connection and every worker's
 * listener holds descriptors, and a soft limit of 1024 is common). 0, or -1
 * when the limit cannot be read or set (logged). */
int kvr_server_raise_fd_limit(void);

/* Starts everything; NULL on failure (message in err). */
kvr_server *kvr_server_start(const kvr_server_config *cfg, char *err, size_t err_len);
/* Bound HTTP port. */
int kvr_server_port(const kvr_server *srv);
void kvr_server_stop(kvr_server *srv);

/* Applies the reloadable part of cfg to a running server (SIGHUP): the
 * worker limit (registry.max_workers; workers above a lowered limit stay),
 * the router's settings (kvr_router_set_config: all but booking_ttl_s,
 * rng_seed, clock_from_requests), the access log reopened at its path, the
 * config file's engines, then every reload hook in the order added (the
 * first re-reads the auth token files and takes auth_scope). Workers are
 * the registry's (kvr_registry_sync with the config
 * file's origin); the listen address, threads, body limit and the rest need
 * a restart. 0, or -1 with err naming what failed (what came before it
 * stays applied). */
int kvr_server_reload(kvr_server *srv, const kvr_server_config *cfg, char *err, size_t err_len);

/* A setting a later layer owns (the auth token file, ...) re-read on reload:
 * 0, or -1 with err. Add hooks before the first reload; at most 8. */
typedef int (*kvr_server_reload_fn)(kvr_server *srv, const kvr_server_config *cfg, void *user,
                                    char *err, size_t err_len);
int kvr_server_add_reload_hook(kvr_server *srv, kvr_server_reload_fn fn, void *user);

/* Counts one reload in /metrics (kvr_reloads_total{result}): ok false when
 * it failed in whole or in part (a file that did not parse, a refused
 * worker or engine) and the running settings stayed where it failed. The
 * program that reads the file calls it once per reload. */
void kvr_server_count_reload(kvr_server *srv, bool ok);

/* Reopens the access log at its path (after logrotate renamed the file).
 * 0 (also with no access log), or -1 with err (the old file stays in use). */
int kvr_server_reopen_logs(kvr_server *srv, char *err, size_t err_len);

/* A /register object (the format of --config workers too) into reg, with
 * its strings borrowed from obj. Fields obj lacks take defaults' values
 * (model_name, block_size, endpoint are then not required; origin and
 * accepts_mm_hashes come from defaults too, so set -1 there for "unset");
 * defaults NULL means none (origin http). false with err naming the
 * field. */
struct json_t;
bool kvr_server_parse_registration(const struct json_t *obj, const kvr_registration *defaults,
                                   kvr_registration *reg, char *err, size_t err_len);

/* An /engines entry (a POST /engines body, or an element of the config
 * file's "engines"): a URL string, or {url, kind?, instance_id?,
 * model_name?, routing_group?, block_size?, mm_identity?,
 * accepts_mm_hashes?, image_token_id?}. Strings are borrowed from v; unknown keys are
 * refused. false with err naming the field. */
bool kvr_server_parse_engine(const struct json_t *v, kvr_origin origin, kvr_engine_spec *spec,
                             char *err, size_t err_len);

/* The server's engine discovery (never NULL once started). */
kvr_discovery *kvr_server_discovery(kvr_server *srv);

/* The server's registry: register and unregister workers from C exactly as
 * POST /register and /unregister do (include/kvrouter/registry.h). */
kvr_registry *kvr_server_registry(kvr_server *srv);

/* Registers one worker from a /register JSON object text, as POST /register
 * does (origin "http"). Returns the HTTP status it would answer; on >= 400
 * err holds the reason (naming the field), else err is "". */
int kvr_server_register_json(kvr_server *srv, const char *body, char *err, size_t err_len);

/* Loads one GET /dump body into the indexes, in any form it comes: Dynamo's
 * object (Dynamo's own or kvrouter's), kvrouter's JSON lines, or its older
 * JSON array. Only the content: registrations and cursors are for
 * kvr_server_recover_from_peer. Returns the store records applied, or -1
 * when the text is not a dump (err says why; records skipped for a bad
 * field are counted and logged, not an error). */
long kvr_server_load_dump(kvr_server *srv, const char *text, size_t len, char *err,
                          size_t err_len);

/* Recovery from one peer replica, SPEC §10 (--peers at start, and the
 * cluster layer for the peer it finds): registers the peer's workers (origin
 * peer) with their listeners held, waits for them to connect, loads the
 * peer's dump and releases each listener at the cursor the dump gives it, so
 * the replica ends equal to its peer while engines keep publishing. 0, or -1
 * with err (the peer could not be read; registrations already made stay,
 * listeners are released without cursors). Not while another recovery runs. */
int kvr_server_recover_from_peer(kvr_server *srv, const char *url, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
