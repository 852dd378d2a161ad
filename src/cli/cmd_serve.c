/* kvrouter serve: the router service. Command-line and --config workers are
 * registered exactly as POST /register would; SIGINT/SIGTERM stop it. */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "kvrouter/server.h"
#include "util/grow.h"

/* --help; bad arguments get one line on stderr instead */
static int usage(void)
{
    printf(
        "usage: kvrouter serve [options]\n"
        "  --listen ADDR:PORT        HTTP address (default 127.0.0.1:8090; port 0 = any)\n"
        "  --workers SPEC            id[:rank]=tcp://host:port[,...] (needs --model-name,\n"
        "                            --block-size)\n"
        "  --model-name M            model of --workers (and default of --config workers)\n"
        "  --block-size B            block size of --workers (and --config default)\n"
        "  --replay-endpoint E       replay ROUTER of --workers (single worker)\n"
        "  --config FILE             JSON: {\"workers\": [/register objects], \"listen\",\n"
        "                            \"peers\", \"max_body\", \"router\": {key: number}}\n"
        "  --peers URL,...           load these peers' /dump before live events\n"
        "  --max-body BYTES          request body limit (default 8 MiB; larger -> 413)\n"
        "  --replay-timeout-ms MS    replay inactivity timeout (default 2000)\n"
        "  --http-threads N          HTTP worker threads (default 2)\n"
        "  --router-opt key=value    router setting (repeatable), e.g.\n"
        "                            overlap_score_credit=1.0 temperature=0\n");
    return 0;
}

typedef struct {
    json_t *workers; /* --config: array of /register objects */
    kvr_registration *workers_cli; /* --workers */
    size_t n_workers, cap_workers;
    char *workers_buf;
    char *peers_csv;
    const char *peer_list[64];
    size_t n_peers;
    char listen[300];
} serve_opts;

static int parse_listen(const char *s, kvr_server_config *cfg, char *addr_buf, size_t cap)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= cap)
        return -1;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535 || end == colon + 1)
        return -1;
    memcpy(addr_buf, s, (size_t)(colon - s));
    addr_buf[colon - s] = 0;
    cfg->listen_addr = addr_buf;
    cfg->port = (int)port;
    return 0;
}

/* "id[:rank]=endpoint,..." -> registrations (strings point into o->workers_buf). */
static int parse_workers(serve_opts *o, const char *spec, const char *model, long block_size,
                         const char *replay)
{
    o->workers_buf = strdup(spec);
    if (!o->workers_buf)
        return -1;
    char *save = NULL;
    for (char *tok = strtok_r(o->workers_buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            fprintf(stderr, "kvrouter serve: --workers entry '%s' lacks '=endpoint'\n", tok);
            return -1;
        }
        *eq = 0;
        char *colon = strchr(tok, ':');
        uint64_t id = 0, rank = 0;
        if (colon)
            *colon = 0;
        if (kvr_cli_parse_u64(tok, 0, UINT64_MAX, &id) != 0) {
            fprintf(stderr, "kvrouter serve: bad instance id in --workers entry '%s'\n", tok);
            return -1;
        }
        if (colon && kvr_cli_parse_u64(colon + 1, 0, KVR_MAX_DP_RANKS - 1, &rank) != 0) {
            fprintf(stderr, "kvrouter serve: bad rank in --workers entry '%s'\n", tok);
            return -1;
        }
        if (KVR_GROW(o->workers_cli, o->cap_workers, o->n_workers + 1) != 0)
            return -1;
        kvr_registration *r = &o->workers_cli[o->n_workers++];
        memset(r, 0, sizeof *r);
        r->settings.model_name = model;
        r->settings.worker_id = id;
        r->settings.block_size = (uint32_t)block_size;
        r->settings.accepts_mm_hashes = -1;
        r->dp_rank = (uint32_t)rank;
        r->endpoint = eq + 1;
        r->replay_endpoint = replay;
        r->origin = KVR_ORIGIN_CLI;
    }
    return 0;
}

static void split_peers(serve_opts *o, const char *csv)
{
    free(o->peers_csv);
    o->peers_csv = strdup(csv);
    o->n_peers = 0;
    char *save = NULL;
    for (char *t = strtok_r(o->peers_csv, ",", &save); t && o->n_peers < 64;
         t = strtok_r(NULL, ",", &save))
        o->peer_list[o->n_peers++] = t;
}

static int load_config(const char *path, serve_opts *o, kvr_server_config *cfg,
                       const char *model, long block_size)
{
    json_error_t jerr;
    json_t *c = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(c)) {
        fprintf(stderr, "kvrouter serve: --config %s: %s (line %d)\n", path,
                c ? "not a JSON object" : jerr.text, jerr.line);
        json_decref(c);
        return -1;
    }
    int rc = 0;
    json_t *ws = json_object_get(c, "workers");
    if (ws && !json_is_array(ws)) {
        fprintf(stderr, "kvrouter serve: --config: 'workers' must be an array\n");
        rc = -1;
    }
    size_t i;
    json_t *w;
    json_array_foreach(ws, i, w)
    {
        json_t *copy = json_deep_copy(w);
        if (json_is_object(copy)) {
            if (model && !json_object_get(copy, "model_name"))
                json_object_set_new(copy, "model_name", json_string(model));
            if (block_size > 0 && !json_object_get(copy, "block_size"))
                json_object_set_new(copy, "block_size", json_integer(block_size));
        }
        json_array_append_new(o->workers, copy);
    }
    const char *listen = json_string_value(json_object_get(c, "listen"));
    if (listen) {
        snprintf(o->listen, sizeof o->listen, "%s", listen);
    }
    json_t *peers = json_object_get(c, "peers");
    if (json_is_string(peers))
        split_peers(o, json_string_value(peers));
    else if (json_is_array(peers)) {
        json_t *p;
        size_t total = 0;
        json_array_foreach(peers, i, p) total += json_string_length(p) + 1;
        char *csv = calloc(1, total + 1);
        json_array_foreach(peers, i, p)
        {
            if (i)
                strcat(csv, ",");
            if (json_is_string(p))
                strcat(csv, json_string_value(p));
        }
        split_peers(o, csv);
        free(csv);
    }
    json_t *mb = json_object_get(c, "max_body");
    if (json_is_integer(mb) && json_integer_value(mb) > 0)
        cfg->max_body = (size_t)json_integer_value(mb);
    json_t *router = json_object_get(c, "router");
    const char *key;
    json_t *v;
    json_object_foreach(router, key, v)
    {
        if (!json_is_number(v) || kvr_router_config_set(&cfg->router, key, json_number_value(v))) {
            fprintf(stderr, "kvrouter serve: --config: bad router setting '%s'\n", key);
            rc = -1;
        }
    }
    json_decref(c);
    return rc;
}

int kvr_cmd_serve(int argc, char **argv)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    serve_opts o;
    memset(&o, 0, sizeof o);
    o.workers = json_array();
    const char *workers_spec = NULL, *config = NULL, *model = NULL, *replay = NULL;
    long block_size = 0;
    const char *router_opts[64];
    size_t n_router_opts = 0;
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            rc = usage();
            goto out;
        }
        if (!v) {
            fprintf(stderr, "kvrouter serve: '%s' needs a value or is unknown (try --help)\n", a);
            goto out;
        }
        i++;
        uint64_t n = 0;
        if (strcmp(a, "--block-size") == 0 || strcmp(a, "--max-body") == 0 ||
            strcmp(a, "--replay-timeout-ms") == 0 || strcmp(a, "--http-threads") == 0) {
            /* atol/strtoul would turn "8k" or "-1" into a silent 0 or a huge value */
            uint64_t lo = a[2] == 'b' ? 1 : 0, hi = a[2] == 'h' ? 1024 : UINT32_MAX;
            if (a[2] == 'm')
                hi = SIZE_MAX;
            if (kvr_cli_parse_u64(v, lo, hi, &n) != 0) {
                fprintf(stderr, "kvrouter serve: %s needs an integer in %" PRIu64 "..%" PRIu64
                                ", got '%s'\n",
                        a, lo, hi, v);
                goto out;
            }
        }
        if (strcmp(a, "--listen") == 0)
            snprintf(o.listen, sizeof o.listen, "%s", v);
        else if (strcmp(a, "--workers") == 0)
            workers_spec = v;
        else if (strcmp(a, "--model-name") == 0)
            model = v;
        else if (strcmp(a, "--block-size") == 0)
            block_size = (long)n;
        else if (strcmp(a, "--replay-endpoint") == 0)
            replay = v;
        else if (strcmp(a, "--config") == 0)
            config = v;
        else if (strcmp(a, "--peers") == 0)
            split_peers(&o, v);
        else if (strcmp(a, "--max-body") == 0)
            cfg.max_body = (size_t)n;
        else if (strcmp(a, "--replay-timeout-ms") == 0)
            cfg.source.replay_timeout_ms = (uint32_t)n;
        else if (strcmp(a, "--http-threads") == 0)
            cfg.http_threads = (unsigned)n;
        else if (strcmp(a, "--router-opt") == 0 && n_router_opts < 64)
            router_opts[n_router_opts++] = v;
        else {
            fprintf(stderr, "kvrouter serve: unknown option '%s' (try --help)\n", a);
            goto out;
        }
    }
    if (config && load_config(config, &o, &cfg, model, block_size) != 0)
        goto out;
    if (workers_spec) {
        if (!model || block_size <= 0) {
            fprintf(stderr, "kvrouter serve: --workers needs --model-name and --block-size\n");
            goto out;
        }
        if (parse_workers(&o, workers_spec, model, block_size, replay) != 0)
            goto out;
    }
    for (size_t i = 0; i < n_router_opts; i++) {
        const char *eq = strchr(router_opts[i], '=');
        char key[128];
        char *end = NULL;
        double val = eq ? strtod(eq + 1, &end) : 0;
        if (!eq || (size_t)(eq - router_opts[i]) >= sizeof key || end == eq + 1 || *end) {
            fprintf(stderr, "kvrouter serve: --router-opt '%s' is not key=number\n",
                    router_opts[i]);
            goto out;
        }
        memcpy(key, router_opts[i], (size_t)(eq - router_opts[i]));
        key[eq - router_opts[i]] = 0;
        if (kvr_router_config_set(&cfg.router, key, val) != 0) {
            fprintf(stderr, "kvrouter serve: unknown or out-of-range router option '%s'\n", key);
            goto out;
        }
    }
    char addr[300];
    if (o.listen[0] && parse_listen(o.listen, &cfg, addr, sizeof addr) != 0) {
        fprintf(stderr, "kvrouter serve: --listen '%s' is not ADDR:PORT\n", o.listen);
        goto out;
    }
    cfg.peers = o.peer_list;
    cfg.n_peers = o.n_peers;
    cfg.workers = o.workers_cli;
    cfg.n_workers = o.n_workers;
    char *wj = json_dumps(o.workers, JSON_COMPACT);
    cfg.workers_json = wj;

    /* Block the stop signals in every thread the server starts; this thread
     * waits for them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char err[512] = "";
    kvr_server *srv = kvr_server_start(&cfg, err, sizeof err);
    free(wj);
    if (!srv) {
        fprintf(stderr, "kvrouter serve: %s\n", err);
        rc = 1;
        goto out;
    }
    printf("kvrouter: listening on http://%s:%d (%zu workers from the command line/config)\n",
           cfg.listen_addr, kvr_server_port(srv), o.n_workers + json_array_size(o.workers));
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "kvrouter: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    kvr_server_stop(srv);
    rc = 0;
out:
    json_decref(o.workers);
    free(o.workers_buf);
    free(o.workers_cli);
    free(o.peers_csv);
    return rc;
}
