/* Private structures of the library facade (indexer*.c).
 *
 * Lock order: registry rwlock -> worker mutex -> rank mutex -> index lock.
 * - registry rwlock (writer-preferring): register/unregister/reset take it
 *   exclusively; apply, clear_rank, info snapshots take it shared. Matches
 *   never take it: groups are published on a lock-free append-only list and
 *   live as long as the indexer.
 * - worker mutex: the worker's rank table (lookup/insert) and wide_seen.
 * - rank mutex: one rank's normalizer, converter and counters, so different
 *   dp ranks of one worker apply in parallel. A batch holds it together
 *   with the index write lock across slices of events, releasing both
 *   between slices (indexer_apply.c). */
#ifndef KVR_INDEX_INDEXER_INTERNAL_H
#define KVR_INDEX_INDEXER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "index/convert.h"
#include "kvrouter/indexer.h"
#include "util/u64map.h"

typedef struct kvr_group kvr_group;

typedef struct {
    uint32_t rank;
    pthread_mutex_t mu;
    kvr_normalizer *norm;
    kvr_converter *conv;
    kvr_owner owner;
    uint64_t *local; /* convert scratch: one router hash per kept block */
    size_t local_cap;
    uint64_t batches;
    uint64_t events_stored, events_removed, events_cleared, events_dropped;
    uint64_t blocks_stored, blocks_removed;
    /* GPU-tier blocks stored less removed (cleared: 0), and whether the
     * engine removed any: an LRU that evicted was full, so from then on the
     * largest occupancy is its capacity (kvr_worker.peak_gpu_blocks). */
    uint64_t gpu_held;
    bool gpu_evicted;
    uint64_t dup_warnings; /* rate-limits the duplicate_ids warning */
} kvr_rank_state;

/* Settings with owned strings and defaults resolved. */
/* The name last: a /route reads the rest of every worker's (with the
 * fields kvr_worker puts before it) from one or two cache lines. */
typedef struct {
    uint32_t block_size;
    kvr_mm_identity mm_identity;
    int accepts_raw;              /* as registered: -1, 0, 1 */
    int accepts_norm;             /* -1 only for auto+unset (dynamic) */
    bool is_eagle;
    uint32_t mm_capacity;         /* 0 resolved to the default */
    kvr_engine engine;
    bool has_image_token_id;
    uint32_t image_token_id;
    kvr_kv_events kv_events;      /* routing hints: change in place */
    double prefill_tps;
    uint64_t max_total_num_tokens;
    char lora[KVR_NAME_MAX];      /* "" = none */
} kvr_worker_conf;

/* What kvr_worker_caps reads comes first. */
struct kvr_worker {
    kvr_group *grp;
    uint64_t worker_id;
    uint64_t lora_seed;
    atomic_bool wide_seen;
    /* ranks with state, readable without mu (kvr_worker_caps): bit r for
     * rank r < KVR_CAPS_RANKS, wide_ranks for any above; written under mu */
    atomic_bool wide_ranks;
    atomic_uint_fast64_t rank_bits;
    kvr_worker_conf conf;
    pthread_mutex_t mu;
    kvr_rank_state **ranks; /* sorted by rank, so snapshots need no sort */
    size_t n_ranks, cap_ranks;
    /* ranks registered (kvr_indexer_declare_rank), with state or not:
     * sorted, under mu */
    uint32_t *declared;
    size_t n_declared, cap_declared;
    atomic_uint_fast64_t batches_rejected;
    uint64_t resets;
    /* The largest GPU occupancy of any rank once it evicted (0 before):
     * the capacity estimate of a worker that registered none. */
    atomic_uint_fast64_t peak_gpu_blocks;
};

struct kvr_group {
    char model[KVR_NAME_MAX];
    char group[KVR_NAME_MAX];
    _Atomic uint32_t block_size; /* 0 = unknown (only dump-loaded state) */
    kvr_index *idx;
    kvr_group *next;             /* immutable once published */
    /* registered workers, guarded by the registry rwlock */
    kvr_worker **workers;
    size_t n_workers, cap_workers;
    /* Changes with anything kvr_worker_caps reads of the group's workers
     * (kvr_ix_caps_changed), so a router keeping its copy of the snapshot
     * copies it again only then (kvr_indexer_caps_list_since). */
    atomic_uint_fast64_t caps_gen;
    /* owners created by kvr_indexer_load_store: owner id -> worker id, so
     * a worker's reset/unregister also clears state it never applied */
    pthread_mutex_t loaded_mu;
    kvr_u64map loaded;
};

struct kvr_indexer {
    pthread_rwlock_t lock;
    pthread_mutex_t groups_mu; /* serializes group creation only */
    _Atomic(kvr_group *) groups;
};

/* indexer.c */
/* After a change to what kvr_worker_caps reads of a worker of g (its
 * registration, rank_bits, wide_ranks, wide_seen, peak_gpu_blocks): the
 * stores come first. */
static inline void kvr_ix_caps_changed(kvr_group *g)
{
    atomic_fetch_add_explicit(&g->caps_gen, 1, memory_order_release);
}
kvr_group *kvr_ix_group_find(kvr_indexer *ix, const char *model, const char *group);
kvr_group *kvr_ix_group_get(kvr_indexer *ix, const char *model, const char *group);
const char *kvr_ix_group_name(const char *group);
bool kvr_ix_name_ok(const char *name, bool allow_empty);

/* indexer_rank.c */
kvr_rank_state *kvr_ix_rank_create(kvr_worker *w, uint32_t rank);
void kvr_ix_rank_destroy(kvr_rank_state *r);
/* Rank state of w, created if missing; NULL past KVR_MAX_DP_RANKS or OOM. */
kvr_rank_state *kvr_ix_rank_get(kvr_worker *w, uint32_t rank, bool create);
/* Clears the rank's index ownership and its normalizer/converter state.
 * Caller holds r->mu. */
void kvr_ix_rank_clear(kvr_worker *w, kvr_rank_state *r);
/* Drops every index ownership of w (all ranks, dump-loaded ones too) and
 * frees its rank states. Caller holds the registry lock exclusively. */
void kvr_ix_worker_drop_state(kvr_worker *w);
bool kvr_ix_accepts_effective(const kvr_worker *w);
/* The KV capacity per rank in tokens the router uses
 * (kvr_worker_caps.kv_capacity_tokens): as registered, else the estimate
 * from events, else 0. */
uint64_t kvr_ix_kv_capacity(kvr_worker *w);

#endif
