/* Index churn over real ZeroMQ (SPEC §12: RSS comes back once the index
 * drains), for bench/bench_churn.c and test_memory_trim: batch i of one
 * engine stores 32 new stores of 4 blocks x 16 tokens and removes the
 * stores of batch i - window, so the index holds window x 128 blocks; and
 * the process's RSS. Header-only, over net_helpers.h. */
#ifndef KVR_TEST_CHURN_H
#define KVR_TEST_CHURN_H

#include "net_helpers.h"

#define CHURN_BS 16
#define CHURN_STORES 32
#define CHURN_BLOCKS 4

/* A field of /proc/self/status (VmRSS, VmHWM) in MiB; -1 when absent. */
static inline double churn_status_mib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            kib = strtod(line + n + 1, NULL);
    if (f)
        fclose(f);
    return kib / 1024;
}

static inline uint64_t churn_mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

/* Engine hash of block b of store s of batch i. */
static inline uint64_t churn_block_hash(uint64_t i, int s, int b)
{
    return churn_mix(i * (CHURN_STORES * CHURN_BLOCKS) + (uint64_t)s * CHURN_BLOCKS +
                     (uint64_t)b + 1) |
           1;
}

/* Publishes batch i (seq i) on e. */
static inline void churn_send_batch(th_engine *e, uint64_t i, uint64_t window)
{
    static uint64_t stored[CHURN_STORES][CHURN_BLOCKS], removed[CHURN_STORES][CHURN_BLOCKS];
    static uint64_t tokens[CHURN_STORES][CHURN_BLOCKS * CHURN_BS];
    kvr_raw_event evs[2 * CHURN_STORES];
    size_t n = 0;
    for (int s = 0; s < CHURN_STORES; s++) {
        for (int b = 0; b < CHURN_BLOCKS; b++)
            stored[s][b] = churn_block_hash(i, s, b);
        for (int t = 0; t < CHURN_BLOCKS * CHURN_BS; t++)
            tokens[s][t] = churn_mix(i * 7919 + (uint64_t)s * 131 + (uint64_t)t) % 150000;
        evs[n++] = th_store(stored[s], CHURN_BLOCKS, 0, tokens[s], CHURN_BS);
    }
    for (int s = 0; i >= window && s < CHURN_STORES; s++) {
        for (int b = 0; b < CHURN_BLOCKS; b++)
            removed[s][b] = churn_block_hash(i - window, s, b);
        evs[n++] = th_remove(removed[s], CHURN_BLOCKS);
    }
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_wire_encode_batch(&w, KVR_WIRE_SGLANG, 1.0, evs, n, false, 0);
    unsigned char seq[8];
    kvr_wire_encode_seq(i, seq);
    zmq_send(e->pub, "", 0, ZMQ_SNDMORE);
    zmq_send(e->pub, seq, 8, ZMQ_SNDMORE);
    zmq_send(e->pub, w.data, w.len, 0);
    kvr_wbuf_free(&w);
}

/* Waits until worker 1 of model "m" applied `want` batches (or nothing
 * moved for 30 s: generous, the machine may be loaded); the batches applied. */
static inline long long churn_wait_batches(const char *base, long long want)
{
    long long got = -1, last = -1;
    double still = th_now();
    while ((got = th_counter(base, 1, "m", "batches")) < want) {
        if (got != last) {
            last = got;
            still = th_now();
        } else if (th_now() - still > 30) {
            break;
        }
        th_sleep_ms(10);
    }
    return got;
}

/* Registers worker 1 of model "m" on e through base. */
static inline bool churn_register(const char *base, th_engine *e)
{
    return th_register_engine(base, 1, e->endpoint, CHURN_BS) == 201 &&
           th_engine_wait_sub(e, 10000);
}

/* Publishes batches 0..n-1, staying within 1000 batches of the ingest
 * (ZeroMQ's queue is RSS too), then a clear as batch n; waits until every
 * one is applied. *held gets the index's blocks before the clear. Returns
 * the batches applied. */
static inline long long churn_run(const char *base, th_engine *e, uint64_t n, uint64_t window,
                                  double *held)
{
    for (uint64_t i = 0; i < n; i++) {
        churn_send_batch(e, i, window);
        if (i % 1000 == 999)
            churn_wait_batches(base, (long long)i - 1000);
    }
    churn_wait_batches(base, (long long)n);
    *held = th_metric(base, "kvr_index_blocks{model=\"m\",group=\"default\"}");
    kvr_raw_event clear = th_clear();
    th_send_events(e, n, &clear, 1, true);
    return churn_wait_batches(base, (long long)n + 1);
}

#endif
