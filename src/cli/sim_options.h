/* The `kvrouter sim` option table (include/kvrouter/options.h): one row per
 * flag, so flags, checks and --help come from one list. */
#ifndef KVR_CLI_SIM_OPTIONS_H
#define KVR_CLI_SIM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/sim.h"

typedef struct {
    kvr_sim_config cfg;
    const char *trace, *svg, *requests_out;
    uint64_t limit, skip;
    double mm_share;
    bool json, judge, quiet, no_kv_admission;
    char route_extra[512]; /* "K":V members added to every /route body */
    size_t extra_len;
    char *router_opts[16]; /* --router-opt values, for a router the sim starts */
    size_t n_router_opts;
    bool which[KVR_SIM_POLICY_COUNT];
} sim_settings;

/* Defaults, then argv. 0: parsed; 1: --help printed; 2: a one-line usage
 * error on stderr. */
int sim_options_parse(int argc, char **argv, sim_settings *s);

#endif
