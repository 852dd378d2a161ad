/* The router's settings as an option table: the one list behind
 * kvr_router_config_default, kvr_router_config_set, `serve --router-opt`,
 * the config file's "router" object and their --help. A new setting is a
 * field in kvr_router_config plus one row here. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kvrouter/options.h"
#include "kvrouter/route.h"

/* A row a running router takes on SIGHUP (kvr_router_set_config) ... */
#define ROW(field, ty, lo, hi, dflt, text)                                                 \
    {.name = #field, .type = ty, .offset = offsetof(kvr_router_config, field), .min = lo,   \
     .max = hi, .def = dflt, .help = text, .flags = KVR_OPT_RELOAD}
/* ... and one only read when the router is created: booking order is
 * expiry order under one TTL, the tie-break stream is seeded once, and a
 * clock cannot change its source under running bookings. */
#define START_ROW(field, ty, lo, hi, dflt, text)                                           \
    {.name = #field, .type = ty, .offset = offsetof(kvr_router_config, field), .min = lo,   \
     .max = hi, .def = dflt, .help = text}

/* kvr_cost_model order. */
static const char *const cost_models[] = {"ttft", "dynamo", NULL};

const char *kvr_cost_model_name(kvr_cost_model m)
{
    return (unsigned)m < sizeof cost_models / sizeof cost_models[0] - 1 ? cost_models[m] : NULL;
}

/* kvr_lru_edge order. */
static const char *const lru_edges[] = {"off", "cost", "tie", NULL};

const char *kvr_lru_edge_name(kvr_lru_edge e)
{
    return (unsigned)e < sizeof lru_edges / sizeof lru_edges[0] - 1 ? lru_edges[e] : NULL;
}

static const kvr_option router_rows[] = {
    {.name = "cost_model", .type = KVR_OPT_CHOICE, .offset = offsetof(kvr_router_config, cost_model),
     .def = "ttft", .help = "ttft: predicted time to first token (default); dynamo: SPEC §8's formula",
     .metavar = "MODEL", .choices = cost_models, .flags = KVR_OPT_RELOAD},
    ROW(overlap_score_credit, KVR_OPT_DOUBLE, 0, HUGE_VAL, "1.0",
        "dynamo: cost credit per block of GPU overlap (SPEC §8)"),
    ROW(prefill_load_scale, KVR_OPT_DOUBLE, 0, HUGE_VAL, "1.0",
        "dynamo: weight of the prefill term against the decode term"),
    ROW(cpu_hit_weight, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0.75",
        "share of a prefill token a block cached on cpu saves (dynamo: its credit)"),
    ROW(disk_hit_weight, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0.25",
        "share of a prefill token a block cached on disk saves (dynamo: its credit)"),
    ROW(temperature, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0",
        "0: argmin with random tie-break; > 0: softmax sampling over normalized costs"),
    START_ROW(booking_ttl_s, KVR_OPT_DOUBLE, 0.001, HUGE_VAL, "600",
        "a booking without /free expires after this many seconds"),
    START_ROW(rng_seed, KVR_OPT_U64, 0, 18446744073709551615.0, "0",
        "seed of tie-breaks and sampling (0: from the clock)"),
    ROW(rank_refresh_s, KVR_OPT_DOUBLE, 0, HUGE_VAL, "1.0",
        "how long a (model, group)'s rank list is cached (0: every request)"),
    ROW(unclamped_prefill, KVR_OPT_BOOL, 0, 1, "false",
        "drop the max(0, .) of the prefill term (opt-in departure from SPEC §8)"),
    ROW(media_cut_weight, KVR_OPT_DOUBLE, 0, HUGE_VAL, "0",
        "dynamo: cost per whole block past a media cut the worker cannot be told"),
    ROW(prefill_tps, KVR_OPT_DOUBLE, 1e-3, HUGE_VAL, "10000",
        "ttft: prefill tokens/s of a worker neither registered with one nor measured"),
    ROW(decode_kv_share, KVR_OPT_DOUBLE, 0, HUGE_VAL, "5e-6",
        "ttft: GPU-time share one KV token of a decoding request takes (prefill slows by "
        "1 + this x the decodes' context tokens)"),
    ROW(max_decode_slowdown, KVR_OPT_DOUBLE, 0, HUGE_VAL, "2",
        "ttft: cap of the decode slowdown term"),
    ROW(recompute_weight, KVR_OPT_DOUBLE, 0, HUGE_VAL, "20",
        "ttft: prefill tokens of cost per token of a prefix copied from other workers (1/k for a block k hold)"),
    ROW(tie_tolerance, KVR_OPT_DOUBLE, 0, 1, "0.05",
        "ttft: costs this close to the lowest tie; the least recently loaded worker wins"),
    ROW(learn_prefill_rate, KVR_OPT_BOOL, 0, 1, "true",
        "ttft: measure each worker's prefill rate from /prefill_done timing"),
    {.name = "lru_edge", .type = KVR_OPT_CHOICE, .offset = offsetof(kvr_router_config, lru_edge),
     .def = "off",
     .help = "ttft: charge the reuse a placement pushes past the worker's LRU edge (cost: in its "
             "cost; tie: among near-equal costs; off)",
     .metavar = "RULE", .choices = lru_edges, .flags = KVR_OPT_RELOAD},
    ROW(decode_ahead, KVR_OPT_BOOL, 0, 1, "false",
        "ttft: the requests queued ahead of a request decode while it prefills (their context "
        "slows its prefill)"),
    ROW(tie_from_error, KVR_OPT_BOOL, 0, 1, "false",
        "ttft: past a predicted second, costs within the model's measured error of the lowest "
        "tie too"),
    ROW(max_bookings, KVR_OPT_U64, 0, 18446744073709551615.0, "262144",
        "active bookings at most; /route beyond it gets 429 (0: unlimited)"),
    ROW(decode_expiry_factor, KVR_OPT_DOUBLE, 0, HUGE_VAL, "4",
        "a booking ages out this many predicted decodes after /prefill_done (0: TTL only)"),
    ROW(approx_ttl_s, KVR_OPT_DOUBLE, 0.001, HUGE_VAL, "120",
        "workers without KV events: a routed block is forgotten after this many seconds"),
    ROW(approx_max_blocks, KVR_OPT_U64, 1, 18446744073709551615.0, "32768",
        "workers without KV events: routed blocks kept per (worker, rank), oldest go first"),
    START_ROW(clock_from_requests, KVR_OPT_BOOL, 0, 1, "false",
        "simulators only: the clock is the time_s the requests carry"),
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

int kvr_router_config_parse(kvr_router_config *cfg, const char *key, const char *value)
{
    size_t n;
    const kvr_option *rows = kvr_router_options(&n);
    const kvr_option *o = cfg && key && value ? kvr_opt_find(rows, n, key) : NULL;
    char err[160];
    return o && kvr_opt_set_text(o, cfg, value, err, sizeof err) == 0 ? 0 : -1;
}
