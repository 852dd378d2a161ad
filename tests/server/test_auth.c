/* Bearer-token authentication (SPEC §12) through real HTTP: every row of
 * the endpoint table is asked without a token, with a wrong one and with
 * the right one, under each scope, and must answer 401 (JSON error,
 * WWW-Authenticate: Bearer) exactly when its access class needs the token;
 * failures are counted by reason in /metrics; the token file is read again
 * on reload, and one that cannot be read keeps the token in use; a replica
 * sends its token to a protected peer's /dump. The constant-time compare
 * is checked by its results (never by timing). */
#include "test_support.h"

#include <sys/stat.h>

#include "kvrouter/server.h"
#include "net_helpers.h"
#include "server/auth.h"
#include "server/server_internal.h"

#define TOKEN "s3cret-Token_0123456789"

typedef struct {
    long status;
    char challenge[256]; /* WWW-Authenticate */
    char *body;
} reply;

static size_t on_header(char *p, size_t s, size_t n, void *u)
{
    reply *r = u;
    size_t len = s * n;
    const char *name = "WWW-Authenticate:";
    if (len > strlen(name) && strncasecmp(p, name, strlen(name)) == 0) {
        size_t v = strlen(name);
        while (v < len && p[v] == ' ')
            v++;
        size_t e = len;
        while (e > v && (p[e - 1] == '\r' || p[e - 1] == '\n'))
            e--;
        snprintf(r->challenge, sizeof r->challenge, "%.*s", (int)(e - v), p + v);
    }
    return len;
}

/* method path with an optional "Authorization: <authorization>". */
static reply call(const char *base, const char *method, const char *path,
                  const char *authorization)
{
    reply r = {0};
    char url[256], h[512];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    th_buf b = {0};
    struct curl_slist *hs = curl_slist_append(NULL, "Content-Type: application/json");
    if (authorization) {
        snprintf(h, sizeof h, "Authorization: %s", authorization);
        hs = curl_slist_append(hs, h);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (strcmp(method, "POST") == 0)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "{}");
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    r.body = b.data ? b.data : strdup("");
    return r;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, 0600);
}

static void token_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "/tmp/kvr_test_auth_%d_%s", (int)getpid(), name);
}

static kvr_server *start(const char *token_file, kvr_auth_scope scope, char *base, size_t cap)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.auth_token_file = token_file;
    cfg.auth_scope = scope;
    kvr_server *srv = th_server_start(&cfg, base, cap);
    assert_non_null(srv);
    return srv;
}

static bool needs_token(kvr_access a, kvr_auth_scope scope)
{
    return scope == KVR_AUTH_SCOPE_ALL || a == KVR_ACCESS_ADMIN ||
           (scope == KVR_AUTH_SCOPE_QUERY && a == KVR_ACCESS_QUERY);
}

/* Every table row under one scope; returns the 401s seen (missing, invalid). */
static void check_every_endpoint(const char *base, kvr_auth_scope scope, unsigned *missing,
                                 unsigned *invalid)
{
    for (size_t i = 0; i < kvr_endpoint_table_len; i++) {
        const kvr_endpoint_def *d = &kvr_endpoint_table[i];
        bool need = needs_token(d->access, scope);
        reply none = call(base, d->method, d->path, NULL);
        reply wrong = call(base, d->method, d->path, "Bearer not-the-" TOKEN);
        reply basic = call(base, d->method, d->path, "Basic dXNlcjpwYXNz");
        reply right = call(base, d->method, d->path, "Bearer " TOKEN);
        reply lower = call(base, d->method, d->path, "bearer   " TOKEN "  ");
        if (need) {
            assert_int_equal(none.status, 401);
            assert_string_equal(none.challenge, "Bearer realm=\"kvrouter\"");
            json_t *j = json_loads(none.body, 0, NULL);
            assert_non_null(strstr(json_string_value(json_object_get(j, "error")), d->path));
            json_decref(j);
            assert_int_equal(wrong.status, 401);
            assert_non_null(strstr(wrong.challenge, "error=\"invalid_token\""));
            assert_int_equal(basic.status, 401);
            *missing += 2;
            *invalid += 1;
        } else {
            assert_int_not_equal(none.status, 401);
            assert_int_not_equal(wrong.status, 401);
        }
        assert_int_not_equal(right.status, 401);
        assert_true(right.status > 0);
        assert_int_not_equal(lower.status, 401); /* the scheme is case-insensitive */
        free(none.body);
        free(wrong.body);
        free(basic.body);
        free(right.body);
        free(lower.body);
    }
}

static double metric(const char *base, const char *key)
{
    reply r = call(base, "GET", "/metrics", "Bearer " TOKEN);
    double v = th_metric_in(r.body, key);
    free(r.body);
    return v;
}

static void check_scope(kvr_auth_scope scope)
{
    char path[128], base[64];
    token_path(path, sizeof path, "token");
    write_file(path, TOKEN "\n");
    kvr_server *srv = start(path, scope, base, sizeof base);
    unsigned missing = 0, invalid = 0;
    check_every_endpoint(base, scope, &missing, &invalid);
    assert_true(missing > 0);
    assert_true(metric(base, "kvr_http_auth_failures_total{reason=\"missing\"}") == missing);
    assert_true(metric(base, "kvr_http_auth_failures_total{reason=\"invalid\"}") == invalid);
    kvr_server_stop(srv);
    unlink(path);
}

static void test_admin_scope_guards_the_admin_endpoints_only(void **state)
{
    (void)state;
    check_scope(KVR_AUTH_SCOPE_ADMIN);
}

static void test_query_scope_adds_the_query_endpoints(void **state)
{
    (void)state;
    check_scope(KVR_AUTH_SCOPE_QUERY);
}

static void test_all_scope_guards_every_endpoint(void **state)
{
    (void)state;
    check_scope(KVR_AUTH_SCOPE_ALL);
}

static void test_without_a_token_file_everything_is_open(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = start(NULL, KVR_AUTH_SCOPE_ADMIN, base, sizeof base);
    for (size_t i = 0; i < kvr_endpoint_table_len; i++) {
        reply r = call(base, kvr_endpoint_table[i].method, kvr_endpoint_table[i].path, NULL);
        assert_int_not_equal(r.status, 401);
        assert_true(r.status > 0);
        free(r.body);
    }
    kvr_server_stop(srv);
    /* a scope beyond admin without a token is a configuration error */
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.auth_scope = KVR_AUTH_SCOPE_ALL;
    char err[256] = "";
    assert_null(kvr_server_start(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "auth"));
}

static void test_an_unauthenticated_body_is_not_read(void **state)
{
    (void)state;
    char path[128], base[64];
    token_path(path, sizeof path, "token");
    write_file(path, TOKEN);
    kvr_server *srv = start(path, KVR_AUTH_SCOPE_ADMIN, base, sizeof base);
    /* 4 MiB to /register: the 401 comes from the headers alone */
    size_t big = 4u << 20;
    char *body = malloc(big);
    memset(body, ' ', big);
    body[0] = '{';
    body[big - 1] = '}';
    char url[96], *out = NULL;
    snprintf(url, sizeof url, "%s/register", base);
    assert_int_equal(th_http("POST", url, body, big, &out), 401);
    free(out);
    free(body);
    kvr_server_stop(srv);
    unlink(path);
}

static void test_reload_reads_the_token_again_and_keeps_it_when_the_file_is_bad(void **state)
{
    (void)state;
    char path[128], base[64];
    token_path(path, sizeof path, "reload");
    write_file(path, "first-token\r\n");
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.auth_token_file = path;
    kvr_server *srv = th_server_start(&cfg, base, sizeof base);
    assert_non_null(srv);
    reply r = call(base, "GET", "/dump", "Bearer first-token");
    assert_int_equal(r.status, 200);
    free(r.body);

    write_file(path, "second-token\n");
    char err[512];
    assert_int_equal(kvr_server_reload(srv, &cfg, err, sizeof err), 0);
    r = call(base, "GET", "/dump", "Bearer first-token");
    assert_int_equal(r.status, 401);
    free(r.body);
    r = call(base, "GET", "/dump", "Bearer second-token");
    assert_int_equal(r.status, 200);
    free(r.body);

    /* a missing file, then an empty one: the token in use stays */
    unlink(path);
    assert_int_equal(kvr_server_reload(srv, &cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "stays"));
    write_file(path, "\n");
    assert_int_equal(kvr_server_reload(srv, &cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "no token"));
    r = call(base, "GET", "/dump", "Bearer second-token");
    assert_int_equal(r.status, 200);
    free(r.body);
    /* nor does dropping the setting turn authentication off */
    cfg.auth_token_file = NULL;
    assert_int_equal(kvr_server_reload(srv, &cfg, err, sizeof err), -1);
    r = call(base, "GET", "/dump", NULL);
    assert_int_equal(r.status, 401);
    free(r.body);
    kvr_server_stop(srv);
    unlink(path);
}

static void test_a_replica_sends_its_token_to_a_protected_peer(void **state)
{
    (void)state;
    char path[128], peer_base[64], base[64];
    token_path(path, sizeof path, "peer");
    write_file(path, TOKEN "\n");
    kvr_server *peer = start(path, KVR_AUTH_SCOPE_ADMIN, peer_base, sizeof peer_base);
    /* something to dump: a store from a registered engine */
    th_engine e;
    th_engine_start(&e);
    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\": 5, \"endpoint\": \"%s\", \"model_name\": \"m\", \"block_size\": 4}",
             e.endpoint);
    assert_int_equal(kvr_server_register_json(peer, body, NULL, 0), 201);
    assert_true(th_engine_wait_sub(&e, 10000));
    uint64_t tokens[4] = {1, 2, 3, 4}, local[1], h = 11;
    th_local_hashes(tokens, 4, 4, local, 1);
    kvr_raw_event ev = th_store(&h, 1, 0, tokens, 4);
    th_send_events(&e, 0, &ev, 1, true);
    assert_int_equal(th_wait_score(peer_base, "m", local, 1, 5, 0, 4, 10000), 4);

    const char *peers[] = {peer_base};
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.peers = peers;
    cfg.n_peers = 1;
    /* no token: the peer refuses, nothing is loaded */
    kvr_server *lone = th_server_start(&cfg, base, sizeof base);
    assert_non_null(lone);
    assert_true(metric(base, "kvr_dump_records_loaded_total") == 0);
    kvr_server_stop(lone);
    /* the peer token (here the peer's own, from peer_token_file) */
    cfg.peer_token_file = path;
    kvr_server *replica = th_server_start(&cfg, base, sizeof base);
    assert_non_null(replica);
    assert_true(metric(base, "kvr_dump_records_loaded_total") >= 1);
    kvr_server_stop(replica);
    th_engine_stop(&e);
    kvr_server_stop(peer);
    unlink(path);
}

static void test_token_compare_is_exact(void **state)
{
    (void)state;
    const char *t = "abcdef";
    assert_true(kvr_auth_token_equal(t, 6, "abcdef", 6));
    assert_false(kvr_auth_token_equal(t, 6, "abcdeg", 6)); /* last byte */
    assert_false(kvr_auth_token_equal(t, 6, "Abcdef", 6)); /* first byte */
    assert_false(kvr_auth_token_equal(t, 6, "abcde", 5));  /* a prefix */
    assert_false(kvr_auth_token_equal(t, 6, "abcdefg", 7)); /* longer */
    assert_false(kvr_auth_token_equal(t, 6, "", 0));
    assert_false(kvr_auth_token_equal(t, 6, "abcdef\0", 7)); /* a NUL after it */
    /* bytes above 0x7f and differences in single bits */
    assert_false(kvr_auth_token_equal("\x80", 1, "\x00", 1));
    assert_false(kvr_auth_token_equal("a", 1, "c", 1));
}

static void test_token_file_rules(void **state)
{
    (void)state;
    char path[128], err[512], *tok = NULL;
    size_t len = 0;
    token_path(path, sizeof path, "rules");
    const struct {
        const char *text, *want; /* want NULL: refused */
    } cases[] = {
        {"tok\n", "tok"}, {"tok\r\n", "tok"}, {"tok", "tok"}, {"\n", NULL},
        {"", NULL},       {"a b\n", NULL},    {"tok\n\n", NULL}, {"two\nlines\n", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(path, cases[i].text);
        int rc = kvr_auth_read_token_file(path, &tok, &len, err, sizeof err);
        if (cases[i].want) {
            assert_int_equal(rc, 0);
            assert_string_equal(tok, cases[i].want);
            assert_int_equal(len, strlen(cases[i].want));
            free(tok);
        } else {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(err, path));
        }
    }
    unlink(path);
    assert_int_equal(kvr_auth_read_token_file(path, &tok, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "No such file"));
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_compare_is_exact),
        cmocka_unit_test(test_token_file_rules),
        cmocka_unit_test(test_admin_scope_guards_the_admin_endpoints_only),
        cmocka_unit_test(test_query_scope_adds_the_query_endpoints),
        cmocka_unit_test(test_all_scope_guards_every_endpoint),
        cmocka_unit_test(test_without_a_token_file_everything_is_open),
        cmocka_unit_test(test_an_unauthenticated_body_is_not_read),
        cmocka_unit_test(test_reload_reads_the_token_again_and_keeps_it_when_the_file_is_bad),
        cmocka_unit_test(test_a_replica_sends_its_token_to_a_protected_peer),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
