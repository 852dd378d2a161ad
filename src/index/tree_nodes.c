/* Node storage (chunks addressed by id) and the child table of the prefix
 * index; see tree_internal.h for the layout. */
#include <stdlib.h>

#include "index/tree_internal.h"

#define CHILD_MIN 16u

/* Chunks cover ids below the allocator's top (plus one spare chunk, so a
 * count hovering at a chunk boundary does not allocate and free repeatedly;
 * an index holding only the root keeps just the first chunk). */
int kvr_tree_sync_nodes(kvr_index *idx)
{
    uint32_t top = idx->node_ids.top;
    uint32_t need = (top + KVR_NODE_CHUNK - 1) >> KVR_NODE_CHUNK_BITS;
    while (idx->n_chunks < need) {
        if (idx->n_chunks == idx->chunks_cap) {
            uint32_t ncap = idx->chunks_cap ? idx->chunks_cap * 2 : 8;
            kvr_node **nc = realloc(idx->chunks, (size_t)ncap * sizeof *nc);
            if (!nc)
                return -1;
            idx->chunks = nc;
            idx->chunks_cap = ncap;
        }
        kvr_node *c = malloc((size_t)KVR_NODE_CHUNK * sizeof *c);
        if (!c)
            return -1;
        idx->chunks[idx->n_chunks++] = c;
    }
    uint32_t keep = idx->node_ids.count <= 1 ? 1 : need + 1;
    while (idx->n_chunks > keep)
        free(idx->chunks[--idx->n_chunks]);
    uint32_t cap = idx->chunks_cap;
    while (cap > 8 && idx->n_chunks * 4 <= cap)
        cap /= 2;
    if (cap != idx->chunks_cap) {
        kvr_node **nc = realloc(idx->chunks, (size_t)cap * sizeof *nc);
        if (nc) {
            idx->chunks = nc;
            idx->chunks_cap = cap;
        }
    }
    return 0;
}

static void child_place(uint64_t *t, uint32_t cap, uint64_t slot)
{
    uint32_t i = kvr_fastrange((uint32_t)(slot >> 32), cap);
    while (t[i])
        i = kvr_probe_next(i, cap);
    t[i] = slot;
}

/* A copy of table (cap slots) with new_cap slots; NULL on OOM. Reads the
 * old table only, so it can run while matches read it too. */
static uint64_t *child_rehash(const uint64_t *table, uint32_t cap, uint32_t new_cap)
{
    uint64_t *t = calloc(new_cap, sizeof *t);
    if (!t)
        return NULL;
    kvr_hugepage_hint(t, (size_t)new_cap * sizeof *t);
    for (uint32_t i = 0; i < cap; i++)
        if (table[i])
            child_place(t, new_cap, table[i]);
    return t;
}

static void child_install(kvr_index *idx, uint64_t *t, uint32_t cap)
{
    free(idx->child);
    idx->child = t;
    idx->child_cap = cap;
}

static int child_resize(kvr_index *idx, uint32_t cap)
{
    uint64_t *t = NULL;
    if (cap && !(t = child_rehash(idx->child, idx->child_cap, cap)))
        return -1;
    child_install(idx, t, cap);
    return 0;
}

/* kvr_tree_child_fit resizes tables up to this many slots (~0.5 ms to
 * rehash) under the write lock; larger ones under a read lock. */
#define CHILD_INLINE_MAX (1u << 16)

static bool child_overfull(uint64_t len, uint32_t cap) { return len * 5 > (uint64_t)cap * 4; }
static bool child_sparse(uint64_t len, uint32_t cap) { return cap > CHILD_MIN && len * 8 < cap; }

int kvr_tree_child_fit(kvr_index *idx, uint32_t more)
{
    uint64_t need = (uint64_t)idx->child_len + more;
    uint32_t cap = idx->child_cap;
    if (child_overfull(need, cap)) {
        for (cap = cap ? cap : CHILD_MIN; child_overfull(need, cap); cap *= 2)
            if (cap >= 1u << 31)
                return -1;
    } else {
        while (child_sparse(idx->child_len, cap) && !child_overfull(need, cap / 2))
            cap /= 2;
    }
    if (cap == idx->child_cap)
        return 0;
    if (idx->child_cap <= CHILD_INLINE_MAX && cap <= CHILD_INLINE_MAX)
        return child_resize(idx, cap);
    /* Nothing of this event is applied yet. A read lock keeps writers off
     * the old table while matches keep using it; if another writer got the
     * lock in the handover, the copy may be stale: drop it (inserts grow
     * the table inline if they must; the next event tries again). */
    uint64_t epoch = idx->write_epoch;
    pthread_rwlock_unlock(&idx->lock);
    pthread_rwlock_rdlock(&idx->lock);
    uint64_t *t = child_rehash(idx->child, idx->child_cap, cap);
    pthread_rwlock_unlock(&idx->lock);
    kvr_tree_write_lock(idx);
    if (idx->write_epoch != epoch + 1) {
        free(t);
        return 0;
    }
    if (!t)
        return -1;
    child_install(idx, t, cap);
    return 0;
}

static int child_insert(kvr_index *idx, uint32_t id)
{
    /* max load 4/5: tags make long probe runs cheap (no node access per
     * probe) */
    if (child_overfull((uint64_t)idx->child_len + 1, idx->child_cap) &&
        child_resize(idx, idx->child_cap ? idx->child_cap * 2 : CHILD_MIN) < 0)
        return -1;
    const kvr_node *nd = &KVR_NODE(idx, id);
    child_place(idx->child, idx->child_cap, (uint64_t)nd->tag << 32 | id);
    idx->child_len++;
    return 0;
}

static void child_delete(kvr_index *idx, uint32_t id)
{
    uint32_t cap = idx->child_cap;
    const kvr_node *nd = &KVR_NODE(idx, id);
    uint64_t slot = (uint64_t)nd->tag << 32 | id;
    uint32_t i = kvr_fastrange(nd->tag, cap);
    while (idx->child[i] != slot)
        i = kvr_probe_next(i, cap);
    uint32_t hole = i;
    for (uint32_t j = kvr_probe_next(i, cap); idx->child[j]; j = kvr_probe_next(j, cap)) {
        uint32_t h = kvr_fastrange((uint32_t)(idx->child[j] >> 32), cap);
        if (!kvr_probe_stays(hole, j, h)) {
            idx->child[hole] = idx->child[j];
            hole = j;
        }
    }
    idx->child[hole] = 0;
    idx->child_len--;
    /* a sparse table shrinks at the next event's kvr_tree_child_fit; an
     * empty one goes now, so a drained index is back to its baseline */
    if (idx->child_len == 0)
        child_resize(idx, 0);
}

/* A new node under parent with no owners yet: the caller gives it one. */
uint32_t kvr_tree_node_new(kvr_index *idx, uint32_t parent, uint64_t local, uint64_t engine)
{
    uint32_t id = kvr_ids_get(&idx->node_ids);
    if (id == UINT32_MAX)
        return KVR_NIL;
    if (kvr_tree_sync_nodes(idx) < 0) {
        kvr_ids_put(&idx->node_ids, id);
        return KVR_NIL;
    }
    kvr_node *nd = &KVR_NODE(idx, id);
    *nd = (kvr_node){.local = local,
                     .engine = engine,
                     .parent = parent,
                     .tag = kvr_chain_tag(KVR_NODE(idx, parent).tag, local)};
    if (child_insert(idx, id) < 0) {
        kvr_ids_put(&idx->node_ids, id);
        kvr_tree_sync_nodes(idx);
        return KVR_NIL;
    }
    kvr_node *p = &KVR_NODE(idx, parent);
    nd->next = p->first_child;
    if (p->first_child)
        KVR_NODE(idx, p->first_child).prev = id;
    p->first_child = id;
    return id;
}

void kvr_tree_node_unlink(kvr_index *idx, uint32_t id)
{
    kvr_node *nd = &KVR_NODE(idx, id);
    if (nd->prev)
        KVR_NODE(idx, nd->prev).next = nd->next;
    else
        KVR_NODE(idx, nd->parent).first_child = nd->next;
    if (nd->next)
        KVR_NODE(idx, nd->next).prev = nd->prev;
}

/* Frees a node whose owners are gone: an evicted leaf, or a member of a
 * subtree being reclaimed as a whole (then its children go too). */
void kvr_tree_node_release(kvr_index *idx, uint32_t id)
{
    child_delete(idx, id);
    KVR_NODE(idx, id).set = KVR_OSET_EMPTY;
    kvr_ids_put(&idx->node_ids, id);
    kvr_tree_sync_nodes(idx);
}

