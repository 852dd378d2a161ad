#include "sim/sim.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "kvrouter/hash.h"
#include "sim/approx_tree.h"
#include "mock/clock.h"
#include "sim/diagnose.h"
#include "mock/engine.h"
#include "sim/kvrouter_policy.h"
#include "sim/serving.h"
#include "util/rng.h"
#include "util/u64map.h"

static const char *const policy_names[KVR_SIM_POLICY_COUNT] = {
    "kvrouter", "round_robin", "random", "least_loaded", "approx_tree", "oracle"};

const char *kvr_sim_policy_name(kvr_sim_policy p)
{
    return (unsigned)p < KVR_SIM_POLICY_COUNT ? policy_names[p] : "?";
}

int kvr_sim_policy_from_name(const char *name)
{
    for (int i = 0; i < KVR_SIM_POLICY_COUNT; i++)
        if (strcmp(name, policy_names[i]) == 0)
            return i;
    return -1;
}

void kvr_sim_config_defaults(kvr_sim_config *c)
{
    memset(c, 0, sizeof *c);
    c->engines = 8;
    c->dp = 1;
    c->block_size = 16;
    c->capacity = 16384;
    c->wire = KVR_WIRE_SGLANG;
    c->seed = 1;
    c->speed = 1.0;
    c->prefill_tps = 20000.0;
    c->decode_tps = 50.0;
    c->kv_read_tps = 8e6;
    c->host_load_cost = 0.2;
    c->kv_admission = true;
    c->model_name = "sim-model";
    c->sync_every = 1;
    c->sync_timeout_ms = 5000;
}

bool kvr_sim_engine_is_kimi(const kvr_sim_config *c, size_t engine)
{
    if (c->kimi_share <= 0)
        return false;
    return floor((double)(engine + 1) * c->kimi_share) > floor((double)engine * c->kimi_share);
}

/* ---- one run ---- */

typedef struct {
    const kvr_sim_config *cfg;
    const kvr_sim_workload *wl;
    kvr_sim_policy pol;
    size_t n_slots;
    kvr_sim_engine **eng;
    bool *kimi;
    uint64_t *assigned, *prefill_tokens;
    kvr_sim_serving serving;
    uint64_t rng;
    size_t rr_next;
    kvr_sim_approx *approx;
    uint32_t *running; /* per slot, for approx_tree */
    kvr_sim_kr *kr;
    void *zctx;
    kvr_sim_request req;
} sim_run;

/* Fewer running requests, then fewer tokens still to prefill. */
static bool lighter(const sim_run *s, size_t a, size_t b)
{
    const kvr_sim_worker *x = &s->serving.w[a], *y = &s->serving.w[b];
    return x->running < y->running || (x->running == y->running && x->queued < y->queued);
}

static size_t least_loaded(const sim_run *s)
{
    size_t best = 0;
    for (size_t w = 1; w < s->n_slots; w++)
        if (lighter(s, w, best))
            best = w;
    return best;
}

static const uint64_t *engine_tokens(const sim_run *s, size_t slot)
{
    return s->kimi[slot] ? s->req.wide : s->req.legacy;
}

/* Oracle: every engine has unbounded capacity (nothing is ever evicted), and
 * the request goes to the worker holding the longest cached prefix of it, in
 * that worker's own token form, read from the engine itself (no event lag);
 * ties (e.g. no match anywhere) go to the least loaded. With nothing evicted,
 * the longest prefix over workers equals the longest prefix shared with any
 * earlier request, so on text this is the reuse of one infinite cache: no
 * policy on finite caches can reuse more. */
static size_t oracle_pick(sim_run *s)
{
    size_t best = SIZE_MAX, best_m = 0;
    for (size_t w = 0; w < s->n_slots; w++) {
        kvr_sim_hit hit;
        kvr_sim_engine_peek(s->eng[w], engine_tokens(s, w), s->req.n, &hit);
        size_t m = hit.gpu_blocks + hit.cpu_blocks;
        if (best == SIZE_MAX || m > best_m || (m == best_m && lighter(s, w, best))) {
            best = w;
            best_m = m;
        }
    }
    return best;
}

static long pick(sim_run *s, size_t idx, uint32_t osl, double t)
{
    switch (s->pol) {
    case KVR_SIM_ROUND_ROBIN: {
        size_t w = s->rr_next;
        s->rr_next = (s->rr_next + 1) % s->n_slots;
        return (long)w;
    }
    case KVR_SIM_RANDOM:
        return (long)(kvr_splitmix64(&s->rng) % s->n_slots);
    case KVR_SIM_LEAST_LOADED:
        return (long)least_loaded(s);
    case KVR_SIM_APPROX_TREE:
        for (size_t w = 0; w < s->n_slots; w++)
            s->running[w] = s->serving.w[w].running;
        return (long)kvr_sim_approx_pick(s->approx, s->req.route, s->req.n, s->running);
    case KVR_SIM_ORACLE:
        return (long)oracle_pick(s);
    case KVR_SIM_KVROUTER: {
        long w = kvr_sim_kr_route(s->kr, idx, &s->req, osl, t);
        /* A failed /route is counted; the request still runs somewhere so
         * the comparison keeps the same work. */
        return w >= 0 ? w : (long)least_loaded(s);
    }
    default:
        return -1;
    }
}

/* The router hears of a request's prefill end and its end at those virtual
 * instants, as a gateway would tell it. */
static void on_prefill_done(void *ud, uint32_t req, uint32_t slot, double t)
{
    sim_run *s = ud;
    (void)slot;
    if (s->kr)
        kvr_sim_kr_prefill_done(s->kr, req, t);
}

static void on_finished(void *ud, uint32_t req, uint32_t slot, double t)
{
    sim_run *s = ud;
    (void)slot;
    if (s->kr)
        kvr_sim_kr_free(s->kr, req, t);
}

static size_t total_blocks(const kvr_sim_config *cfg, const kvr_sim_workload *wl)
{
    size_t total = 0;
    for (size_t i = 0; i < wl->trace->n; i++) {
        size_t n = kvr_trace_tokens(&wl->trace->reqs[i], NULL, 0);
        total += n / cfg->block_size + 1;
    }
    return total + 1;
}

static void run_free(sim_run *s)
{
    kvr_sim_kr_destroy(s->kr);
    if (s->eng)
        for (size_t i = 0; i < s->n_slots; i++)
            kvr_sim_engine_destroy(s->eng[i]);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    kvr_sim_approx_destroy(s->approx);
    free(s->eng);
    free(s->kimi);
    free(s->running);
    free(s->assigned);
    free(s->prefill_tokens);
    kvr_sim_serving_free(&s->serving);
    kvr_sim_request_free(&s->req);
}

/* Ranks of one engine publish on consecutive ports (SPEC §2): with dp > 1
 * pick a base port and retry the whole engine elsewhere if one is taken. */
static int create_engines(sim_run *s, char *err, size_t errlen)
{
    const kvr_sim_config *cfg = s->cfg;
    bool publish = s->pol == KVR_SIM_KVROUTER;
    bool oracle = s->pol == KVR_SIM_ORACLE;
    if (publish && !(s->zctx = zmq_ctx_new())) {
        snprintf(err, errlen, "zmq_ctx_new failed");
        return -1;
    }
    size_t cap = oracle ? total_blocks(cfg, s->wl) : cfg->capacity;
    uint64_t port_rng = cfg->seed ^ (uint64_t)time(NULL);
    for (size_t e = 0; e < cfg->engines; e++) {
        for (int attempt = 0;; attempt++) {
            unsigned base = 20000 + (unsigned)(kvr_splitmix64(&port_rng) % 30000);
            size_t r;
            for (r = 0; r < cfg->dp; r++) {
                char pub[64], rep[64];
                kvr_sim_engine_config ec = {
                    .dp_rank = (uint32_t)r,
                    .block_size = cfg->block_size,
                    .gpu_capacity = cap,
                    .cpu_capacity = oracle ? 0 : cfg->hicache,
                    .eagle = cfg->eagle,
                    .wire = cfg->wire,
                    .zctx = publish ? s->zctx : NULL,
                    .pub_bind = "tcp://127.0.0.1:*",
                    .replay_bind = "tcp://127.0.0.1:*",
                };
                if (publish && cfg->dp > 1) {
                    snprintf(pub, sizeof pub, "tcp://127.0.0.1:%u", base + (unsigned)r);
                    snprintf(rep, sizeof rep, "tcp://127.0.0.1:%u", base + 1000 + (unsigned)r);
                    ec.pub_bind = pub;
                    ec.replay_bind = rep;
                }
                size_t slot = e * cfg->dp + r;
                s->eng[slot] = kvr_sim_engine_create(&ec, err, errlen);
                if (!s->eng[slot])
                    break;
                s->kimi[slot] = kvr_sim_engine_is_kimi(cfg, e);
            }
            if (r == cfg->dp)
                break;
            for (size_t k = 0; k < r; k++) {
                kvr_sim_engine_destroy(s->eng[e * cfg->dp + k]);
                s->eng[e * cfg->dp + k] = NULL;
            }
            if (!(publish && cfg->dp > 1) || attempt >= 20)
                return -1;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    /* nearest rank */
    size_t k = (size_t)ceil(p / 100.0 * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return sorted[k - 1];
}

static double max_over_mean(const uint64_t *v, size_t n)
{
    uint64_t mx = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > mx)
            mx = v[i];
    }
    return sum ? (double)mx * (double)n / (double)sum : 0.0;
}

int kvr_sim_run(const kvr_sim_config *cfg, const kvr_sim_workload *wl, kvr_sim_policy pol,
                kvr_sim_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (cfg->engines == 0 || cfg->dp == 0 || cfg->block_size == 0 || cfg->speed <= 0 ||
        cfg->prefill_tps <= 0 || cfg->decode_tps <= 0) {
        snprintf(err, errlen, "engines, dp, block size, speed and rates must be positive");
        return -1;
    }
    double t0 = kvr_sim_seconds(CLOCK_MONOTONIC);
    sim_run s = {.cfg = cfg, .wl = wl, .pol = pol, .rng = cfg->seed};
    s.n_slots = cfg->engines * cfg->dp;
    size_t n = wl->trace->n;
    s.eng = calloc(s.n_slots, sizeof *s.eng);
    s.kimi = calloc(s.n_slots, sizeof *s.kimi);
    s.running = calloc(s.n_slots, sizeof *s.running);
    s.assigned = calloc(s.n_slots, sizeof *s.assigned);
    s.prefill_tokens = calloc(s.n_slots, sizeof *s.prefill_tokens);
    kvr_sim_serving_params sp = {cfg->prefill_tps, cfg->decode_tps, cfg->kv_read_tps,
                                 cfg->kv_admission ? cfg->capacity : 0};
    int rc = -1;
    if (!s.eng || !s.kimi || !s.running || !s.assigned || !s.prefill_tokens ||
        kvr_sim_serving_init(&s.serving, &sp, s.n_slots, n) != 0) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    s.serving.prefill_done = on_prefill_done;
    s.serving.finished = on_finished;
    s.serving.ud = &s;
    if (create_engines(&s, err, errlen) != 0)
        goto done;
    if (pol == KVR_SIM_APPROX_TREE && !(s.approx = kvr_sim_approx_create(s.n_slots))) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (pol == KVR_SIM_KVROUTER) {
        if (!cfg->router_url) {
            snprintf(err, errlen, "the kvrouter policy needs a router URL");
            goto done;
        }
        s.kr = kvr_sim_kr_create(cfg, s.eng, s.n_slots, err, errlen);
        if (!s.kr)
            goto done;
    }

    uint32_t B = cfg->block_size;
    for (size_t i = 0; i < n; i++) {
        const kvr_trace_request *tr = &wl->trace->reqs[i];
        double t = tr->timestamp_ms / 1000.0 / cfg->speed;
        if (kvr_sim_serving_run_until(&s.serving, t) != 0) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        if (kvr_sim_workload_build(wl, i, &s.req) != 0) {
            snprintf(err, errlen, "out of memory building request %zu", i);
            goto done;
        }
        long w = pick(&s, i, tr->output_length, t);
        if (w < 0 || (size_t)w >= s.n_slots) {
            snprintf(err, errlen, "policy %s picked no worker", kvr_sim_policy_name(pol));
            goto done;
        }
        size_t slot = (size_t)w;
        /* Before serving: the caches as the policy saw them. The chosen
         * slot's peek equals what serving it finds. */
        if (cfg->diagnose && pol != KVR_SIM_ORACLE) {
            kvr_sim_hit seen;
            kvr_sim_engine_peek(s.eng[slot], engine_tokens(&s, slot), s.req.n, &seen);
            uint64_t got = (uint64_t)(seen.gpu_blocks + seen.cpu_blocks) * B;
            kvr_sim_diagnose_request(&out->diag, s.eng, s.kimi, s.n_slots, &s.req, B, cfg->eagle,
                                     slot, got < s.req.n ? got : s.req.n, s.assigned[slot] == 0);
        }
        if (cfg->choices)
            cfg->choices[i] = (uint32_t)slot;
        kvr_sim_hit hit;
        if (kvr_sim_engine_serve(s.eng[slot], engine_tokens(&s, slot), s.req.n, &hit) != 0) {
            snprintf(err, errlen, "engine %zu failed on request %zu", slot, i);
            goto done;
        }
        if (s.approx && kvr_sim_approx_insert(s.approx, slot, s.req.route, s.req.n) != 0) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        if (s.kr)
            kvr_sim_kr_published(s.kr, slot);

        uint64_t prompt = s.req.n;
        uint64_t reused = (uint64_t)(hit.gpu_blocks + hit.cpu_blocks) * B;
        if (reused > prompt)
            reused = prompt;
        uint64_t gpu_reused = (uint64_t)hit.gpu_blocks * B;
        if (gpu_reused > reused)
            gpu_reused = reused;
        uint64_t uncached = prompt - reused;
        out->prompt_tokens += prompt;
        out->reused_tokens += reused;
        if (cfg->requests_out)
            fprintf(cfg->requests_out, "%s %zu %zu %" PRIu64 " %" PRIu64 " %zu %.3f\n",
                    kvr_sim_policy_name(pol), i, slot, prompt, reused, s.req.n_items, t);
        out->gpu_reused_tokens += gpu_reused;

        uint64_t osl = tr->output_length;
        kvr_sim_job job = {
            .arrival = t,
            .work = (double)uncached + cfg->host_load_cost * (double)(reused - gpu_reused),
            .context = (double)prompt + (double)osl / 2.0,
            .kv_blocks = (prompt + osl + B - 1) / B,
            .decode_s = (double)osl / cfg->decode_tps,
            .uncached = uncached,
            .slot = (uint32_t)slot,
        };
        s.assigned[slot]++;
        s.prefill_tokens[slot] += uncached;
        if (kvr_sim_serving_submit(&s.serving, (uint32_t)i, &job) != 0) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        if (cfg->log && n >= 4 && (i + 1) % (n / 4) == 0)
            fprintf(cfg->log, "  %s: %zu/%zu requests\n", kvr_sim_policy_name(pol), i + 1, n);
    }
    if (kvr_sim_serving_run_until(&s.serving, INFINITY) != 0) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (s.kr)
        kvr_sim_kr_sync(s.kr);

    out->ran = true;
    out->requests = n;
    out->hit_rate = out->prompt_tokens ? (double)out->reused_tokens / out->prompt_tokens : 0;
    out->gpu_hit_rate =
        out->prompt_tokens ? (double)out->gpu_reused_tokens / out->prompt_tokens : 0;
    out->max_mean_load = max_over_mean(s.prefill_tokens, s.n_slots);
    out->max_mean_requests = max_over_mean(s.assigned, s.n_slots);
    double sum = 0, *ttft = s.serving.ttft_s;
    for (size_t i = 0; i < n; i++)
        sum += ttft[i] *= 1000.0;
    qsort(ttft, n, sizeof *ttft, cmp_double);
    out->ttft_p50_ms = percentile(ttft, n, 50);
    out->ttft_p99_ms = percentile(ttft, n, 99);
    out->ttft_mean_ms = n ? sum / (double)n : 0;
    if (cfg->diagnose && pol != KVR_SIM_ORACLE)
        kvr_sim_print_diagnosis(stdout, kvr_sim_policy_name(pol), &out->diag, out->prompt_tokens,
                                out->reused_tokens);
    if (s.kr) {
        kvr_sim_kr_stats(s.kr, out);
        kvr_sim_kr_collect(s.kr, out);
    }
    rc = 0;
done:
    run_free(&s);
    out->wall_s = kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
    return rc;
}
