/* The library facade: workers, their settings and per-rank normalizers, and
 * one prefix index per (model, routing group). Applies decoded batches
 * (normalize -> convert -> index) and answers matches. The service, the
 * benchmark and embedding gateways use this API. */
#ifndef KVROUTER_INDEXER_H
#define KVROUTER_INDEXER_H

#include "kvrouter/index.h"
#include "kvrouter/normalize.h"
#include "kvrouter/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVR_DEFAULT_ROUTING_GROUP "default"
#define KVR_NAME_MAX 256
/* Registration bounds: no engine uses blocks near this size, and it keeps
 * per-block windows small. */
#define KVR_MAX_BLOCK_SIZE 65536u
/* A rank's KV cache capacity, in tokens (max_total_num_tokens), is at most
 * this: 2^40 tokens is far past any engine's memory. */
#define KVR_MAX_KV_CAPACITY_TOKENS (1ull << 40)
/* Distinct dp ranks tracked per worker; a batch naming a new rank beyond this
 * is rejected and counted (batches_rejected), so a bad dp_rank field cannot
 * grow memory without bound. */
#define KVR_MAX_DP_RANKS 4096u

typedef struct kvr_indexer kvr_indexer;
typedef struct kvr_worker kvr_worker; /* handle; valid until unregistered */

/* Where the router reads a worker's cache from (route.h). */
typedef enum {
    /* Its KV events, once a batch of that rank was applied; a rank still
     * silent 10 s after the first request routed there is scored from what
     * the router routed there (an engine whose events stay silent still
     * routes by prefix). */
    KVR_KV_EVENTS_AUTO = 0,
    KVR_KV_EVENTS_ON,  /* its KV events only */
    KVR_KV_EVENTS_OFF  /* it publishes none: what the router routed there */
} kvr_kv_events;

/* "auto", "on", "off"; NULL for an unknown value. */
const char *kvr_kv_events_name(kvr_kv_events k);

typedef struct {
    const char *model_name;
    const char *routing_group; /* NULL -> "default" */
    uint64_t worker_id;
    uint32_t block_size;
    const char *lora_name;     /* NULL or "" -> none */
    kvr_mm_identity mm_identity;
    int accepts_mm_hashes;     /* -1 unset (SPEC §5 default), 0, 1 */
    bool is_eagle;
    uint32_t mm_capacity;      /* 0 -> KVR_MM_DEFAULT_CAPACITY */
    /* SPEC §5 "vLLM media identity": the engine (how a 64-hex mm_hash
     * reads, which identity field /route forwards) and the model's media
     * placeholder token (151655 for Qwen-VL), without which blocks whose
     * extra_keys list media are unsupported. Both are effective settings. */
    kvr_engine engine;         /* default KVR_ENGINE_SGLANG (0) */
    bool has_image_token_id;
    uint32_t image_token_id;   /* below KVR_WIDE_SENTINEL */
    /* Routing hints, read per request (no index state depends on them). */
    kvr_kv_events kv_events;
    double prefill_tps;        /* the engine's prefill tokens/s per rank; 0 = unknown */
    /* The rank's GPU KV cache capacity in tokens (SGLang's name; vLLM:
     * num_gpu_blocks x block_size); 0 = unknown, at most
     * KVR_MAX_KV_CAPACITY_TOKENS. */
    uint64_t max_total_num_tokens;
} kvr_worker_settings;

typedef enum {
    KVR_REG_CREATED = 0,
    KVR_REG_UNCHANGED,         /* same effective settings: state kept */
    KVR_REG_RESET,             /* settings changed: worker's index state cleared */
    KVR_REG_BLOCK_SIZE_CONFLICT,
    KVR_REG_INVALID,
    KVR_REG_UPDATED            /* only accepts_mm_hashes changed: state kept */
} kvr_reg_result;

/* "created", "unchanged", "reset", "block_size_conflict", "invalid", "updated". */
const char *kvr_reg_result_name(kvr_reg_result r);

kvr_indexer *kvr_indexer_create(void);
void kvr_indexer_destroy(kvr_indexer *ix);

/* Registry semantics:
 * - key (model, group, worker_id); group NULL or "" -> "default".
 * - INVALID: model empty/NULL, a name >= KVR_NAME_MAX bytes, block_size 0 or
 *   above KVR_MAX_BLOCK_SIZE, mm_identity, accepts_mm_hashes, engine or
 *   kv_events out of range, image_token_id KVR_WIDE_SENTINEL (no real token
 *   narrows to it), prefill_tps negative or not finite,
 *   max_total_num_tokens above KVR_MAX_KV_CAPACITY_TOKENS.
 * - BLOCK_SIZE_CONFLICT: another registered worker of (model, group) has a
 *   different block size. The size binds while any worker of the group is
 *   registered (a group holding only dump-loaded state takes the size of its
 *   next registration). A worker alone in its group may change it (RESET).
 * - Effective settings: block size, mm_identity, eagle, lora (NULL == ""),
 *   mm_capacity (0 == default), engine, image_token_id (absent or its
 *   value: it decides how media blocks hash). Any difference -> RESET: the worker's index
 *   ownerships on every rank (dump-loaded ones too) are cleared and its
 *   normalizers/converters are rebuilt lazily with the new settings.
 * - accepts_mm_hashes compares by its effective rule: -1 equals the explicit
 *   default of legacy (1) and engine_wide (0); for auto, -1 (flips after wide
 *   ids) differs from an explicit value. Only that, kv_events,
 *   prefill_tps or max_total_num_tokens differing -> UPDATED (read per request; state kept).
 * - *out (may be NULL) gets the handle, or NULL for CONFLICT/INVALID. The
 *   handle stays the same across UNCHANGED/UPDATED/RESET. */
kvr_reg_result kvr_indexer_register(kvr_indexer *ix, const kvr_worker_settings *s,
                                    kvr_worker **out);
kvr_worker *kvr_indexer_find(kvr_indexer *ix, const char *model, const char *group,
                             uint64_t worker_id);
/* Removes the worker and all its index state. The caller must have stopped
 * every source that applies batches with this handle. */
void kvr_indexer_unregister(kvr_indexer *ix, kvr_worker *w);
/* Clears one rank and frees its per-rank state (normalizer, converter,
 * counters) and its declaration; the worker stays registered. Returns false
 * if the rank had neither. */
bool kvr_indexer_unregister_rank(kvr_indexer *ix, kvr_worker *w, uint32_t rank);
/* Records that `rank` of w is registered. Rank state only exists once a
 * batch names the rank, and an engine registered with kv_events off never
 * sends one: the router takes its candidates from the ranks with state plus
 * the declared ones (kvr_worker_info.declared_ranks), so such a rank is
 * scored as itself, not as rank 0. 0, or -1 (rank >= KVR_MAX_DP_RANKS or out
 * of memory). */
int kvr_indexer_declare_rank(kvr_indexer *ix, kvr_worker *w, uint32_t rank);

/* Applies one decoded batch from socket rank `rank` (the batch's own dp_rank
 * overrides it). Events apply in order, each whole: a run of parent-linked
 * one-block stores (SGLang publishes one event per page) shares one index
 * call of at most 64 blocks, anything else is one call per event, so a match
 * sees whole events and never waits behind a batch. Drops are counted per rank:
 * duplicate_ids (nothing applied, never a clear), parent_not_found (store
 * skipped), block_not_found (once per unknown handle of a removal). Batches of
 * different ranks of one worker may be applied concurrently; batches of one
 * rank must come from one thread at a time to keep their order. The batch
 * is read with kvr_batch_next from where it stands (normally its first
 * event) to its end. */
void kvr_indexer_apply(kvr_indexer *ix, kvr_worker *w, uint32_t rank, kvr_batch *b);
/* Clears (worker, rank): index ownerships, exclusion sets, converter state. */
void kvr_indexer_clear_rank(kvr_indexer *ix, kvr_worker *w, uint32_t rank);

/* The index of (model, group), or NULL. Valid for the indexer's lifetime. */
kvr_index *kvr_indexer_index(kvr_indexer *ix, const char *model, const char *group);
/* Block size of (model, group), 0 if none registered. */
uint32_t kvr_indexer_block_size(kvr_indexer *ix, const char *model, const char *group);

/* Match helpers: look up (model, group) without the registry lock (indexes
 * are never freed before the indexer) and match. Return 0 with *out = NULL
 * when the group does not exist. match_tokens hashes whole blocks with the
 * group's block size, Eagle windows if eagle, and the given seed
 * (kvr_hash_seed(lora, salt)). */
size_t kvr_indexer_match_hashes(kvr_indexer *ix, const char *model, const char *group,
                                kvr_match_ctx *ctx, const uint64_t *local_hashes, size_t n,
                                const kvr_match_entry **out);
size_t kvr_indexer_match_tokens(kvr_indexer *ix, const char *model, const char *group,
                                kvr_match_ctx *ctx, const uint32_t *tokens, size_t n_tokens,
                                bool eagle, uint64_t seed, const kvr_match_entry **out);

/* What the router needs to build a worker's routing sequence (SPEC §5
 * request side): small enough to snapshot per request. Never waits behind a
 * batch, nor takes a per-worker lock (reads no per-rank state: a /route
 * snapshots every worker of the group, and one mutex pair per worker was
 * ~8 % of a 1000-worker /route's CPU in perf). */
#define KVR_CAPS_RANKS 64
typedef struct {
    uint64_t worker_id;
    uint32_t block_size;
    bool is_eagle;
    bool accepts_mm_hashes;        /* effective now */
    kvr_mm_identity mm_identity;   /* as registered */
    kvr_engine engine;
    uint64_t lora_seed;            /* kvr_hash_seed(lora, none) */
    uint64_t rank_bits;            /* bit r: rank r < KVR_CAPS_RANKS has state (a batch applied) */
    bool wide_ranks;               /* a rank >= KVR_CAPS_RANKS has state (not in rank_bits) */
    kvr_kv_events kv_events;       /* as registered */
    double prefill_tps;            /* as registered, 0 = unknown */
    /* KV capacity per rank in tokens: max_total_num_tokens as registered,
     * else estimated from the events: the most GPU blocks a rank held
     * (stores less removes) once it had removed any (an LRU that evicts was
     * full), times the block size; 0 = unknown. */
    uint64_t kv_capacity_tokens;
    /* last: what a request reads of the rest fits one cache line */
    char lora_name[KVR_NAME_MAX];  /* "" when none */
} kvr_worker_caps;

void kvr_worker_caps_get(kvr_indexer *ix, kvr_worker *w, kvr_worker_caps *out);
/* Caps of the workers of (model, group) (group NULL -> "default"), in
 * registration order. Returns the count; writes at most cap. */
size_t kvr_indexer_caps_list(kvr_indexer *ix, const char *model, const char *group,
                             kvr_worker_caps *out, size_t cap);
/* kvr_indexer_caps_list for a caller that keeps its copy: *gen is the
 * group's caps generation out[0..n) was copied at (0: none, or a copy of
 * another group). Unchanged since: returns the count and copies nothing
 * (a /route at 1000 workers copied 312 KB per request); else copies as
 * kvr_indexer_caps_list and sets *gen (0 when the count exceeds cap). */
size_t kvr_indexer_caps_list_since(kvr_indexer *ix, const char *model, const char *group,
                                   kvr_worker_caps *out, size_t cap, uint64_t *gen);

/* Per-rank state for /workers and /metrics. */
typedef struct {
    uint32_t dp_rank;
    kvr_mm_identity effective_mode;
    uint64_t batches;
    uint64_t events_stored, events_removed, events_cleared, events_dropped;
    uint64_t blocks_stored, blocks_removed;
    kvr_normalizer_counters norm;
    bool wide_seen;
} kvr_rank_info;

#define KVR_MAX_RANKS_INFO 64
typedef struct {
    char model_name[KVR_NAME_MAX];
    char routing_group[KVR_NAME_MAX];
    char lora_name[KVR_NAME_MAX];
    uint64_t worker_id;
    uint32_t block_size;
    kvr_mm_identity mm_identity;   /* as registered */
    bool accepts_mm_hashes;        /* effective now (SPEC §5) */
    bool accepts_mm_hashes_explicit;
    bool is_eagle;
    kvr_engine engine;
    kvr_kv_events kv_events;       /* as registered */
    bool has_image_token_id;
    uint32_t image_token_id;
    uint64_t max_total_num_tokens; /* as registered, 0 = unknown */
    /* the capacity the router uses (kvr_worker_caps.kv_capacity_tokens),
     * 0 = unknown; with max_total_num_tokens 0 it is the estimate from
     * events */
    uint64_t kv_capacity_tokens;
    uint64_t lora_seed;            /* hash seed of the worker's adapter, no salt */
    uint32_t n_ranks;              /* entries written below, sorted by dp_rank */
    uint32_t n_ranks_total;        /* ranks with state (may exceed KVR_MAX_RANKS_INFO) */
    bool wide_seen;                /* any rank saw a wide id since (re)registration */
    uint64_t resets;               /* registrations that returned RESET */
    uint64_t batches_rejected;     /* dp_rank beyond KVR_MAX_DP_RANKS distinct ranks */
    uint32_t n_declared_ranks;     /* kvr_indexer_declare_rank's, sorted (at most 64 listed) */
    uint32_t declared_ranks[KVR_MAX_RANKS_INFO];
    kvr_worker *worker;            /* its handle (as kvr_indexer_find gives it) */
    kvr_rank_info ranks[KVR_MAX_RANKS_INFO]; /* entries past n_ranks are not written */
} kvr_worker_info;

void kvr_worker_info_get(kvr_indexer *ix, kvr_worker *w, kvr_worker_info *out);
/* Snapshot of the workers of (model, group) (all when model == NULL; every
 * group of the model when group == NULL). Returns the count; writes at most
 * cap (out may be NULL with cap 0 to size the array). */
size_t kvr_indexer_list(kvr_indexer *ix, const char *model, const char *group,
                        kvr_worker_info *out, size_t cap);

/* Snapshot every index as store events (see kvr_index_dump), with model and
 * group. Loading goes through kvr_indexer_load_store, which creates the
 * (model, group) index if needed (block size 0 = unknown until a registration
 * sets it) and stores the blocks for (worker, rank) directly in the index:
 * loaded ownerships count as that worker's state (cleared by its unregister
 * or reset) even before it registers. Returns KVR_DROP_NONE,
 * KVR_DROP_PARENT_NOT_FOUND, or KVR_DROP_MALFORMED_EVENT for bad arguments. */
typedef void (*kvr_indexer_dump_fn)(void *user, const char *model, const char *group,
                                    const kvr_dump_store *ev);
void kvr_indexer_dump(kvr_indexer *ix, kvr_indexer_dump_fn fn, void *user);
kvr_drop_reason kvr_indexer_load_store(kvr_indexer *ix, const char *model, const char *group,
                                       const kvr_dump_store *ev);

/* Heap bytes held by every (model, group) index (kvr_index_stats.bytes
 * summed), for a caller deciding when memory drained; any thread, each
 * index read-locked in turn. */
uint64_t kvr_indexer_heap_bytes(kvr_indexer *ix);

#ifdef __cplusplus
}
#endif
#endif
