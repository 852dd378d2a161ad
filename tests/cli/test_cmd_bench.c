/* `kvrouter bench` as a user runs it: the last line is one JSON object with
 * the documented keys, and replaying the emitted stream with --events gives
 * the same checksum. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char out[65536];
    int status;
} run_result;

static void run(run_result *r, const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", kvr_test_path(""), kvr_test_binary(),
             args);
    char *out = kvr_test_run(cmd, &r->status);
    snprintf(r->out, sizeof r->out, "%s", out);
    free(out);
}

static void test_summary_and_events_round_trip(void **state)
{
    (void)state;
    char events[] = "/tmp/kvr_bench_cli_XXXXXX";
    int fd = mkstemp(events);
    assert_true(fd >= 0);
    close(fd);
    run_result *r = malloc(sizeof *r);
    char args[512];
    snprintf(args, sizeof args,
             "bench --limit 120 --workers 6 --capacity 400 --threads 2 --emit-events %s", events);
    run(r, args);
    assert_int_equal(r->status, 0);
    json_t *j = kvr_test_last_line_json(r->out);
    static const char *keys[] = {"ops_per_s",      "block_ops_per_s", "events",
                                 "matches",        "match_p50_us",    "match_p99_us",
                                 "bytes_per_block", "peak_rss_mb",    "checksum",
                                 "ops_per_cpu_s",  "ops_per_cpu_s_with_checksum"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_non_null(json_object_get(j, keys[i]));
    assert_int_equal(json_integer_value(json_object_get(j, "matches")), 120);
    assert_true(json_integer_value(json_object_get(j, "events")) > 120); /* stores + evictions */
    json_int_t checksum = json_integer_value(json_object_get(j, "checksum"));
    json_int_t per_block_events = json_integer_value(json_object_get(j, "events"));
    assert_true(checksum > 0);
    assert_true(json_number_value(json_object_get(j, "bytes_per_block")) > 0);
    assert_non_null(json_object_get(j, "concurrent_matches_per_s"));
    json_decref(j);

    snprintf(args, sizeof args, "bench --events %s", events);
    run(r, args);
    assert_int_equal(r->status, 0);
    j = kvr_test_last_line_json(r->out);
    assert_int_equal(json_integer_value(json_object_get(j, "checksum")), checksum);
    assert_int_equal(json_integer_value(json_object_get(j, "matches")), 120);
    json_decref(j);

    /* multi-block events: fewer events, the same matches */
    run(r, "bench --limit 120 --workers 6 --capacity 400 --granularity vllm");
    assert_int_equal(r->status, 0);
    j = kvr_test_last_line_json(r->out);
    assert_int_equal(json_integer_value(json_object_get(j, "checksum")), checksum);
    json_int_t multi_events = json_integer_value(json_object_get(j, "events"));
    assert_true(multi_events > 0 && multi_events < per_block_events);
    json_decref(j);

    /* msgpack batches through the facade index the same blocks */
    run(r, "bench --limit 120 --workers 6 --capacity 400 --pipeline");
    assert_int_equal(r->status, 0);
    j = kvr_test_last_line_json(r->out);
    assert_int_equal(json_integer_value(json_object_get(j, "pipeline_checksum")), checksum);
    assert_int_equal(json_integer_value(json_object_get(j, "pipeline_events_dropped")), 0);
    assert_true(json_number_value(json_object_get(j, "pipeline_events_per_s")) > 0);
    json_decref(j);
    unlink(events);
    free(r);
}

static void test_usage_errors(void **state)
{
    (void)state;
    run_result *r = malloc(sizeof *r);
    run(r, "bench --workers 0");
    assert_int_equal(r->status, 2);
    assert_non_null(strstr(r->out, "--workers"));
    run(r, "bench --bogus");
    assert_int_equal(r->status, 2);
    run(r, "bench --pipeline --events /tmp/x.jsonl");
    assert_int_equal(r->status, 2);
    assert_non_null(strstr(r->out, "--pipeline"));
    run(r, "bench --granularity page");
    assert_int_equal(r->status, 2);
    assert_non_null(strstr(r->out, "--granularity"));
    run(r, "bench --events /nonexistent/events.jsonl");
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->out, "/nonexistent/events.jsonl"));
    run(r, "bench --help");
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "--emit-events"));
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summary_and_events_round_trip),
        cmocka_unit_test(test_usage_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
