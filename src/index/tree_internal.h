/* Internal layout of the prefix index (include/kvrouter/index.h), shared by
 * tree.c (mutations), tree_match.c and tree_dump.c.
 *
 * Nodes live in one array addressed by u32 ids (0 is the root), allocated
 * lowest-id-first so the array shrinks back after churn. Children are found
 * through one global open-addressing table keyed by (parent id, local hash);
 * sibling links exist for subtree reclamation and dumps. A node's owners are
 * an interned set (tree_sets.h). Each owner maps its engine hashes to nodes
 * (tree_handles.h); the node keeps the engine hash of the owner that created
 * it, and an owner whose engine hash differs keeps it in `exc`, so the usual
 * case (every engine hashes a prefix the same way) costs no extra bytes. */
#ifndef KVR_INDEX_TREE_INTERNAL_H
#define KVR_INDEX_TREE_INTERNAL_H

#include <pthread.h>

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
    uint32_t pad;
} kvr_node;

typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t next_rank; /* next owner of the same worker, KVR_OWNER_NONE ends */
    uint64_t blocks;    /* ownerships of this owner */
    kvr_handles handles;
} kvr_owner_rec;

struct kvr_index {
    pthread_rwlock_t lock;
    kvr_node *nodes;
    uint32_t nodes_cap;
    kvr_ids node_ids;
    uint64_t *child; /* slot: tag << 32 | node id (see kvr_child_tag); 0 = empty */
    uint32_t child_cap, child_len;
    kvr_osets sets;
    kvr_owner_rec *owners;
    uint32_t n_owners, owners_cap;
    kvr_u64map by_worker; /* worker id -> first owner of it */
    kvr_u64map exc;       /* owner << 32 | node -> engine hash when != node->engine */
    uint64_t ownerships;
    uint32_t *stack;      /* reclamation scratch */
    size_t stack_cap;
};

/* Child table slots hold (tag << 32 | node id) where tag is the high half of
 * the (parent, local) hash; the home slot is derived from the tag too, so
 * probing, deletion and resizing never touch node memory except to confirm
 * a tag match. */
static inline uint32_t kvr_child_tag(uint32_t parent, uint64_t local)
{
    return (uint32_t)(kvr_mix64(local ^ ((uint64_t)parent * 0x9E3779B97F4A7C15ULL)) >> 32);
}

/* Child of parent with this local hash, KVR_NIL if none. */
static inline uint32_t kvr_tree_child(const struct kvr_index *idx, uint32_t parent, uint64_t local)
{
    if (!idx->child_cap)
        return KVR_NIL;
    uint32_t tag = kvr_child_tag(parent, local);
    uint32_t mask = idx->child_cap - 1;
    for (uint32_t i = tag & mask;; i = (i + 1) & mask) {
        uint64_t s = idx->child[i];
        if (!s)
            return KVR_NIL;
        if ((uint32_t)(s >> 32) == tag) {
            const kvr_node *nd = &idx->nodes[(uint32_t)s];
            if (nd->local == local && nd->parent == parent)
                return (uint32_t)s;
        }
    }
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
    return idx->nodes[node].engine;
}

#endif
