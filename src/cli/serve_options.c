/* The `kvrouter serve` option table and the loading of its settings from a
 * config file and the command line (serve_options.h). A new serve setting
 * is one row here: flag, config key and --help follow. */
#include "cli/serve_options.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/log.h"
#include "kvrouter/route.h"
#include "util/grow.h"

#define S(field) offsetof(serve_settings, field)
#define NUM(nm, ty, field, lo, hi, meta, hlp, ...)                                          \
    {.name = nm, .type = ty, .offset = S(field), .min = lo, .max = hi, .metavar = meta,    \
     .help = hlp, __VA_ARGS__}
#define STR(nm, field, meta, hlp, ...)                                                     \
    {.name = nm, .type = KVR_OPT_STRING, .offset = S(field), .metavar = meta, .help = hlp, \
     __VA_ARGS__}
#define CUSTOM(nm, meta, hlp, text_fn, json_fn, ...)                                       \
    {.name = nm, .type = KVR_OPT_CUSTOM, .metavar = meta, .help = hlp, .set_text = text_fn, \
     .set_json = json_fn, __VA_ARGS__}
#define U64_MAX_D 18446744073709551615.0
#define STRINGIFY(x) #x
#define XSTR(x) STRINGIFY(x)

static const char *const log_formats[] = {"text", "json", NULL};
static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};
/* kvr_auth_scope order */
static const char *const auth_scopes[] = {"admin", "query", "all", NULL};

/* cli: the error came from a flag (label --name) or a config key ('name'). */
static int fail_as(const kvr_option *o, bool cli, char *err, size_t cap, const char *what,
                   const char *got)
{
    char label[96];
    snprintf(err, cap, "%s %s%s%s%s", kvr_opt_label(o, cli, NULL, label, sizeof label), what,
             got ? ", got '" : "", got ? got : "", got ? "'" : "");
    return -1;
}

static int fail(const kvr_option *o, char *err, size_t cap, const char *what, const char *got)
{
    return fail_as(o, true, err, cap, what, got);
}

static int set_addr_port(serve_settings *s, const char *addr, size_t addr_len, long port)
{
    if (addr_len >= sizeof s->listen_addr || port < 0 || port > 65535)
        return -1;
    memcpy(s->listen_addr, addr, addr_len);
    s->listen_addr[addr_len] = 0;
    s->server.listen_addr = s->listen_addr;
    s->server.port = (int)port;
    return 0;
}

static int parse_port(const char *t, long *port)
{
    uint64_t v;
    if (kvr_parse_u64(t, 0, 65535, &v) != 0)
        return -1;
    *port = (long)v;
    return 0;
}

static int set_listen(const kvr_option *o, void *target, const char *t, char *err, size_t cap)
{
    const char *colon = strrchr(t, ':');
    long port;
    if (!colon || colon == t || parse_port(colon + 1, &port) != 0 ||
        set_addr_port(target, t, (size_t)(colon - t), port) != 0)
        return fail(o, err, cap, "must be ADDR:PORT (port 0..65535)", t);
    return 0;
}

/* Dynamo's --port: every interface, as its indexer binds. */
static int set_port(const kvr_option *o, void *target, const char *t, char *err, size_t cap)
{
    long port;
    if (parse_port(t, &port) != 0)
        return fail(o, err, cap, "must be a port in 0..65535", t);
    set_addr_port(target, "0.0.0.0", 7, port);
    return 0;
}

static int set_port_json(const kvr_option *o, void *target, const json_t *v, char *err,
                         size_t cap)
{
    char text[32];
    if (json_is_integer(v))
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_string(v))
        snprintf(text, sizeof text, "%s", json_string_value(v));
    else
        return fail_as(o, false, err, cap, "must be an integer port", NULL);
    return set_port(o, target, text, err, cap);
}

/* Replaces the peer list with the comma-separated URLs of csv. */
static int set_peers_csv(serve_settings *s, const char *csv)
{
    free(s->peers_text);
    free(s->peer_list);
    s->peer_list = NULL;
    s->n_peers = 0;
    s->peers_text = strdup(csv);
    if (!s->peers_text)
        return -1;
    size_t n = 1;
    for (const char *p = csv; *p; p++)
        n += *p == ',';
    s->peer_list = calloc(n, sizeof *s->peer_list);
    if (!s->peer_list)
        return -1;
    char *save = NULL;
    for (char *t = strtok_r(s->peers_text, ",", &save); t; t = strtok_r(NULL, ",", &save))
        s->peer_list[s->n_peers++] = t;
    return 0;
}

static int set_peers(const kvr_option *o, void *target, const char *t, char *err, size_t cap)
{
    return set_peers_csv(target, t) == 0 ? 0 : fail(o, err, cap, "out of memory", NULL);
}

static int set_peers_json(const kvr_option *o, void *target, const json_t *v, char *err,
                          size_t cap)
{
    if (json_is_string(v))
        return set_peers(o, target, json_string_value(v), err, cap);
    if (!json_is_array(v))
        return fail_as(o, false, err, cap, "must be a string or an array of URL strings", NULL);
    size_t total = 1, i;
    json_t *p;
    json_array_foreach(v, i, p)
    {
        if (!json_is_string(p) || strchr(json_string_value(p), ','))
            return fail_as(o, false, err, cap, "entries must be URL strings without commas", NULL);
        total += json_string_length(p) + 1;
    }
    char *csv = calloc(1, total);
    if (!csv)
        return fail_as(o, false, err, cap, "out of memory", NULL);
    json_array_foreach(v, i, p)
    {
        if (i)
            strcat(csv, ",");
        strcat(csv, json_string_value(p));
    }
    int rc = set_peers(o, target, csv, err, cap);
    free(csv);
    return rc;
}

static int set_workers_spec(const kvr_option *o, void *target, const char *t, char *err,
                            size_t cap)
{
    (void)o;
    (void)err;
    (void)cap;
    ((serve_settings *)target)->workers_spec = t;
    return 0;
}

/* A config file's workers: an array of /register objects (or a spec string). */
static int set_workers_json(const kvr_option *o, void *target, const json_t *v, char *err,
                            size_t cap)
{
    if (json_is_string(v))
        return set_workers_spec(o, target, json_string_value(v), err, cap);
    if (!json_is_array(v))
        return fail_as(o, false, err, cap, "must be an array of /register objects", NULL);
    ((serve_settings *)target)->config_workers = v;
    return 0;
}

/* --engines "[kind=]URL,...": engines of the command line. */
static int set_engines_csv(const kvr_option *o, void *target, const char *t, char *err,
                           size_t cap)
{
    (void)o;
    (void)err;
    (void)cap;
    serve_settings *s = target;
    s->engines_csv = t;
    s->engines_csv_from_config = false;
    return 0;
}

/* The config file's engines: an array of URL strings or /engines objects
 * (or one "[kind=]URL,..." string). */
static int set_engines_json(const kvr_option *o, void *target, const json_t *v, char *err,
                            size_t cap)
{
    serve_settings *s = target;
    if (json_is_string(v)) {
        s->engines_csv = json_string_value(v);
        s->engines_csv_from_config = true;
        return 0;
    }
    if (!json_is_array(v))
        return fail_as(o, false, err, cap, "must be an array of engine URLs or objects", NULL);
    s->config_engines = v;
    return 0;
}

static kvr_opt_table router_table(serve_settings *s)
{
    size_t n;
    const kvr_option *rows = kvr_router_options(&n);
    return (kvr_opt_table){rows, n, &s->server.router, "router."};
}

static int set_router_opt(const kvr_option *o, void *target, const char *t, char *err,
                          size_t cap)
{
    (void)o;
    kvr_opt_table rt = router_table(target);
    return kvr_opt_set_pair(&rt, t, err, cap);
}

static int set_router_json(const kvr_option *o, void *target, const json_t *v, char *err,
                           size_t cap)
{
    (void)o;
    kvr_opt_table rt = router_table(target);
    return kvr_opt_load_json(&rt, 1, v, err, cap);
}

static const kvr_option serve_rows[] = {
    CUSTOM("listen", "ADDR:PORT",
           "HTTP address (default " KVR_DEFAULT_LISTEN_ADDR ":" XSTR(KVR_DEFAULT_PORT)
           "; port 0 = any free port)",
           set_listen, NULL),
    CUSTOM("port", "N", "listen on 0.0.0.0:N, every interface (as Dynamo's indexer does)",
           set_port, set_port_json),
    NUM("http_threads", KVR_OPT_U32, server.http_threads, 1, 1024, "N",
        "HTTP worker threads (they also run the matches)", .alias = "threads"),
    NUM("max_body", KVR_OPT_SIZE, server.max_body, 1, U64_MAX_D, "BYTES",
        "request body limit; larger bodies get 413"),
    NUM("max_connections", KVR_OPT_SIZE, server.max_connections, 1, 10000000, "N",
        "HTTP connections open at once; one more is closed as it is accepted (counted); "
        "lowered to half of RLIMIT_NOFILE when it does not fit"),
    NUM("max_connections_per_ip", KVR_OPT_SIZE, server.max_connections_per_ip, 0, 10000000, "N",
        "the same from one client address (0 = no limit)"),
    NUM("connection_timeout_s", KVR_OPT_U32, server.connection_timeout_s, 1, 86400, "S",
        "a request must arrive in full within S seconds of the connection's accept or of its "
        "previous reply (idle connections close then too), and a reply must make progress"),
    STR("auth_token_file", server.auth_token_file, "FILE",
        "bearer token (the file's one line) required by the admin endpoints, and by more with "
        "--auth; SIGHUP reads it again",
        .flags = KVR_OPT_RELOAD),
    {.name = "auth", .type = KVR_OPT_CHOICE, .offset = S(server.auth_scope),
     .choices = auth_scopes, .def = "admin", .metavar = "admin|query|all",
     .help = "endpoints needing the token: admin (register, unregister, dump, peers, "
             "reopen_logs), query (also query, route, free, prefill_done), all (every one)",
     .flags = KVR_OPT_RELOAD},
    STR("peer_token_file", server.peer_token_file, "FILE",
        "bearer token sent to --peers (default: the auth_token_file token)",
        .flags = KVR_OPT_RELOAD),
    NUM("replay_timeout_ms", KVR_OPT_U32, server.source.replay_timeout_ms, 1, 3600000, "MS",
        "replay inactivity timeout"),
    NUM("max_message_bytes", KVR_OPT_U64, server.source.max_message_bytes, 1, U64_MAX_D / 2,
        "BYTES",
        "ZeroMQ payloads above this are dropped before decoding and counted "
        "(messages_over_limit); a connection sending more than twice this is dropped by ZeroMQ"),
    NUM("replay_backoff_max_ms", KVR_OPT_U32, server.source.replay_backoff_max_ms, 1000,
        86400000, "MS",
        "a failed replay endpoint waits 1 s, doubling up to this, before it is tried again"),
    NUM("reconnect_max_ms", KVR_OPT_INT, server.source.reconnect_max_ms, 100, 3600000, "MS",
        "retries to an unreachable engine back off from 100 ms up to this"),
    NUM("replay_buffer_messages", KVR_OPT_U32, server.source.max_buffered, 1, 1e9, "N",
        "live messages one listener holds during a replay or peer recovery"),
    NUM("replay_buffer_bytes", KVR_OPT_U64, server.source.max_buffered_bytes, 1, U64_MAX_D,
        "BYTES", "and their bytes"),
    NUM("replay_buffer_total_bytes", KVR_OPT_U64, server.source.max_buffered_total_bytes, 1,
        U64_MAX_D, "BYTES", "bytes held over every listener"),
    NUM("max_workers", KVR_OPT_SIZE, server.registry.max_workers, 0, U64_MAX_D, "N",
        "registered workers at most (0 = unlimited); more get 503 naming max_workers",
        .flags = KVR_OPT_RELOAD),
    CUSTOM("workers", "SPEC",
           "id[:rank]=tcp://host:port[,...] (needs block_size); in a config file an array of "
           "/register objects",
           set_workers_spec, set_workers_json, .flags = KVR_OPT_RELOAD),
    CUSTOM("engines", "[KIND=]URL,...",
           "engines whose KV-event sources kvrouter finds and keeps registered (SPEC 11; KIND "
           "sglang, vllm or auto); in a config file an array of URLs or /engines objects",
           set_engines_csv, set_engines_json, .flags = KVR_OPT_RELOAD),
    NUM("engine_poll_s", KVR_OPT_DOUBLE, server.discovery.poll_s, 0.05, 86400, "S",
        "seconds between two polls of one engine", .def = "5"),
    NUM("engine_grace_s", KVR_OPT_DOUBLE, server.discovery.grace_s, 0.01, 604800, "S",
        "an engine without a valid answer for this long is unregistered (one failed poll "
        "never is)",
        .def = "30"),
    NUM("engine_timeout_s", KVR_OPT_DOUBLE, server.discovery.timeout_s, 0.05, 600, "S",
        "deadline of one HTTP request to an engine, connection included", .def = "2"),
    NUM("max_engines", KVR_OPT_SIZE, server.discovery.max_engines, 1, 1e6, "N",
        "engines listed at most; POST /engines beyond gets 503 naming max_engines",
        .def = "1024"),
    NUM("engine_max_response_bytes", KVR_OPT_SIZE, server.discovery.max_response_bytes, 1024,
        1073741824, "BYTES", "a larger engine response is refused (the poll fails)",
        .def = "4194304"),
    STR("model_name", model_name, "M", "model of --workers, and of config workers naming none",
        .def = "default"),
    NUM("block_size", KVR_OPT_U32, block_size, 1, KVR_MAX_BLOCK_SIZE, "B",
        "block size of --workers, and of config workers naming none"),
    STR("routing_group", routing_group, "G",
        "routing group of --workers, and of config workers naming none (default \"default\")"),
    STR("replay_endpoint", replay_endpoint, "E", "replay ROUTER of --workers (one worker)",
        .flags = KVR_OPT_NO_CONFIG),
    NUM("min_initial_workers", KVR_OPT_SIZE, server.min_initial_workers, 0, U64_MAX_D, "N",
        "until N workers are registered only /register, /unregister, /workers, /health, "
        "/metrics, /engines and /reopen_logs answer; the rest get 503",
        .env = "DYN_ROUTER_MIN_INITIAL_WORKERS"),
    STR("access_log", server.access_log, "FILE",
        "append one JSON line per request (time, method, path, status, duration_s, bytes, "
        "remote); POST /reopen_logs or SIGHUP reopens it"),
    STR("trace_id_header", server.trace_id_header, "NAME",
        "request header copied into each access-log line's trace_id", .def = "x-trace-id"),
    CUSTOM("peers", "URL,...", "load these peers' /dump before live events", set_peers,
           set_peers_json),
    STR("nats", server.cluster.nats_url, "URL",
        "NATS server(s) of a replica cluster (nats://host:4222[,...]); off when unset"),
    STR("cluster", server.cluster.name, "NAME",
        "the replica cluster's name (with --nats): its buckets and stream are KVR_<NAME>_*"),
    STR("cluster_url", server.cluster.replica_url, "URL",
        "this replica's URL for the others (default http://<listen address or host>:<port>)"),
    NUM("cluster_startup_timeout_ms", KVR_OPT_U32, server.cluster.startup_timeout_ms, 1,
        3600000, "MS", "how long a starting replica waits for NATS and the cluster's state"),
    NUM("cluster_batch_delay_us", KVR_OPT_U32, server.cluster.batch_max_delay_us, 1, 1000000,
        "US", "booking batches go at most one per this interval (none waits longer)"),
    CUSTOM("router_opt", "KEY=VALUE", "router setting (repeatable); keys below", set_router_opt,
           NULL, .flags = KVR_OPT_NO_CONFIG),
    CUSTOM("router", NULL, "object of router settings (keys below)", NULL, set_router_json,
           .flags = KVR_OPT_NO_CLI),
    {.name = "metrics_per_worker", .type = KVR_OPT_BOOL, .offset = S(server.metrics_per_worker),
     .help = "/metrics also writes every kvr_worker_* family (about 45 series per worker)",
     .flags = KVR_OPT_NO_VALUE},
    {.name = "log_format", .type = KVR_OPT_CHOICE, .offset = S(log_format),
     .choices = log_formats, .def = "text", .help = "stderr lines: text, or one JSON object each",
     .flags = KVR_OPT_RELOAD},
    {.name = "log_level", .type = KVR_OPT_CHOICE, .offset = S(log_level), .choices = log_levels,
     .def = "info", .help = "least severe level logged", .flags = KVR_OPT_RELOAD},
    STR("config", config_path, "FILE", "JSON object of the keys below; SIGHUP reloads it",
        .flags = KVR_OPT_NO_CONFIG),
    {.name = "help", .type = KVR_OPT_BOOL, .offset = S(help), .help = "this text",
     .flags = KVR_OPT_NO_CONFIG | KVR_OPT_NO_VALUE},
};
#define N_ROWS (sizeof serve_rows / sizeof serve_rows[0])
static const kvr_option *rows(void) { return serve_rows; }

const kvr_option *serve_option_rows(size_t *n)
{
    *n = N_ROWS;
    return serve_rows;
}

static int load_file(serve_settings *s, const char *path, char *err, size_t cap)
{
    json_error_t jerr;
    s->doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!s->doc) {
        snprintf(err, cap, "--config %s: %s (line %d)", path, jerr.text, jerr.line);
        return -1;
    }
    kvr_opt_table t = {rows(), N_ROWS, s, NULL};
    char e[400];
    if (kvr_opt_load_json(&t, 1, s->doc, e, sizeof e) != 0) {
        snprintf(err, cap, "--config %s: %s", path, e);
        return -1;
    }
    return 0;
}

int serve_settings_load(serve_settings *s, int argc, char **argv, int first, char *err,
                        size_t cap)
{
    memset(s, 0, sizeof *s);
    kvr_server_config_default(&s->server);
    if (kvr_opt_defaults(rows(), N_ROWS, s, err, cap) != 0)
        return -1;
    /* The file first, so that flags override it. */
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            s->config_path = argv[i + 1];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            s->config_path = argv[i] + 9;
    }
    if (s->config_path && load_file(s, s->config_path, err, cap) != 0)
        return -1;
    if (kvr_opt_env(rows(), N_ROWS, s, err, cap) != 0)
        return -1;
    kvr_opt_table t = {rows(), N_ROWS, s, NULL};
    for (int i = first; i < argc;) {
        if (strcmp(argv[i], "-h") == 0) {
            s->help = true;
            i++;
            continue;
        }
        int rc = kvr_opt_parse_arg(&t, 1, argc, argv, &i, err, cap);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            snprintf(err, cap, "unknown option '%s'", argv[i]);
            return -1;
        }
    }
    s->server.peers = s->peer_list;
    s->server.n_peers = s->n_peers;
    return 0;
}

static kvr_registration *add_reg(serve_settings *s)
{
    if (KVR_GROW(s->regs, s->cap_regs, s->n_regs + 1) != 0)
        return NULL;
    kvr_registration *r = &s->regs[s->n_regs++];
    memset(r, 0, sizeof *r);
    return r;
}

/* "id[:rank]=endpoint,..." */
static int spec_workers(serve_settings *s, char *err, size_t cap)
{
    if (!s->block_size) {
        snprintf(err, cap, "--workers needs --block-size");
        return -1;
    }
    free(s->workers_buf);
    s->workers_buf = strdup(s->workers_spec);
    if (!s->workers_buf)
        return -1;
    char *save = NULL;
    for (char *tok = strtok_r(s->workers_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(err, cap, "--workers entry '%s' lacks '=endpoint'", tok);
            return -1;
        }
        *eq = 0;
        char *colon = strchr(tok, ':');
        if (colon)
            *colon = 0;
        uint64_t id = 0, rank = 0;
        if (kvr_parse_u64(tok, 0, UINT64_MAX, &id) != 0 ||
            (colon && kvr_parse_u64(colon + 1, 0, KVR_MAX_DP_RANKS - 1, &rank) != 0)) {
            snprintf(err, cap, "--workers entry '%s': bad instance id or rank", tok);
            return -1;
        }
        kvr_registration *r = add_reg(s);
        if (!r)
            return -1;
        r->settings.model_name = s->model_name;
        r->settings.routing_group = s->routing_group;
        r->settings.worker_id = id;
        r->settings.block_size = s->block_size;
        r->settings.accepts_mm_hashes = -1;
        r->dp_rank = (uint32_t)rank;
        r->endpoint = eq + 1;
        r->replay_endpoint = s->replay_endpoint;
        r->origin = KVR_ORIGIN_CLI;
    }
    return 0;
}

static kvr_engine_spec *add_engine(serve_settings *s, size_t *cap_specs)
{
    if (KVR_GROW(s->engine_specs, *cap_specs, s->n_engine_specs + 1) != 0)
        return NULL;
    kvr_engine_spec *e = &s->engine_specs[s->n_engine_specs++];
    memset(e, 0, sizeof *e);
    e->mm_identity = -1;
    e->accepts_mm_hashes = -1;
    return e;
}

/* "[kind=]URL,..." */
static int csv_engines(serve_settings *s, size_t *cap_specs, char *err, size_t cap)
{
    free(s->engines_buf);
    s->engines_buf = strdup(s->engines_csv);
    if (!s->engines_buf)
        return -1;
    char *save = NULL;
    for (char *tok = strtok_r(s->engines_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        kvr_engine_spec *e = add_engine(s, cap_specs);
        if (!e)
            return -1;
        e->origin = s->engines_csv_from_config ? KVR_ORIGIN_CONFIG : KVR_ORIGIN_CLI;
        e->url = tok;
        char *eq = strchr(tok, '=');
        if (eq && !strstr(tok, "://")) {
            snprintf(err, cap, "--engines entry '%s' is not [KIND=]URL", tok);
            return -1;
        }
        if (eq && eq < strstr(tok, "://")) {
            *eq = 0;
            int k = kvr_engine_kind_from_name(tok);
            if (k < 0) {
                snprintf(err, cap, "--engines entry '%s=%s': kind must be sglang, vllm or auto",
                         tok, eq + 1);
                return -1;
            }
            e->kind = (kvr_engine_kind)k;
            e->url = eq + 1;
        }
    }
    return 0;
}

static int serve_settings_engines(serve_settings *s, char *err, size_t cap)
{
    size_t cap_specs = 0;
    free(s->engine_specs);
    s->engine_specs = NULL;
    s->n_engine_specs = 0;
    if (s->engines_csv && csv_engines(s, &cap_specs, err, cap) != 0) {
        if (!err[0])
            snprintf(err, cap, "out of memory");
        return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(s->config_engines, i, v)
    {
        kvr_engine_spec *e = add_engine(s, &cap_specs);
        char ee[300];
        if (!e) {
            snprintf(err, cap, "out of memory");
            return -1;
        }
        if (!kvr_server_parse_engine(v, KVR_ORIGIN_CONFIG, e, ee, sizeof ee)) {
            snprintf(err, cap, "--config %s: engines[%zu]: %s", s->config_path, i, ee);
            return -1;
        }
    }
    s->server.engines = s->engine_specs;
    s->server.n_engines = s->n_engine_specs;
    return 0;
}

int serve_settings_workers(serve_settings *s, char *err, size_t cap)
{
    err[0] = 0;
    if (serve_settings_engines(s, err, cap) != 0)
        return -1;
    s->n_regs = 0;
    if (s->workers_spec && spec_workers(s, err, cap) != 0)
        return -1;
    kvr_registration defaults = {.origin = KVR_ORIGIN_CONFIG};
    defaults.settings.model_name = s->model_name;
    defaults.settings.block_size = s->block_size;
    defaults.settings.routing_group = s->routing_group;
    defaults.settings.accepts_mm_hashes = -1;
    size_t i;
    json_t *w;
    json_array_foreach(s->config_workers, i, w)
    {
        kvr_registration *r = add_reg(s);
        char e[300];
        if (!r) {
            snprintf(err, cap, "out of memory");
            return -1;
        }
        if (!kvr_server_parse_registration(w, &defaults, r, e, sizeof e)) {
            snprintf(err, cap, "--config %s: workers[%zu]: %s", s->config_path, i, e);
            return -1;
        }
    }
    return 0;
}

void serve_settings_free(serve_settings *s)
{
    free(s->engine_specs);
    free(s->engines_buf);
    free(s->regs);
    free(s->workers_buf);
    free(s->peers_text);
    free(s->peer_list);
    json_decref(s->doc);
    memset(s, 0, sizeof *s);
}

void serve_settings_help(FILE *out)
{
    serve_settings d;
    char err[128];
    memset(&d, 0, sizeof d);
    kvr_server_config_default(&d.server);
    kvr_opt_defaults(rows(), N_ROWS, &d, err, sizeof err);
    fprintf(out, "usage: kvrouter serve [options]\n\n"
                 "Options (each is also a --config key, written with '_'; flags override the "
                 "file):\n");
    kvr_opt_help(out, rows(), N_ROWS, true, &d);
    size_t n;
    const kvr_option *r = kvr_router_options(&n);
    fprintf(out, "\nRouter keys (--router-opt KEY=VALUE, or the config's \"router\" object):\n");
    kvr_opt_help(out, r, n, false, &d.server.router);
}
