/* The registration side of SPEC §7.1 through real HTTP, as a client written
 * to Dynamo's standalone-indexer guide sees it: /register and /unregister
 * status codes and "status": "ok" with kvrouter's "result"; /unregister's
 * three scopes and its 404; the worker limit's 503 naming it; the
 * initial-workers wait; the access log and POST /reopen_logs. */
#include "test_support.h"

#include <stdio.h>
#include <unistd.h>

#include "net_helpers.h"

#define WAIT 10000

typedef struct {
    kvr_server *srv;
    char base[64];
} srv_t;

static void start(srv_t *s, void (*tune)(kvr_server_config *, void *), void *arg)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    if (tune)
        tune(&cfg, arg);
    s->srv = th_server_start(&cfg, s->base, sizeof s->base);
    assert_non_null(s->srv);
}

/* POST path body: the status, and the reply's field (a string) into out. */
static long post_field(srv_t *s, const char *path, const char *body, const char *field,
                       char *out, size_t cap)
{
    long st;
    json_t *r = th_json("POST", s->base, path, body, &st);
    const char *v = json_string_value(json_object_get(r, field));
    snprintf(out, cap, "%s", v ? v : "");
    json_decref(r);
    return st;
}

static void reg(char *buf, size_t cap, uint64_t id, const char *group, int rank,
                const char *extra)
{
    snprintf(buf, cap,
             "{\"instance_id\": %llu, \"endpoint\": \"tcp://127.0.0.1:%d\", \"model_name\": "
             "\"llama\", \"routing_group\": \"%s\", \"block_size\": 16, \"dp_rank\": %d%s}",
             (unsigned long long)id, 6000 + (int)id * 10 + rank, group, rank, extra ? extra : "");
}

static void test_register_answers_status_ok_with_the_result(void **state)
{
    (void)state;
    srv_t s;
    start(&s, NULL, NULL);
    char body[512], v[64];
    reg(body, sizeof body, 1, "default", 0, NULL);
    assert_int_equal(post_field(&s, "/register", body, "status", v, sizeof v), 201);
    assert_string_equal(v, "ok");
    reg(body, sizeof body, 1, "default", 1, NULL); /* a new rank: created too */
    assert_int_equal(post_field(&s, "/register", body, "result", v, sizeof v), 201);
    assert_string_equal(v, "created");
    assert_int_equal(post_field(&s, "/register", body, "result", v, sizeof v), 200);
    assert_string_equal(v, "unchanged");
    reg(body, sizeof body, 1, "default", 0, ", \"mm_identity\": \"engine_wide\"");
    assert_int_equal(post_field(&s, "/register", body, "result", v, sizeof v), 200);
    assert_string_equal(v, "reset");
    assert_int_equal(post_field(&s, "/register", body, "status", v, sizeof v), 200);
    assert_string_equal(v, "ok");
    /* kvrouter's extras stay. */
    long st;
    json_t *r = th_json("POST", s.base, "/register", body, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(r, "mm_identity")), "engine_wide");
    assert_int_equal(json_integer_value(json_object_get(r, "block_size")), 16);
    assert_false(json_is_true(json_object_get(r, "reset")));
    json_decref(r);
    /* Errors are {"error": ...} with 4xx, as Dynamo's. */
    assert_int_equal(post_field(&s, "/register", "{\"instance_id\": 1}", "error", v, sizeof v),
                     400);
    assert_non_null(strstr(v, "endpoint"));
    kvr_server_stop(s.srv);
}

static void test_unregister_scopes_as_dynamo(void **state)
{
    (void)state;
    srv_t s;
    start(&s, NULL, NULL);
    char body[512], v[256];
    /* Worker 1: group a ranks 0 and 1, group b rank 0; worker 2: group a. */
    const struct {
        uint64_t id;
        const char *group;
        int rank;
    } regs[] = {{1, "a", 0}, {1, "a", 1}, {1, "b", 0}, {2, "a", 0}};
    for (size_t i = 0; i < 4; i++) {
        reg(body, sizeof body, regs[i].id, regs[i].group, regs[i].rank, NULL);
        assert_int_equal(th_register(s.base, body, NULL), 201);
    }
    /* Group and rank: that rank only. */
    assert_int_equal(post_field(&s, "/unregister",
                                "{\"instance_id\": 1, \"model_name\": \"llama\", "
                                "\"routing_group\": \"a\", \"dp_rank\": 1}",
                                "status", v, sizeof v),
                     200);
    assert_string_equal(v, "ok");
    json_t *w = th_json("GET", s.base, "/workers?model_name=llama&routing_group=a", NULL, NULL);
    assert_int_equal(json_array_size(w), 2);
    json_decref(w);
    /* No group: every group of the model, dp_rank ignored. */
    assert_int_equal(post_field(&s, "/unregister",
                                "{\"instance_id\": 1, \"model_name\": \"llama\", \"dp_rank\": 7}",
                                "status", v, sizeof v),
                     200);
    assert_string_equal(v, "ok");
    w = th_json("GET", s.base, "/workers", NULL, NULL);
    assert_int_equal(json_array_size(w), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(w, 0), "instance_id")), 2);
    json_decref(w);
    /* Nothing matched: 404 with an error. */
    assert_int_equal(post_field(&s, "/unregister",
                                "{\"instance_id\": 1, \"model_name\": \"llama\"}", "error", v,
                                sizeof v),
                     404);
    assert_non_null(strstr(v, "instance_id"));
    assert_int_equal(post_field(&s, "/unregister",
                                "{\"instance_id\": 2, \"model_name\": \"llama\", "
                                "\"routing_group\": \"b\"}",
                                "error", v, sizeof v),
                     404);
    /* Group and no rank: the whole instance in that group. */
    long st;
    json_t *r = th_json("POST", s.base, "/unregister",
                        "{\"instance_id\": 2, \"model_name\": \"llama\", \"routing_group\": \"a\"}",
                        &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    assert_int_equal(json_integer_value(json_object_get(r, "workers_removed")), 1);
    json_decref(r);
    w = th_json("GET", s.base, "/workers", NULL, NULL);
    assert_int_equal(json_array_size(w), 0);
    json_decref(w);
    kvr_server_stop(s.srv);
}

static void limit_two(kvr_server_config *cfg, void *arg)
{
    (void)arg;
    cfg->registry.max_workers = 2;
}

static void test_worker_limit_answers_503_naming_it(void **state)
{
    (void)state;
    srv_t s;
    start(&s, limit_two, NULL);
    char body[512];
    for (uint64_t id = 1; id <= 2; id++) {
        reg(body, sizeof body, id, "default", 0, NULL);
        assert_int_equal(th_register(s.base, body, NULL), 201);
    }
    reg(body, sizeof body, 3, "default", 0, NULL);
    long st;
    json_t *r = th_json("POST", s.base, "/register", body, &st);
    assert_int_equal(st, 503);
    assert_string_equal(json_string_value(json_object_get(r, "limit")), "max_workers");
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "max_workers"));
    json_decref(r);
    /* A second rank of a registered worker is no new worker. */
    reg(body, sizeof body, 2, "default", 1, NULL);
    assert_int_equal(th_register(s.base, body, NULL), 201);
    kvr_server_stop(s.srv);
}

static void wait_for(kvr_server_config *cfg, void *arg)
{
    cfg->min_initial_workers = *(size_t *)arg;
}

static long status_of(srv_t *s, const char *method, const char *path, const char *body)
{
    long st;
    json_decref(th_json(method, s->base, path, body, &st));
    return st;
}

static void test_initial_workers_wait(void **state)
{
    (void)state;
    size_t two = 2;
    srv_t s;
    start(&s, wait_for, &two);
    const char *q = "{\"model_name\": \"llama\", \"token_ids\": [1, 2, 3]}";
    long st;
    json_t *r = th_json("POST", s.base, "/query", q, &st);
    assert_int_equal(st, 503);
    assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "2 initial workers"));
    json_decref(r);
    assert_int_equal(status_of(&s, "GET", "/dump", NULL), 503);
    assert_int_equal(status_of(&s, "GET", "/health", NULL), 200);
    assert_int_equal(status_of(&s, "GET", "/metrics", NULL), 200);
    assert_int_equal(status_of(&s, "GET", "/workers", NULL), 200);
    char body[512];
    reg(body, sizeof body, 1, "default", 0, NULL);
    assert_int_equal(th_register(s.base, body, NULL), 201);
    reg(body, sizeof body, 1, "default", 1, NULL); /* a rank is not a worker */
    assert_int_equal(th_register(s.base, body, NULL), 201);
    assert_int_equal(status_of(&s, "POST", "/query", q), 503);
    reg(body, sizeof body, 2, "default", 0, NULL);
    assert_int_equal(th_register(s.base, body, NULL), 201);
    assert_int_equal(status_of(&s, "POST", "/query", q), 200);
    /* Once open, it stays open. */
    assert_int_equal(status_of(&s, "POST", "/unregister",
                               "{\"instance_id\": 2, \"model_name\": \"llama\"}"),
                     200);
    assert_int_equal(status_of(&s, "POST", "/query", q), 200);
    kvr_server_stop(s.srv);

    /* Workers registered before HTTP starts count. */
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.min_initial_workers = 1;
    kvr_registration w = {.endpoint = "tcp://127.0.0.1:6999", .origin = KVR_ORIGIN_CLI};
    w.settings.model_name = "llama";
    w.settings.worker_id = 5;
    w.settings.block_size = 16;
    w.settings.accepts_mm_hashes = -1;
    cfg.workers = &w;
    cfg.n_workers = 1;
    s.srv = th_server_start(&cfg, s.base, sizeof s.base);
    assert_non_null(s.srv);
    assert_int_equal(status_of(&s, "POST", "/query", q), 200);
    kvr_server_stop(s.srv);
}

static void with_access_log(kvr_server_config *cfg, void *arg)
{
    cfg->access_log = arg;
}

/* The JSON lines of path (the caller json_decref's the array). */
static json_t *lines_of(const char *path)
{
    json_t *arr = json_array();
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        if (!j)
            fail_msg("access log line is not JSON: %s", line);
        json_array_append_new(arr, j);
    }
    if (f)
        fclose(f);
    return arr;
}

static void test_access_log_lines_and_reopen(void **state)
{
    (void)state;
    char path[] = "/tmp/kvr_access_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    srv_t s;
    start(&s, with_access_log, path);
    char body[512];
    reg(body, sizeof body, 1, "default", 0, NULL);
    assert_int_equal(th_register(s.base, body, NULL), 201);
    assert_int_equal(status_of(&s, "GET", "/nope", NULL), 404);
    json_t *lines = lines_of(path);
    assert_int_equal(json_array_size(lines), 2);
    json_t *a = json_array_get(lines, 0);
    assert_string_equal(json_string_value(json_object_get(a, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(a, "path")), "/register");
    assert_int_equal(json_integer_value(json_object_get(a, "status")), 201);
    assert_int_equal(json_integer_value(json_object_get(a, "bytes_in")), (json_int_t)strlen(body));
    assert_true(json_integer_value(json_object_get(a, "bytes")) > 10);
    assert_true(json_real_value(json_object_get(a, "duration_s")) >= 0);
    assert_non_null(strstr(json_string_value(json_object_get(a, "remote")), "127.0.0.1:"));
    const char *t = json_string_value(json_object_get(a, "time"));
    assert_true(t && strlen(t) == 24 && t[10] == 'T' && t[23] == 'Z');
    assert_int_equal(json_integer_value(json_object_get(json_array_get(lines, 1), "status")), 404);
    assert_null(json_object_get(json_array_get(lines, 1), "trace_id"));
    json_decref(lines);
    /* The trace header's value is the line's trace_id. */
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/health", s.base);
    struct curl_slist *h = curl_slist_append(NULL, "X-Trace-Id: req-42");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_on_data);
    th_buf sink = {0};
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(sink.data);
    lines = lines_of(path);
    assert_int_equal(json_array_size(lines), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(lines, 2), "trace_id")),
                        "req-42");
    json_decref(lines);

    /* Rotation: the file is renamed, /reopen_logs starts a new one at the path. */
    char rotated[64];
    snprintf(rotated, sizeof rotated, "%s.1", path);
    assert_int_equal(rename(path, rotated), 0);
    long st;
    json_t *r = th_json("POST", s.base, "/reopen_logs", NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    json_decref(r);
    assert_int_equal(status_of(&s, "GET", "/health", NULL), 200);
    lines = lines_of(rotated);
    assert_int_equal(json_array_size(lines), 3);
    json_decref(lines);
    lines = lines_of(path); /* the /reopen_logs request itself is the new file's first line */
    assert_int_equal(json_array_size(lines), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(lines, 0), "path")),
                        "/reopen_logs");
    assert_string_equal(json_string_value(json_object_get(json_array_get(lines, 1), "path")),
                        "/health");
    json_decref(lines);
    kvr_server_stop(s.srv);
    unlink(path);
    unlink(rotated);

    /* Without an access log, /reopen_logs is a successful no-op (as Dynamo's). */
    start(&s, NULL, NULL);
    r = th_json("POST", s.base, "/reopen_logs", NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    json_decref(r);
    kvr_server_stop(s.srv);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_answers_status_ok_with_the_result),
        cmocka_unit_test(test_unregister_scopes_as_dynamo),
        cmocka_unit_test(test_worker_limit_answers_503_naming_it),
        cmocka_unit_test(test_initial_workers_wait),
        cmocka_unit_test(test_access_log_lines_and_reopen),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
