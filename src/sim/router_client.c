#include "mock/clock.h"
#include "sim/router_client.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void kvr_sim_buf_free(kvr_sim_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void kvr_sim_buf_reset(kvr_sim_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static int buf_reserve(kvr_sim_buf *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return 0;
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < b->len + more + 1)
        ncap *= 2;
    char *d = realloc(b->data, ncap);
    if (!d)
        return -1;
    b->data = d;
    b->cap = ncap;
    return 0;
}

int kvr_sim_buf_append(kvr_sim_buf *b, const void *data, size_t len)
{
    if (buf_reserve(b, len) != 0)
        return -1;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int kvr_sim_buf_printf(kvr_sim_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

struct kvr_sim_http {
    CURL *curl;
    struct curl_slist *headers;
    char base[256];
    uint64_t calls;
    double seconds;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    return kvr_sim_buf_append(ud, ptr, size * nmemb) == 0 ? size * nmemb : 0;
}

kvr_sim_http *kvr_sim_http_create(const char *base)
{
    static bool global_done;
    if (!global_done) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        global_done = true;
    }
    kvr_sim_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    snprintf(h->base, sizeof h->base, "%s", base);
    size_t bl = strlen(h->base);
    if (bl && h->base[bl - 1] == '/')
        h->base[bl - 1] = '\0';
    h->curl = curl_easy_init();
    h->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!h->curl || !h->headers) {
        kvr_sim_http_destroy(h);
        return NULL;
    }
    curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h->curl, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h->curl, CURLOPT_TCP_NODELAY, 1L);
    return h;
}

void kvr_sim_http_destroy(kvr_sim_http *h)
{
    if (!h)
        return;
    if (h->curl)
        curl_easy_cleanup(h->curl);
    curl_slist_free_all(h->headers);
    free(h);
}

uint64_t kvr_sim_http_calls(const kvr_sim_http *h) { return h->calls; }
double kvr_sim_http_seconds(const kvr_sim_http *h) { return h->seconds; }

int kvr_sim_http_call(kvr_sim_http *h, const char *path, const char *body, size_t len,
                      long *status, kvr_sim_buf *resp)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", h->base, path);
    kvr_sim_buf_reset(resp);
    if (buf_reserve(resp, 0) != 0)
        return -1;
    resp->data[0] = '\0';
    curl_easy_setopt(h->curl, CURLOPT_URL, url);
    curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, resp);
    if (body) {
        curl_easy_setopt(h->curl, CURLOPT_POST, 1L);
        curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, h->headers);
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else {
        curl_easy_setopt(h->curl, CURLOPT_HTTPGET, 1L);
    }
    double t0 = kvr_sim_seconds(CLOCK_MONOTONIC);
    CURLcode rc = curl_easy_perform(h->curl);
    h->seconds += kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
    h->calls++;
    if (rc != CURLE_OK)
        return -1;
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, status);
    return 0;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int kvr_sim_router_spawn(const char *exe, uint64_t rng_seed, char *const *router_opts,
                         size_t n_opts, char *url, size_t urllen, pid_t *pid_out, int timeout_ms,
                         char *err, size_t errlen)
{
    int port = free_port();
    if (port < 0) {
        snprintf(err, errlen, "no free loopback port: %s", strerror(errno));
        return -1;
    }
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(url, urllen, "http://127.0.0.1:%d", port);
    char seed[64];
    snprintf(seed, sizeof seed, "rng_seed=%llu", (unsigned long long)(rng_seed ? rng_seed : 1));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* The router's logs go to stderr; keep stdout for the sim's table. A
         * sim that dies without cleaning up takes its router with it. */
        dup2(STDERR_FILENO, STDOUT_FILENO);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        char **argv = calloc(8 + 2 * n_opts + 1, sizeof *argv);
        if (!argv)
            _exit(127);
        size_t k = 0;
        argv[k++] = "kvrouter"; /* for ps: exe may be /proc/self/exe */
        argv[k++] = "serve";
        argv[k++] = "--listen";
        argv[k++] = listen;
        argv[k++] = "--router-opt";
        argv[k++] = seed;
        /* The sim replays in virtual time and says so in every call. */
        argv[k++] = "--router-opt";
        argv[k++] = "clock_from_requests=1";
        for (size_t i = 0; i < n_opts; i++) {
            argv[k++] = "--router-opt";
            argv[k++] = router_opts[i];
        }
        execv(exe, argv);
        fprintf(stderr, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    kvr_sim_http *h = kvr_sim_http_create(url);
    kvr_sim_buf resp = {0};
    double deadline = kvr_sim_seconds(CLOCK_MONOTONIC) + timeout_ms / 1000.0;
    int rc = -1;
    while (h && kvr_sim_seconds(CLOCK_MONOTONIC) < deadline) {
        long status = 0;
        if (kvr_sim_http_call(h, "/health", NULL, 0, &status, &resp) == 0 && status == 200) {
            rc = 0;
            break;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            snprintf(err, errlen, "kvrouter serve exited before answering /health");
            pid = -1;
            break;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kvr_sim_buf_free(&resp);
    kvr_sim_http_destroy(h);
    if (rc != 0) {
        if (pid > 0) {
            snprintf(err, errlen, "kvrouter serve did not answer /health on %s", url);
            kvr_sim_router_stop(pid);
        }
        return -1;
    }
    *pid_out = pid;
    return 0;
}

void kvr_sim_router_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}
