/* `kvrouter serve --config`: the config file's keys come from the same
 * option table as the flags, so an unknown key or a wrong type is a usage
 * error naming the key (it used to be ignored), flags override the file,
 * and --help lists the router keys. */
#include "test_support.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* `kvrouter serve --config FILE EXTRA`: exit status and stderr. The
 * `timeout` only guards against a server that starts instead of refusing. */
static char *serve_config(const char *text, const char *extra, int *status)
{
    const char *path = kvr_test_write_tmp(text);
    char line[1024];
    snprintf(line, sizeof line, "timeout 20 '%s' serve --config %s %s 2>&1 >/dev/null",
             kvr_test_binary(), path, extra);
    char *out = kvr_test_run(line, status);
    unlink(path);
    return out;
}

static void expect_refused(const char *text, const char *names)
{
    int status;
    char *out = serve_config(text, "", &status);
    if (status != 2 || !strstr(out, names) || strncmp(out, "kvrouter serve: --config ", 25) != 0)
        fail_msg("config %s: status %d, stderr '%s' (wanted it to name %s)", text, status, out,
                 names);
    free(out);
}

static void test_unknown_keys_and_wrong_types_name_the_key(void **state)
{
    (void)state;
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"max_bdy\": 1}", "unknown key 'max_bdy'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"max_body\": \"big\"}", "'max_body'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"max_body\": -5}", "'max_body'");
    expect_refused("{\"listen\": 8090}", "'listen'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"router\": {\"temprature\": 1}}",
                   "unknown key 'router.temprature'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"router\": {\"temperature\": \"hot\"}}",
                   "'router.temperature'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"router\": 3}", "router");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"workers\": {}}", "'workers'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"workers\": [{\"instance_id\": 1}]}",
                   "workers[0]: missing field 'endpoint'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"peers\": [1]}", "'peers'");
    expect_refused("{\"listen\": \"127.0.0.1:0\", \"log_level\": \"loud\"}", "'log_level'");
    expect_refused("[1, 2]", "must be a JSON object");
    expect_refused("{\"listen\": ", "line 1");
}

static void test_flags_override_the_file_and_help_lists_router_keys(void **state)
{
    (void)state;
    /* The file's bad value is overridden by a good flag: the flag wins (the
     * run then fails later, on the missing --workers model, which proves it
     * got past the option). */
    int status;
    char *out = serve_config("{\"listen\": \"127.0.0.1:0\", \"block_size\": 4}",
                             "--workers 1=tcp://127.0.0.1:5 --block-size 0", &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "--block-size"));
    free(out);
    char line[512];
    snprintf(line, sizeof line, "'%s' serve --help", kvr_test_binary());
    out = kvr_test_run(line, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "--threads"));
    assert_non_null(strstr(out, "--max-workers N"));
    assert_non_null(strstr(out, "overlap_score_credit"));
    assert_non_null(strstr(out, "(default 600)")); /* booking_ttl_s, from the router table */
    assert_non_null(strstr(out, "(default 8388608)")); /* max_body, from the server default */
    free(out);
}

/* The README's configuration table stays true: every flag and router key
 * --help prints (from the option tables) is named there. */
static void test_readme_names_every_option(void **state)
{
    (void)state;
    size_t len;
    char *readme = kvr_test_read_file(kvr_test_path("README.md"), &len);
    assert_non_null(readme);
    char line[512];
    snprintf(line, sizeof line, "'%s' serve --help", kvr_test_binary());
    int status;
    char *help = kvr_test_run(line, &status);
    assert_int_equal(status, 0);
    size_t checked = 0;
    bool router = false;
    for (char *l = strtok(help, "\n"); l; l = strtok(NULL, "\n")) {
        if (strncmp(l, "Router keys", 11) == 0)
            router = true;
        char name[64];
        bool flag = strncmp(l, "  --", 4) == 0;
        if (!(flag || (router && l[0] == ' ' && l[1] == ' ' && l[2] != ' ')) ||
            sscanf(l + (flag ? 4 : 2), "%63s", name) != 1 || strcmp(name, "help") == 0)
            continue;
        char key[80], as_flag[80];
        snprintf(as_flag, sizeof as_flag, "`--%s", name);
        for (char *c = name; *c; c++)
            if (*c == '-')
                *c = '_';
        snprintf(key, sizeof key, "`%s`", name);
        if (!strstr(readme, key) && !strstr(readme, as_flag))
            fail_msg("README.md does not name option %s", key);
        checked++;
    }
    assert_true(checked >= 25);
    free(help);
    free(readme);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_keys_and_wrong_types_name_the_key),
        cmocka_unit_test(test_flags_override_the_file_and_help_lists_router_keys),
        cmocka_unit_test(test_readme_names_every_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
