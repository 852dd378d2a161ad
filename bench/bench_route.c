/* kvr_route throughput in-process (the embedding path, no HTTP): 64 workers
 * (or [workers])
 * on one (model, group), 16 prompt families of 2,000 tokens, block size 16;
 * each worker caches its family whole and 40% of the next one. Bookings are
 * released right away so the load stays steady. Built by CMake with
 * everything else (bench/CMakeLists.txt):
 *   BUILD/bench/bench_route [seconds] [threads] [held] [workers]
 * held > 0 keeps that many bookings per thread outstanding (each released
 * `held` routes later), so candidates carry load and shared blocks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/hash.h"
#include "kvrouter/route.h"

static uint64_t n_workers = 64;
#define FAMILIES 16
#define TOKENS 2000
#define BS 16

static uint32_t fam[FAMILIES][TOKENS];
static kvr_router *router;
static double seconds = 5;
static int held = 0;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int id;
    size_t n;
    double *lat;
    size_t cap;
} thread_arg;

static void *run(void *p)
{
    thread_arg *a = p;
    char rid[32];
    char (*ring)[32] = held > 0 ? calloc((size_t)held, sizeof *ring) : NULL;
    double end = now() + seconds;
    uint64_t x = 88172645463325252ull + (uint64_t)a->id;
    while (now() < end) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        kvr_route_request rq;
        memset(&rq, 0, sizeof rq);
        rq.q.model_name = "m";
        rq.q.token_ids = fam[x % FAMILIES];
        rq.q.n_tokens = TOKENS;
        snprintf(rid, sizeof rid, "%d-%zu", a->id, a->n);
        rq.request_id = rid;
        kvr_route_decision d;
        double t0 = now();
        if (kvr_route(router, &rq, &d) != KVR_ROUTE_OK) {
            fprintf(stderr, "route: %s\n", d.error);
            exit(1);
        }
        double t1 = now();
        if (ring) {
            char *slot = ring[a->n % (size_t)held];
            if (slot[0])
                kvr_router_release(router, slot);
            memcpy(slot, rid, sizeof rid);
        } else
            kvr_router_release(router, rid);
        if (a->n == a->cap) {
            a->cap = a->cap ? 2 * a->cap : 1 << 16;
            a->lat = realloc(a->lat, a->cap * sizeof *a->lat);
        }
        a->lat[a->n++] = t1 - t0;
    }
    free(ring);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        seconds = atof(argv[1]);
    int nt = argc > 2 ? atoi(argv[2]) : 2;
    if (nt < 1 || nt > 16)
        nt = 2;
    if (argc > 3)
        held = atoi(argv[3]);
    if (argc > 4)
        n_workers = strtoull(argv[4], NULL, 10);
    kvr_indexer *ix = kvr_indexer_create();
    for (int f = 0; f < FAMILIES; f++)
        for (int i = 0; i < TOKENS; i++)
            fam[f][i] = (uint32_t)((f * 7919 + i * 31) % 150000 + 10);
    uint64_t local[TOKENS / BS], engine[TOKENS / BS];
    for (uint64_t w = 1; w <= n_workers; w++) {
        kvr_worker_settings s = {.model_name = "m", .worker_id = w, .block_size = BS,
                                 .accepts_mm_hashes = -1};
        kvr_indexer_register(ix, &s, NULL);
        for (int k = 0; k < 2; k++) {
            int f = (int)((w + (uint64_t)k) % FAMILIES);
            size_t nb = kvr_hash_blocks(fam[f], TOKENS, BS, false, KVR_HASH_SEED, local,
                                        TOKENS / BS);
            if (k)
                nb = nb * 4 / 10;
            for (size_t i = 0; i < nb; i++)
                engine[i] = w * 10000000ull + (uint64_t)f * 100000 + i;
            kvr_dump_store ev = {.worker_id = w, .tier = KVR_TIER_GPU, .engine_hashes = engine,
                                 .local_hashes = local, .n = nb};
            kvr_indexer_load_store(ix, "m", "default", &ev);
        }
    }
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    cfg.rng_seed = 1;
    router = kvr_router_create(ix, &cfg);

    pthread_t th[16];
    thread_arg args[16];
    memset(args, 0, sizeof args);
    double t0 = now();
    for (int i = 0; i < nt; i++) {
        args[i].id = i;
        pthread_create(&th[i], NULL, run, &args[i]);
    }
    size_t total = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        total += args[i].n;
    }
    double el = now() - t0;
    double *all = malloc(total * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < nt; i++) {
        memcpy(all + k, args[i].lat, args[i].n * sizeof *all);
        k += args[i].n;
        free(args[i].lat);
    }
    qsort(all, total, sizeof *all, cmp_d);
    printf("kvr_route: %d threads, %llu workers, %d-token prompts, block %d, %d held/thread: "
           "%.0f routes/s, p50 %.1f us, p99 %.1f us\n",
           nt, (unsigned long long)n_workers, TOKENS, BS, held, (double)total / el, all[total / 2] * 1e6,
           all[total * 99 / 100] * 1e6);
    free(all);
    kvr_router_destroy(router);
    kvr_indexer_destroy(ix);
    return 0;
}
