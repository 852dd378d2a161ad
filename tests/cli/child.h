/* A `kvrouter` child process for the CLI tests: stdout and stderr on
 * pipes, stderr read on demand with a deadline (never sleep-then-look), and
 * a stop by signal that reports the exit status. Header-only. */
#ifndef KVR_TEST_CLI_CHILD_H
#define KVR_TEST_CLI_CHILD_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    FILE *out;     /* child's stdout */
    int err_fd;    /* child's stderr */
    char err[1 << 16]; /* stderr read so far, NUL-terminated */
    size_t err_len;
} kvr_child;

/* Starts argv[0] with argv; fails the test if it cannot. c is large: allocate it. */
static inline void kvr_child_spawn(kvr_child *c, char *const argv[])
{
    int o[2], e[2];
    assert_int_equal(pipe(o), 0);
    assert_int_equal(pipe(e), 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        dup2(o[1], 1);
        dup2(e[1], 2);
        close(o[0]);
        close(o[1]);
        close(e[0]);
        close(e[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    c->out = fdopen(o[0], "r");
    c->err_fd = e[0];
    c->err_len = 0;
    c->err[0] = 0;
}

static inline double kvr_child_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reads stderr until what appears after offset from, or the child closes
 * it (false), or timeout_ms passes (false). */
static inline bool kvr_child_wait_stderr(kvr_child *c, size_t from, const char *what,
                                         int timeout_ms)
{
    double end = kvr_child_now() + timeout_ms / 1000.0;
    while (!strstr(c->err + from, what)) {
        if (kvr_child_now() > end || c->err_len + 1 >= sizeof c->err)
            return false;
        struct pollfd p = {.fd = c->err_fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(c->err_fd, c->err + c->err_len, sizeof c->err - c->err_len - 1);
        if (n <= 0)
            return false;
        c->err_len += (size_t)n;
        c->err[c->err_len] = 0;
    }
    return true;
}

/* "listening on http://ADDR:PORT" from stdout: ADDR into addr, returns PORT (-1). */
static inline int kvr_child_read_listen(kvr_child *c, char *addr, size_t cap)
{
    char line[512];
    if (!fgets(line, sizeof line, c->out))
        return -1;
    const char *p = strstr(line, "http://");
    const char *colon = p ? strchr(p + 7, ':') : NULL;
    if (!colon || (size_t)(colon - p - 7) >= cap)
        return -1;
    memcpy(addr, p + 7, (size_t)(colon - p - 7));
    addr[colon - p - 7] = 0;
    return atoi(colon + 1);
}

/* Starts `kvrouter serve` argv (listening on 127.0.0.1 or a wildcard), waits
 * for its listen line and writes "http://127.0.0.1:PORT" into base. The
 * child is calloc'ed: free it after kvr_child_stop. */
static inline kvr_child *kvr_child_serve(char *const argv[], char *base, size_t cap)
{
    kvr_child *c = calloc(1, sizeof *c);
    assert_non_null(c);
    kvr_child_spawn(c, argv);
    char addr[64];
    int port = kvr_child_read_listen(c, addr, sizeof addr);
    assert_true(port > 0);
    snprintf(base, cap, "http://127.0.0.1:%d", port);
    return c;
}

/* Sends sig, waits, drains stderr into c->err; the exit status (128 + signal
 * when killed). */
static inline int kvr_child_stop(kvr_child *c, int sig)
{
    kill(c->pid, sig);
    int status = 0;
    waitpid(c->pid, &status, 0);
    ssize_t n;
    while (c->err_len + 1 < sizeof c->err &&
           (n = read(c->err_fd, c->err + c->err_len, sizeof c->err - c->err_len - 1)) > 0)
        c->err_len += (size_t)n;
    c->err[c->err_len] = 0;
    fclose(c->out);
    close(c->err_fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
