/* `kvrouter serve` settings: one option table for its flags, its config
 * file keys and its --help (include/kvrouter/options.h), and the config
 * file's workers turned into registrations. cmd_serve.c starts the server
 * from these and reloads them on SIGHUP. */
#ifndef KVR_CLI_SERVE_OPTIONS_H
#define KVR_CLI_SERVE_OPTIONS_H

#include <jansson.h>
#include <stdio.h>

#include "kvrouter/options.h"
#include "kvrouter/server.h"

typedef struct {
    kvr_server_config server;
    char listen_addr[256];       /* server.listen_addr points here once set */
    const char *config_path;
    const char *workers_spec;    /* --workers id[:rank]=endpoint,... */
    const char *model_name;      /* of --workers; default of config workers */
    uint32_t block_size;         /* likewise */
    const char *routing_group;   /* likewise */
    const char *replay_endpoint; /* of --workers */
    char *peers_text;            /* owned copy of the peers list */
    const char **peer_list;      /* into peers_text */
    size_t n_peers;
    const json_t *config_workers; /* the config file's "workers" (borrowed from doc) */
    json_t *doc;                 /* the config file, owned */
    int log_format;              /* kvr_log_format */
    int log_level;               /* kvr_log_level */
    bool help;
    /* registrations built by serve_settings_workers */
    kvr_registration *regs;
    size_t n_regs, cap_regs;
    char *workers_buf;           /* --workers text the registrations point into */
    /* engine discovery: --engines text (origin cli) and the config file's
     * "engines" (origin config), turned into specs by serve_settings_workers */
    const char *engines_csv;
    bool engines_csv_from_config; /* "engines" given as a string in the file */
    const json_t *config_engines;
    kvr_engine_spec *engine_specs;
    size_t n_engine_specs;
    char *engines_buf;           /* engines_csv text the specs point into */
} serve_settings;

/* Defaults, then the config file named by --config (if any), then the
 * table's environment variables, then every flag of argv[first..] (each
 * wins over what comes before). 0, or -1 with err. */
int serve_settings_load(serve_settings *s, int argc, char **argv, int first, char *err,
                        size_t cap);
/* Registrations of --workers (origin cli) and of the config file's workers
 * (origin config), the latter taking model_name/block_size/routing_group
 * from the settings when they lack them; and the engines to discover
 * (--engines: origin cli, the file's "engines": origin config). They point
 * into s, and s->server's workers and engines point at them. */
int serve_settings_workers(serve_settings *s, char *err, size_t cap);
void serve_settings_free(serve_settings *s);
/* The table (rows flagged KVR_OPT_RELOAD apply on SIGHUP). */
const kvr_option *serve_option_rows(size_t *n);
/* serve_reload.c: SIGHUP. Loads the settings again (file, environment,
 * argv); on success applies what can change while running (the config
 * file's workers through kvr_registry_sync, the worker limit, log level and
 * format, the access log reopened) and makes *cur the new settings; logs
 * what needs a restart. A bad file changes nothing and logs why. 0 / -1. */
int serve_reload(kvr_server *srv, serve_settings *cur, int argc, char **argv);
void serve_settings_help(FILE *out);

#endif
