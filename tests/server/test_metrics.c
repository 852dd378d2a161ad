/* GET /metrics through real HTTP: a valid exposition (each family declared
 * once, its samples together, one family per quantity), the values of the
 * split families, process_* and kvr_build_info, per-worker series only when
 * asked for, the /route cached-share histogram, and the Grafana dashboard
 * querying only names that exist. */
#include "test_support.h"

#include <ctype.h>
#include <math.h>
#include <sys/types.h>
#include <time.h>

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT 5000

/* ------------------------------------------------------------ exposition */

typedef struct {
    char *series; /* name{labels} as written */
    char *name;
    double value;
} sample;

typedef struct {
    sample *s;
    size_t n;
    char **families; /* declared, in order */
    size_t n_families;
} exposition;

static void expo_free(exposition *e)
{
    for (size_t i = 0; i < e->n; i++) {
        free(e->s[i].series);
        free(e->s[i].name);
    }
    for (size_t i = 0; i < e->n_families; i++)
        free(e->families[i]);
    free(e->s);
    free(e->families);
    memset(e, 0, sizeof *e);
}

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':'))
            return false;
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static ssize_t family_index(const exposition *e, const char *name)
{
    for (size_t i = 0; i < e->n_families; i++)
        if (strcmp(e->families[i], name) == 0)
            return (ssize_t)i;
    return -1;
}

/* Parses text, failing the test on anything the format (0.0.4) forbids or
 * kvrouter's own rules rule out: a family declared twice, a sample before
 * its TYPE or away from its family's group, a duplicate series, a counter
 * family not ending in _total, an unknown type. */
static void expo_parse(const char *text, exposition *e)
{
    memset(e, 0, sizeof *e);
    char **types = NULL;
    size_t cap_s = 0, cap_f = 0;
    ssize_t current = -1;
    char *copy = strdup(text), *save = NULL;
    bool *closed = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0)
            continue;
        if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[256], type[32];
            assert_int_equal(sscanf(line + 7, "%255s %31s", name, type), 2);
            if (family_index(e, name) >= 0)
                fail_msg("family %s declared twice", name);
            if (strcmp(type, "counter") != 0 && strcmp(type, "gauge") != 0 &&
                strcmp(type, "histogram") != 0)
                fail_msg("family %s has type %s", name, type);
            if (strcmp(type, "counter") == 0 && !ends_with(name, "_total"))
                fail_msg("counter %s does not end in _total", name);
            if (e->n_families == cap_f) {
                cap_f = cap_f ? cap_f * 2 : 64;
                e->families = realloc(e->families, cap_f * sizeof *e->families);
                types = realloc(types, cap_f * sizeof *types);
                closed = realloc(closed, cap_f * sizeof *closed);
            }
            closed[e->n_families] = false;
            types[e->n_families] = strdup(type);
            e->families[e->n_families++] = strdup(name);
            if (current >= 0)
                closed[current] = true;
            current = (ssize_t)e->n_families - 1;
            continue;
        }
        assert_true(line[0] != '#');
        char *sp = strrchr(line, ' ');
        assert_non_null(sp);
        size_t name_len = strcspn(line, "{ ");
        if (!valid_name(line, name_len))
            fail_msg("bad metric name in '%s'", line);
        char *name = strndup(line, name_len);
        ssize_t f = family_index(e, name);
        if (f < 0 || strcmp(types[f], "histogram") == 0) {
            const char *sfx[3] = {"_bucket", "_sum", "_count"};
            for (int k = 0; k < 3 && f < 0; k++)
                if (ends_with(name, sfx[k])) {
                    char *base = strndup(name, strlen(name) - strlen(sfx[k]));
                    f = family_index(e, base);
                    if (f >= 0 && strcmp(types[f], "histogram") != 0)
                        f = -1;
                    free(base);
                }
        }
        if (f < 0)
            fail_msg("sample %s has no TYPE before it", line);
        if (f != current || closed[f])
            fail_msg("sample %s is away from its family's group", line);
        char *end = NULL;
        double v = strtod(sp + 1, &end);
        if (end == sp + 1 || *end)
            fail_msg("bad value in '%s'", line);
        char *series = strndup(line, (size_t)(sp - line));
        for (size_t i = 0; i < e->n; i++)
            if (strcmp(e->s[i].series, series) == 0)
                fail_msg("series %s written twice", series);
        if (e->n == cap_s) {
            cap_s = cap_s ? cap_s * 2 : 256;
            e->s = realloc(e->s, cap_s * sizeof *e->s);
        }
        e->s[e->n++] = (sample){series, name, v};
    }
    for (size_t i = 0; i < e->n_families; i++)
        free(types[i]);
    free(types);
    free(closed);
    free(copy);
}

/* Value of the series written exactly as `series`; NAN when absent. */
static double value_of(const exposition *e, const char *series)
{
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->s[i].series, series) == 0)
            return e->s[i].value;
    return NAN;
}

static bool has_sample_named(const exposition *e, const char *name)
{
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->s[i].name, name) == 0)
            return true;
    return false;
}

static bool any_series_contains(const exposition *e, const char *needle)
{
    for (size_t i = 0; i < e->n; i++)
        if (strstr(e->s[i].series, needle))
            return true;
    return false;
}

/* ------------------------------------------------------------ fixture */

typedef struct {
    kvr_server *srv;
    char base[64];
    th_engine e[2];
    uint64_t tokens[4 * BS];
    uint64_t local[4];
} fixture;

static void scrape(const fixture *f, exposition *e)
{
    char url[128], *text = NULL;
    snprintf(url, sizeof url, "%s/metrics", f->base);
    assert_int_equal(th_http("GET", url, NULL, 0, &text), 200);
    expo_parse(text, e);
    free(text);
}

/* Two workers of model m: worker 1 holds the 4 blocks of tokens on gpu,
 * worker 2 nothing yet. */
static void start(fixture *f, bool per_worker)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.router.rng_seed = 7;
    cfg.metrics_per_worker = per_worker;
    f->srv = th_server_start(&cfg, f->base, sizeof f->base);
    assert_non_null(f->srv);
    for (int i = 0; i < 4 * BS; i++)
        f->tokens[i] = 300 + (uint64_t)i;
    th_local_hashes(f->tokens, 4 * BS, BS, f->local, 4);
    for (int w = 0; w < 2; w++) {
        th_engine_start(&f->e[w]);
        char body[512];
        snprintf(body, sizeof body,
                 "{\"instance_id\": %d, \"endpoint\": \"%s\", \"model_name\": \"m\", "
                 "\"block_size\": %d}",
                 w + 1, f->e[w].endpoint, BS);
        assert_int_equal(th_register(f->base, body, NULL), 201);
        assert_true(th_engine_wait_sub(&f->e[w], WAIT));
    }
    uint64_t h[4] = {11, 12, 13, 14};
    kvr_raw_event ev = th_store(h, 4, 0, f->tokens, BS);
    th_send_events(&f->e[0], 0, &ev, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", f->local, 4, 1, 0, 4 * BS, WAIT), 4 * BS);
}

static void stop(fixture *f)
{
    for (int w = 0; w < 2; w++)
        th_engine_stop(&f->e[w]);
    kvr_server_stop(f->srv);
}

/* /route of n tokens (the first `cached` from the indexed prompt, the rest
 * unseen); returns the chosen worker. */
static long route(const fixture *f, const char *id, size_t n, size_t cached, int pin)
{
    json_t *toks = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(toks, json_integer((json_int_t)(i < cached ? f->tokens[i]
                                                                       : 90000 + i)));
    json_t *q = json_pack("{s:o,s:s,s:s}", "token_ids", toks, "model_name", "m", "request_id",
                          id);
    if (pin)
        json_object_set_new(q, "worker_id", json_integer(pin));
    char *body = json_dumps(q, JSON_COMPACT);
    json_decref(q);
    long st;
    json_t *r = th_json("POST", f->base, "/route", body, &st);
    free(body);
    assert_int_equal(st, 200);
    long w = (long)json_integer_value(json_object_get(r, "worker_id"));
    json_decref(r);
    return w;
}

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------ tests */

static void test_families_split_and_valid(void **state)
{
    (void)state;
    fixture f;
    start(&f, false);
    /* Worker 2: seq 0, then 2 with no replay endpoint: one gap, one loss. */
    uint64_t h = 21;
    kvr_raw_event ev = th_store(&h, 1, 0, f.tokens, BS);
    th_send_events(&f.e[1], 0, &ev, 1, true);
    uint64_t h2 = 22;
    kvr_raw_event ev2 = th_store(&h2, 1, 0, f.tokens + BS, BS);
    th_send_events(&f.e[1], 2, &ev2, 1, true);
    assert_int_equal(th_wait_counter(f.base, 2, "m", "lost_batches", 1, WAIT), 1);
    exposition e;
    scrape(&f, &e);
    /* The mixed families are gone; each quantity is its own family. */
    assert_int_equal(family_index(&e, "kvr_source_total"), -1);
    assert_int_equal(family_index(&e, "kvr_mm_total"), -1);
    assert_int_equal(family_index(&e, "kvr_router_total"), -1);
    assert_true(value_of(&e, "kvr_source_seq_gaps_total") == 1);
    assert_true(value_of(&e, "kvr_source_lost_batches_total") == 1);
    assert_true(value_of(&e, "kvr_events_total{type=\"stored\"}") == 3);
    assert_true(value_of(&e, "kvr_events_total{type=\"removed\"}") == 0);
    assert_true(value_of(&e, "kvr_blocks_total{op=\"stored\"}") == 6);
    assert_true(value_of(&e, "kvr_replays_total{result=\"ok\"}") == 0);
    assert_true(value_of(&e, "kvr_replays_total{result=\"failed\"}") == 0);
    assert_true(value_of(&e, "kvr_source_batches_total") == 3);
    assert_true(value_of(&e, "kvr_drops_total{reason=\"parent_not_found\"}") == 0);
    assert_true(value_of(&e, "kvr_mm_blocks_excluded_total") == 0);
    assert_true(value_of(&e, "kvr_mm_excluded_ids") == 0);
    assert_true(value_of(&e, "kvr_workers{model=\"m\",group=\"default\"}") == 2);
    assert_true(value_of(&e, "kvr_listeners{status=\"active\"}") == 2);
    assert_true(value_of(&e, "kvr_listeners{status=\"pending\"}") == 0);
    assert_true(value_of(&e, "kvr_index_blocks{model=\"m\",group=\"default\"}") >= 4);
    double last = value_of(&e, "kvr_last_event_timestamp_seconds");
    assert_true(fabs(last - now_unix()) < 60);
    assert_true(value_of(&e, "kvr_listener_last_event_min_timestamp_seconds") <= last);
    /* Off by default: no series carries a worker. */
    assert_false(any_series_contains(&e, "worker=\""));
    assert_false(has_sample_named(&e, "kvr_worker_events_total"));
    expo_free(&e);
    stop(&f);
}

static void test_process_and_build_info(void **state)
{
    (void)state;
    fixture f;
    start(&f, false);
    /* Spend 60 ms of this process's CPU (the server runs in it) first; /proc
     * counts whole clock ticks. */
    clock_t c0 = clock();
    volatile uint64_t spin = 0;
    while ((double)(clock() - c0) / CLOCKS_PER_SEC < 0.06)
        spin++;
    exposition e;
    scrape(&f, &e);
    assert_true(value_of(&e, "process_cpu_seconds_total") >= 0.04);
    assert_true(value_of(&e, "process_resident_memory_bytes") > 1e6);
    assert_true(value_of(&e, "process_virtual_memory_bytes") >=
                value_of(&e, "process_resident_memory_bytes"));
    double started = value_of(&e, "process_start_time_seconds");
    assert_true(started <= now_unix() + 1 && started > now_unix() - 3600);
    double fds = value_of(&e, "process_open_fds");
    assert_true(fds >= 3 && fds <= value_of(&e, "process_max_fds"));
    /* kvr_build_info{version} 1, the version /health reports. */
    long st;
    json_t *h = th_json("GET", f.base, "/health", NULL, &st);
    assert_int_equal(st, 200);
    const char *version = json_string_value(json_object_get(h, "version"));
    assert_non_null(version);
    assert_true(version[0] >= '0' && version[0] <= '9');
    char series[128];
    snprintf(series, sizeof series, "kvr_build_info{version=\"%s\"}", version);
    assert_true(value_of(&e, series) == 1);
    json_decref(h);
    expo_free(&e);
    stop(&f);
}

static void test_per_worker_series_only_when_asked(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        fixture f;
        start(&f, on);
        assert_int_equal(route(&f, "a", 4 * BS, 4 * BS, 0), 1);
        assert_int_equal(route(&f, "b", 4 * BS, 0, 2), 2);
        assert_int_equal(route(&f, "c", 4 * BS, 0, 2), 2);
        exposition e;
        scrape(&f, &e);
        /* Fleet load per (model, group), always. */
        assert_true(value_of(&e, "kvr_router_active_requests{model=\"m\",group=\"default\"}") ==
                    3);
        assert_true(value_of(&e, "kvr_router_max_active_prefill_tokens{model=\"m\",group="
                                 "\"default\"}") == 8 * BS);
        assert_true(value_of(&e, "kvr_router_active_prefill_tokens{model=\"m\",group="
                                 "\"default\"}") == 8 * BS);
        assert_true(value_of(&e, "kvr_router_bookings_active") == 3);
        const char *w1 = "model=\"m\",group=\"default\",worker=\"1\"";
        const char *w2 = "model=\"m\",group=\"default\",worker=\"2\"";
        char s[256];
        snprintf(s, sizeof s, "kvr_worker_active_requests{%s,rank=\"0\"}", w2);
        double v = value_of(&e, s);
        if (!on) {
            assert_true(isnan(v));
            assert_false(any_series_contains(&e, "worker=\""));
        } else {
            assert_true(v == 2);
            snprintf(s, sizeof s, "kvr_worker_active_requests{%s,rank=\"0\"}", w1);
            assert_true(value_of(&e, s) == 1);
            snprintf(s, sizeof s, "kvr_worker_active_prefill_tokens{%s,rank=\"0\"}", w2);
            assert_true(value_of(&e, s) == 8 * BS);
            snprintf(s, sizeof s, "kvr_worker_active_prefill_tokens{%s,rank=\"0\"}", w1);
            assert_true(value_of(&e, s) == 0);
            snprintf(s, sizeof s, "kvr_worker_active_decode_blocks{%s,rank=\"0\"}", w1);
            assert_true(value_of(&e, s) >= 4);
            snprintf(s, sizeof s, "kvr_worker_events_total{%s,type=\"stored\"}", w1);
            assert_true(value_of(&e, s) == 1);
            snprintf(s, sizeof s, "kvr_worker_blocks_total{%s,op=\"stored\"}", w1);
            assert_true(value_of(&e, s) == 4);
            snprintf(s, sizeof s, "kvr_worker_source_seq_gaps_total{%s}", w2);
            assert_true(value_of(&e, s) == 0);
            snprintf(s, sizeof s, "kvr_worker_drops_total{%s,reason=\"block_not_found\"}", w1);
            assert_true(value_of(&e, s) == 0);
            snprintf(s, sizeof s, "kvr_worker_last_event_timestamp_seconds{%s,rank=\"0\"}", w1);
            assert_true(fabs(value_of(&e, s) - now_unix()) < 60);
            /* Worker 2 never heard an event: no timestamp for it. */
            snprintf(s, sizeof s, "kvr_worker_last_event_timestamp_seconds{%s,rank=\"0\"}", w2);
            assert_true(isnan(value_of(&e, s)));
        }
        expo_free(&e);
        stop(&f);
    }
}

static void test_route_cached_share_histogram(void **state)
{
    (void)state;
    fixture f;
    start(&f, false);
    /* All 16 tokens cached on worker 1; none of 16 on worker 2; 8 of 16. */
    assert_int_equal(route(&f, "all", 4 * BS, 4 * BS, 1), 1);
    assert_int_equal(route(&f, "none", 4 * BS, 0, 2), 2);
    assert_int_equal(route(&f, "half", 4 * BS, 2 * BS, 1), 1);
    exposition e;
    scrape(&f, &e);
    assert_true(value_of(&e, "kvr_route_cached_share_bucket{le=\"0\"}") == 1);
    assert_true(value_of(&e, "kvr_route_cached_share_bucket{le=\"0.4\"}") == 1);
    assert_true(value_of(&e, "kvr_route_cached_share_bucket{le=\"0.5\"}") == 2);
    assert_true(value_of(&e, "kvr_route_cached_share_bucket{le=\"0.9\"}") == 2);
    assert_true(value_of(&e, "kvr_route_cached_share_bucket{le=\"1\"}") == 3);
    assert_true(value_of(&e, "kvr_route_cached_share_bucket{le=\"+Inf\"}") == 3);
    assert_true(value_of(&e, "kvr_route_cached_share_count") == 3);
    assert_true(fabs(value_of(&e, "kvr_route_cached_share_sum") - 1.5) < 1e-6);
    assert_true(value_of(&e, "kvr_route_prompt_tokens_total") == 12 * BS);
    assert_true(value_of(&e, "kvr_route_cached_tokens_total") == 6 * BS);
    assert_true(value_of(&e, "kvr_router_routes_total") == 3);
    /* A failed /route observes nothing. */
    long st;
    json_decref(th_json("POST", f.base, "/route",
                        "{\"model_name\":\"m\",\"request_id\":\"all\",\"token_ids\":[1]}", &st));
    assert_int_equal(st, 409);
    expo_free(&e);
    scrape(&f, &e);
    assert_true(value_of(&e, "kvr_route_cached_share_count") == 3);
    expo_free(&e);
    stop(&f);
}

/* Names from registrations are label values: quotes, backslashes and
 * newlines are escaped, so the exposition still parses. */
static void test_label_values_escaped(void **state)
{
    (void)state;
    fixture f;
    start(&f, true);
    assert_int_equal(th_register(f.base,
                                 "{\"instance_id\": 9, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                 "\"model_name\": \"q\\\"m\\\\x\\ny\", \"block_size\": 4}",
                                 NULL),
                     201);
    exposition e;
    scrape(&f, &e);
    assert_true(value_of(&e, "kvr_workers{model=\"q\\\"m\\\\x\\ny\",group=\"default\"}") == 1);
    assert_true(value_of(&e, "kvr_worker_active_requests{model=\"q\\\"m\\\\x\\ny\",group="
                             "\"default\",worker=\"9\",rank=\"0\"}") == 0);
    expo_free(&e);
    stop(&f);
}

/* Every string under an "expr" key, anywhere in the dashboard. */
static void collect_exprs(json_t *j, json_t *out)
{
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
        {
            if (strcmp(k, "expr") == 0 && json_is_string(v))
                json_array_append(out, v);
            else
                collect_exprs(v, out);
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) collect_exprs(v, out);
    }
}

/* The metric names a PromQL expression reads: identifiers outside label
 * matchers' values and range brackets that start with kvr_ or process_. */
static size_t expr_metrics(const char *expr, char names[][128], size_t cap)
{
    size_t n = 0;
    for (const char *p = expr; *p;) {
        if (*p == '"') {
            const char *close = strchr(p + 1, '"');
            p = close ? close + 1 : p + strlen(p);
            continue;
        }
        if (*p == '[') {
            p += strcspn(p, "]");
            continue;
        }
        if (isalpha((unsigned char)*p) || *p == '_') {
            size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
            if ((strncmp(p, "kvr_", 4) == 0 || strncmp(p, "process_", 8) == 0) && len < 128 &&
                n < cap)
                snprintf(names[n++], 128, "%.*s", (int)len, p);
            p += len;
            continue;
        }
        p++;
    }
    return n;
}

static void test_dashboard_queries_exported_metrics(void **state)
{
    (void)state;
    fixture f;
    start(&f, true);
    assert_int_equal(route(&f, "a", 4 * BS, 4 * BS, 0), 1);
    exposition e;
    scrape(&f, &e);
    json_t *dash = kvr_test_load_json("contrib/grafana/kvrouter.json");
    assert_true(json_is_array(json_object_get(dash, "panels")));
    json_t *exprs = json_array();
    collect_exprs(dash, exprs);
    assert_true(json_array_size(exprs) >= 10);
    size_t i, checked = 0;
    json_t *x;
    json_array_foreach(exprs, i, x)
    {
        char names[16][128];
        size_t n = expr_metrics(json_string_value(x), names, 16);
        if (n == 0)
            fail_msg("dashboard expr reads no kvrouter metric: %s", json_string_value(x));
        for (size_t k = 0; k < n; k++, checked++)
            if (!has_sample_named(&e, names[k]))
                fail_msg("dashboard queries %s, which /metrics does not export (expr: %s)",
                         names[k], json_string_value(x));
    }
    assert_true(checked >= json_array_size(exprs));
    json_decref(exprs);
    json_decref(dash);
    expo_free(&e);
    stop(&f);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families_split_and_valid),
        cmocka_unit_test(test_process_and_build_info),
        cmocka_unit_test(test_per_worker_series_only_when_asked),
        cmocka_unit_test(test_route_cached_share_histogram),
        cmocka_unit_test(test_label_values_escaped),
        cmocka_unit_test(test_dashboard_queries_exported_metrics),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
