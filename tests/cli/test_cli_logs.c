/* What an operator reads on stderr from a real `kvrouter serve
 * --log-format json` (issue 13, Logs): a warning about one engine's stream
 * is one JSON object with time, level, message and the worker and rank it
 * concerns, and an engine that keeps sending bad batches does not get a line
 * per batch (the site is rate-limited). The format itself, the text form and
 * the limiter's count are tests/util/test_log.c's. */
#include "test_support.h"

#include "../server/net_helpers.h"
#include "child.h"

#define WAIT 20000
#define FLOOD 40

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Runs `kvrouter serve` for worker id:rank with extra flags, lets its
 * engine send FLOOD batches that are not msgpack, and stops it once every
 * one is counted; the child (with its stderr) is the caller's to free. */
static kvr_child *serve_a_flood(uint64_t id, uint32_t rank, const char *log_format)
{
    th_engine e;
    th_engine_start(&e);
    char workers[256];
    snprintf(workers, sizeof workers, "%llu:%u=%s", (unsigned long long)id, rank, e.endpoint);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--listen", "127.0.0.1:0", "--workers",
                    workers, "--model-name", "m", "--block-size", "4", "--log-format",
                    (char *)log_format, NULL};
    char base[64];
    kvr_child *c = kvr_child_serve(argv, base, sizeof base);
    assert_true(th_engine_wait_sub(&e, WAIT));
    static const unsigned char junk[] = {0xc1, 0xc1, 0xc1, 0xc1};
    for (uint64_t seq = 0; seq < FLOOD; seq++)
        th_engine_send(&e, seq, junk, sizeof junk, true);
    assert_int_equal(th_wait_counter(base, id, "m", "malformed_batches", FLOOD, WAIT), FLOOD);
    assert_true(kvr_child_wait_stderr(c, 0, "malformed batch", WAIT));
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    th_engine_stop(&e);
    return c;
}

static void test_json_lines_name_the_worker_and_rank(void **state)
{
    (void)state;
    kvr_child *c = serve_a_flood(42, 1, "json");
    /* The line about it, as a log collector parses it. */
    json_t *found = NULL;
    char *save = NULL;
    for (char *l = strtok_r(c->err, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        if (!j)
            fail_msg("stderr line is not JSON: %s", l);
        const char *msg = json_string_value(json_object_get(j, "message"));
        assert_non_null(msg);
        assert_non_null(json_string_value(json_object_get(j, "time")));
        assert_non_null(json_string_value(json_object_get(j, "level")));
        if (strstr(msg, "malformed batch") && !found)
            found = json_incref(j);
        json_decref(j);
    }
    assert_non_null(found);
    assert_string_equal(json_string_value(json_object_get(found, "level")), "warn");
    assert_int_equal(json_integer_value(json_object_get(found, "worker_id")), 42);
    assert_int_equal(json_integer_value(json_object_get(found, "dp_rank")), 1);
    const char *t = json_string_value(json_object_get(found, "time"));
    assert_true(strlen(t) == 24 && t[10] == 'T' && t[23] == 'Z');
    json_decref(found);
    free(c);
}

/* The same flood in text: far fewer lines than batches (one per 10 s per
 * site). */
static void test_repeated_warnings_are_rate_limited(void **state)
{
    (void)state;
    kvr_child *c = serve_a_flood(7, 0, "text");
    assert_non_null(strstr(c->err, "worker 7 rank 0: malformed batch"));
    size_t lines = count(c->err, "malformed batch");
    if (lines >= FLOOD / 2)
        fail_msg("%zu lines for %d malformed batches: not rate-limited", lines, FLOOD);
    free(c);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_lines_name_the_worker_and_rank),
        cmocka_unit_test(test_repeated_warnings_are_rate_limited),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
