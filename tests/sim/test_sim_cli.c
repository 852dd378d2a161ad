/* `kvrouter sim` end to end through the built binary: small runs whose JSON
 * last line must parse, one of them routing through a real `kvrouter serve`
 * (started by the sim itself) over HTTP with events over ZeroMQ. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_support.h"

/* Runs the command; returns its stdout (malloc'd) and exit status. */
static char *run(const char *args, int *status)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s sim --trace %s %s 2>/dev/null", kvr_test_binary(),
             kvr_test_path("data/conversation_trace.jsonl"), args);
    return kvr_test_run(cmd, status);
}

static json_t *policy(json_t *root, const char *name, size_t requests)
{
    json_t *p = json_object_get(json_object_get(root, "policies"), name);
    assert_non_null(p);
    double hit = json_number_value(json_object_get(p, "hit_rate"));
    assert_true(hit >= 0.0 && hit <= 1.0);
    assert_true(json_is_number(json_object_get(p, "max_mean_load")));
    assert_true(json_number_value(json_object_get(p, "max_mean_load")) >= 1.0);
    double p50 = json_number_value(json_object_get(p, "ttft_p50_ms"));
    double p99 = json_number_value(json_object_get(p, "ttft_p99_ms"));
    assert_true(p50 > 0 && p50 <= p99);
    assert_int_equal(json_integer_value(json_object_get(p, "requests")), requests);
    return p;
}

/* Creates an empty file from the mkstemp template path. */
static void temp_file(char *path)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

static void test_baselines_json_and_svg(void **state)
{
    (void)state;
    char svg[] = "/tmp/kvr_sim_chart_XXXXXX";
    temp_file(svg);
    char args[256];
    snprintf(args, sizeof args,
             "--limit 50 --engines 4 --capacity 2048 --policies round_robin,oracle --json "
             "--quiet --svg %s",
             svg);
    int st;
    char *out = run(args, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "round_robin"));
    json_t *root = kvr_test_last_line_json(out);
    json_t *rr = policy(root, "round_robin", 50);
    json_t *orc = policy(root, "oracle", 50);
    assert_null(json_object_get(json_object_get(root, "policies"), "kvrouter"));
    assert_true(json_number_value(json_object_get(orc, "hit_rate")) >=
                json_number_value(json_object_get(rr, "hit_rate")));
    json_decref(root);
    free(out);
    size_t len;
    char *chart = kvr_test_read_file(svg, &len);
    assert_non_null(chart);
    assert_non_null(strstr(chart, "<svg"));
    assert_non_null(strstr(chart, "oracle"));
    assert_non_null(strstr(chart, "</svg>"));
    free(chart);
    unlink(svg);
}

/* --requests-out: a header, then a line per request and policy whose
 * reused tokens give the policy's reported hit rate. */
static void test_requests_out(void **state)
{
    (void)state;
    char path[] = "/tmp/kvr_sim_requests_XXXXXX";
    temp_file(path);
    char args[256];
    snprintf(args, sizeof args,
             "--limit 50 --engines 4 --capacity 2048 --policies round_robin,approx_tree --json "
             "--quiet --requests-out %s",
             path);
    int st;
    char *out = run(args, &st);
    assert_int_equal(st, 0);
    json_t *root = kvr_test_last_line_json(out);
    size_t len;
    char *text = kvr_test_read_file(path, &len);
    assert_non_null(text);
    const char *header = "policy request slot prompt_tokens reused_tokens images time_s\n";
    assert_int_equal(strncmp(text, header, strlen(header)), 0);
    const char *names[2] = {"round_robin", "approx_tree"};
    double prompt[2] = {0, 0}, reused[2] = {0, 0};
    size_t lines[2] = {0, 0};
    /* The columns themselves are checked by test_sim's test_requests_out_adds_up. */
    for (const char *line = text + strlen(header); *line;) {
        char pol[32];
        unsigned long long p, u;
        assert_int_equal(sscanf(line, "%31s %*u %*u %llu %llu", pol, &p, &u), 3);
        int k = strcmp(pol, names[0]) == 0 ? 0 : 1;
        assert_string_equal(pol, names[k]);
        assert_true(u <= p);
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        line = nl + 1;
        prompt[k] += (double)p;
        reused[k] += (double)u;
        lines[k]++;
    }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(lines[k], 50);
        json_t *pj = policy(root, names[k], 50);
        /* the JSON prints 6 significant digits */
        double hit = json_number_value(json_object_get(pj, "hit_rate"));
        assert_true(reused[k] > 0 && fabs(reused[k] / prompt[k] - hit) <= 1e-5 * hit);
    }
    free(text);
    json_decref(root);
    free(out);
    unlink(path);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    int st;
    free(run("--policies round_robin,nope --quiet", &st));
    assert_int_equal(st, 2);
    free(run("--engines 0 --quiet", &st));
    assert_int_equal(st, 2);
    char *out = run("--limit 5 --wire msgpack --quiet", &st);
    assert_int_equal(st, 2);
    free(out);
}

/* Every /route, /prefill_done and /free succeeded, every engine batch was
 * applied before the next request was routed, and the router dropped no
 * event and saw no sequence gap. */
static void assert_clean_router(json_t *k)
{
    assert_int_equal(json_integer_value(json_object_get(k, "router_errors")), 0);
    assert_int_equal(json_integer_value(json_object_get(k, "sync_timeouts")), 0);
    assert_int_equal(json_integer_value(json_object_get(k, "router_drops")), 0);
    assert_int_equal(json_integer_value(json_object_get(k, "router_seq_gaps")), 0);
}

/* kvrouter through a real router, with the multimodal mix: Kimi
 * engine_wide engines publishing wide pads, legacy engines legacy pads,
 * HiCache on. */
static void test_kvrouter_end_to_end(void **state)
{
    (void)state;
    int st;
    char *out = run("--limit 60 --engines 4 --capacity 1024 --hicache 512 --mm-share 0.3 "
                    "--kimi-share 0.5 --policies kvrouter,round_robin --json --quiet",
                    &st);
    assert_int_equal(st, 0);
    json_t *root = kvr_test_last_line_json(out);
    json_t *k = policy(root, "kvrouter", 60);
    policy(root, "round_robin", 60);
    assert_clean_router(k);
    /* The router saw the Kimi engines' wide ids and excluded media blocks. */
    assert_true(json_integer_value(json_object_get(k, "router_wide_tokens")) > 0);
    assert_true(json_integer_value(json_object_get(k, "router_mm_blocks_excluded")) > 0);
    /* /route + /prefill_done + /free per request, plus registration. */
    assert_true(json_integer_value(json_object_get(k, "http_calls")) >= 3 * 60);
    json_decref(root);
    free(out);
}

/* The other wire and topology options through the router: vLLM maps, two
 * DP ranks per engine on consecutive ports, Eagle bigrams. */
static void test_kvrouter_vllm_dp_eagle(void **state)
{
    (void)state;
    int st;
    char *out = run("--limit 30 --engines 2 --dp 2 --wire vllm --eagle --capacity 1024 "
                    "--policies kvrouter --json --quiet",
                    &st);
    assert_int_equal(st, 0);
    json_t *root = kvr_test_last_line_json(out);
    json_t *k = policy(root, "kvrouter", 30);
    assert_clean_router(k);
    json_decref(root);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_baselines_json_and_svg),
        cmocka_unit_test(test_requests_out),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_kvrouter_end_to_end),
        cmocka_unit_test(test_kvrouter_vllm_dp_eagle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
