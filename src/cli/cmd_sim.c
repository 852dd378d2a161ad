/* `kvrouter sim`: a simulated SGLang fleet replaying a Mooncake trace under
 * kvrouter and the baseline policies (see src/sim/sim.h for the model). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/sim_options.h"
#include "sim/judge.h"
#include "sim/router_client.h"
#include "sim/sim.h"

int kvr_cmd_sim(int argc, char **argv)
{
    sim_settings opt;
    int prc = sim_options_parse(argc, argv, &opt);
    if (prc != 0)
        return prc == 1 ? 0 : 2;
    kvr_sim_config cfg = opt.cfg;
    const bool *which = opt.which;
    if (opt.n_router_opts && cfg.router_url)
        fprintf(stderr, "kvrouter sim: --router-opt only applies to a router the sim starts; "
                        "ignored with --router\n");

    kvr_trace trace;
    char err[512];
    if (kvr_trace_load_slice(opt.trace, (size_t)opt.skip, (size_t)opt.limit, &trace, err,
                             sizeof err) != 0) {
        fprintf(stderr, "kvrouter sim: %s\n", err);
        return 1;
    }
    kvr_sim_workload wl;
    if (kvr_sim_workload_init(&wl, &trace, opt.mm_share, cfg.seed) != 0) {
        fprintf(stderr, "kvrouter sim: out of memory\n");
        kvr_trace_free(&trace);
        return 1;
    }

    int rc = 0;
    pid_t router_pid = -1;
    char url[128];
    if (which[KVR_SIM_KVROUTER] && !cfg.router_url) {
        if (kvr_sim_router_spawn("/proc/self/exe", cfg.seed, opt.router_opts, opt.n_router_opts, url,
                                 sizeof url, &router_pid, 10000, err, sizeof err) != 0) {
            fprintf(stderr, "kvrouter sim: %s\n", err);
            rc = 1;
            goto out;
        }
        cfg.router_url = url;
        if (cfg.log)
            fprintf(cfg.log, "sim: started kvrouter serve at %s (pid %d)\n", url,
                    (int)router_pid);
    }
    if (cfg.log) {
        size_t kimi = 0;
        for (size_t e = 0; e < cfg.engines; e++)
            kimi += kvr_sim_engine_is_kimi(&cfg, e);
        fprintf(cfg.log,
                "sim: %zu requests, %zu engines x %u ranks (%zu Kimi engine_wide), capacity %zu "
                "blocks, hicache %zu, block size %u, %zu image ids\n",
                trace.n, cfg.engines, cfg.dp, kimi, cfg.capacity, cfg.hicache, cfg.block_size,
                kvr_u64map_len(&wl.image_ids));
    }

    if (opt.requests_out) {
        if (!(cfg.requests_out = fopen(opt.requests_out, "w"))) {
            fprintf(stderr, "kvrouter sim: cannot write %s: %s\n", opt.requests_out,
                    strerror(errno));
            rc = 1;
            goto out;
        }
        fprintf(cfg.requests_out, "%s\n", KVR_SIM_REQUESTS_HEADER);
    }
    kvr_sim_result res[KVR_SIM_POLICY_COUNT];
    memset(res, 0, sizeof res);
    for (int p = 0; p < KVR_SIM_POLICY_COUNT; p++) {
        if (!which[p])
            continue;
        if (cfg.log)
            fprintf(cfg.log, "sim: running %s\n", kvr_sim_policy_name((kvr_sim_policy)p));
        if (kvr_sim_run(&cfg, &wl, (kvr_sim_policy)p, &res[p], err, sizeof err) != 0) {
            fprintf(stderr, "kvrouter sim: %s: %s\n", kvr_sim_policy_name((kvr_sim_policy)p),
                    err);
            rc = 1;
        }
    }
    kvr_sim_print_table(stdout, res, which);
    if (res[KVR_SIM_KVROUTER].ran) {
        const kvr_sim_result *k = &res[KVR_SIM_KVROUTER];
        printf("kvrouter: %llu HTTP calls in %.2f s; event sync %.2f s over %llu polls; "
               "%llu router errors, %llu sync timeouts\n",
               (unsigned long long)k->http_calls, k->http_s, k->sync_s,
               (unsigned long long)k->sync_polls, (unsigned long long)k->route_errors,
               (unsigned long long)k->sync_timeouts);
        printf("kvrouter: router-predicted gpu overlap %.2f%% of prompt tokens vs %.2f%% "
               "found in the engines' GPU caches\n",
               k->prompt_tokens ? 100.0 * (double)k->router_overlap_tokens / k->prompt_tokens : 0,
               100.0 * k->gpu_hit_rate);
        printf("kvrouter: router counters for the fleet: %llu wide tokens seen, %llu media blocks "
               "excluded, %llu sequence gaps, %llu events dropped%s%s%s\n",
               (unsigned long long)k->router_wide_tokens, (unsigned long long)k->router_mm_excluded,
               (unsigned long long)k->router_seq_gaps, (unsigned long long)k->router_drops,
               k->router_drops ? " (" : "", k->router_drop_detail, k->router_drops ? ")" : "");
    }
    if (opt.judge) {
        kvr_sim_verdict v;
        kvr_sim_judge(res, which, &v);
        kvr_sim_print_verdict(stdout, &v);
    }
    if (opt.svg) {
        /* engines, not engines x ranks: the table and the log count engines */
        char title[256], ranks[32] = "";
        if (cfg.dp > 1)
            snprintf(ranks, sizeof ranks, " x %u ranks", cfg.dp);
        snprintf(title, sizeof title,
                 "kvrouter sim: %zu requests, %zu engines%s, capacity %zu blocks", trace.n,
                 cfg.engines, ranks, cfg.capacity);
        if (kvr_sim_write_svg(opt.svg, res, which, title) != 0) {
            fprintf(stderr, "kvrouter sim: cannot write %s: %s\n", opt.svg, strerror(errno));
            rc = 1;
        } else if (cfg.log) {
            fprintf(cfg.log, "sim: chart written to %s\n", opt.svg);
        }
    }
    if (opt.json) {
        char *s = kvr_sim_json(&cfg, res, which);
        if (s)
            printf("%s\n", s);
        free(s);
    }
    fflush(stdout);
out:
    if (cfg.requests_out && fclose(cfg.requests_out) != 0) {
        fprintf(stderr, "kvrouter sim: cannot write %s: %s\n", opt.requests_out, strerror(errno));
        rc = 1;
    }
    kvr_sim_router_stop(router_pid);
    kvr_sim_workload_free(&wl);
    kvr_trace_free(&trace);
    return rc;
}
