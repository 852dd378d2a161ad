/* Baseline policies and the virtual-time model of `kvrouter sim`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#include "sim/approx_tree.h"
#include "sim/judge.h"
#include "sim/sim.h"

typedef struct {
    kvr_trace trace;
    uint64_t ids[64][4];
} mini_trace;

/* n requests, request i at t_ms[i] with distinct content unless shared. */
static void mini(mini_trace *m, size_t n, const double *t_ms, const uint32_t *osl,
                 uint32_t input_len, bool shared)
{
    memset(m, 0, sizeof *m);
    m->trace.reqs = calloc(n, sizeof *m->trace.reqs);
    assert_non_null(m->trace.reqs);
    m->trace.n = n;
    for (size_t i = 0; i < n; i++) {
        kvr_trace_request *r = &m->trace.reqs[i];
        for (int k = 0; k < 4; k++)
            m->ids[i][k] = shared ? (uint64_t)k : 1000 * (i + 1) + (uint64_t)k;
        r->hash_ids = m->ids[i];
        r->n_hash_ids = 4;
        r->timestamp_ms = t_ms ? t_ms[i] : 0;
        r->input_length = input_len;
        r->output_length = osl ? osl[i] : 10;
    }
}

static void base_config(kvr_sim_config *c, size_t engines)
{
    kvr_sim_config_defaults(c);
    c->engines = engines;
    c->capacity = 4096;
}

/* Runs one policy over a mini trace on `engines` fresh engines. */
static void run_mini(mini_trace *m, size_t engines, kvr_sim_policy p, uint32_t *choices,
                     kvr_sim_result *r)
{
    kvr_sim_workload wl;
    assert_int_equal(kvr_sim_workload_init(&wl, &m->trace, 0, 1), 0);
    kvr_sim_config c;
    base_config(&c, engines);
    c.choices = choices;
    char err[256];
    assert_int_equal(kvr_sim_run(&c, &wl, p, r, err, sizeof err), 0);
    kvr_sim_workload_free(&wl);
}

static void test_round_robin_cycles(void **state)
{
    (void)state;
    mini_trace m;
    mini(&m, 10, NULL, NULL, 600, false);
    uint32_t choices[10];
    kvr_sim_result r;
    run_mini(&m, 4, KVR_SIM_ROUND_ROBIN, choices, &r);
    for (uint32_t i = 0; i < 10; i++)
        assert_int_equal(choices[i], i % 4);
    assert_int_equal(r.requests, 10);
    /* 3,3,2,2 requests per worker: max/mean = 3 / 2.5 */
    assert_true(fabs(r.max_mean_requests - 1.2) < 1e-9);
    assert_true(fabs(r.max_mean_load - 1.2) < 1e-9); /* equal prompts: same work */
    free(m.trace.reqs);
}

static void test_least_loaded_picks_least_loaded(void **state)
{
    (void)state;
    /* Four long requests at t=0 fill the four workers; the one on worker 1
     * finishes quickly, so the request at t=100 s must go there. */
    double t[6] = {0, 0, 0, 0, 100000, 100000};
    uint32_t osl[6] = {1000000, 1, 1000000, 1000000, 1000000, 1000000};
    mini_trace m;
    mini(&m, 6, t, osl, 600, false);
    uint32_t choices[6];
    kvr_sim_result r;
    run_mini(&m, 4, KVR_SIM_LEAST_LOADED, choices, &r);
    assert_int_equal(choices[0], 0);
    assert_int_equal(choices[1], 1);
    assert_int_equal(choices[2], 2);
    assert_int_equal(choices[3], 3);
    assert_int_equal(choices[4], 1);
    assert_int_not_equal(choices[5], 1); /* worker 1 is busy again: a tie among the others */
    free(m.trace.reqs);
}

static void test_random_is_seeded(void **state)
{
    (void)state;
    mini_trace m;
    mini(&m, 40, NULL, NULL, 600, false);
    uint32_t a[40], b[40];
    kvr_sim_result r;
    run_mini(&m, 4, KVR_SIM_RANDOM, a, &r);
    run_mini(&m, 4, KVR_SIM_RANDOM, b, &r);
    assert_memory_equal(a, b, sizeof a);
    bool used[4] = {0};
    for (int i = 0; i < 40; i++) {
        assert_true(a[i] < 4);
        used[a[i]] = true;
    }
    assert_true(used[0] && used[1] && used[2] && used[3]);
    free(m.trace.reqs);
}

/* Two identical 1000-token prompts at t=0 on one engine: the second reuses
 * 62 whole blocks (992 tokens), waits for the first prefill (1000 tokens at
 * 20000 tok/s = 50 ms) and prefills 8 tokens while the first decodes (10
 * output tokens; its mean context 1005 tokens at 50 tok/s reads
 * 1005 x 50 / 8e6 of the GPU's time): 0.4 ms x (1 + 1005 x 50 / 8e6). */
static void test_hit_and_ttft_accounting(void **state)
{
    (void)state;
    mini_trace m;
    mini(&m, 2, NULL, NULL, 1000, true);
    kvr_sim_result r;
    run_mini(&m, 1, KVR_SIM_ROUND_ROBIN, NULL, &r);
    assert_int_equal(r.prompt_tokens, 2000);
    assert_int_equal(r.reused_tokens, 992);
    assert_true(fabs(r.hit_rate - 0.496) < 1e-12);
    assert_true(fabs(r.ttft_p50_ms - 50.0) < 1e-6);
    assert_true(fabs(r.ttft_p99_ms - (50.0 + 0.4 * (1 + 1005.0 * 50 / 8e6))) < 1e-6);
    assert_true(fabs(r.max_mean_load - 1.0) < 1e-12);
    assert_true(fabs(r.max_mean_requests - 1.0) < 1e-12);
    free(m.trace.reqs);
}

/* requests_out: one line per request, whose slots are the choices and whose
 * tokens add up to the run's totals. */
static void test_requests_out_adds_up(void **state)
{
    (void)state;
    mini_trace m;
    double t[6] = {0, 0, 10, 10, 20, 20};
    mini(&m, 6, t, NULL, 1000, true);
    kvr_sim_workload wl;
    assert_int_equal(kvr_sim_workload_init(&wl, &m.trace, 0, 1), 0);
    kvr_sim_config c;
    base_config(&c, 3);
    uint32_t choices[6];
    c.choices = choices;
    char *buf = NULL;
    size_t len = 0;
    c.requests_out = open_memstream(&buf, &len);
    assert_non_null(c.requests_out);
    kvr_sim_result r;
    char err[256];
    assert_int_equal(kvr_sim_run(&c, &wl, KVR_SIM_ROUND_ROBIN, &r, err, sizeof err), 0);
    assert_int_equal(fclose(c.requests_out), 0);
    uint64_t prompt = 0, reused = 0;
    size_t lines = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char pol[32];
        size_t req, slot, images;
        unsigned long long p, u;
        double at;
        assert_int_equal(sscanf(line, "%31s %zu %zu %llu %llu %zu %lf", pol, &req, &slot, &p,
                                &u, &images, &at),
                         7);
        assert_string_equal(pol, "round_robin");
        assert_int_equal(req, lines);
        assert_int_equal(slot, choices[req]);
        assert_int_equal(p, 1000);
        assert_int_equal(images, 0);
        assert_true(fabs(at - t[req] / 1000.0) < 1e-9);
        prompt += p;
        reused += u;
        lines++;
    }
    assert_int_equal(lines, 6);
    assert_int_equal(prompt, r.prompt_tokens);
    assert_int_equal(reused, r.reused_tokens);
    assert_true(reused > 0); /* the shared prefix comes back on each slot's second request */
    free(buf);
    kvr_sim_workload_free(&wl);
    free(m.trace.reqs);
}

static void test_approx_tree_rules(void **state)
{
    (void)state;
    kvr_sim_approx *a = kvr_sim_approx_create(4);
    assert_non_null(a);
    uint32_t p[320], q[320];
    for (int i = 0; i < 320; i++) {
        p[i] = (uint32_t)i + 1;
        q[i] = (uint32_t)i + 50000;
    }
    uint32_t load[4] = {3, 2, 5, 4};
    assert_int_equal(kvr_sim_approx_insert(a, 2, p, 320), 0);
    assert_int_equal(kvr_sim_approx_match(a, 2, p, 320), 320);
    assert_int_equal(kvr_sim_approx_match(a, 0, p, 320), 0);
    /* Best match above 0.3 of the prompt wins despite a higher load. */
    assert_int_equal(kvr_sim_approx_pick(a, p, 320, load), 2);
    /* Only 80 of 320 tokens shared (0.25): least loaded instead. */
    uint32_t mix[320];
    memcpy(mix, p, 80 * sizeof *mix);
    memcpy(mix + 80, q, 240 * sizeof *mix);
    assert_int_equal(kvr_sim_approx_match(a, 2, mix, 320), 80);
    assert_int_equal(kvr_sim_approx_pick(a, mix, 320, load), 1);
    /* No match: least loaded. */
    assert_int_equal(kvr_sim_approx_pick(a, q, 320, load), 1);
    /* Imbalance guard: 100 - 10 > 64 and 100 > 1.5 * 10: least loaded. */
    uint32_t skew[4] = {40, 30, 100, 10};
    assert_int_equal(kvr_sim_approx_pick(a, p, 320, skew), 3);
    /* Under either threshold the match wins. */
    uint32_t abs_ok[4] = {40, 30, 70, 10}; /* 70 - 10 = 60 <= 64 */
    assert_int_equal(kvr_sim_approx_pick(a, p, 320, abs_ok), 2);
    uint32_t rel_ok[4] = {100, 100, 140, 95}; /* 140 <= 1.5 * 95 */
    assert_int_equal(kvr_sim_approx_pick(a, p, 320, rel_ok), 2);
    kvr_sim_approx_destroy(a);
}

/* On a real trace slice with small caches, the oracle's hit rate bounds
 * every baseline's, and every rate is a fraction. */
/* The first n requests of the conversation trace. */
static void load_trace(kvr_trace *t, size_t n)
{
    char err[256];
    assert_int_equal(
        kvr_trace_load(kvr_test_path("data/conversation_trace.jsonl"), n, t, err, sizeof err), 0);
}

static void test_oracle_bounds_baselines(void **state)
{
    (void)state;
    kvr_trace t;
    char err[256];
    load_trace(&t, 300);
    kvr_sim_workload wl;
    assert_int_equal(kvr_sim_workload_init(&wl, &t, 0, 1), 0);
    kvr_sim_config c;
    base_config(&c, 4);
    c.capacity = 512;
    c.hicache = 256;
    kvr_sim_result res[KVR_SIM_POLICY_COUNT];
    for (int p = KVR_SIM_ROUND_ROBIN; p < KVR_SIM_POLICY_COUNT; p++) {
        assert_int_equal(kvr_sim_run(&c, &wl, (kvr_sim_policy)p, &res[p], err, sizeof err), 0);
        assert_int_equal(res[p].requests, 300);
        assert_true(res[p].hit_rate >= 0 && res[p].hit_rate <= 1);
        assert_true(res[p].gpu_hit_rate <= res[p].hit_rate);
        assert_true(res[p].max_mean_load >= 1.0);
        assert_true(res[p].ttft_p50_ms > 0 && res[p].ttft_p50_ms <= res[p].ttft_p99_ms);
    }
    for (int p = KVR_SIM_ROUND_ROBIN; p < KVR_SIM_ORACLE; p++)
        assert_true(res[KVR_SIM_ORACLE].hit_rate >= res[p].hit_rate);
    /* Conversations come back within these 300 requests (8% of prompt
     * tokens could be reused); small caches spread round-robin lose them. */
    assert_true(res[KVR_SIM_ORACLE].hit_rate > 0.05);
    assert_true(res[KVR_SIM_ORACLE].hit_rate > res[KVR_SIM_ROUND_ROBIN].hit_rate + 0.02);
    /* Deterministic: the same run again gives the same figures. */
    kvr_sim_result again;
    assert_int_equal(kvr_sim_run(&c, &wl, KVR_SIM_APPROX_TREE, &again, err, sizeof err), 0);
    assert_true(again.hit_rate == res[KVR_SIM_APPROX_TREE].hit_rate);
    assert_true(again.ttft_p99_ms == res[KVR_SIM_APPROX_TREE].ttft_p99_ms);
    kvr_sim_workload_free(&wl);
    kvr_trace_free(&t);
}

/* Round robin over 4 engines on one shared 600-token prompt: request 0
 * finds nothing anywhere, requests 1-3 miss the 592 tokens engine 0 holds,
 * requests 4-7 land where they are cached. With an image at tokens
 * 32..288 and every engine Kimi engine_wide, a router bound by SPEC §5 sees
 * only the 2 blocks before it. */
static void test_diagnosis_best_and_visible(void **state)
{
    (void)state;
    mini_trace m;
    mini(&m, 8, NULL, NULL, 600, true);
    for (int kimi = 0; kimi <= 1; kimi++) {
        kvr_sim_workload wl;
        assert_int_equal(kvr_sim_workload_init(&wl, &m.trace, kimi ? 1.0 : 0, 1), 0);
        kvr_sim_config c;
        base_config(&c, 4);
        c.diagnose = true;
        c.kimi_share = kimi;
        kvr_sim_result r;
        char err[256];
        assert_int_equal(kvr_sim_run(&c, &wl, KVR_SIM_ROUND_ROBIN, &r, err, sizeof err), 0);
        assert_int_equal(r.reused_tokens, 4 * 592);
        assert_int_equal(r.diag.requests, 8);
        assert_int_equal(r.diag.best_tokens, 7 * 592);
        assert_int_equal(r.diag.below_best, 3);
        assert_int_equal(r.diag.best_shortfall, 3 * 592);
        /* all three misses were their engine's first request */
        assert_int_equal(r.diag.warmup_below_best, 3);
        assert_int_equal(r.diag.warmup_shortfall, 3 * 592);
        assert_int_equal(r.diag.visible_tokens, kimi ? 7 * 32 : 7 * 592);
        assert_int_equal(r.diag.below_visible, 3);
        assert_int_equal(r.diag.visible_shortfall, kimi ? 3 * 32 : 3 * 592);
        assert_int_equal(r.diag.mm_requests, kimi ? 8 : 0);
        assert_int_equal(r.diag.mm_on_kimi, kimi ? 8 : 0);
        assert_int_equal(r.diag.mm_reused_tokens, kimi ? 4 * 592 : 0);
        kvr_sim_workload_free(&wl);
    }
    free(m.trace.reqs);
}

/* Round robin over 2 engines on prompts a, a, b, b: request 1 misses a on
 * engine 1's first request (warm-up), request 3 misses b on engine 1's
 * second (a choice below the best). The judge counts only the second. */
static void test_diagnosis_warmup_is_each_slots_first_request(void **state)
{
    (void)state;
    uint64_t a[] = {1, 2}, b[] = {3, 4};
    kvr_trace_request reqs[] = {
        {0, 2 * 512, 10, 2, a},
        {0, 2 * 512, 10, 2, a},
        {0, 2 * 512, 10, 2, b},
        {0, 2 * 512, 10, 2, b},
    };
    kvr_trace t = {reqs, 4};
    kvr_sim_workload wl;
    assert_int_equal(kvr_sim_workload_init(&wl, &t, 0, 1), 0);
    kvr_sim_config c;
    base_config(&c, 2);
    c.diagnose = true;
    kvr_sim_result res[KVR_SIM_POLICY_COUNT];
    memset(res, 0, sizeof res);
    char err[256];
    assert_int_equal(kvr_sim_run(&c, &wl, KVR_SIM_ROUND_ROBIN, &res[KVR_SIM_KVROUTER], err,
                                 sizeof err),
                     0);
    const kvr_sim_diagnosis *d = &res[KVR_SIM_KVROUTER].diag;
    assert_int_equal(d->below_best, 2);
    assert_int_equal(d->warmup_below_best, 1);
    assert_true(d->warmup_shortfall > 0);
    assert_int_equal(d->best_shortfall, 2 * d->warmup_shortfall);
    /* Judged as kvrouter's run: the gap past warm-up is the second miss. */
    bool which[KVR_SIM_POLICY_COUNT] = {false};
    which[KVR_SIM_KVROUTER] = true;
    kvr_sim_verdict v;
    kvr_sim_judge(res, which, &v);
    assert_true(v.judged);
    double pct = 100.0 / (double)res[KVR_SIM_KVROUTER].prompt_tokens;
    assert_true(fabs(v.warmup - (double)d->warmup_shortfall * pct) < 1e-9);
    assert_true(fabs(v.best - v.hit - v.warmup - v.gap) < 1e-9);
    assert_true(fabs(v.gap - (double)d->warmup_shortfall * pct) < 1e-9);
    assert_true(v.gap > KVR_SIM_JUDGE_MAX_GAP_POINTS); /* 4 small requests: a large share */
    assert_true(v.fails & KVR_SIM_FAIL_GAP);
    /* Without its second miss (the diagnosis of a run that only warmed its
     * slots) the gap is 0 and passes, although best - hit is not. */
    res[KVR_SIM_KVROUTER].diag.best_shortfall -= d->warmup_shortfall;
    res[KVR_SIM_KVROUTER].diag.best_tokens -= d->warmup_shortfall;
    kvr_sim_judge(res, which, &v);
    assert_true(fabs(v.gap) < 1e-9);
    assert_true(v.best - v.hit > KVR_SIM_JUDGE_MAX_GAP_POINTS);
    assert_false(v.fails & KVR_SIM_FAIL_GAP);
    kvr_sim_workload_free(&wl);
}

/* A request's image goes in the last full block it adds: never in the
 * system prompt a conversation's first request also adds, never in a
 * partial last block (no later turn shares it), and later turns carry it. */
static void test_image_in_newest_full_block(void **state)
{
    (void)state;
    uint64_t a[] = {1, 11, 12}, b[] = {1, 21, 22}, c[] = {1, 11, 12, 13}, d[] = {1, 11, 12, 13, 14};
    kvr_trace_request reqs[] = {
        {0, 3 * 512, 10, 3, a},       /* system prompt 1 + 2 full blocks */
        {0, 2 * 512 + 300, 10, 3, b}, /* last block partial */
        {0, 4 * 512, 10, 4, c},       /* a's next turn */
        {0, 4 * 512 + 100, 10, 5, d}, /* only a partial block is new */
    };
    kvr_trace t = {reqs, 4};
    kvr_sim_workload wl;
    assert_int_equal(kvr_sim_workload_init(&wl, &t, 1.0, 1), 0);
    kvr_sim_request r = {0};
    size_t want_items[] = {1, 1, 2, 2};
    uint32_t want_start[4][2] = {{2 * 512 + KVR_SIM_IMAGE_OFFSET},
                                 {1 * 512 + KVR_SIM_IMAGE_OFFSET},
                                 {2 * 512 + KVR_SIM_IMAGE_OFFSET, 3 * 512 + KVR_SIM_IMAGE_OFFSET},
                                 {2 * 512 + KVR_SIM_IMAGE_OFFSET, 3 * 512 + KVR_SIM_IMAGE_OFFSET}};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(kvr_sim_workload_build(&wl, i, &r), 0);
        assert_int_equal(r.n_items, want_items[i]);
        for (size_t k = 0; k < r.n_items; k++) {
            assert_int_equal(r.items[k].start, want_start[i][k]);
            assert_int_equal(r.items[k].end, r.items[k].start + KVR_SIM_IMAGE_TOKENS);
            assert_int_equal(r.route[r.items[k].start], KVR_SIM_IMAGE_PLACEHOLDER);
        }
    }
    kvr_sim_request_free(&r);
    kvr_sim_workload_free(&wl);
}

static void test_kimi_share_spreads(void **state)
{
    (void)state;
    kvr_sim_config c;
    base_config(&c, 8);
    c.kimi_share = 0.5;
    int kimi = 0;
    for (size_t e = 0; e < 8; e++)
        kimi += kvr_sim_engine_is_kimi(&c, e);
    assert_int_equal(kimi, 4);
    assert_false(kvr_sim_engine_is_kimi(&c, 0));
    assert_true(kvr_sim_engine_is_kimi(&c, 1));
    c.kimi_share = 0;
    assert_false(kvr_sim_engine_is_kimi(&c, 3));
}

/* What the matrix's shapes vary that the baselines cannot see (README,
 * "What the shapes vary"): a dp rank is a worker of its own, so 4 engines
 * x 2 ranks are 8 engines; and images, Kimi engines and the vLLM wire change
 * what a router must translate, not what an engine caches or reuses (each
 * engine caches its own form of the same image every turn). Every baseline
 * gives the same figures on the three fleets; the options are applied all
 * the same (the third fleet's requests carry images, some on Kimi slots). */
static void test_shapes_the_baselines_cannot_tell_apart(void **state)
{
    (void)state;
    kvr_trace t;
    char err[256];
    load_trace(&t, 300);
    kvr_sim_workload text, media;
    assert_int_equal(kvr_sim_workload_init(&text, &t, 0, 1), 0);
    assert_int_equal(kvr_sim_workload_init(&media, &t, 0.2, 1), 0);
    assert_true(kvr_u64map_len(&media.image_ids) > 0);
    kvr_sim_config c[3];
    for (int k = 0; k < 3; k++) {
        base_config(&c[k], 8);
        c[k].capacity = 512;
        c[k].diagnose = true;
    }
    c[1].engines = 4;
    c[1].dp = 2;
    c[2].kimi_share = 0.5;
    c[2].wire = KVR_WIRE_VLLM;
    const kvr_sim_workload *wl[3] = {&text, &text, &media};
    kvr_sim_policy pols[] = {KVR_SIM_ROUND_ROBIN, KVR_SIM_RANDOM, KVR_SIM_LEAST_LOADED,
                             KVR_SIM_APPROX_TREE};
    for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++) {
        kvr_sim_result r[3];
        for (int k = 0; k < 3; k++)
            assert_int_equal(kvr_sim_run(&c[k], wl[k], pols[p], &r[k], err, sizeof err), 0);
        assert_true(r[0].reused_tokens > 0);
        for (int k = 1; k < 3; k++) {
            assert_int_equal(r[k].reused_tokens, r[0].reused_tokens);
            assert_true(r[k].max_mean_load == r[0].max_mean_load);
            assert_true(r[k].ttft_p50_ms == r[0].ttft_p50_ms);
            assert_true(r[k].ttft_p99_ms == r[0].ttft_p99_ms);
        }
        assert_int_equal(r[0].diag.mm_requests, 0);
        assert_true(r[2].diag.mm_requests > 0 && r[2].diag.mm_on_kimi > 0);
    }
    kvr_sim_workload_free(&text);
    kvr_sim_workload_free(&media);
    kvr_trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_robin_cycles),
        cmocka_unit_test(test_least_loaded_picks_least_loaded),
        cmocka_unit_test(test_random_is_seeded),
        cmocka_unit_test(test_hit_and_ttft_accounting),
        cmocka_unit_test(test_requests_out_adds_up),
        cmocka_unit_test(test_approx_tree_rules),
        cmocka_unit_test(test_oracle_bounds_baselines),
        cmocka_unit_test(test_kimi_share_spreads),
        cmocka_unit_test(test_diagnosis_best_and_visible),
        cmocka_unit_test(test_diagnosis_warmup_is_each_slots_first_request),
        cmocka_unit_test(test_image_in_newest_full_block),
        cmocka_unit_test(test_shapes_the_baselines_cannot_tell_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
