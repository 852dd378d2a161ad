/* Out of memory in the HTTP core's reply path (http.c send_reply): a reply
 * whose JSON body a handler could not build (json_pack gave NULL) or whose
 * stream could not be set up is not sent as what the handler meant (200
 * with `{}`, or a cut connection counted as a 200) but as 500 {"error":
 * "out of memory"}, counted in kvr_http_reply_out_of_memory_total, and the
 * endpoint's histogram and access-log line take the status that was sent.
 * GET /workers is all or nothing: a worker it had no memory for is a 500,
 * not a list without it.
 * An access-log line lost (no memory to build it, a write that fails) is
 * counted in kvr_http_access_log_lines_lost_total. jansson's allocations
 * fail through kvr_fail_json_malloc (tests/support/fail_alloc.h), the
 * stream's record through the armed malloc; /dev/full fails the writes. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvrouter/server.h"
#include "server/api.h"
#include "net_helpers.h"
#include "fail_alloc.h"

static int json_allocs; /* counted by count_malloc */

static void *count_malloc(size_t n)
{
    json_allocs++;
    return malloc(n);
}

/* How many allocations jansson makes for j = make(text) (counted at run
 * time: jansson's own business). */
static int allocs_of(json_t *(*make)(const char *), const char *text)
{
    json_set_alloc_funcs(count_malloc, free);
    json_allocs = 0;
    json_t *j = make(text);
    int n = json_allocs;
    json_decref(j);
    json_set_alloc_funcs(malloc, free);
    assert_non_null(j);
    return n;
}

static json_t *object_of(const char *unused)
{
    (void)unused;
    return json_object();
}

static json_t *array_of(const char *unused)
{
    (void)unused;
    return json_array();
}

/* How many allocations a GET's argument object takes (http.c dispatch
 * builds it before the handler runs): the handler's first is the next. */
static int get_args_allocs(void) { return allocs_of(object_of, NULL); }

static double errors_5xx(const char *base, const char *endpoint)
{
    char key[128];
    snprintf(key, sizeof key, "kvr_http_errors_total{endpoint=\"%s\",class=\"5xx\"}", endpoint);
    return th_metric(base, key);
}

/* GET /health whose handler's json_pack fails: 500 out of memory (before:
 * 200 and `{}`), counted, and a 5xx in /health's series; memory back, 200. */
static void test_reply_body_out_of_memory_is_500(void **state)
{
    (void)state;
    int before_handler = get_args_allocs();
    json_set_alloc_funcs(kvr_fail_json_malloc, free);
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    long st = 0;
    json_t *r = th_json("GET", base, "/health", NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_http_reply_out_of_memory_total"), 0);

    kvr_fail_reset();
    kvr_fail_json_nth(before_handler + 1);
    r = th_json("GET", base, "/health", NULL, &st);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(st, 500); /* before: 200 */
    assert_string_equal(json_string_value(json_object_get(r, "error")), "out of memory");
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_http_reply_out_of_memory_total"), 1);
    assert_int_equal(errors_5xx(base, "/health"), 1);

    r = th_json("GET", base, "/health", NULL, &st);
    assert_int_equal(st, 200);
    json_decref(r);
    assert_int_equal(th_metric(base, "kvr_http_reply_out_of_memory_total"), 1);
    kvr_server_stop(srv);
    json_set_alloc_funcs(malloc, free);
}

/* A server on a free port writing its access log to path. */
static kvr_server *start_logging(const char *path, char *base, size_t cap)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.access_log = path;
    return th_server_start(&cfg, base, cap);
}

/* path (a mkstemp template) made an empty file. */
static const char *log_file(char *path)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    return path;
}

/* The status of the access log's line n (from 0) at path, -1 without one. */
static long logged_status(const char *path, size_t n)
{
    char *text = kvr_test_read_file(path, NULL);
    const char *line = text;
    for (size_t i = 0; line && i < n; i++)
        line = (line = strchr(line, '\n')) ? line + 1 : NULL;
    json_t *j = line && *line ? json_loadb(line, strcspn(line, "\n"), 0, NULL) : NULL;
    long st = j ? (long)json_integer_value(json_object_get(j, "status")) : -1;
    json_decref(j);
    free(text);
    return st;
}

/* GET /dump whose stream record cannot be made: 500 out of memory (before:
 * the connection cut, counted and logged as a 200), in /dump's 5xx series
 * and its access-log line; memory back, the dump streams. */
static void test_stream_out_of_memory_is_500(void **state)
{
    (void)state;
    char path[] = "/tmp/kvr_reply_oom_XXXXXX", base[64];
    kvr_server *srv = start_logging(log_file(path), base, sizeof base);
    assert_non_null(srv);

    kvr_fail_reset();
    kvr_fail_malloc(sizeof(kvr_api_stream));
    long st = 0;
    json_t *r = th_json("GET", base, "/dump?format=ndjson", NULL, &st);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(st, 500); /* before: 0, no reply */
    assert_string_equal(json_string_value(json_object_get(r, "error")), "out of memory");
    json_decref(r);
    assert_int_equal(logged_status(path, 0), 500); /* before: 200 */
    assert_int_equal(th_metric(base, "kvr_http_reply_out_of_memory_total"), 1);
    assert_int_equal(errors_5xx(base, "/dump"), 1);

    char url[128], *out = NULL;
    snprintf(url, sizeof url, "%s/dump", base);
    assert_int_equal(th_http("GET", url, NULL, 0, &out), 200);
    assert_string_equal(out, "{}\n");
    free(out);
    assert_int_equal(errors_5xx(base, "/dump"), 1);
    kvr_server_stop(srv);
    unlink(path);
}

/* Every line lost to a write that fails (/dev/full: ENOSPC) is counted:
 * the /health line, then each /metrics line (written after its reply is
 * built, so a scrape sees the lines before it). Before: logged only. */
static void test_access_line_not_written_is_counted(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start_logging("/dev/full", base, sizeof base);
    assert_non_null(srv);
    long st = 0;
    json_decref(th_json("GET", base, "/health", NULL, &st));
    assert_int_equal(st, 200);
    assert_int_equal(th_metric(base, "kvr_http_access_log_lines_lost_total"), 1);
    assert_int_equal(th_metric(base, "kvr_http_access_log_lines_lost_total"), 2);
    kvr_server_stop(srv);
}

/* A line jansson has no memory to build is counted and not written. GET
 * /dump without arguments with its stream record failing makes no jansson
 * allocation on the server's thread but its argument object's and the
 * access-log line's: the method's and the path's strings (each tried again
 * if it fails: kvr_json_text_lossy), then the line's object, which fails. */
static void test_access_line_out_of_memory_is_counted(void **state)
{
    (void)state;
    int before_line = get_args_allocs() + allocs_of(json_string, "GET") +
                      allocs_of(json_string, "/dump");
    json_set_alloc_funcs(kvr_fail_json_malloc, free);
    char path[] = "/tmp/kvr_reply_oom_XXXXXX", base[64];
    kvr_server *srv = start_logging(log_file(path), base, sizeof base);
    assert_non_null(srv);

    kvr_fail_reset();
    kvr_fail_malloc(sizeof(kvr_api_stream));
    kvr_fail_json_nth(before_line + 1);
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "%s/dump", base);
    assert_int_equal(th_http("GET", url, NULL, 0, &out), 500);
    free(out);
    assert_int_equal(kvr_fail_count(), 2);
    assert_int_equal(logged_status(path, 0), -1); /* no line */
    assert_int_equal(th_metric(base, "kvr_http_access_log_lines_lost_total"), 1);
    assert_int_equal(logged_status(path, 0), 200); /* the scrape's */
    assert_int_equal(th_metric(base, "kvr_http_access_log_lines_lost_total"), 1);
    kvr_server_stop(srv);
    unlink(path);
    json_set_alloc_funcs(malloc, free);
}

/* GET /workers is all or nothing: a worker whose object could not be made
 * (its json_object, the allocation after the argument object and the
 * array) is a 500 out of memory, not 200 with the worker left out; a
 * snapshot without memory is a 500 too, not 503 "ingest thread is not
 * running". */
static void test_workers_out_of_memory_is_500(void **state)
{
    (void)state;
    int before_worker = get_args_allocs() + allocs_of(array_of, NULL);
    json_set_alloc_funcs(kvr_fail_json_malloc, free);
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    assert_int_equal(th_register(base,
                                 "{\"instance_id\": 7, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"m\", \"block_size\": 16}",
                                 NULL),
                     201);
    long st = 0;
    json_t *r = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(r), 1);
    json_decref(r);

    kvr_fail_reset();
    kvr_fail_json_nth(before_worker + 1);
    r = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(st, 500); /* before: 200 and [] */
    assert_string_equal(json_string_value(json_object_get(r, "error")), "out of memory");
    json_decref(r);

    kvr_fail_reset();
    kvr_fail_malloc(sizeof(kvr_worker_info)); /* the snapshot's copy of the one worker */
    r = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(st, 500); /* before: 503 "ingest thread is not running" */
    assert_string_equal(json_string_value(json_object_get(r, "error")), "out of memory");
    json_decref(r);

    r = th_json("GET", base, "/workers", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(r), 1);
    json_decref(r);
    kvr_server_stop(srv);
    json_set_alloc_funcs(malloc, free);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_body_out_of_memory_is_500),
        cmocka_unit_test(test_stream_out_of_memory_is_500),
        cmocka_unit_test(test_access_line_not_written_is_counted),
        cmocka_unit_test(test_access_line_out_of_memory_is_counted),
        cmocka_unit_test(test_workers_out_of_memory_is_500),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
