/* A mock SGLang engine (one data-parallel rank): a GPU prefix cache of fixed
 * capacity with LRU leaf eviction, an optional HiCache host tier, and the KV
 * events a real engine publishes for them (SPEC §2-3), encoded as real
 * msgpack and sent on a real ZeroMQ XPUB when publishing is on.
 *
 * Engine hashes: block i's hash is kvr_hash_chain(hash_{i-1}, XXH3 of the
 * block's raw u64 tokens, seed 0) — deterministic and unique per prefix, and
 * deliberately unlike the router's hash (the router recomputes its own). */
#ifndef KVR_MOCK_ENGINE_H
#define KVR_MOCK_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvrouter/wire_encode.h"

typedef struct kvr_sim_engine kvr_sim_engine;

typedef struct {
    uint32_t dp_rank;     /* sent in every batch */
    uint32_t block_size;  /* tokens per block (default 16) */
    size_t gpu_capacity;  /* blocks */
    size_t cpu_capacity;  /* HiCache host blocks; 0 = no host tier */
    bool eagle;           /* Eagle: B+1-token windows, bigram token form on the wire */
    kvr_wire_style wire;  /* SGLang tagged arrays or vLLM maps */
    /* Publishing: NULL zctx = no sockets and no events (baseline runs). */
    void *zctx;
    const char *pub_bind;    /* e.g. "tcp://127.0.0.1:*" */
    const char *replay_bind; /* NULL = no replay socket */
    size_t ring_capacity;    /* batches kept for replay (default 1024, and <= 16 MiB) */
} kvr_sim_engine_config;

typedef struct {
    size_t n_blocks;   /* whole blocks in the request */
    size_t gpu_blocks; /* cached prefix on the GPU at arrival */
    size_t cpu_blocks; /* HiCache continuation loaded back from host */
} kvr_sim_hit;

typedef struct {
    uint64_t batches, gpu_stored, gpu_removed, cpu_stored, cpu_removed, clears;
} kvr_sim_engine_stats;

kvr_sim_engine *kvr_sim_engine_create(const kvr_sim_engine_config *cfg, char *err, size_t errlen);
void kvr_sim_engine_destroy(kvr_sim_engine *e);

/* Runs one request's prompt through the cache: measures the cached prefix at
 * arrival, inserts the prompt (evicting LRU leaves, moving them to the host
 * tier with HiCache), and publishes the resulting events as one batch.
 * tokens are the engine's own token form (legacy pads or wide pads at image
 * positions). Returns 0, or -1 on allocation/publish failure. */
int kvr_sim_engine_serve(kvr_sim_engine *e, const uint64_t *tokens, size_t n, kvr_sim_hit *hit);

/* Cached prefix (gpu, then host continuation) without touching LRU state. */
void kvr_sim_engine_peek(kvr_sim_engine *e, const uint64_t *tokens, size_t n, kvr_sim_hit *hit);

/* Drops every cached block and publishes AllBlocksCleared. */
int kvr_sim_engine_clear(kvr_sim_engine *e);

/* Engine hashes of a token sequence (whole blocks); returns the block count,
 * writes at most cap. */
size_t kvr_sim_engine_hashes(const kvr_sim_engine *e, const uint64_t *tokens, size_t n,
                             uint64_t *out, size_t cap);

/* Publishing endpoints, "" when not publishing. */
const char *kvr_sim_engine_endpoint(const kvr_sim_engine *e);
const char *kvr_sim_engine_replay_endpoint(const kvr_sim_engine *e);
bool kvr_sim_engine_wait_subscriber(kvr_sim_engine *e, int timeout_ms);
/* Sequence number of the last published batch, -1 if none yet. */
int64_t kvr_sim_engine_last_seq(const kvr_sim_engine *e);
uint64_t kvr_sim_engine_replays_served(const kvr_sim_engine *e);

bool kvr_sim_engine_gpu_contains(const kvr_sim_engine *e, uint64_t engine_hash);
bool kvr_sim_engine_cpu_contains(const kvr_sim_engine *e, uint64_t engine_hash);
size_t kvr_sim_engine_gpu_size(const kvr_sim_engine *e);
size_t kvr_sim_engine_cpu_size(const kvr_sim_engine *e);
kvr_sim_engine_stats kvr_sim_engine_get_stats(const kvr_sim_engine *e);

#endif
