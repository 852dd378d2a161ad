/* Prefix index (SPEC §6): one tree per (model, routing group), keyed by
 * router block hash under its parent; owners are (worker, dp_rank) with a
 * tier bit set. Thread-safe: mutations are serialized by a per-index write
 * lock held for one call (one event, or a short run of whole events), or by
 * a batch writer across slices of whole events (kvr_index_write_begin);
 * matches take the read lock, so a match never sees half an event and never
 * waits behind a whole batch. */
#ifndef KVROUTER_INDEX_H
#define KVROUTER_INDEX_H

#include "kvrouter/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_index kvr_index;
typedef uint32_t kvr_owner; /* dense id of a (worker, dp_rank) inside one index */
#define KVR_OWNER_NONE UINT32_MAX

kvr_index *kvr_index_create(void);
void kvr_index_destroy(kvr_index *idx);

/* Get or create the owner id of (worker, rank). */
kvr_owner kvr_index_owner(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank);
/* KVR_OWNER_NONE when (worker, rank) never stored anything. */
kvr_owner kvr_index_find_owner(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank);

/* Store n blocks as a chain under parent (engine handle of this owner; any
 * tier) or under the root. Returns KVR_DROP_NONE, or KVR_DROP_PARENT_NOT_FOUND
 * (nothing applied). */
kvr_drop_reason kvr_index_store(kvr_index *idx, kvr_owner owner, kvr_tier tier, bool has_parent,
                                uint64_t parent, const uint64_t *engine_hashes,
                                const uint64_t *local_hashes, size_t n);
/* Clears the tier bit of each handle; returns how many handles were unknown. */
size_t kvr_index_remove(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                        const uint64_t *engine_hashes, size_t n);
/* Drops every ownership of the owner (AllBlocksCleared, restart). */
void kvr_index_clear_owner(kvr_index *idx, kvr_owner owner);

/* Batch writing: hold the write lock across many events, handing it to
 * waiting matches between whole events. Between begin and end the caller
 * uses only the _locked mutations below (any other call on this index from
 * the same thread deadlocks), and calls kvr_index_write_yield after each
 * whole event: when matches wait and the slice (started at *slice_start_ns,
 * from kvr_index_now_ns) is old enough, it lets them in, restarts the slice
 * and returns true. A caller holding its own lock that other threads take
 * before the index lock instead checks kvr_index_write_yield_due, and
 * releases both (write_end first) itself. */
void kvr_index_write_begin(kvr_index *idx);
void kvr_index_write_end(kvr_index *idx);
uint64_t kvr_index_now_ns(void);
bool kvr_index_write_yield_due(kvr_index *idx, uint64_t slice_start_ns);
bool kvr_index_write_yield(kvr_index *idx, uint64_t *slice_start_ns);
/* kvr_index_store; *added gets how many (owner, tier) ownerships the store
 * gained, net, also when it stopped part way (what it applied before):
 * blocks the owner already held on the tier (an engine re-storing them,
 * SPEC §6) add none, a hash moved onto one of them counts -1 (the block it
 * left). The indexer's capacity estimate counts occupancy with it. */
kvr_drop_reason kvr_index_store_locked(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                                       bool has_parent, uint64_t parent,
                                       const uint64_t *engine_hashes,
                                       const uint64_t *local_hashes, size_t n, int64_t *added);
size_t kvr_index_remove_locked(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                               const uint64_t *engine_hashes, size_t n);
void kvr_index_clear_owner_locked(kvr_index *idx, kvr_owner owner);

typedef struct {
    kvr_owner owner;
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t gpu_blocks;  /* consecutive blocks from the root on gpu */
    uint32_t cpu_blocks;  /* reach when cpu continues it (>= gpu) */
    uint32_t disk_blocks; /* reach when disk continues it (>= cpu) */
} kvr_match_entry;

/* Per-thread match scratch; reusable across indexes. */
typedef struct kvr_match_ctx kvr_match_ctx;
kvr_match_ctx *kvr_match_ctx_create(void);
void kvr_match_ctx_destroy(kvr_match_ctx *ctx);

/* Read-lock contention seen by the matches made through one ctx (a match
 * first tries the lock and only times the wait when it has to block). */
typedef struct {
    uint64_t matches;
    uint64_t waits;      /* matches that had to wait for a writer */
    uint64_t wait_ns;    /* total time spent waiting */
    uint64_t max_wait_ns;
    uint64_t max_wait_end_ns; /* when that wait ended (kvr_index_now_ns), to line it up with
                               * what the writer was doing then */
} kvr_match_ctx_stats;
void kvr_match_ctx_stats_get(const kvr_match_ctx *ctx, kvr_match_ctx_stats *out);

/* Matches local block hashes from the root. Returns the number of owners
 * with disk_blocks > 0; *out points into ctx, valid until its next use. */
size_t kvr_index_match(kvr_index *idx, kvr_match_ctx *ctx, const uint64_t *local_hashes,
                       size_t n, const kvr_match_entry **out);

typedef struct {
    uint64_t nodes;
    uint64_t ownerships; /* (node, owner) pairs */
    uint64_t owners;
    uint64_t bytes;      /* heap bytes held by the index */
    /* large tables rebuilt under a read lock (matches go on meanwhile) */
    uint64_t table_rebuilds;
} kvr_index_stats;
void kvr_index_stats_get(kvr_index *idx, kvr_index_stats *out);

/* Snapshot as parent-linked store events, parents before children. Loading
 * them in order with kvr_index_store into an empty index reproduces every
 * match result. */
typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    kvr_tier tier;
    bool has_parent;
    uint64_t parent;              /* engine handle */
    const uint64_t *engine_hashes;
    const uint64_t *local_hashes;
    size_t n;
} kvr_dump_store;
typedef void (*kvr_dump_fn)(void *user, const kvr_dump_store *ev);
void kvr_index_dump(kvr_index *idx, kvr_dump_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
