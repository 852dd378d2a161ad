/* Service benchmark (not a ctest: performance is measured by a command).
 *
 *   bench_service ingest [batches] [engines]
 *       engines push pre-encoded batches (16 stores of 4 blocks x 16 tokens
 *       + 16 removals each) over real ZeroMQ as fast as they can; reports
 *       the ingest rate from the server's own counters.
 *   bench_service query [seconds] [connections]
 *       indexes 4 workers x 64 prompts of 2,000 tokens (block 16), then runs
 *       wrk with a Lua POST script against /query (token_ids) and
 *       /query_by_hash (block hashes as signed i64 JSON numbers).
 *
 * Built by CMake with everything else (bench/CMakeLists.txt) as
 * BUILD/bench/bench_service; the query mode needs wrk.
 */
#include <inttypes.h>

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 16

static kvr_server *start_server(int port, char *base, size_t cap)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = port;
    kvr_server *srv = th_server_start(&cfg, base, cap);
    if (!srv)
        exit(1);
    return srv;
}

static void reg(const char *base, uint64_t id, const th_engine *e)
{
    if (th_register_engine(base, id, e->endpoint, BS) != 201) {
        fprintf(stderr, "register failed\n");
        exit(1);
    }
}

static uint64_t rng = 88172645463325252ull;
static uint64_t xs(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct {
    th_engine *e;
    kvr_wbuf *payloads;
    size_t n_payloads;
    uint64_t batches;
} pusher;

static void *push_main(void *arg)
{
    pusher *p = arg;
    for (uint64_t s = 0; s < p->batches; s++) {
        kvr_wbuf *w = &p->payloads[s % p->n_payloads];
        unsigned char seq[8];
        kvr_wire_encode_seq(s, seq);
        zmq_send(p->e->pub, "", 0, ZMQ_SNDMORE);
        zmq_send(p->e->pub, seq, 8, ZMQ_SNDMORE);
        zmq_send(p->e->pub, w->data, w->len, 0);
    }
    return NULL;
}

static long long sum_counter(const char *base, int engines, const char *key)
{
    long long t = 0;
    for (int i = 0; i < engines; i++) {
        long long v = th_counter(base, (uint64_t)i + 1, "m", key);
        t += v > 0 ? v : 0;
    }
    return t;
}

static int bench_ingest(uint64_t batches, int engines)
{
    char base[64];
    kvr_server *srv = start_server(0, base, sizeof base);
    th_engine *es = calloc((size_t)engines, sizeof *es);
    for (int i = 0; i < engines; i++) {
        th_engine_start(&es[i]);
        reg(base, (uint64_t)i + 1, &es[i]);
        th_engine_wait_sub(&es[i], 5000);
    }
    /* 256 distinct payloads; payload i removes what payload i-1 stored. */
    enum { NP = 256, ST = 16, BL = 4 };
    static uint64_t hashes[NP][ST][BL], tokens[NP][ST][BL * BS];
    kvr_wbuf *pl = calloc(NP, sizeof *pl);
    for (int i = 0; i < NP; i++) {
        kvr_raw_event evs[2 * ST];
        for (int s = 0; s < ST; s++) {
            for (int b = 0; b < BL; b++)
                hashes[i][s][b] = xs();
            for (int t = 0; t < BL * BS; t++)
                tokens[i][s][t] = xs() % 150000;
            evs[s] = th_store(hashes[i][s], BL, 0, tokens[i][s], BS);
        }
        int prev = (i + NP - 1) % NP;
        for (int s = 0; s < ST; s++)
            evs[ST + s] = th_remove(hashes[prev][s], BL);
        kvr_wbuf_init(&pl[i]);
        kvr_wire_encode_batch(&pl[i], KVR_WIRE_SGLANG, 1.0, evs, 2 * ST, false, 0);
    }
    pusher *ps = calloc((size_t)engines, sizeof *ps);
    pthread_t *th = calloc((size_t)engines, sizeof *th);
    double t0 = th_now();
    for (int i = 0; i < engines; i++) {
        ps[i] = (pusher){&es[i], pl, NP, batches};
        pthread_create(&th[i], NULL, push_main, &ps[i]);
    }
    uint64_t want = batches * (uint64_t)engines;
    long long got = 0, gaps = 0;
    double last_change = th_now();
    while (th_now() - last_change < 2.0) {
        long long g = sum_counter(base, engines, "batches") +
                      sum_counter(base, engines, "lost_batches");
        if (g != got) {
            got = g;
            last_change = th_now();
        }
        if ((uint64_t)got >= want)
            break;
        th_sleep_ms(20);
    }
    double el = th_now() - t0;
    for (int i = 0; i < engines; i++)
        pthread_join(th[i], NULL);
    long long applied = sum_counter(base, engines, "batches");
    gaps = sum_counter(base, engines, "lost_batches");
    long long evs = applied * 2 * ST;
    printf("{\"bench\":\"ingest\",\"engines\":%d,\"batches_sent\":%" PRIu64
           ",\"batches_applied\":%lld,\"lost_batches\":%lld,\"seconds\":%.3f,"
           "\"events_per_s\":%.0f,\"blocks_per_s\":%.0f,\"batch_events\":%d}\n",
           engines, want, applied, gaps, el, evs / el, (double)applied * 2 * ST * BL / el, 2 * ST);
    kvr_server_stop(srv);
    for (int i = 0; i < engines; i++)
        th_engine_stop(&es[i]);
    for (int i = 0; i < NP; i++)
        kvr_wbuf_free(&pl[i]);
    free(pl);
    free(ps);
    free(th);
    free(es);
    return 0;
}

static int bench_query(int seconds, int conns)
{
    char base[64];
    kvr_server *srv = start_server(0, base, sizeof base);
    enum { W = 4, P = 64, T = 2000 };
    static uint64_t toks[P][T];
    th_engine es[W];
    for (int i = 0; i < W; i++) {
        th_engine_start(&es[i]);
        reg(base, (uint64_t)i + 1, &es[i]);
        th_engine_wait_sub(&es[i], 5000);
    }
    /* Prompts share a 1,024-token system prefix; each worker caches a
     * different subset of the prompts (and so a different depth). */
    for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++)
            toks[p][t] = t < 1024 ? (uint64_t)t + 1 : xs() % 150000;
    /* Like an engine: the shared prefix once, then each prompt's own
     * blocks under it. */
    enum { SHARED = 1024 / BS };
    uint64_t hashes[T / BS];
    for (int w = 0; w < W; w++) {
        uint64_t seq = 0;
        for (int b = 0; b < SHARED; b++)
            hashes[b] = (uint64_t)w << 56 | 0xFFFFull << 32 | (uint64_t)b;
        uint64_t prefix_tail = hashes[SHARED - 1];
        kvr_raw_event pre = th_store(hashes, SHARED, 0, toks[0], BS);
        th_send_events(&es[w], seq++, &pre, 1, true);
        for (int p = w; p < P; p += 1 + w) {
            for (int b = 0; b < T / BS - SHARED; b++)
                hashes[b] = (uint64_t)w << 56 | (uint64_t)p << 32 | (uint64_t)b;
            kvr_raw_event ev =
                th_store(hashes, T / BS - SHARED, prefix_tail, toks[p] + SHARED * BS, BS);
            th_send_events(&es[w], seq++, &ev, 1, true);
        }
    }
    th_sleep_ms(500);
    /* One request body per prompt; wrk cycles through them. */
    const char *lua = "/tmp/kvr_bench_query.lua";
    const char *lua_h = "/tmp/kvr_bench_query_by_hash.lua";
    FILE *f = fopen(lua, "w");
    FILE *fh = fopen(lua_h, "w");
    fprintf(f, "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
               "local bodies = {}\n");
    fprintf(fh, "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
                "local bodies = {}\n");
    for (int p = 0; p < P; p++) {
        fprintf(f, "bodies[%d] = '{\"model_name\":\"m\",\"token_ids\":[", p + 1);
        for (int t = 0; t < T; t++)
            fprintf(f, "%s%" PRIu64, t ? "," : "", toks[p][t]);
        fprintf(f, "]}'\n");
        uint64_t local[T / BS];
        size_t n = th_local_hashes(toks[p], T, BS, local, T / BS);
        fprintf(fh, "bodies[%d] = '{\"model_name\":\"m\",\"block_hashes\":[", p + 1);
        for (size_t b = 0; b < n; b++)
            fprintf(fh, "%s%" PRId64, b ? "," : "", (int64_t)local[b]); /* i64 bits */
        fprintf(fh, "]}'\n");
    }
    const char *tail = "local i = 0\nrequest = function()\n  i = i %% %d + 1\n"
                       "  return wrk.format(nil, nil, nil, bodies[i])\nend\n"
                       "done = function(summary, latency, requests)\n"
                       "  io.write(string.format('p50_us=%%d p99_us=%%d rps=%%.0f errors=%%d\\n',"
                       " latency:percentile(50), latency:percentile(99),"
                       " summary.requests / (summary.duration / 1e6),"
                       " summary.errors.status + summary.errors.connect + summary.errors.read"
                       " + summary.errors.write + summary.errors.timeout))\nend\n";
    fprintf(f, tail, P);
    fprintf(fh, tail, P);
    fclose(f);
    fclose(fh);
    /* Sanity: worker 1 holds prompt 0 whole, the others its shared prefix. */
    uint64_t local0[T / BS];
    size_t n0 = th_local_hashes(toks[0], T, BS, local0, T / BS);
    long w1 = th_score(base, "m", local0, n0, 1, 0), w2 = th_score(base, "m", local0, n0, 2, 0);
    printf("prompt 0 overlap: worker 1 %ld tokens, worker 2 %ld tokens\n", w1, w2);
    if (w1 != (T / BS) * BS || w2 != 1024) {
        fprintf(stderr, "index not populated as expected\n");
        return 1;
    }
    char cmd[512];
    printf("server %s, %d workers x prompts of %d tokens (block %d)\n", base, W, T, BS);
    fflush(stdout);
    snprintf(cmd, sizeof cmd, "wrk -t1 -c%d -d%ds -s %s %s/query", conns, seconds, lua, base);
    printf("$ %s\n", cmd);
    fflush(stdout);
    if (system(cmd) != 0)
        fprintf(stderr, "wrk failed\n");
    snprintf(cmd, sizeof cmd, "wrk -t1 -c%d -d%ds -s %s %s/query_by_hash", conns, seconds, lua_h,
             base);
    printf("$ %s\n", cmd);
    fflush(stdout);
    if (system(cmd) != 0)
        fprintf(stderr, "wrk failed\n");
    kvr_server_stop(srv);
    for (int i = 0; i < W; i++)
        th_engine_stop(&es[i]);
    return 0;
}

int main(int argc, char **argv)
{
    curl_global_init(CURL_GLOBAL_ALL);
    int rc = 2;
    if (argc >= 2 && strcmp(argv[1], "ingest") == 0)
        rc = bench_ingest(argc > 2 ? strtoull(argv[2], NULL, 10) : 20000,
                          argc > 3 ? atoi(argv[3]) : 2);
    else if (argc >= 2 && strcmp(argv[1], "query") == 0)
        rc = bench_query(argc > 2 ? atoi(argv[2]) : 10, argc > 3 ? atoi(argv[3]) : 8);
    else
        fprintf(stderr, "usage: bench_service ingest [batches] [engines] | query [seconds] "
                        "[connections]\n");
    curl_global_cleanup();
    return rc;
}
