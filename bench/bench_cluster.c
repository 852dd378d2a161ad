/* Replica benchmark (SPEC §10; not a ctest: performance is measured by a
 * command). Starts its own nats-server (JetStream, a temporary store).
 *
 *   bench_cluster propagation [n] [gap_ms]
 *       two in-process replicas A and B, 4 engine doubles: n times (each
 *       change gap_ms after the previous one was seen, default 0), POST
 *       /route on A (pinned, booked) and poll B's router until it counts the
 *       booking, then POST /free on A and poll until B drops it; then n/10
 *       registrations and unregistrations on A until B's registry has them.
 *       Prints p50 / p99 / max of each, from the moment the HTTP request
 *       leaves to the moment B's state shows it.
 *   bench_cluster restart KVROUTER [workers] [blocks]
 *       replica A as a `kvrouter serve` process, `workers` engine doubles
 *       (default 64) registered on it and `blocks` blocks (default 2^20)
 *       published to it, distinct per worker; then replica B is started
 *       (it joins: registrations from the bucket, A's /dump, the bookings
 *       stream) and, once ready, SIGKILLed and started again. Prints the
 *       time from each start to B's /ready answering 200, and both
 *       replicas' index sizes.
 *
 * Built by CMake with everything else (bench/CMakeLists.txt) as
 * BUILD/bench/bench_cluster.
 */
#include <inttypes.h>
#include <math.h>

#include "kvrouter/server.h"
#include "nats_server.h"
#include "net_helpers.h"
#include "server/api.h"

#define BS 16

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *ms, size_t n)
{
    qsort(ms, n, sizeof *ms, cmp_double);
    printf("%-34s n=%-5zu p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", what, n, ms[n / 2],
           ms[(size_t)(n * 0.99) < n ? (size_t)(n * 0.99) : n - 1], ms[n - 1]);
}

static kvr_server *replica(const char *nats, const char *cluster, int port, char *base,
                           size_t cap)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = port;
    cfg.router.booking_ttl_s = 600;
    cfg.cluster.nats_url = nats;
    cfg.cluster.name = cluster;
    kvr_server *srv = th_server_start(&cfg, base, cap);
    if (!srv)
        exit(1);
    return srv;
}

static void reg_engine(const char *base, uint64_t id, const th_engine *e)
{
    long st = th_register_engine(base, id, e->endpoint, BS);
    if (st != 201 && st != 200) {
        fprintf(stderr, "register %" PRIu64 ": HTTP %ld\n", id, st);
        exit(1);
    }
}

static uint32_t bookings_on(kvr_server *s, uint64_t worker)
{
    kvr_worker_load l;
    kvr_router_load(kvr_server_router(s), "m", NULL, worker, 0, &l);
    return l.bookings;
}

/* Spins (yielding every 20 us) until cond(arg) or 10 s; the ms it took
 * from t0, or -1. */
static double wait_until(double t0, bool (*cond)(void *), void *arg)
{
    while (!cond(arg)) {
        if (th_now() - t0 > 10)
            return -1;
        usleep(20);
    }
    return (th_now() - t0) * 1e3;
}

typedef struct {
    kvr_server *b;
    uint64_t worker;
    uint32_t want;
    size_t workers;
} probe;

static bool booked(void *arg)
{
    probe *p = arg;
    return bookings_on(p->b, p->worker) == p->want;
}

static bool workers_are(void *arg)
{
    probe *p = arg;
    return kvr_registry_workers(kvr_server_registry(p->b)) == p->workers;
}

static int propagation(int n, int gap_ms)
{
    th_nats nats;
    if (!th_nats_start(&nats))
        return 1;
    char cluster[32], base_a[64], base_b[64];
    snprintf(cluster, sizeof cluster, "bench%d", (int)getpid());
    kvr_server *a = replica(nats.url, cluster, th_free_port(), base_a, sizeof base_a);
    kvr_server *b = replica(nats.url, cluster, th_free_port(), base_b, sizeof base_b);
    th_engine e[4];
    for (int i = 0; i < 4; i++) {
        th_engine_start(&e[i]);
        reg_engine(base_a, (uint64_t)i + 1, &e[i]);
    }
    probe p = {b, 0, 0, 4};
    if (wait_until(th_now(), workers_are, &p) < 0) {
        fprintf(stderr, "B never saw the workers\n");
        return 1;
    }
    double *book = calloc((size_t)n, sizeof *book), *fr = calloc((size_t)n, sizeof *fr);
    double *http = calloc((size_t)n, sizeof *http);
    char url[128], body[256];
    for (int i = 0; i < n; i++) {
        p.worker = (uint64_t)(i % 4) + 1;
        p.want = bookings_on(b, p.worker) + 1;
        snprintf(body, sizeof body,
                 "{\"model_name\":\"m\",\"token_ids\":[%d,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"
                 "\"request_id\":\"r%d\",\"worker_id\":%" PRIu64 "}",
                 i, i, p.worker);
        snprintf(url, sizeof url, "%s/route", base_a);
        if (gap_ms)
            usleep((useconds_t)gap_ms * 1000);
        double t0 = th_now();
        if (th_http("POST", url, body, strlen(body), NULL) != 200)
            return 1;
        http[i] = (th_now() - t0) * 1e3;
        book[i] = wait_until(t0, booked, &p);
        p.want--;
        snprintf(body, sizeof body, "{\"request_id\":\"r%d\"}", i);
        snprintf(url, sizeof url, "%s/free", base_a);
        if (gap_ms)
            usleep((useconds_t)gap_ms * 1000);
        t0 = th_now();
        if (th_http("POST", url, body, strlen(body), NULL) != 200)
            return 1;
        fr[i] = wait_until(t0, booked, &p);
        if (book[i] < 0 || fr[i] < 0) {
            fprintf(stderr, "request %d never reached B\n", i);
            return 1;
        }
    }
    /* The same through the C API: no HTTP on A's side. */
    double *direct = calloc((size_t)n, sizeof *direct);
    uint32_t toks[16];
    for (int i = 0; i < n; i++) {
        p.worker = (uint64_t)(i % 4) + 1;
        p.want = bookings_on(b, p.worker) + 1;
        for (int k = 0; k < 16; k++)
            toks[k] = (uint32_t)(i * 16 + k + 7);
        char id[32];
        snprintf(id, sizeof id, "d%d", i);
        kvr_route_request rq;
        memset(&rq, 0, sizeof rq);
        rq.q.model_name = "m";
        rq.q.token_ids = toks;
        rq.q.n_tokens = 16;
        rq.request_id = id;
        rq.has_worker_id = true;
        rq.worker_id = p.worker;
        kvr_route_decision d;
        if (gap_ms)
            usleep((useconds_t)gap_ms * 1000);
        double t0 = th_now();
        if (kvr_route(kvr_server_router(a), &rq, &d) != KVR_ROUTE_OK)
            return 1;
        direct[i] = wait_until(t0, booked, &p);
        p.want--;
        kvr_router_release(kvr_server_router(a), id);
        if (wait_until(th_now(), booked, &p) < 0)
            return 1;
    }
    report("booking  kvr_route on A -> B", direct, (size_t)n);
    free(direct);
    report("A's /route reply (HTTP, included)", http, (size_t)n);
    report("booking  A /route -> B counts it", book, (size_t)n);
    report("release  A /free  -> B drops it", fr, (size_t)n);

    int m = n / 10 > 10 ? n / 10 : 10;
    double *reg = calloc((size_t)m, sizeof *reg), *unreg = calloc((size_t)m, sizeof *unreg);
    for (int i = 0; i < m; i++) {
        p.workers = 5;
        double t0 = th_now();
        reg_engine(base_a, 1000 + (uint64_t)i, &e[i % 4]);
        reg[i] = wait_until(t0, workers_are, &p);
        snprintf(body, sizeof body, "{\"instance_id\":%d,\"model_name\":\"m\"}", 1000 + i);
        snprintf(url, sizeof url, "%s/unregister", base_a);
        p.workers = 4;
        t0 = th_now();
        th_http("POST", url, body, strlen(body), NULL);
        unreg[i] = wait_until(t0, workers_are, &p);
        if (reg[i] < 0 || unreg[i] < 0) {
            fprintf(stderr, "registration %d never reached B\n", i);
            return 1;
        }
    }
    report("register   on A -> in B's registry", reg, (size_t)m);
    report("unregister on A -> gone from B", unreg, (size_t)m);
    kvr_server_stop(b);
    kvr_server_stop(a);
    for (int i = 0; i < 4; i++)
        th_engine_stop(&e[i]);
    th_nats_stop(&nats);
    free(book);
    free(fr);
    free(http);
    free(reg);
    free(unreg);
    return 0;
}

/* ---- restart ------------------------------------------------------------ */

static long long index_blocks(const char *base)
{
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "%s/metrics", base);
    if (th_http("GET", url, NULL, 0, &out) != 200) {
        free(out);
        return -1;
    }
    long long total = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
        if (strncmp(l, "kvr_index_blocks{", 17) == 0)
            total += atoll(strrchr(l, ' ') + 1);
    free(out);
    return total;
}

static pid_t serve(const char *bin, const char *nats, const char *cluster, int port,
                   const char *log)
{
    char listen[48];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    char *argv[] = {(char *)bin, "serve", "--listen", listen, "--nats", (char *)nats,
                    "--cluster", (char *)cluster, "--cluster-startup-timeout-ms", "30000",
                    NULL};
    return th_spawn(argv, log);
}

static double wait_ready(const char *base, double t0, double limit_s)
{
    char url[128];
    snprintf(url, sizeof url, "%s/ready", base);
    while (th_http("GET", url, NULL, 0, NULL) != 200) {
        if (th_now() - t0 > limit_s)
            return -1;
        usleep(10 * 1000);
    }
    return th_now() - t0;
}

/* Worker w's blocks as chains of 64 blocks of 16 tokens, 16 chains a batch,
 * hashes and tokens distinct per worker. */
static void fill(th_engine *e, uint64_t w, uint32_t blocks)
{
    enum { CHAIN = 64, PER_BATCH = 16 };
    uint64_t *tok = malloc(CHAIN * BS * sizeof *tok), hashes[PER_BATCH][CHAIN];
    kvr_raw_event ev[PER_BATCH];
    uint64_t *toks[PER_BATCH];
    uint64_t seq = 0;
    for (uint32_t done = 0; done < blocks; seq++) {
        int n = 0;
        for (; n < PER_BATCH && done < blocks; n++, done += CHAIN) {
            toks[n] = malloc(CHAIN * BS * sizeof *tok);
            for (uint32_t i = 0; i < CHAIN * BS; i++)
                toks[n][i] = (w * 1000003 + done * BS + i) % 4000000000u;
            for (uint32_t i = 0; i < CHAIN; i++)
                hashes[n][i] = (w << 40) + done + i + 1;
            ev[n] = th_store(hashes[n], CHAIN, 0, toks[n], BS);
        }
        th_send_events(e, seq, ev, (size_t)n, true);
        for (int i = 0; i < n; i++)
            free(toks[i]);
    }
    free(tok);
}

static int restart(const char *bin, int workers, uint32_t blocks)
{
    th_nats nats;
    if (!th_nats_start(&nats))
        return 1;
    char cluster[32], base_a[64], base_b[64], log_a[64], log_b[64];
    snprintf(cluster, sizeof cluster, "restart%d", (int)getpid());
    int pa = th_free_port(), pb = th_free_port();
    snprintf(base_a, sizeof base_a, "http://127.0.0.1:%d", pa);
    snprintf(base_b, sizeof base_b, "http://127.0.0.1:%d", pb);
    snprintf(log_a, sizeof log_a, "/tmp/bench-cluster-a-%d.log", (int)getpid());
    snprintf(log_b, sizeof log_b, "/tmp/bench-cluster-b-%d.log", (int)getpid());
    pid_t a = serve(bin, nats.url, cluster, pa, log_a);
    if (wait_ready(base_a, th_now(), 30) < 0) {
        fprintf(stderr, "A did not start (log %s)\n", log_a);
        return 1;
    }
    th_engine *e = calloc((size_t)workers, sizeof *e);
    for (int i = 0; i < workers; i++) {
        th_engine_start(&e[i]);
        reg_engine(base_a, (uint64_t)i + 1, &e[i]);
    }
    for (int i = 0; i < workers; i++)
        th_engine_wait_sub(&e[i], 10000);
    double t0 = th_now();
    for (int i = 0; i < workers; i++)
        fill(&e[i], (uint64_t)i + 1, blocks / (uint32_t)workers);
    long long want = (long long)(blocks / (uint32_t)workers) * workers, have = 0;
    while ((have = index_blocks(base_a)) < want && th_now() - t0 < 120)
        usleep(100 * 1000);
    printf("A indexed %lld blocks of %d workers in %.1f s\n", have, workers, th_now() - t0);

    for (int round = 0; round < 2; round++) {
        double s = th_now();
        pid_t b = serve(bin, nats.url, cluster, pb, log_b);
        double ready = wait_ready(base_b, s, 120);
        printf("%s B: /ready after %.2f s; B indexes %lld blocks, A %lld\n",
               round ? "restarted (SIGKILL)" : "joining", ready, index_blocks(base_b),
               index_blocks(base_a));
        if (ready < 0) {
            char cmd[160];
            snprintf(cmd, sizeof cmd, "tail -20 %s >&2", log_b);
            if (system(cmd) != 0)
                fprintf(stderr, "no log %s\n", log_b);
        }
        th_reap(b, round ? SIGTERM : SIGKILL);
    }
    th_reap(a, SIGTERM);
    for (int i = 0; i < workers; i++)
        th_engine_stop(&e[i]);
    free(e);
    th_nats_stop(&nats);
    unlink(log_a);
    unlink(log_b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "propagation") == 0)
        return propagation(argc > 2 ? atoi(argv[2]) : 1000, argc > 3 ? atoi(argv[3]) : 0);
    if (argc >= 3 && strcmp(argv[1], "restart") == 0)
        return restart(argv[2], argc > 3 ? atoi(argv[3]) : 64,
                       argc > 4 ? (uint32_t)atol(argv[4]) : 1u << 20);
    fprintf(stderr, "usage: bench_cluster propagation [n] | restart KVROUTER [workers] [blocks]\n");
    return 2;
}
