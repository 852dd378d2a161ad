/* Decoder throughput (issue 2): one SGLang-style batch of 64 BlockStored
 * events, each 4 blocks of 16 tokens, parent-linked, built with the wire
 * encoder and decoded repeatedly into one reused kvr_batch. */
#include "cli/decode_bench.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kvrouter/wire_encode.h"
#include "mock/clock.h"

enum { BENCH_EVENTS = 64, BENCH_BLOCKS = 4, BENCH_BLOCK_SIZE = 16 };
enum { BENCH_TOKENS = BENCH_BLOCKS * BENCH_BLOCK_SIZE };

/* Token ids spread over a 150k vocabulary, hashes over all 64 bits, as a
 * real engine publishes them (so the msgpack int widths are realistic). */
static void build_batch(kvr_wbuf *w)
{
    static uint64_t tokens[BENCH_EVENTS][BENCH_TOKENS];
    static uint64_t hashes[BENCH_EVENTS][BENCH_BLOCKS];
    kvr_raw_event ev[BENCH_EVENTS];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    memset(ev, 0, sizeof ev);
    for (int i = 0; i < BENCH_EVENTS; i++) {
        for (int k = 0; k < BENCH_TOKENS; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            tokens[i][k] = (x >> 33) % 151936;
        }
        for (int k = 0; k < BENCH_BLOCKS; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            hashes[i][k] = x;
        }
        ev[i].type = KVR_EV_STORED;
        ev[i].tier = KVR_TIER_GPU;
        ev[i].block_hashes = hashes[i];
        ev[i].n_block_hashes = BENCH_BLOCKS;
        ev[i].token_ids = tokens[i];
        ev[i].n_token_ids = BENCH_TOKENS;
        ev[i].block_size = BENCH_BLOCK_SIZE;
        ev[i].has_parent = i > 0;
        ev[i].parent = i > 0 ? hashes[i - 1][BENCH_BLOCKS - 1] : 0;
    }
    kvr_wire_encode_batch(w, KVR_WIRE_SGLANG, 1700000000.0, ev, BENCH_EVENTS, true, 0);
}

int kvr_cli_decode_bench(uint64_t iterations)
{
    kvr_wbuf w;
    kvr_batch b;
    kvr_wbuf_init(&w);
    kvr_batch_init(&b);
    build_batch(&w);
    int rc = 0;
    /* warm-up sizes the buffers and checks the batch decodes cleanly */
    bool ok = kvr_batch_decode(&b, w.data, w.len) == KVR_BATCH_OK && b.n_events == BENCH_EVENTS;
    while (ok && kvr_batch_next(&b))
        ;
    if (!ok || b.tally.dropped != 0 || b.tally.stored != BENCH_EVENTS) {
        fprintf(stderr, "kvrouter decode --bench: benchmark batch did not decode\n");
        rc = 1;
        goto out;
    }
    uint64_t events = 0;
    /* CPU time too: on a shared machine wall time also counts waiting */
    double t0 = kvr_sim_seconds(CLOCK_MONOTONIC), c0 = kvr_sim_seconds(CLOCK_PROCESS_CPUTIME_ID);
    for (uint64_t i = 0; i < iterations; i++) {
        kvr_batch_decode(&b, w.data, w.len);
        while (kvr_batch_next(&b)) /* events are decoded as they are read */
            events++;
    }
    double secs = kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
    double cpu = kvr_sim_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (secs <= 0)
        secs = 1e-9;
    if (cpu <= 0)
        cpu = 1e-9;
    double mb = (double)w.len * (double)iterations / 1e6;
    printf("batch: %d BlockStored x %d blocks x %d tokens, SGLang tagged arrays, %zu bytes\n",
           BENCH_EVENTS, BENCH_BLOCKS, BENCH_BLOCK_SIZE, w.len);
    printf("%" PRIu64 " decodes in %.3f s wall (%.3f s CPU): %.1f MB/s, %.0f events/s, "
           "%.0f batches/s (per CPU second: %.1f MB/s, %.0f events/s)\n",
           iterations, secs, cpu, mb / secs, (double)events / secs, (double)iterations / secs,
           mb / cpu, (double)events / cpu);
    printf("{\"payload_bytes\":%zu,\"events_per_batch\":%d,\"iterations\":%" PRIu64
           ",\"seconds\":%.6f,\"cpu_seconds\":%.6f,\"mb_per_s\":%.2f,\"events_per_s\":%.0f,"
           "\"batches_per_s\":%.0f,\"mb_per_cpu_s\":%.2f,\"events_per_cpu_s\":%.0f}\n",
           w.len, BENCH_EVENTS, iterations, secs, cpu, mb / secs, (double)events / secs,
           (double)iterations / secs, mb / cpu, (double)events / cpu);
out:
    kvr_batch_free(&b);
    kvr_wbuf_free(&w);
    return rc;
}
