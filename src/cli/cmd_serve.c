/* kvrouter serve: the router service. Settings come from one option table
 * (serve_options.c: flags, --config keys, --help); --workers and the config
 * file's workers go to the registry as registrations; SIGHUP reloads
 * (serve_reload.c); SIGINT/SIGTERM stop it. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/serve_options.h"
#include "kvrouter/log.h"

int kvr_cmd_serve(int argc, char **argv)
{
    serve_settings s;
    char err[512] = "";
    if (serve_settings_load(&s, argc, argv, 1, err, sizeof err) != 0) {
        serve_settings_free(&s);
        return kvr_cli_usage_error("serve", err, NULL);
    }
    if (s.help) {
        serve_settings_help(stdout);
        serve_settings_free(&s);
        return 0;
    }
    if (serve_settings_workers(&s, err, sizeof err) != 0) {
        serve_settings_free(&s);
        return kvr_cli_usage_error("serve", err, NULL);
    }
    kvr_log_set_format((kvr_log_format)s.log_format);
    kvr_log_set_level((kvr_log_level)s.log_level);
    kvr_server_raise_fd_limit();
    s.server.workers = s.regs;
    s.server.n_workers = s.n_regs;

    /* Block the signals in every thread the server starts; this thread
     * waits for them: SIGHUP reloads, SIGINT/SIGTERM stop. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    kvr_server *srv = kvr_server_start(&s.server, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "kvrouter serve: %s\n", err);
        serve_settings_free(&s);
        return 1;
    }
    printf("kvrouter: listening on http://%s:%d (%zu workers from the command line/config)\n",
           s.server.listen_addr, kvr_server_port(srv), s.n_regs);
    fflush(stdout);
    int sig = 0;
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
        kvr_log(KVR_LOG_INFO, "SIGHUP received, reloading%s%s", s.config_path ? " " : "",
                s.config_path ? s.config_path : "");
        serve_reload(srv, &s, argc, argv);
    }
    kvr_log(KVR_LOG_INFO, "%s received, stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
    kvr_server_stop(srv);
    serve_settings_free(&s);
    return 0;
}
