/* Issue 15's verdict on one simulated fleet: does kvrouter, with whatever
 * settings it ran, meet every target against the baselines of the same run?
 * `kvrouter sim --judge` prints it; scripts/matrix.sh collects it per fleet
 * shape and seed. The targets:
 *   - TTFT p50 and p99 no worse than every baseline's (round_robin, random,
 *     least_loaded, approx_tree; those that ran);
 *   - hit rate at least approx_tree's;
 *   - at most 0.3 points below the best prefix the fleet's caches held at
 *     each routing moment (--diagnose of the kvrouter run), past each
 *     slot's first request: a slot's cache is empty until it serves, so
 *     the first request there gives up what others hold (the system
 *     prompt) whichever it is, once per slot, with any policy that uses
 *     every slot (64 slots: 63 x 512 tokens, 0.3 points of a 1,000-request
 *     slice). That warm-up is reported beside the gap, not judged;
 *   - load max/mean at most max(1.25, 1.1 x round_robin's). */
#ifndef KVR_SIM_JUDGE_H
#define KVR_SIM_JUDGE_H

#include <stdbool.h>
#include <stdio.h>

#include "sim/sim.h"

#define KVR_SIM_JUDGE_MAX_GAP_POINTS 0.3

enum {
    KVR_SIM_FAIL_TTFT_P50 = 1u << 0,
    KVR_SIM_FAIL_TTFT_P99 = 1u << 1,
    KVR_SIM_FAIL_HIT = 1u << 2,
    KVR_SIM_FAIL_GAP = 1u << 3,
    KVR_SIM_FAIL_LOAD = 1u << 4,
};

typedef struct {
    bool judged;      /* kvrouter ran, with the diagnosis */
    unsigned fails;   /* KVR_SIM_FAIL_* */
    double hit, approx_hit;         /* percent */
    double best, visible;           /* percent of prompt tokens the caches held (all / SPEC §5) */
    double gap;                     /* best - hit - warmup, points: what is judged */
    double warmup;                  /* the shortfall on each slot's first request, points */
    double load, load_bound;
    double p50, p99;                /* kvrouter's */
    double best_p50, best_p99;      /* the lowest baseline figures */
    int best_p50_policy, best_p99_policy; /* kvr_sim_policy, -1 if none ran */
} kvr_sim_verdict;

void kvr_sim_judge(const kvr_sim_result *res, const bool *which, kvr_sim_verdict *out);
/* One line "judge: pass=0|1 fails=a,b hit=... " of key=value fields. */
void kvr_sim_print_verdict(FILE *out, const kvr_sim_verdict *v);

#endif
