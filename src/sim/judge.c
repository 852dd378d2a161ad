/* kvr_sim_judge: issue 15's targets (sim/judge.h) from one run's results. */
#include "sim/judge.h"

#include <string.h>

static void lowest(const kvr_sim_result *res, const bool *which, bool p99, double *v, int *who)
{
    *who = -1;
    for (int p = 0; p < KVR_SIM_POLICY_COUNT; p++) {
        if (p == KVR_SIM_KVROUTER || p == KVR_SIM_ORACLE || !which[p] || !res[p].ran)
            continue;
        double x = p99 ? res[p].ttft_p99_ms : res[p].ttft_p50_ms;
        if (*who < 0 || x < *v) {
            *v = x;
            *who = p;
        }
    }
}

void kvr_sim_judge(const kvr_sim_result *res, const bool *which, kvr_sim_verdict *out)
{
    memset(out, 0, sizeof *out);
    out->best_p50_policy = out->best_p99_policy = -1;
    const kvr_sim_result *k = &res[KVR_SIM_KVROUTER];
    if (!which[KVR_SIM_KVROUTER] || !k->ran || !k->diag.requests || !k->prompt_tokens)
        return;
    out->judged = true;
    double pct = 100.0 / (double)k->prompt_tokens;
    out->hit = 100.0 * k->hit_rate;
    out->best = (double)k->diag.best_tokens * pct;
    out->visible = (double)k->diag.visible_tokens * pct;
    /* best - hit is the shortfall summed over requests (the chosen slot's
     * peek is what serving it found); summed, so that no rounding of the
     * three percentages makes a 0 gap -0.00 */
    out->warmup = (double)k->diag.warmup_shortfall * pct;
    out->gap = (double)(k->diag.best_shortfall - k->diag.warmup_shortfall) * pct;
    out->load = k->max_mean_load;
    out->p50 = k->ttft_p50_ms;
    out->p99 = k->ttft_p99_ms;
    if (out->gap > KVR_SIM_JUDGE_MAX_GAP_POINTS)
        out->fails |= KVR_SIM_FAIL_GAP;
    const kvr_sim_result *a = &res[KVR_SIM_APPROX_TREE];
    if (which[KVR_SIM_APPROX_TREE] && a->ran) {
        out->approx_hit = 100.0 * a->hit_rate;
        if (k->hit_rate < a->hit_rate)
            out->fails |= KVR_SIM_FAIL_HIT;
    }
    const kvr_sim_result *rr = &res[KVR_SIM_ROUND_ROBIN];
    out->load_bound = 1.25;
    if (which[KVR_SIM_ROUND_ROBIN] && rr->ran && 1.1 * rr->max_mean_load > out->load_bound)
        out->load_bound = 1.1 * rr->max_mean_load;
    if (out->load > out->load_bound)
        out->fails |= KVR_SIM_FAIL_LOAD;
    lowest(res, which, false, &out->best_p50, &out->best_p50_policy);
    lowest(res, which, true, &out->best_p99, &out->best_p99_policy);
    if (out->best_p50_policy >= 0 && out->p50 > out->best_p50)
        out->fails |= KVR_SIM_FAIL_TTFT_P50;
    if (out->best_p99_policy >= 0 && out->p99 > out->best_p99)
        out->fails |= KVR_SIM_FAIL_TTFT_P99;
}

void kvr_sim_print_verdict(FILE *out, const kvr_sim_verdict *v)
{
    if (!v->judged) {
        fprintf(out, "judge: pass=0 fails=not_judged\n");
        return;
    }
    static const char *const names[] = {"ttft_p50", "ttft_p99", "hit", "gap", "load"};
    char fails[64] = "";
    size_t len = 0;
    for (unsigned b = 0; b < sizeof names / sizeof names[0]; b++)
        if (v->fails & (1u << b))
            len += (size_t)snprintf(fails + len, sizeof fails - len, "%s%s", len ? "," : "",
                                    names[b]);
    fprintf(out,
            "judge: pass=%d fails=%s hit=%.2f approx_hit=%.2f best=%.2f visible=%.2f gap=%.2f "
            "warmup=%.2f load=%.3f load_bound=%.3f p50=%.1f best_p50=%.1f best_p50_by=%s p99=%.1f "
            "best_p99=%.1f best_p99_by=%s\n",
            v->fails == 0, len ? fails : "-", v->hit, v->approx_hit, v->best, v->visible, v->gap,
            v->warmup, v->load, v->load_bound, v->p50, v->best_p50,
            v->best_p50_policy >= 0 ? kvr_sim_policy_name((kvr_sim_policy)v->best_p50_policy)
                                    : "-",
            v->p99, v->best_p99,
            v->best_p99_policy >= 0 ? kvr_sim_policy_name((kvr_sim_policy)v->best_p99_policy)
                                    : "-");
}
