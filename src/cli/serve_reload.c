/* SIGHUP for `kvrouter serve` (serve_options.h, serve_reload): the settings
 * are loaded again exactly as at start; a file that does not load changes
 * nothing. What can change while running is applied: the config file's
 * workers become exactly the file's (kvr_registry_sync: registrations of
 * other origins stay; an unchanged worker keeps its listener and state,
 * SPEC §5 rule 9), the server's reloadable settings (kvr_server_reload:
 * worker limit, access log, router settings, hooks), log level and format. Every other
 * changed setting is named in the log as needing a restart. */
#include <stdlib.h>
#include <string.h>

#include "cli/serve_options.h"
#include "kvrouter/log.h"
#include "kvrouter/route.h"

/* Settings that differ and cannot change while running, named in the log. */
static void note_restart_settings(const serve_settings *cur, const serve_settings *next)
{
    size_t n;
    const kvr_option *rows = serve_option_rows(&n);
    for (size_t i = 0; i < n; i++)
        if (!(rows[i].flags & KVR_OPT_RELOAD) && !kvr_opt_same(&rows[i], cur, next))
            kvr_log(KVR_LOG_WARN, "reload: '%s' changed; it applies at the next start",
                    rows[i].name);
    bool same_listen = strcmp(cur->server.listen_addr, next->server.listen_addr) == 0 &&
                       cur->server.port == next->server.port;
    if (!same_listen)
        kvr_log(KVR_LOG_WARN, "reload: the listen address changed; it applies at the next start");
    const kvr_option *r = kvr_router_options(&n);
    for (size_t i = 0; i < n; i++)
        if (!(r[i].flags & KVR_OPT_RELOAD) &&
            !kvr_opt_same(&r[i], &cur->server.router, &next->server.router))
            kvr_log(KVR_LOG_WARN,
                    "reload: router setting '%s' changed; it applies at the next start",
                    r[i].name);
}

/* The config file's registrations of next (origin config), in file order. */
static size_t config_workers(const serve_settings *next, kvr_registration **out)
{
    *out = calloc(next->n_regs ? next->n_regs : 1, sizeof **out);
    size_t k = 0;
    for (size_t i = 0; *out && i < next->n_regs; i++)
        if (next->regs[i].origin == KVR_ORIGIN_CONFIG)
            (*out)[k++] = next->regs[i];
    return k;
}

static int sync_workers(kvr_server *srv, const serve_settings *next)
{
    kvr_registration *regs;
    size_t n = config_workers(next, &regs);
    kvr_registry_reply *replies = calloc(n ? n : 1, sizeof *replies);
    if (!regs || !replies) {
        free(regs);
        free(replies);
        kvr_log(KVR_LOG_ERROR, "reload: out of memory; workers unchanged");
        return -1;
    }
    kvr_registry_sync_report rep;
    kvr_registry_sync(kvr_server_registry(srv), KVR_ORIGIN_CONFIG, regs, n, replies, &rep);
    for (size_t i = 0; i < n; i++)
        if (!kvr_registry_result_ok(replies[i].result))
            kvr_log(KVR_LOG_WARN, "reload: %s: workers[%zu]: %s", next->config_path, i,
                    replies[i].error);
    kvr_log(KVR_LOG_INFO,
            "reload: %s: workers %zu created, %zu changed, %zu unchanged, %zu ranks removed, "
            "%zu failed",
            next->config_path ? next->config_path : "(no config file)", rep.created, rep.changed,
            rep.unchanged, rep.removed, rep.failed);
    free(regs);
    free(replies);
    return rep.failed ? -1 : 0;
}

int serve_reload(kvr_server *srv, serve_settings *cur, int argc, char **argv)
{
    serve_settings next;
    char err[512];
    if (serve_settings_load(&next, argc, argv, 1, err, sizeof err) != 0 ||
        serve_settings_workers(&next, err, sizeof err) != 0) {
        /* Counted before it is told: whoever reads the log line (an
         * operator, test_cli_reload) finds the failure in /metrics. */
        kvr_server_count_reload(srv, false);
        kvr_log(KVR_LOG_WARN, "reload failed, the running settings stay: %s", err);
        serve_settings_free(&next);
        return -1;
    }
    note_restart_settings(cur, &next);
    int rc = 0;
    if (kvr_server_reload(srv, &next.server, err, sizeof err) != 0) {
        kvr_log(KVR_LOG_WARN, "reload: %s", err);
        rc = -1;
    }
    if (sync_workers(srv, &next) != 0)
        rc = -1;
    kvr_log_set_format((kvr_log_format)next.log_format);
    kvr_log_set_level((kvr_log_level)next.log_level);
    serve_settings_free(cur);
    bool own_addr = next.server.listen_addr == next.listen_addr;
    *cur = next;
    if (own_addr) /* it pointed into next itself */
        cur->server.listen_addr = cur->listen_addr;
    kvr_server_count_reload(srv, rc == 0);
    return rc;
}
