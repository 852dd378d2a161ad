/* `kvrouter sim`: one trace replayed under several routing policies, each on
 * a fresh simulated fleet, in virtual time.
 *
 * Request i arrives at timestamp_ms / speed; the policy picks a worker
 * (engine x dp rank) at arrival; the engine's cache is read and updated at
 * arrival (hit = cached prefix then). How the worker then spends its time
 * -- FIFO prefill of the uncached tokens at a rate that long decodes slow
 * down, HiCache hits copied back at a cost, KV memory that bounds how many
 * requests run at once -- is sim/serving.h; TTFT = prefill end - arrival.
 * A worker's running requests (arrival .. end of decode) are its load for
 * least_loaded / approx_tree (as SGLang's router counts them), and the
 * router hears /prefill_done (with the TTFT) and /free at those virtual
 * instants. Output tokens are not cached (the trace does not say which
 * later prompt blocks they become). */
#ifndef KVR_SIM_SIM_H
#define KVR_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvrouter/wire_encode.h"
#include "mock/workload.h"

typedef enum {
    KVR_SIM_KVROUTER = 0,
    KVR_SIM_ROUND_ROBIN,
    KVR_SIM_RANDOM,
    KVR_SIM_LEAST_LOADED,
    KVR_SIM_APPROX_TREE,
    KVR_SIM_ORACLE,
    KVR_SIM_POLICY_COUNT
} kvr_sim_policy;

const char *kvr_sim_policy_name(kvr_sim_policy p);
int kvr_sim_policy_from_name(const char *name); /* -1 if unknown */

typedef struct {
    size_t engines;
    uint32_t dp;            /* ranks per engine; rank r publishes on base port + r */
    uint32_t block_size;
    size_t capacity;        /* GPU blocks per rank */
    size_t hicache;         /* host blocks per rank, 0 = off */
    double kimi_share;      /* share of engines that are Kimi engine_wide */
    kvr_wire_style wire;
    bool eagle;
    uint64_t seed;
    double speed;           /* trace time is divided by this */
    double prefill_tps;     /* prefill tokens/s per worker */
    double decode_tps;      /* decode tokens/s per request */
    double kv_read_tps;     /* KV context tokens a worker reads per second (sim/serving.h); 0 = decode is free */
    double host_load_cost;  /* a HiCache hit costs this many prefill tokens' time */
    bool kv_admission;      /* a request waits until its KV blocks fit in `capacity` */
    const char *router_url; /* needed by the kvrouter policy */
    const char *model_name;
    unsigned sync_every;    /* kvrouter: wait for the router to apply events every N requests */
    int sync_timeout_ms;
    const char *route_extra; /* extra JSON members for every /route body, e.g. "\"overlap_score_credit\":2" */
    FILE *log;              /* progress lines, or NULL */
    uint32_t *choices;      /* optional: the slot chosen for each request (tests) */
    /* Optional: one line per request served, in KVR_SIM_REQUESTS_HEADER's
     * columns, so two policies' runs can be compared request by request
     * (which returning turns one kept in cache and the other lost). */
    FILE *requests_out;
    bool diagnose;          /* sim/diagnose.h; `kvrouter sim --diagnose` */
} kvr_sim_config;

void kvr_sim_config_defaults(kvr_sim_config *c);

/* kvr_sim_config.requests_out's columns: the policy, the request's position
 * in the replayed slice, the slot it ran on (engine x dp + rank), its prompt
 * and reused (GPU + host hit) tokens, its images, its arrival in trace
 * seconds. */
#define KVR_SIM_REQUESTS_HEADER "policy request slot prompt_tokens reused_tokens images time_s"


/* Sums over requests, in prompt tokens (sim/diagnose.h). */
typedef struct {
    uint64_t requests, best_tokens, visible_tokens;
    uint64_t below_best, best_shortfall, below_visible, visible_shortfall;
    /* Of below_best: requests that were the first their slot served, whose
     * cache was still empty (warming a slot costs any policy that uses it
     * the prefix others held: the system prompt), and their shortfall. */
    uint64_t warmup_below_best, warmup_shortfall;
    uint64_t mm_requests, mm_prompt_tokens, mm_reused_tokens, mm_on_kimi; /* requests with media */
} kvr_sim_diagnosis;

typedef struct {
    bool ran;
    size_t requests;
    uint64_t prompt_tokens, reused_tokens, gpu_reused_tokens;
    double hit_rate;           /* reused prompt tokens / prompt tokens */
    double gpu_hit_rate;       /* the GPU part of it */
    /* Load balance, max over mean across workers (1.0 = perfectly even).
     * load: prefill tokens each worker computed, the work that builds its
     * queue in this model (a cache hit is not work); requests: requests
     * routed to it. */
    double max_mean_load;
    double max_mean_requests;
    double ttft_p50_ms, ttft_p99_ms, ttft_mean_ms;
    double wall_s;
    /* kvrouter policy only */
    uint64_t route_errors, sync_timeouts, http_calls, sync_polls;
    double http_s, sync_s;
    uint64_t router_overlap_tokens; /* what the router believed it reused (gpu) */
    /* The router's own counters for the fleet at the end (GET /workers). */
    uint64_t router_drops, router_wide_tokens, router_mm_excluded, router_seq_gaps;
    char router_drop_detail[256]; /* "reason=n ..." of the nonzero drop reasons */
    kvr_sim_diagnosis diag;       /* filled when cfg->diagnose (not for oracle) */
} kvr_sim_result;

/* Engine e is Kimi engine_wide when the running share crosses an integer:
 * spreads the Kimi engines evenly over the fleet. */
bool kvr_sim_engine_is_kimi(const kvr_sim_config *c, size_t engine);

int kvr_sim_run(const kvr_sim_config *cfg, const kvr_sim_workload *wl, kvr_sim_policy p,
                kvr_sim_result *out, char *err, size_t errlen);

/* Output (report.c). */
void kvr_sim_print_table(FILE *out, const kvr_sim_result *res, const bool *which);
/* One line {"policies": {...}, ...} without a newline. */
char *kvr_sim_json(const kvr_sim_config *cfg, const kvr_sim_result *res, const bool *which);
int kvr_sim_write_svg(const char *path, const kvr_sim_result *res, const bool *which,
                      const char *title);

#endif
