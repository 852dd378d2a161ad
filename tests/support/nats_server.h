/* A real nats-server for the cluster tests, started by the test on a free
 * loopback port with JetStream and a temporary store, stopped by pid (also
 * when the test process dies: the child gets SIGKILL with its parent).
 * Plus the same for any child process (th_spawn), for tests that run
 * `kvrouter serve` itself. Header-only so every test layer can use it.
 * nats-server must be installed (Makefile DEPS): a missing one fails the
 * test, it is not skipped. */
#ifndef KVR_TEST_NATS_SERVER_H
#define KVR_TEST_NATS_SERVER_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A port nobody listens on now (the kernel's pick for a bound socket). */
static inline int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* A connected loopback socket to port, or -1. */
static inline int th_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static inline bool th_port_open(int port)
{
    int fd = th_connect(port);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

static inline double th_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Forks argv (argv[0] looked up in PATH) with stdout and stderr appended to
 * log (or /dev/null). -1 when fork fails; an exec failure exits 127. */
static inline pid_t th_spawn(char *const argv[], const char *log)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execvp(argv[0], argv);
    _exit(127);
}

/* Stops pid with sig and reaps it (SIGKILL after 10 s). Its exit status. */
static inline int th_reap(pid_t pid, int sig)
{
    if (pid <= 0)
        return -1;
    kill(pid, sig);
    int status = 0;
    for (double end = th_clock() + 10; th_clock() < end;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        usleep(10 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return status;
}

typedef struct {
    pid_t pid;
    int port;
    char dir[128];
    char url[64];
    char log[192];
} th_nats;

/* Starts (or, with the same port and store, starts again) and waits until
 * it accepts connections. false with the reason on stderr. */
static inline bool th_nats_run(th_nats *n)
{
    char port[16];
    snprintf(port, sizeof port, "%d", n->port);
    char *argv[] = {"nats-server", "-js", "-a", "127.0.0.1", "-p", port, "-sd", n->dir, NULL};
    n->pid = th_spawn(argv, n->log);
    for (double end = th_clock() + 15; th_clock() < end;) {
        int status;
        if (waitpid(n->pid, &status, WNOHANG) == n->pid) {
            fprintf(stderr, "nats-server exited (status %d; not installed? see %s)\n", status,
                    n->log);
            n->pid = 0;
            return false;
        }
        if (th_port_open(n->port))
            return true;
        usleep(20 * 1000);
    }
    fprintf(stderr, "nats-server did not listen on %d\n", n->port);
    return false;
}

static inline bool th_nats_start(th_nats *n)
{
    memset(n, 0, sizeof *n);
    snprintf(n->dir, sizeof n->dir, "/tmp/kvr-nats-XXXXXX");
    if (!mkdtemp(n->dir))
        return false;
    snprintf(n->log, sizeof n->log, "%s.log", n->dir);
    n->port = th_free_port();
    snprintf(n->url, sizeof n->url, "nats://127.0.0.1:%d", n->port);
    return th_nats_run(n);
}

/* SIGKILL: an outage, the store stays for th_nats_run. */
static inline void th_nats_kill(th_nats *n)
{
    th_reap(n->pid, SIGKILL);
    n->pid = 0;
}

static inline void th_nats_stop(th_nats *n)
{
    th_reap(n->pid, SIGTERM);
    n->pid = 0;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", n->dir, n->log);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", n->dir);
}

#endif
