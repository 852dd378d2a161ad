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

typedef struct kvr_indexer kvr_indexer;
typedef struct kvr_worker kvr_worker; /* handle; valid until unregistered */

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
} kvr_worker_settings;

typedef enum {
    KVR_REG_CREATED = 0,
    KVR_REG_UNCHANGED,         /* same effective settings: state kept */
    KVR_REG_RESET,             /* settings changed: worker's index state cleared */
    KVR_REG_BLOCK_SIZE_CONFLICT,
    KVR_REG_INVALID
} kvr_reg_result;

kvr_indexer *kvr_indexer_create(void);
void kvr_indexer_destroy(kvr_indexer *ix);

kvr_reg_result kvr_indexer_register(kvr_indexer *ix, const kvr_worker_settings *s,
                                    kvr_worker **out);
kvr_worker *kvr_indexer_find(kvr_indexer *ix, const char *model, const char *group,
                             uint64_t worker_id);
/* Removes the worker and all its index state. */
void kvr_indexer_unregister(kvr_indexer *ix, kvr_worker *w);

/* Applies one decoded batch from socket rank `rank` (the batch's own dp_rank
 * overrides it). Events apply one at a time, in order. */
void kvr_indexer_apply(kvr_indexer *ix, kvr_worker *w, uint32_t rank, const kvr_batch *b);
/* Clears (worker, rank): index ownerships, exclusion sets, converter state. */
void kvr_indexer_clear_rank(kvr_indexer *ix, kvr_worker *w, uint32_t rank);

/* The index of (model, group), or NULL. Valid for the indexer's lifetime. */
kvr_index *kvr_indexer_index(kvr_indexer *ix, const char *model, const char *group);
/* Block size of (model, group), 0 if none registered. */
uint32_t kvr_indexer_block_size(kvr_indexer *ix, const char *model, const char *group);

/* Per-rank state for /workers and /metrics. */
typedef struct {
    uint32_t dp_rank;
    kvr_mm_identity effective_mode;
    uint64_t batches;
    uint64_t events_stored, events_removed, events_cleared, events_dropped;
    uint64_t blocks_stored, blocks_removed;
    kvr_normalizer_counters norm;
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
    uint64_t lora_seed;            /* hash seed of the worker's adapter, no salt */
    uint32_t n_ranks;
    kvr_rank_info ranks[KVR_MAX_RANKS_INFO];
} kvr_worker_info;

void kvr_worker_info_get(kvr_indexer *ix, kvr_worker *w, kvr_worker_info *out);
/* Snapshot of the workers of (model, group) (all when model == NULL).
 * Returns the count; writes at most cap. */
size_t kvr_indexer_list(kvr_indexer *ix, const char *model, const char *group,
                        kvr_worker_info *out, size_t cap);

/* Snapshot every index as store events (see kvr_index_dump), with model and
 * group. Loading goes through kvr_indexer_load_store. */
typedef void (*kvr_indexer_dump_fn)(void *user, const char *model, const char *group,
                                    const kvr_dump_store *ev);
void kvr_indexer_dump(kvr_indexer *ix, kvr_indexer_dump_fn fn, void *user);
kvr_drop_reason kvr_indexer_load_store(kvr_indexer *ix, const char *model, const char *group,
                                       const kvr_dump_store *ev);

#ifdef __cplusplus
}
#endif
#endif
