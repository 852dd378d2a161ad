/* Internal layout of the prefix index (include/kvrouter/index.h), shared by
 * tree.c (mutations), tree_match.c and tree_dump.c.
 *
 * Nodes are addressed by u32 ids (0 is the root), allocated lowest-id-first
 * so their chunks are released again after churn. Children are found
 * through one global open-addressing table keyed by (parent id, local hash);
 * sibling links exist for subtree reclamation and dumps. A node's owners are
 * an interned set (tree_sets.h). Each owner maps its engine hashes to nodes
 * (tree_handles.h); the node keeps the engine hash of the owner that created
 * it, and an owner whose engine hash differs keeps it in `exc`, so the usual
 * case (every engine hashes a prefix the same way) costs no extra bytes. */
#ifndef KVR_INDEX_TREE_INTERNAL_H
#define KVR_INDEX_TREE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "index/tree_handles.h"
#include "index/tree_ids.h"
#include "index/tree_sets.h"
#include "kvrouter/index.h"
#include "util/u64map.h"

#define KVR_ROOT 0u
#define KVR_NIL 0u /* no node: the root is never a child or a sibling */

typedef struct {
    uint64_t local;  /* router block hash */
    uint64_t engine; /* engine hash of the creating owner */
    uint32_t parent, first_child, next, prev;
    uint32_t set;    /* owner set; KVR_OSET_EMPTY marks a free node (and the root) */
    uint32_t tag;    /* kvr_chain_tag of the path from the root: locates it in the child table */
} kvr_node;

/* Nodes live in fixed chunks, allocated as the highest live id grows and
 * freed as it falls: no reallocation copies of a large array, and memory
 * follows the live node count closely (ids are handed out lowest first). */
#define KVR_NODE_CHUNK_BITS 13
#define KVR_NODE_CHUNK (1u << KVR_NODE_CHUNK_BITS)
#define KVR_NODE(idx, id) ((idx)->chunks[(id) >> KVR_NODE_CHUNK_BITS][(id) & (KVR_NODE_CHUNK - 1)])

typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t next_rank; /* next owner of the same worker, KVR_OWNER_NONE ends */
    uint64_t blocks;    /* ownerships of this owner */
    kvr_handles handles;
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
     * on (kvr_tree_child_fit) learns whether another writer came between. */
    uint64_t write_epoch;
    uint64_t uid; /* distinct per index created in this process (match ctx caches) */
    /* Matches blocked behind a writer. The lock prefers writers, so an
     * ingestion thread applying events back to back could otherwise starve
     * matches; a writer lets waiting readers in before its next event or
     * slice of events (kvr_index_write_yield). */
    atomic_uint readers_waiting;
    kvr_node **chunks; /* node id -> chunks[id >> KVR_NODE_CHUNK_BITS][id & mask] */
    uint32_t n_chunks, chunks_cap;
    kvr_ids node_ids;
    uint64_t *child; /* slot: tag << 32 | node id (see kvr_chain_tag); 0 = empty */
    uint32_t child_cap, child_len;
    kvr_osets sets;
    kvr_owner_rec *owners;
    kvr_owner_key *owner_keys; /* owners_cap entries */
    uint32_t n_owners, owners_cap;
    kvr_u64map by_worker; /* worker id -> first owner of it */
    kvr_u64map exc;       /* owner << 32 | node -> engine hash when != node->engine */
    uint64_t ownerships;
    uint32_t *stack;      /* reclamation scratch */
    size_t stack_cap;
};

/* The node array and the child table are probed at random: with 4 KiB pages
 * nearly every probe also misses the TLB. Ask for transparent huge pages on
 * the big ones (a hint; ignored where THP is off). */
static inline void kvr_hugepage_hint(void *p, size_t bytes)
{
    const uintptr_t huge = 2u << 20;
    if (bytes < 2 * huge)
        return;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t b = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (b > a)
        madvise((void *)a, b - a, MADV_HUGEPAGE);
}

#define KVR_ROOT_TAG 0x6b76723fu

/* Child table slots hold (tag << 32 | node id). A node's tag is a 32-bit
 * hash chained over the local hashes of its path, so the slot of block i of
 * a request is known before block i-1 is found: matches and stores prefetch
 * slots ahead instead of paying one dependent cache miss per block. The tag
 * also gives the home slot, so probing, deletion and resizing touch node
 * memory only to confirm a tag match (parent and local must both agree,
 * so tag collisions are harmless). */
static inline uint32_t kvr_chain_tag(uint32_t parent_tag, uint64_t local)
{
    return (uint32_t)(kvr_mix64(local + (uint64_t)parent_tag * 0x9E3779B97F4A7C15ULL) >> 32);
}

static inline const uint64_t *kvr_child_home(const struct kvr_index *idx, uint32_t tag)
{
    return &idx->child[kvr_fastrange(tag, idx->child_cap)];
}

/* Child of parent with this local hash and tag, KVR_NIL if none. */
static inline uint32_t kvr_tree_child_tagged(const struct kvr_index *idx, uint32_t parent,
                                             uint64_t local, uint32_t tag)
{
    if (!idx->child_cap)
        return KVR_NIL;
    for (uint32_t i = kvr_fastrange(tag, idx->child_cap);; i = kvr_probe_next(i, idx->child_cap)) {
        uint64_t s = idx->child[i];
        if (!s)
            return KVR_NIL;
        if ((uint32_t)(s >> 32) == tag) {
            const kvr_node *nd = &KVR_NODE(idx, (uint32_t)s);
            if (nd->local == local && nd->parent == parent)
                return (uint32_t)s;
        }
    }
}

static inline uint32_t kvr_tree_child(const struct kvr_index *idx, uint32_t parent, uint64_t local)
{
    return kvr_tree_child_tagged(idx, parent, local, kvr_chain_tag(KVR_NODE(idx, parent).tag, local));
}

/* Engine hash by which owner refers to node (entry: its set entry). */
static inline uint64_t kvr_tree_handle(const struct kvr_index *idx, uint32_t owner, uint32_t node,
                                       uint32_t entry)
{
    if (entry & KVR_OSET_EXC) {
        uint64_t v = 0;
        kvr_u64map_get(&idx->exc, (uint64_t)owner << 32 | node, &v);
        return v;
    }
    return KVR_NODE(idx, node).engine;
}

/* tree.c: takes `lock` for writing (letting queued matches in first). */
void kvr_tree_write_lock(struct kvr_index *idx);

/* tree_nodes.c: node chunks and the child table. */
/* Called by a writer before an event changes anything: sizes the child
 * table for `more` new nodes (or shrinks it after removals). A large table
 * is rebuilt under a read lock instead of the write lock: rehashing
 * millions of slots takes ~100 ms, and matches keep reading the unchanged
 * old table meanwhile. -1 on OOM (the old table stays; inserts then grow
 * it inline). */
int kvr_tree_child_fit(struct kvr_index *idx, uint32_t more);
/* Makes the chunks follow the id allocator's top (after kvr_ids_get/put). */
int kvr_tree_sync_nodes(struct kvr_index *idx);
/* A new node under parent with no owners yet: the caller gives it one.
 * KVR_NIL on OOM. */
uint32_t kvr_tree_node_new(struct kvr_index *idx, uint32_t parent, uint64_t local,
                           uint64_t engine);
void kvr_tree_node_unlink(struct kvr_index *idx, uint32_t id);
/* Frees a node already unlinked (or whose parent is being freed too). */
void kvr_tree_node_release(struct kvr_index *idx, uint32_t id);

#endif
