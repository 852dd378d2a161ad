/* Engine discovery from the command line and the config file, in a real
 * `kvrouter serve` process: --engines ([kind=]URL, origin cli) and the
 * file's "engines" (URLs or objects, origin config) are polled, an entry's
 * instance_id and kind are kept; SIGHUP makes the file's engines exactly the
 * new file's and leaves the command line's; the engine options are in
 * --help, and bad values are refused naming the option or field. The
 * engines are HTTP doubles in this process (tests/server/mock_engine_http.h). */
#include "test_support.h"

#include "../server/mock_engine_http.h"
#include "child.h"

#define WAIT 20000

/* "url=state,..." of GET /engines, in list order. */
static void engines_summary(const char *base, char *out, size_t cap)
{
    json_t *r = th_json("GET", base, "/engines", NULL, NULL);
    size_t o = 0, i;
    json_t *e;
    out[0] = 0;
    json_array_foreach(json_object_get(r, "engines"), i, e)
    o += (size_t)snprintf(out + o, cap - o, "%s%s=%s/%s", i ? "," : "",
                          json_string_value(json_object_get(e, "url")),
                          json_string_value(json_object_get(e, "origin")),
                          json_string_value(json_object_get(e, "state")));
    json_decref(r);
}

static void wait_summary(const char *base, const char *want)
{
    char got[1024];
    double end = th_now() + WAIT / 1000.0;
    do {
        engines_summary(base, got, sizeof got);
        if (strcmp(got, want) == 0)
            return;
        th_sleep_ms(30);
    } while (th_now() < end);
    fail_msg("engines %s, wanted %s", got, want);
}

static void test_config_and_flag_engines_are_polled_and_reloaded(void **state)
{
    (void)state;
    mock_pubs p1, p2;
    mock_pubs_start(&p1, 1);
    mock_pubs_start(&p2, 1);
    mock_http a, b;
    mock_sglang_engine(&a, &p1, "sglang_server_info_dp2.json", "sglang_model_info_qwen.json", 1,
                       NULL);
    mock_sglang_engine(&b, &p2, "sglang_server_info_dp2.json", "sglang_model_info_qwen.json", 1,
                       NULL);
    char path[] = "/tmp/kvr_disc_cfg_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char cfg[1024], flag[128];
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"engine_poll_s\": 0.2, \"engine_grace_s\": 60, "
             "\"engines\": [{\"url\": \"%s\", \"kind\": \"sglang\", \"instance_id\": 77}]}",
             a.url);
    kvr_test_replace_file(path, cfg);
    snprintf(flag, sizeof flag, "sglang=%s", b.url);
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--config", path, "--engines", flag,
                    NULL};
    kvr_child *c = calloc(1, sizeof *c);
    kvr_child_spawn(c, argv);
    char addr[64], base[96], want[512];
    int port = kvr_child_read_listen(c, addr, sizeof addr);
    assert_true(port > 0);
    snprintf(base, sizeof base, "http://%s:%d", addr, port);
    /* In the order listed: the command line's, then the file's. */
    snprintf(want, sizeof want, "%s=cli/indexed,%s=config/indexed", b.url, a.url);
    wait_summary(base, want);
    json_t *r = th_json("GET", base, "/engines", NULL, NULL);
    json_t *ea = json_array_get(json_object_get(r, "engines"), 1);
    assert_int_equal(json_integer_value(json_object_get(ea, "instance_id")), 77);
    assert_string_equal(json_string_value(json_object_get(ea, "kind")), "sglang");
    json_decref(r);
    /* The file loses its engine: gone, with its worker; the flag's stays. */
    snprintf(cfg, sizeof cfg,
             "{\"listen\": \"127.0.0.1:0\", \"engine_poll_s\": 0.2, \"engines\": []}");
    kvr_test_replace_file(path, cfg);
    size_t mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(c, mark, "removed", WAIT));
    snprintf(want, sizeof want, "%s=cli/indexed", b.url);
    wait_summary(base, want);
    json_t *w = th_json("GET", base, "/workers", NULL, NULL);
    assert_int_equal(json_array_size(w), 1);
    json_decref(w);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    free(c);
    unlink(path);
    mock_http_stop(&a);
    mock_http_stop(&b);
    mock_pubs_stop(&p1);
    mock_pubs_stop(&p2);
}

static void test_help_lists_the_engine_options(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s serve --help", kvr_test_binary());
    int status;
    char *out = kvr_test_run(cmd, &status);
    assert_int_equal(status, 0);
    const char *opts[] = {"--engines", "--engine-poll-s", "--engine-grace-s", "--engine-timeout-s",
                          "--max-engines", "--engine-max-response-bytes"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strstr(out, opts[i]))
            fail_msg("--help lacks %s", opts[i]);
    free(out);
}

static void test_bad_engine_settings_are_refused_naming_them(void **state)
{
    (void)state;
    const struct {
        const char *args, *config, *names;
        int status;
    } cases[] = {
        {"--engine-poll-s 0", NULL, "--engine-poll-s", 2},
        {"--engine-grace-s -1", NULL, "--engine-grace-s", 2},
        {"--max-engines 0", NULL, "--max-engines", 2},
        {"--engines tgi=http://127.0.0.1:1", NULL, "kind must be", 2},
        {"--engines nourl=", NULL, "[KIND=]URL", 2},
        {"", "{\"engines\": 5}", "'engines'", 2},
        {"", "{\"engines\": [{\"url\": \"http://127.0.0.1:1\", \"colour\": 1}]}", "colour", 2},
        {"", "{\"engines\": [{\"kind\": \"vllm\"}]}", "url", 2},
        {"--engines ftp://127.0.0.1:1", NULL, "http:// or https://", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024], path[] = "/tmp/kvr_disc_bad_XXXXXX";
        char conf[600] = "";
        if (cases[i].config) {
            int fd = mkstemp(path);
            assert_true(fd >= 0);
            assert_true(write(fd, cases[i].config, strlen(cases[i].config)) > 0);
            close(fd);
            snprintf(conf, sizeof conf, "--config %s", path);
        }
        snprintf(cmd, sizeof cmd, "%s serve --listen 127.0.0.1:0 %s %s 2>&1 </dev/null",
                 kvr_test_binary(), conf, cases[i].args);
        int status;
        char *out = kvr_test_run(cmd, &status);
        if (status != cases[i].status || !strstr(out, cases[i].names))
            fail_msg("case %zu (%s %s): status %d, output: %s", i, cases[i].args,
                     cases[i].config ? cases[i].config : "", status, out);
        free(out);
        if (cases[i].config)
            unlink(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_and_flag_engines_are_polled_and_reloaded),
        cmocka_unit_test(test_help_lists_the_engine_options),
        cmocka_unit_test(test_bad_engine_settings_are_refused_naming_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
