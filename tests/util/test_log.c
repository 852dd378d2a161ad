/* The log sink: thresholds, the embedding program's sink, the default
 * writer's text and JSON lines, and per-site rate limiting. */
#include "test_support.h"

#include <string.h>
#include <unistd.h>

#include "kvrouter/log.h"
#include "util/clock.h"

typedef struct {
    size_t n;
    kvr_log_level level[64];
    char msg[64][256];
    bool has_worker[64];
    uint64_t worker[64];
    uint64_t suppressed[64];
} captured;

static void capture(void *user, const kvr_log_record *rec)
{
    captured *c = user;
    if (c->n == 64)
        return;
    c->level[c->n] = rec->level;
    snprintf(c->msg[c->n], sizeof c->msg[0], "%s", rec->message);
    c->has_worker[c->n] = rec->ctx && rec->ctx->has_worker;
    c->worker[c->n] = rec->ctx ? rec->ctx->worker_id : 0;
    c->suppressed[c->n] = rec->suppressed;
    c->n++;
}

static void test_sink_gets_what_passes_the_threshold(void **state)
{
    (void)state;
    captured c = {0};
    kvr_log_set_sink(capture, &c);
    kvr_log_set_level(KVR_LOG_WARN);
    kvr_log(KVR_LOG_INFO, "not this %d", 1);
    kvr_log(KVR_LOG_WARN, "this %d", 2);
    kvr_log_at(KVR_LOG_ERROR, KVR_LOG_WORKER_RANK(7, 1), "and this\nwith a newline");
    kvr_log(KVR_LOG_OFF, "never");
    kvr_log_set_level(KVR_LOG_DEBUG);
    kvr_log(KVR_LOG_DEBUG, "debug now");
    kvr_log_set_sink(NULL, NULL);
    kvr_log_set_level(KVR_LOG_INFO);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.msg[0], "this 2");
    assert_int_equal(c.level[0], KVR_LOG_WARN);
    assert_false(c.has_worker[0]);
    assert_string_equal(c.msg[1], "and this with a newline");
    assert_true(c.has_worker[1]);
    assert_int_equal(c.worker[1], 7);
    assert_string_equal(c.msg[2], "debug now");
}

static void test_level_and_format_names(void **state)
{
    (void)state;
    assert_int_equal(kvr_log_level_from_name("warning"), KVR_LOG_WARN);
    assert_int_equal(kvr_log_level_from_name("warn"), KVR_LOG_WARN);
    assert_int_equal(kvr_log_level_from_name("debug"), KVR_LOG_DEBUG);
    assert_int_equal(kvr_log_level_from_name("loud"), -1);
    assert_int_equal(kvr_log_format_from_name("json"), KVR_LOG_JSON);
    assert_int_equal(kvr_log_format_from_name("xml"), -1);
    assert_string_equal(kvr_log_level_name(KVR_LOG_ERROR), "error");
}

static void test_json_line_has_time_level_message_and_context(void **state)
{
    (void)state;
    kvr_log_context ctx = {.model = "m", .has_worker = true,
                           .worker_id = 18446744073709551615ull, .has_rank = true,
                           .dp_rank = 3};
    kvr_log_record rec = {KVR_LOG_WARN, 1767225600.25, "quote \" and \xff byte", &ctx, 5};
    char line[512];
    int n = kvr_log_format_line(KVR_LOG_JSON, &rec, line, sizeof line);
    assert_true(n > 0 && (size_t)n < sizeof line);
    assert_null(strchr(line, '\n'));
    json_error_t err;
    json_t *j = json_loads(line, 0, &err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "time")), "2026-01-01T00:00:00.250Z");
    assert_string_equal(json_string_value(json_object_get(j, "level")), "warn");
    assert_string_equal(json_string_value(json_object_get(j, "message")), "quote \" and ? byte");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
    /* Above 2^63: a decimal string, as everywhere in the API. */
    assert_string_equal(json_string_value(json_object_get(j, "worker_id")),
                        "18446744073709551615");
    assert_int_equal(json_integer_value(json_object_get(j, "dp_rank")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "suppressed")), 5);
    json_decref(j);

    kvr_log_context w = {.has_worker = true, .worker_id = 7, .has_rank = true, .dp_rank = 0};
    kvr_log_record t = {KVR_LOG_INFO, 1767225600.0, "hello", &w, 0};
    kvr_log_format_line(KVR_LOG_TEXT, &t, line, sizeof line);
    assert_string_equal(line, "2026-01-01T00:00:00.000Z info kvrouter: worker 7 rank 0: hello");
    t.ctx = NULL;
    t.suppressed = 2;
    kvr_log_format_line(KVR_LOG_TEXT, &t, line, sizeof line);
    assert_string_equal(line, "2026-01-01T00:00:00.000Z info kvrouter: hello (2 similar "
                              "messages suppressed)");
}

static void test_rate_limit_counts_what_it_drops(void **state)
{
    (void)state;
    captured c = {0};
    kvr_log_set_sink(capture, &c);
    static kvr_log_limiter site;
    size_t calls = 0;
    double end = kvr_clock_mono() + 20;
    /* A flood: the first message passes, then one per 50 ms interval, each
     * saying how many it stands for. */
    while (c.n < 3 && kvr_clock_mono() < end) {
        kvr_log_limited(&site, 0.05, KVR_LOG_WARN, NULL, "flood %zu", calls);
        calls++;
        if (calls % 100 == 0)
            usleep(1000);
    }
    kvr_log_set_sink(NULL, NULL);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.msg[0], "flood 0");
    assert_int_equal(c.suppressed[0], 0);
    assert_true(c.suppressed[1] > 0);
    assert_int_equal(1 + c.suppressed[1] + 1 + c.suppressed[2] + 1, calls);
    /* A second site has its own limiter. */
    captured d = {0};
    kvr_log_set_sink(capture, &d);
    KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "other site");
    kvr_log_set_sink(NULL, NULL);
    assert_int_equal(d.n, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sink_gets_what_passes_the_threshold),
        cmocka_unit_test(test_level_and_format_names),
        cmocka_unit_test(test_json_line_has_time_level_message_and_context),
        cmocka_unit_test(test_rate_limit_counts_what_it_drops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
