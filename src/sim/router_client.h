/* The simulator's side of the router's HTTP API (SPEC §7) over libcurl, and
 * starting a private `kvrouter serve` when no --router is given. */
#ifndef KVR_SIM_ROUTER_CLIENT_H
#define KVR_SIM_ROUTER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    char *data;
    size_t len, cap;
} kvr_sim_buf;

void kvr_sim_buf_free(kvr_sim_buf *b);
void kvr_sim_buf_reset(kvr_sim_buf *b);
int kvr_sim_buf_append(kvr_sim_buf *b, const void *data, size_t len);
int kvr_sim_buf_printf(kvr_sim_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct kvr_sim_http kvr_sim_http;

/* base: "http://127.0.0.1:8090" (a trailing slash is ignored). */
kvr_sim_http *kvr_sim_http_create(const char *base);
void kvr_sim_http_destroy(kvr_sim_http *h);
/* body NULL = GET. Reply body (NUL-terminated) in resp. Returns 0 when the
 * exchange happened (any status), -1 on a transport error. */
int kvr_sim_http_call(kvr_sim_http *h, const char *path, const char *body, size_t len,
                      long *status, kvr_sim_buf *resp);
uint64_t kvr_sim_http_calls(const kvr_sim_http *h);
double kvr_sim_http_seconds(const kvr_sim_http *h); /* total time inside calls */

/* Starts `exe serve --listen 127.0.0.1:PORT --router-opt rng_seed=SEED
 * --router-opt clock_from_requests=1 [--router-opt OPT]...` on a free port (a fixed seed makes the router's
 * tie-breaks repeatable) and waits (up to timeout_ms) for GET /health to
 * answer 200. url gets "http://127.0.0.1:PORT". */
int kvr_sim_router_spawn(const char *exe, uint64_t rng_seed, char *const *router_opts,
                         size_t n_opts, char *url, size_t urllen, pid_t *pid, int timeout_ms,
                         char *err, size_t errlen);
/* SIGTERM, then SIGKILL if it has not exited after a second. */
void kvr_sim_router_stop(pid_t pid);

#endif
