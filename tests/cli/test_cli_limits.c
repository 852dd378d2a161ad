/* `kvrouter serve` and the limits (SPEC §12) as an operator starts it: the
 * soft descriptor limit raised to the hard one at start (both logged, and
 * /metrics process_max_fds says so); --port beyond loopback warns only when
 * no token is configured; SIGHUP reads --auth-token-file again, and a file
 * that cannot be read keeps the token in use and says why. */
#include "test_support.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include "../server/net_helpers.h"
#include "child.h"

#define WAIT 10000

static long get_with_token(const char *base, const char *path, const char *token)
{
    char url[128], h[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    snprintf(h, sizeof h, "Authorization: Bearer %s", token);
    return th_http_with("GET", url, h, NULL, 0, NULL);
}

static void write_token(const char *path, const char *token)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", token);
    fclose(f);
    chmod(path, 0600);
}

static void test_descriptor_limit_raised_at_start(void **state)
{
    (void)state;
    struct rlimit rl, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max <= 256)
        skip();
    low = rl;
    low.rlim_cur = 256;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0); /* the child inherits it */
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--listen", "127.0.0.1:0", NULL};
    kvr_child *c = calloc(1, sizeof *c);
    kvr_child_spawn(c, argv);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    char addr[64], base[64], expect[128];
    int port = kvr_child_read_listen(c, addr, sizeof addr);
    assert_true(port > 0);
    snprintf(expect, sizeof expect, "soft 256 raised to the hard limit %llu",
             (unsigned long long)rl.rlim_max);
    assert_true(kvr_child_wait_stderr(c, 0, expect, WAIT));
    snprintf(base, sizeof base, "http://127.0.0.1:%d/metrics", port);
    char *text = NULL;
    assert_int_equal(th_http("GET", base, NULL, 0, &text), 200);
    char want[96];
    snprintf(want, sizeof want, "\nprocess_max_fds %llu\n", (unsigned long long)rl.rlim_max);
    assert_non_null(strstr(text, want));
    free(text);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    free(c);
}

static void test_token_beyond_loopback_and_sighup(void **state)
{
    (void)state;
    char path[96];
    snprintf(path, sizeof path, "/tmp/kvr_cli_token_%d", (int)getpid());
    write_token(path, "first");
    char *argv[] = {(char *)kvr_test_binary(), "serve", "--port", "0", "--auth-token-file",
                    path, NULL};
    kvr_child *c = calloc(1, sizeof *c);
    kvr_child_spawn(c, argv);
    char addr[64], base[64];
    int port = kvr_child_read_listen(c, addr, sizeof addr);
    assert_true(port > 0);
    assert_string_equal(addr, "0.0.0.0");
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    /* the start is logged before the listening line: all of it is there */
    assert_true(kvr_child_wait_stderr(c, 0, "authentication: the bearer token", WAIT));
    assert_null(strstr(c->err, "beyond loopback"));
    assert_int_equal(get_with_token(base, "/dump", "first"), 200);
    assert_int_equal(get_with_token(base, "/dump", "second"), 401);

    write_token(path, "second");
    size_t mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(c, mark, "auth token read from", WAIT));
    assert_int_equal(get_with_token(base, "/dump", "second"), 200);
    assert_int_equal(get_with_token(base, "/dump", "first"), 401);

    unlink(path);
    mark = c->err_len;
    kill(c->pid, SIGHUP);
    assert_true(kvr_child_wait_stderr(c, mark, "the token in use stays", WAIT));
    assert_int_equal(get_with_token(base, "/dump", "second"), 200);
    assert_int_equal(kvr_child_stop(c, SIGTERM), 0);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_limit_raised_at_start),
        cmocka_unit_test(test_token_beyond_loopback_and_sighup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
