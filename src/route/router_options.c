/* The router's settings as an option table: the one list behind
 * kvr_router_config_default, kvr_router_config_set, `serve --router-opt`,
 * the config file's "router" object and their --help. A new setting is a
 * field in kvr_router_config plus one row here. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kvrouter/options.h"
#include "kvrouter/route.h"

#define ROW(field, ty, lo, hi, dflt, text)                                                 \
    {.name = #field, .type = ty, .offset = offsetof(kvr_router_config, field), .min = lo,   \
     .max = hi, .def = dflt, .help = text}

static const kvr_option router_rows[] = {
    ROW(overlap_score_credit, KVR_OPT_DOUBLE, 0, HUGE_VAL, "1.0",
        "cost credit per block of GPU overlap (SPEC §8)"),
    ROW(prefill_load_scale, KVR_OPT_DOUBLE, 0, HUGE_VAL, "1.0",
        "weight of the prefill term against the decode term"),
    ROW(cpu_hit_weight, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0.75", "credit of a block cached on cpu"),
    ROW(disk_hit_weight, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0.25", "credit of a block cached on disk"),
    ROW(temperature, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0",
        "0: argmin with random tie-break; > 0: softmax sampling over normalized costs"),
    ROW(booking_ttl_s, KVR_OPT_DOUBLE, 0.001, HUGE_VAL, "600",
        "a booking without /free expires after this many seconds"),
    ROW(rng_seed, KVR_OPT_U64, 0, 18446744073709551615.0, "0",
        "seed of tie-breaks and sampling (0: from the clock)"),
    ROW(rank_refresh_s, KVR_OPT_DOUBLE, 0, HUGE_VAL, "1.0",
        "how long a (model, group)'s rank list is cached (0: every request)"),
    ROW(unclamped_prefill, KVR_OPT_BOOL, 0, 1, "false",
        "drop the max(0, .) of the prefill term (opt-in departure from SPEC §8)"),
    ROW(media_cut_weight, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0",
        "cost per whole block past a media cut the worker cannot be told"),
};

const kvr_option *kvr_router_options(size_t *n)
{
    *n = sizeof router_rows / sizeof router_rows[0];
    return router_rows;
}

void kvr_router_config_default(kvr_router_config *cfg)
{
    char err[128];
    memset(cfg, 0, sizeof *cfg);
    size_t n;
    const kvr_option *rows = kvr_router_options(&n);
    kvr_opt_defaults(rows, n, cfg, err, sizeof err); /* the table's own text: cannot fail */
}

int kvr_router_config_set(kvr_router_config *cfg, const char *key, double value)
{
    size_t n;
    const kvr_option *rows = kvr_router_options(&n);
    const kvr_option *o = cfg && key ? kvr_opt_find(rows, n, key) : NULL;
    char err[160];
    return o && kvr_opt_set_double(o, cfg, value, err, sizeof err) == 0 ? 0 : -1;
}
