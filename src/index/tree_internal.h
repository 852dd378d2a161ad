/* Internal layout of the prefix index (include/kvrouter/index.h), shared by
 * the tree*.c files: tree.c (lifecycle, owners, lock, sizing, stats),
 * tree_handles.c (engine hashes -> blocks), tree_runs.c (block and run
 * storage, splits, merges, reclamation), tree_events.c (store, remove,
 * clear), tree_match.c and tree_dump.c.
 *
 * Blocks and runs. Every indexed block has a u32 id and keeps its local
 * (router) hash, the engine hash of the owner that created it and its run.
 * A run is a chain of blocks with consecutive ids [start, start + len),
 * each the only child of the one before, that all have the same owners
 * (one interned owner set, tree_sets.h): the compressed edge of a radix
 * tree. So a chain costs 20 bytes per block, and owner sets, child links
 * and child-table slots are paid per run. Children hang off the last block
 * of a run; they are runs, found through the child table by (parent block,
 * first local hash) and linked as siblings for reclamation and dumps.
 * Block 0 and run 0 are the root. A store that continues a chain takes the
 * next block id when it is free, so a chain stays one run; a store or a
 * removal that changes the owners of part of a run splits it, and
 * neighbours left with equal owners and consecutive ids merge again.
 *
 * Handles. An owner names each of its blocks by an engine hash. The engine
 * table maps each block's creator hash to the block, so an owner holding a
 * block under that hash (the usual case: every engine hashes a prefix the
 * same way) costs nothing beyond its set entry. An owner whose hash differs
 * keeps it in `exc` ((owner, block) -> hash) and in its own table of
 * exception handles; the set entry carries KVR_OSET_EXC.
 *
 * Ids are handed out lowest first (tree_ids.h), so the chunks holding
 * blocks and runs are released again after churn. */
#ifndef KVR_INDEX_TREE_INTERNAL_H
#define KVR_INDEX_TREE_INTERNAL_H

#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>

#include "index/tree_ids.h"
#include "index/tree_sets.h"
#include "index/tree_keytab.h"
#include "index/tree_table.h"
#include "kvrouter/index.h"
#include "util/u64map.h"

#define KVR_ROOT 0u /* the root block, and the root run */
#define KVR_NIL 0u  /* no block, no run: the root is never a child */

#define KVR_CHUNK_BITS 10
#define KVR_CHUNK (1u << KVR_CHUNK_BITS)
#define KVR_CHUNK_MASK (KVR_CHUNK - 1)

typedef struct {
    uint64_t local[KVR_CHUNK];
    uint64_t engine[KVR_CHUNK]; /* the creating owner's engine hash */
    uint32_t run[KVR_CHUNK];
} kvr_block_chunk;

/* A run is on two doubly-linked lists: its siblings (headed by the parent
 * run's first_child) and the runs with its set (headed by kvr_oset.runs). */
enum { KVR_SIBLINGS, KVR_SAME_SET };
typedef struct {
    uint32_t next, prev;
} kvr_link;

typedef struct {
    uint32_t start, len;  /* blocks [start, start + len); len 0: a free run */
    uint32_t parent;      /* block the run hangs off (KVR_ROOT at the top) */
    uint32_t set;         /* owners of every block of the run */
    uint32_t first_child; /* runs under the last block */
    kvr_link link[2];     /* KVR_SIBLINGS, KVR_SAME_SET */
} kvr_run;

static inline uint32_t kvr_run_next(const kvr_run *r) { return r->link[KVR_SIBLINGS].next; }

typedef struct {
    kvr_run at[KVR_CHUNK];
} kvr_run_chunk;

typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t next_rank; /* next owner of the same worker, KVR_OWNER_NONE ends */
    uint64_t blocks;    /* ownerships of this owner */
    kvr_idtab exc;      /* exception handles: fp(engine hash) -> block */
} kvr_owner_rec;

/* (worker, rank) by owner id, apart from the records: match results read
 * it for every owner of the first block. */
typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
} kvr_owner_key;

struct kvr_index {
    pthread_rwlock_t lock;
    /* Bumped each time a writer takes `lock`: a writer that traded its
     * write lock for a read lock to rebuild a large table while matches go
     * on (kvr_tree_fit) learns whether another writer came between. */
    uint64_t write_epoch;
    uint64_t table_rebuilds; /* kvr_tree_fit's rebuilds under the read lock */
    uint64_t uid; /* distinct per index created in this process (match ctx caches) */
    /* Matches blocked behind a writer. The lock prefers writers, so an
     * ingestion thread applying events back to back could otherwise starve
     * matches; a writer lets waiting readers in before its next event or
     * slice of events (kvr_index_write_yield). */
    atomic_uint readers_waiting;
    kvr_block_chunk **blocks;
    kvr_run_chunk **runs;
    uint32_t n_bchunks, bchunks_cap, n_rchunks, rchunks_cap;
    kvr_ids block_ids, run_ids;
    kvr_idtab child;       /* runs by fp(parent block, first local hash) */
    kvr_keytab engine;     /* blocks by fp(engine hash of their creator) */
    /* Live blocks whose creator hash another live block also has (counted
     * when a block joins or leaves the engine table). While 0, a block's
     * creator hash names that block only, and stores skip the check that
     * the owner holds the hash elsewhere. */
    uint64_t engine_dups;
    kvr_osets sets;
    kvr_owner_rec *owners;
    kvr_owner_key *owner_keys; /* owners_cap entries */
    uint32_t n_owners, owners_cap;
    kvr_u64map by_worker; /* worker id -> first owner of it */
    kvr_u64map exc;       /* owner << 32 | block -> engine hash when != the block's */
    uint64_t ownerships;
    uint32_t *stack;      /* reclamation scratch (run ids) */
    size_t stack_cap;
    /* Tables replaced under the write lock, freed once it is released:
     * unmapping a large table takes milliseconds that matches would wait. */
    void *retired[4];
    uint32_t n_retired;
};

static inline kvr_block_chunk *kvr_bchunk(const struct kvr_index *idx, uint32_t b)
{
    return idx->blocks[b >> KVR_CHUNK_BITS];
}
#define KVR_LOCAL(idx, b) (kvr_bchunk(idx, b)->local[(b) & KVR_CHUNK_MASK])
#define KVR_ENGINE(idx, b) (kvr_bchunk(idx, b)->engine[(b) & KVR_CHUNK_MASK])
#define KVR_RUNOF(idx, b) (kvr_bchunk(idx, b)->run[(b) & KVR_CHUNK_MASK])
#define KVR_RUN(idx, r) ((idx)->runs[(r) >> KVR_CHUNK_BITS]->at[(r) & KVR_CHUNK_MASK])

static inline uint32_t kvr_run_end(const kvr_run *r) { return r->start + r->len; }

static inline bool kvr_tree_block_live(const struct kvr_index *idx, uint32_t b)
{
    return kvr_ids_used(&idx->block_ids, b);
}

/* Fingerprints: tests use small integers as hashes, so both are mixed.
 * An engine hash takes one multiply (Fibonacci hashing: every bit of the
 * hash reaches the high half, and consecutive integers land a golden ratio
 * apart): every block stored or removed computes one, and the full mix
 * was 5 % of a replay. Neither is keyed: a client choosing engine hashes
 * could choose their fingerprints under either. */
static inline uint32_t kvr_child_fp(uint32_t parent, uint64_t local)
{
    return (uint32_t)(kvr_mix64(local + (uint64_t)parent * 0x9E3779B97F4A7C15ULL) >> 32);
}
static inline uint32_t kvr_engine_fp(uint64_t engine)
{
    return (uint32_t)((engine * 0x9E3779B97F4A7C15ULL) >> 32);
}
/* The engine table's key of block b (kvr_keytab_fp_fn; ctx: the index). */
static inline uint32_t kvr_tree_engine_fp_of(const void *ctx, uint32_t b)
{
    return kvr_engine_fp(KVR_ENGINE((const struct kvr_index *)ctx, b));
}

/* Child run of block `parent` whose first block has this local hash. */
static inline uint32_t kvr_tree_child_run(const struct kvr_index *idx, uint32_t parent,
                                          uint64_t local)
{
    const kvr_idtab *t = &idx->child;
    if (!t->cap)
        return KVR_NIL;
    uint32_t fp = kvr_child_fp(parent, local);
    for (uint32_t i = kvr_idtab_home(t, fp); t->slot[i]; i = kvr_probe_next(i, t->cap)) {
        uint64_t s = t->slot[i];
        if (kvr_idtab_fp(s) == fp) {
            const kvr_run *r = &KVR_RUN(idx, kvr_idtab_id(s));
            if (r->parent == parent && KVR_LOCAL(idx, r->start) == local)
                return kvr_idtab_id(s);
        }
    }
    return KVR_NIL;
}

/* The child of block cur with this local hash, KVR_NIL if none. Inside a
 * run it is the next block. At a run's end the next id is tried first (a
 * chain stored in one event has consecutive ids, and keeps them when a
 * later store splits it), then the child table. */
static inline uint32_t kvr_tree_child(const struct kvr_index *idx, uint32_t cur, uint64_t local)
{
    const kvr_run *r = &KVR_RUN(idx, KVR_RUNOF(idx, cur));
    uint32_t x = cur + 1;
    if (x < kvr_run_end(r))
        return KVR_LOCAL(idx, x) == local ? x : KVR_NIL;
    if (kvr_ids_used(&idx->block_ids, x)) {
        const kvr_run *c = &KVR_RUN(idx, KVR_RUNOF(idx, x));
        if (c->start == x && c->parent == cur && KVR_LOCAL(idx, x) == local)
            return x;
    }
    uint32_t c = kvr_tree_child_run(idx, cur, local);
    return c ? KVR_RUN(idx, c).start : KVR_NIL;
}

static inline uint32_t kvr_tree_set_of(const struct kvr_index *idx, uint32_t b)
{
    return KVR_RUN(idx, KVR_RUNOF(idx, b)).set;
}
/* The owner's entry on block b, 0 if it holds none. */
static inline uint32_t kvr_tree_entry(const struct kvr_index *idx, uint32_t b, uint32_t owner)
{
    return kvr_osets_find(&idx->sets, kvr_tree_set_of(idx, b), owner);
}

/* The ownership counters, the index's and the owner's, follow n blocks
 * the owner gained or lost. */
static inline void kvr_tree_owned_add(struct kvr_index *idx, uint32_t owner, uint64_t n)
{
    idx->ownerships += n;
    idx->owners[owner].blocks += n;
}
static inline void kvr_tree_owned_sub(struct kvr_index *idx, uint32_t owner, uint64_t n)
{
    idx->ownerships -= n;
    idx->owners[owner].blocks -= n;
}

/* Engine hash by which owner refers to block b (entry: its set entry). */
static inline uint64_t kvr_tree_handle(const struct kvr_index *idx, uint32_t owner, uint32_t b,
                                       uint32_t entry)
{
    if (entry & KVR_OSET_EXC) {
        uint64_t v = 0;
        kvr_u64map_get(&idx->exc, (uint64_t)owner << 32 | b, &v);
        return v;
    }
    return KVR_ENGINE(idx, b);
}

/* tree.c: the write lock. kvr_tree_write_lock lets queued matches in
 * first; kvr_tree_write_unlock frees retired tables after releasing. */
void kvr_tree_write_lock(struct kvr_index *idx);
void kvr_tree_write_unlock(struct kvr_index *idx);
/* Called by a writer before an event changes anything: sizes the engine
 * table for `blocks` new blocks and the child table for `runs` new runs
 * (or shrinks them after removals). Large tables are rebuilt under a read
 * lock instead of the write lock: rehashing millions of slots takes
 * ~100 ms, and matches keep reading the unchanged old tables meanwhile.
 * -1 on OOM (the old tables stay; inserts then grow them in place). */
int kvr_tree_fit(struct kvr_index *idx, uint32_t blocks, uint32_t runs);

/* tree_handles.c: engine hashes -> blocks. */
/* The block the owner calls e, KVR_NIL if none; *entry gets its entry. */
uint32_t kvr_tree_lookup(const struct kvr_index *idx, uint32_t owner, uint64_t e,
                         uint32_t *entry);
/* The block the owner calls e (fingerprint fp) through an exception
 * handle, KVR_NIL if none. */
uint32_t kvr_tree_exc_search(const struct kvr_index *idx, uint32_t owner, uint64_t e,
                             uint32_t fp);
static inline uint32_t kvr_tree_exc_find(const struct kvr_index *idx, uint32_t owner, uint64_t e,
                                         uint32_t fp)
{
    return idx->owners[owner].exc.len ? kvr_tree_exc_search(idx, owner, e, fp) : KVR_NIL;
}
/* Whether the owner holds block b under its creator hash (*entry: its
 * entry there, 0 if none). */
static inline bool kvr_tree_holds_plain(const struct kvr_index *idx, uint32_t owner, uint32_t b,
                                        uint32_t *entry)
{
    uint32_t en = kvr_tree_entry(idx, b, owner);
    *entry = en;
    return en && !(en & KVR_OSET_EXC);
}
/* Adds block b (its engine hash set), which the owner is about to hold
 * under that hash, to the engine table, unless the owner already calls
 * another block so: then returns that block and adds nothing. Inline: a
 * store adds every new block, and the call was a third of its cost.
 * kvr_tree_engine_put is the same for a table that has room (made once
 * for a chain of blocks, kvr_tree_engine_room) and an owner without
 * exception handles (which a chain's blocks do not change). */
static inline __attribute__((always_inline)) uint32_t kvr_tree_engine_put(struct kvr_index *idx,
                                                                       uint32_t owner, uint32_t b)
{
    uint64_t e = KVR_ENGINE(idx, b);
    uint32_t fp = kvr_engine_fp(e);
    kvr_keytab *t = &idx->engine;
    /* one walk: the owner's block under e if it has one, other blocks with
     * creator hash e, and the empty slot the new entry goes to */
    bool other = false;
    uint32_t i = kvr_keytab_home(t, fp), entry;
    for (; t->slot[i]; i = kvr_probe_next(i, t->cap)) {
        uint32_t x = t->slot[i];
        if (KVR_ENGINE(idx, x) != e)
            continue;
        if (kvr_tree_holds_plain(idx, owner, x, &entry))
            return x;
        other = true;
    }
    idx->engine_dups += other;
    kvr_keytab_put_at(t, b, i);
    return KVR_NIL;
}
/* Room in the engine table for n more blocks. */
static inline void kvr_tree_engine_room(struct kvr_index *idx, uint32_t n)
{
    if (kvr_keytab_room(&idx->engine, n, kvr_tree_engine_fp_of, idx) < 0)
        abort(); /* an ownership without its handle could never be removed */
}
static inline __attribute__((always_inline)) uint32_t kvr_tree_engine_add(struct kvr_index *idx,
                                                                       uint32_t owner, uint32_t b)
{
    uint64_t e = KVR_ENGINE(idx, b);
    uint32_t x = kvr_tree_exc_find(idx, owner, e, kvr_engine_fp(e));
    if (x)
        return x;
    kvr_tree_engine_room(idx, 1);
    return kvr_tree_engine_put(idx, owner, b);
}
/* Takes block b out of the engine table. */
static inline __attribute__((always_inline)) void kvr_tree_engine_del(struct kvr_index *idx,
                                                                   uint32_t b)
{
    kvr_keytab *t = &idx->engine;
    uint64_t e = KVR_ENGINE(idx, b);
    uint32_t fp = kvr_engine_fp(e);
    if (idx->engine_dups) {
        for (uint32_t i = kvr_keytab_home(t, fp); t->slot[i]; i = kvr_probe_next(i, t->cap)) {
            uint32_t x = t->slot[i];
            if (x != b && KVR_ENGINE(idx, x) == e) {
                idx->engine_dups--;
                break;
            }
        }
    }
    kvr_keytab_del(t, b, fp, kvr_tree_engine_fp_of, idx);
}

/* A copy of the engine table in a new array of cap slots (cap > 0), for
 * a resize; reads the index only. NULL on OOM. */
uint32_t *kvr_tree_engine_rebuild(const struct kvr_index *idx, uint32_t cap);

/* Exception handle: owner calls block b by e (!= the block's engine hash). */
int kvr_tree_exc_add(struct kvr_index *idx, uint32_t owner, uint32_t b, uint64_t e);
void kvr_tree_exc_del(struct kvr_index *idx, uint32_t owner, uint32_t b);

/* tree_runs.c: storage and structure. */
/* Makes the chunks follow the id allocators' tops. */
int kvr_tree_sync_chunks(struct kvr_index *idx);
/* A new block id, `prefer` when that one is free; its chunk exists.
 * KVR_NIL on OOM. */
uint32_t kvr_tree_block_new(struct kvr_index *idx, uint32_t prefer);
/* A new run id with every field 0; KVR_NIL on OOM. */
uint32_t kvr_tree_run_new(struct kvr_index *idx);
/* Links run r (parent, start and set filled in) under its parent block and
 * into its set's list. -1 on OOM (nothing linked). */
int kvr_tree_run_link(struct kvr_index *idx, uint32_t r);
/* Block `at` (inside its run, not its first block) starts a run of its
 * own. -1 on OOM (nothing changed). */
int kvr_tree_split(struct kvr_index *idx, uint32_t at);
/* Gives the owner `entry` (0: none) on blocks [b, b + k), which lie in one
 * run: splits the run where the range ends, changes the set of the range,
 * merges neighbours left with equal owners, reclaims the range's subtree
 * when no owner is left (a run's one owner leaving its end cuts the run in
 * place, without a split). Ownership counters follow. -1 on OOM (nothing
 * changed). */
int kvr_tree_set_range(struct kvr_index *idx, uint32_t b, uint32_t k, uint32_t owner,
                       uint32_t entry);
void kvr_tree_runs_free(struct kvr_index *idx);

#endif
