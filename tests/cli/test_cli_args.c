/* Every subcommand answers a bad command line with exactly one line on
 * stderr, "kvrouter CMD: ...", and exit status 2 (issue 2 CLI contract),
 * before it opens a file, a socket or a port. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_one_line_error(const char *cmd, const char *args)
{
    char line[4096];
    /* stdout dropped: the error must be on stderr */
    snprintf(line, sizeof line, "'%s' %s %s 2>&1 >/dev/null", kvr_test_binary(), cmd, args);
    int status;
    char *out = kvr_test_run(line, &status);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "kvrouter %s: ", cmd);
    if (status != 2 || strncmp(out, prefix, strlen(prefix)) != 0 || !strchr(out, '\n') ||
        strchr(out, '\n')[1] != '\0')
        fail_msg("`kvrouter %s %s`: status %d, stderr '%s'", cmd, args, status, out);
    free(out);
}

static void test_serve_bad_values(void **state)
{
    (void)state;
    expect_one_line_error("serve", "--bogus x");
    expect_one_line_error("serve", "--listen");
    expect_one_line_error("serve", "--max-body 8k");
    expect_one_line_error("serve", "--http-threads -1");
    expect_one_line_error("serve", "--replay-timeout-ms 1.5");
    expect_one_line_error("serve", "--block-size 0");
    expect_one_line_error("serve", "--listen nocolon");
    expect_one_line_error("serve", "--router-opt x");
}

static void test_sim_bad_values(void **state)
{
    (void)state;
    expect_one_line_error("sim", "");
    expect_one_line_error("sim", "--trace /nonexistent --engines 2.5");
    expect_one_line_error("sim", "--trace /nonexistent --limit -1");
    expect_one_line_error("sim", "--trace /nonexistent --seed 1e3");
    expect_one_line_error("sim", "--trace /nonexistent --kimi-share 2");
    expect_one_line_error("sim", "--trace /nonexistent --policies best");
    expect_one_line_error("sim", "--trace");
    expect_one_line_error("sim", "--bogus");
    /* A run that would succeed but for --model (a name the JSON bodies
     * cannot carry unescaped). */
    char args[2048];
    snprintf(args, sizeof args, "--trace '%s' --limit 1 --policies round_robin --model 'a\"b'",
             kvr_test_path("data/conversation_trace.jsonl"));
    expect_one_line_error("sim", args);
    snprintf(args, sizeof args, "--trace '%s' --limit 1 --policies round_robin --model ''",
             kvr_test_path("data/conversation_trace.jsonl"));
    expect_one_line_error("sim", args);
}

static void test_tap_bench_decode_hash_bad_values(void **state)
{
    (void)state;
    expect_one_line_error("tap", "");
    expect_one_line_error("tap", "--count x tcp://127.0.0.1:1");
    expect_one_line_error("tap", "--bogus");
    expect_one_line_error("bench", "--coalesce -1");
    expect_one_line_error("bench", "--threads 0");
    expect_one_line_error("decode", "--bench --iterations 0");
    expect_one_line_error("hash", "--block-size 4 -- 1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_bad_values),
        cmocka_unit_test(test_sim_bad_values),
        cmocka_unit_test(test_tap_bench_decode_hash_bad_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
