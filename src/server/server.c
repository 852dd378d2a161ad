/* Server lifecycle: indexer, router, sources, peer recovery, then HTTP. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/resource.h>

#include "kvrouter/log.h"
#include "server/access_log.h"
#include "server/auth.h"
#include "server/http_conns.h"
#include "server/server_internal.h"
#include "util/fds.h"

kvr_indexer *kvr_server_indexer(kvr_server *srv) { return srv->ix; }
struct kvr_router *kvr_server_router(kvr_server *srv) { return srv->router; }
int kvr_server_port(const kvr_server *srv) { return srv->port; }
kvr_registry *kvr_server_registry(kvr_server *srv) { return srv->registry; }

void kvr_server_config_default(kvr_server_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->listen_addr = KVR_DEFAULT_LISTEN_ADDR;
    cfg->port = KVR_DEFAULT_PORT;
    cfg->max_body = KVR_DEFAULT_MAX_BODY;
    cfg->http_threads = 2;
    cfg->max_connections = KVR_DEFAULT_MAX_CONNECTIONS;
    cfg->connection_timeout_s = KVR_DEFAULT_CONNECTION_TIMEOUT_S;
    kvr_source_config_default(&cfg->source);
    kvr_router_config_default(&cfg->router);
    kvr_cluster_config_default(&cfg->cluster);
}

int kvr_server_register_json(kvr_server *srv, const char *body, char *err, size_t err_len)
{
    json_error_t jerr;
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES, &jerr);
    if (!j || !json_is_object(j)) {
        snprintf(err, err_len, "worker registration is not a JSON object: %s",
                 j ? "not an object" : jerr.text);
        json_decref(j);
        return 400;
    }
    kvr_api_reply reply = {0};
    kvr_api_register(srv, j, &reply);
    json_decref(j);
    if (reply.status >= 400) {
        const char *e = json_string_value(json_object_get(reply.body, "error"));
        snprintf(err, err_len, "%s", e ? e : "registration failed");
    } else if (err_len) {
        err[0] = 0;
    }
    json_decref(reply.body);
    free(reply.text);
    return reply.status;
}

static int register_one(kvr_server *srv, const kvr_registration *reg, const char *what,
                        size_t i, char *err, size_t err_len)
{
    kvr_registry_reply out;
    if (kvr_registry_result_ok(kvr_registry_register(srv->registry, reg, &out)))
        return 0;
    snprintf(err, err_len, "%s[%zu]: %s", what, i, out.error);
    return -1;
}

static int register_workers_json(kvr_server *srv, const char *text, char *err, size_t err_len)
{
    json_error_t jerr;
    json_t *arr = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!arr || !json_is_array(arr)) {
        snprintf(err, err_len, "workers must be a JSON array: %s", arr ? "" : jerr.text);
        json_decref(arr);
        return -1;
    }
    size_t i;
    json_t *w;
    int rc = 0;
    json_array_foreach(arr, i, w)
    {
        kvr_registration reg, config = {.origin = KVR_ORIGIN_CONFIG};
        config.settings.accepts_mm_hashes = -1;
        kvr_json_err e = {{0}};
        if (!kvr_api_parse_registration(w, &config, &reg, &e)) {
            snprintf(err, err_len, "workers[%zu]: %s", i, e.msg);
            rc = -1;
        } else {
            rc = register_one(srv, &reg, "workers", i, err, err_len);
        }
        if (rc != 0)
            break;
    }
    json_decref(arr);
    return rc;
}

/* Engines of the command line and config (SPEC §11): listed now, polled
 * at once by the discovery thread. */
static int add_engines(kvr_server *srv, const kvr_server_config *cfg, char *err, size_t err_len)
{
    for (size_t i = 0; i < cfg->n_engines; i++) {
        char e[400];
        kvr_discovery_result r = kvr_discovery_add(srv->discovery, &cfg->engines[i], e, sizeof e);
        if (r != KVR_DISCOVERY_ADDED && r != KVR_DISCOVERY_UNCHANGED &&
            r != KVR_DISCOVERY_UPDATED) {
            snprintf(err, err_len, "engines[%zu] (%s): %s", i,
                     cfg->engines[i].url ? cfg->engines[i].url : "", e);
            return -1;
        }
    }
    return 0;
}

static int register_initial(kvr_server *srv, const kvr_server_config *cfg, char *err,
                            size_t err_len)
{
    for (size_t i = 0; i < cfg->n_workers; i++)
        if (register_one(srv, &cfg->workers[i], "workers", i, err, err_len) != 0)
            return -1;
    if (cfg->workers_json && register_workers_json(srv, cfg->workers_json, err, err_len) != 0)
        return -1;
    return add_engines(srv, cfg, err, err_len);
}

/* ---- the initial-workers wait (min_initial_workers) ------------------- */

bool kvr_server_serving_all(kvr_server *srv) { return atomic_load(&srv->serving_all); }

static void check_initial_workers(kvr_server *srv)
{
    if (atomic_load(&srv->serving_all))
        return;
    size_t n = kvr_registry_workers(srv->registry);
    if (n >= srv->min_initial_workers && !atomic_exchange(&srv->serving_all, true))
        kvr_log(KVR_LOG_INFO, "%zu workers registered (min_initial_workers %zu): serving every "
                              "endpoint",
                n, srv->min_initial_workers);
}

/* A registry observer: runs on the ingest thread after each change. */
static void on_registration(void *user, const kvr_reg_event *ev)
{
    (void)ev;
    check_initial_workers(user);
}

/* ---- logs --------------------------------------------------------------- */

int kvr_server_reopen_logs(kvr_server *srv, char *err, size_t err_len)
{
    if (err_len)
        err[0] = 0;
    if (!srv->access_log)
        return 0;
    return kvr_access_log_reopen(srv->access_log, err, err_len);
}

void kvr_api_reopen_logs(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    (void)body;
    char err[300];
    if (kvr_server_reopen_logs(srv, err, sizeof err) != 0) {
        kvr_api_error(reply, 500, "%s", err);
        return;
    }
    reply->status = 200;
    reply->body = json_pack("{s:s,s:b}", "status", "ok", "access_log", srv->access_log != NULL);
}

/* ---- reload (SIGHUP) ----------------------------------------------------- */

int kvr_server_add_reload_hook(kvr_server *srv, kvr_server_reload_fn fn, void *user)
{
    size_t cap = sizeof srv->reload_hooks / sizeof srv->reload_hooks[0];
    if (!fn || srv->n_reload_hooks == cap)
        return -1;
    srv->reload_hooks[srv->n_reload_hooks].fn = fn;
    srv->reload_hooks[srv->n_reload_hooks++].user = user;
    return 0;
}

void kvr_server_count_reload(kvr_server *srv, bool ok)
{
    atomic_fetch_add(&srv->reloads[ok ? 0 : 1], 1);
}

int kvr_server_reload(kvr_server *srv, const kvr_server_config *cfg, char *err, size_t err_len)
{
    if (err_len)
        err[0] = 0;
    kvr_registry_set_max_workers(srv->registry, cfg->registry.max_workers);
    int changed = kvr_router_set_config(srv->router, &cfg->router);
    if (changed > 0)
        kvr_log(KVR_LOG_INFO, "reload: %d router settings applied", changed);
    if (kvr_server_reopen_logs(srv, err, err_len) != 0)
        return -1;
    /* The config file's engines become exactly the file's; engines of the
     * command line and of POST /engines stay. */
    kvr_engine_spec *specs = calloc(cfg->n_engines ? cfg->n_engines : 1, sizeof *specs);
    size_t n = 0;
    for (size_t i = 0; specs && i < cfg->n_engines; i++)
        if (cfg->engines[i].origin == KVR_ORIGIN_CONFIG)
            specs[n++] = cfg->engines[i];
    size_t refused = specs ? kvr_discovery_sync(srv->discovery, KVR_ORIGIN_CONFIG, specs, n) : 1;
    free(specs);
    if (refused) {
        snprintf(err, err_len, "%zu engines of the config file were refused (see the log)",
                 refused);
        return -1;
    }
    for (size_t i = 0; i < srv->n_reload_hooks; i++)
        if (srv->reload_hooks[i].fn(srv, cfg, srv->reload_hooks[i].user, err, err_len) != 0)
            return -1;
    return 0;
}

/* The auth token files, again (auth.h). */
static int reload_auth(kvr_server *srv, const kvr_server_config *cfg, void *user, char *err,
                       size_t err_len)
{
    (void)user;
    return kvr_auth_reload(srv->auth, cfg, err, err_len);
}

static bool is_loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "localhost") == 0;
}

/* ---- lifecycle ---------------------------------------------------------- */

/* The first peer that answers is the base; the others are not merged in. */
static void recover_at_start(kvr_server *srv)
{
    size_t n;
    char **peers = kvr_server_peer_list(srv, &n);
    if (!peers)
        kvr_log(KVR_LOG_WARN, "peers: cannot list them (out of memory): continuing without a peer");
    for (size_t i = 0; i < n; i++) {
        char e[320];
        if (kvr_server_recover_from_peer(srv, peers[i], e, sizeof e) == 0)
            break;
        kvr_log(KVR_LOG_WARN, "peer %s: %s (%s)", peers[i], e,
                i + 1 < n ? "trying the next" : "continuing without a peer");
    }
    kvr_server_free_peer_list(peers, n);
}

/* Descriptors the HTTP server holds besides its connections: the listening
 * socket, an epoll and an eventfd per thread, and a few spare. */
static size_t http_fd_overhead(unsigned threads) { return 2 * (size_t)threads + 16; }

/* max_connections that fit the descriptor limit (RLIMIT_NOFILE): at most
 * half of it, so that listeners keep the other half. */
static size_t connection_budget(size_t want, unsigned threads)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return want;
    size_t half = (size_t)rl.rlim_cur / 2, overhead = http_fd_overhead(threads);
    if (want + overhead <= half)
        return want;
    size_t fit = half > overhead + 1 ? half - overhead : 1;
    kvr_log(KVR_LOG_WARN,
            "max_connections %zu lowered to %zu: the descriptor limit (RLIMIT_NOFILE) is %llu "
            "and listeners need the other half; raise it (ulimit -n, systemd LimitNOFILE=)",
            want, fit, (unsigned long long)rl.rlim_cur);
    return fit;
}

int kvr_server_raise_fd_limit(void)
{
    int r = kvr_fd_raise_limit();
    if (r == 0)
        kvr_log(KVR_LOG_INFO, "descriptor limit (RLIMIT_NOFILE): %zu (soft = hard)",
                kvr_fd_limit());
    return r < 0 ? -1 : 0;
}

/* Authentication and the HTTP connection limits, before any thread that
 * reads them starts. */
static int start_limits(kvr_server *srv, kvr_server_config *cfg, char *err, size_t err_len)
{
    if (!(srv->auth = kvr_auth_create(cfg, err, err_len)))
        return -1;
    kvr_fd_raise_limit(); /* before the budget below (the source does it too) */
    unsigned threads = cfg->http_threads ? cfg->http_threads : 2;
    size_t max = connection_budget(
        cfg->max_connections ? cfg->max_connections : KVR_DEFAULT_MAX_CONNECTIONS, threads);
    srv->connection_timeout_s =
        cfg->connection_timeout_s ? cfg->connection_timeout_s : KVR_DEFAULT_CONNECTION_TIMEOUT_S;
    srv->conns = kvr_conns_create(max, cfg->max_connections_per_ip, srv->connection_timeout_s);
    /* Listeners leave the HTTP server's share free (source.h fd_reserve). */
    srv->fd_reserve = cfg->source.fd_reserve = max + http_fd_overhead(threads);
    if (!srv->conns || kvr_server_add_reload_hook(srv, reload_auth, NULL) != 0) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    return 0;
}

static int start_logs_and_wait(kvr_server *srv, const kvr_server_config *cfg, char *err,
                               size_t err_len)
{
    srv->trace_id_header = strdup(cfg->trace_id_header ? cfg->trace_id_header : "x-trace-id");
    if (!srv->trace_id_header) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    if (cfg->access_log && cfg->access_log[0] &&
        !(srv->access_log = kvr_access_log_open(cfg->access_log, err, err_len)))
        return -1;
    srv->min_initial_workers = cfg->min_initial_workers;
    atomic_store(&srv->serving_all, cfg->min_initial_workers == 0);
    if (cfg->min_initial_workers &&
        kvr_registry_observe(srv->registry, on_registration, srv) != 0) {
        snprintf(err, err_len, "cannot observe the registry");
        return -1;
    }
    return 0;
}

kvr_server *kvr_server_start(const kvr_server_config *cfg_in, char *err, size_t err_len)
{
    kvr_server_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        kvr_server_config_default(&cfg);
    kvr_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    srv->max_body = cfg.max_body ? cfg.max_body : KVR_DEFAULT_MAX_BODY;
    pthread_mutex_init(&srv->peers_mu, NULL);
    srv->started_at = kvr_source_now();
    srv->metrics_per_worker = cfg.metrics_per_worker;
    if (start_limits(srv, &cfg, err, err_len) != 0) {
        kvr_server_stop(srv);
        return NULL;
    }
    srv->ix = kvr_http_init_endpoints(srv) == 0 ? kvr_indexer_create() : NULL;
    srv->router = srv->ix ? kvr_router_create(srv->ix, &cfg.router) : NULL;
    srv->src = srv->router ? kvr_source_create(srv->ix, &cfg.source) : NULL;
    srv->registry = srv->src ? kvr_registry_create(srv->src, &cfg.registry) : NULL;
    srv->discovery = srv->registry ? kvr_discovery_create(srv->registry, &cfg.discovery) : NULL;
    srv->engine_post_wait_s = 3 * (cfg.discovery.timeout_s > 0 ? cfg.discovery.timeout_s : 2) + 1;
    srv->sweeper = srv->discovery ? kvr_sweeper_start(srv) : NULL;
    if (!srv->sweeper) {
        snprintf(err, err_len, "cannot create indexer, router, sources, discovery or sweeper");
        kvr_server_stop(srv);
        return NULL;
    }
    if (start_logs_and_wait(srv, &cfg, err, err_len) != 0 ||
        kvr_server_cluster_start(srv, &cfg, err, err_len) != 0) {
        kvr_server_stop(srv);
        return NULL;
    }
    /* Peers first: their snapshot is the base the live streams continue. A
     * ready replica of the cluster first, the static list as the fallback. */
    for (size_t i = 0; i < cfg.n_peers; i++)
        if (kvr_server_add_peer(srv, cfg.peers[i]) == KVR_PEER_INVALID)
            kvr_log(KVR_LOG_WARN, "peer '%s' is not an http:// or https:// URL; ignored",
                    cfg.peers[i]);
    if (!kvr_server_recover_from_cluster(srv))
        recover_at_start(srv);
    if (register_initial(srv, &cfg, err, err_len) != 0) {
        kvr_server_stop(srv);
        return NULL;
    }
    int port = cfg.port < 0 ? KVR_DEFAULT_PORT : cfg.port;
    const char *addr = cfg.listen_addr ? cfg.listen_addr : KVR_DEFAULT_LISTEN_ADDR;
    if (kvr_http_start(srv, addr, port, cfg.http_threads, err, err_len) != 0) {
        kvr_server_stop(srv);
        return NULL;
    }
    /* SPEC §12. */
    if (!is_loopback(addr) && !kvr_auth_enabled(srv->auth))
        kvr_log(KVR_LOG_WARN,
                "listening on %s:%d, beyond loopback, without authentication: anyone who can "
                "reach this port can register and unregister workers and read /dump; set "
                "--auth-token-file",
                addr, srv->port);
    if (kvr_auth_enabled(srv->auth))
        kvr_log(KVR_LOG_INFO, "authentication: the bearer token of %s is required by %s",
                cfg.auth_token_file,
                cfg.auth_scope == KVR_AUTH_SCOPE_ALL     ? "every endpoint"
                : cfg.auth_scope == KVR_AUTH_SCOPE_QUERY ? "the admin and query endpoints"
                                                         : "the admin endpoints");
    if (!atomic_load(&srv->serving_all))
        kvr_log(KVR_LOG_INFO,
                "waiting for %zu initial workers (%zu registered): until then only /register, "
                "/unregister, /workers, /engines, /health, /metrics and /reopen_logs answer",
                srv->min_initial_workers, kvr_registry_workers(srv->registry));
    atomic_store(&srv->started, true);
    if (srv->cluster)
        kvr_cluster_refresh(srv->cluster); /* peers may recover from it now */
    return srv;
}

void kvr_server_stop(kvr_server *srv)
{
    if (!srv)
        return;
    kvr_http_stop(srv);
    kvr_discovery_destroy(srv->discovery); /* it calls the registry: before the source */
    kvr_cluster_stop(srv->cluster);
    kvr_sweeper_stop(srv->sweeper);
    kvr_conns_destroy(srv->conns);
    kvr_auth_destroy(srv->auth);
    kvr_source_destroy(srv->src);
    kvr_registry_destroy(srv->registry);
    kvr_router_destroy(srv->router);
    kvr_indexer_destroy(srv->ix);
    kvr_access_log_close(srv->access_log);
    free(srv->trace_id_header);
    free(srv->endpoints);
    kvr_server_free_peer_list(srv->peers, srv->n_peers);
    pthread_mutex_destroy(&srv->peers_mu);
    free(srv);
}
