/* Prefix index mutations (SPEC §6): owners, store, remove, clear, subtree
 * reclamation, stats. Layout in tree_internal.h. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index/tree_internal.h"

#define STACK_MIN 64u

static void drop_ownership_count(kvr_index *idx, uint32_t owner)
{
    idx->ownerships--;
    idx->owners[owner].blocks--;
}

/* Node `top` lost its last owner: it and its whole subtree are unreachable
 * by any match. Free them, dropping the handles other owners hold into the
 * subtree, so nothing leaks and a later store under such a handle is a
 * parent_not_found like any unknown parent. */
static void reclaim(kvr_index *idx, uint32_t top)
{
    kvr_tree_node_unlink(idx, top);
    if (!KVR_NODE(idx, top).first_child) {
        kvr_tree_node_release(idx, top);
        return;
    }
    size_t sp = 0;
    idx->stack[sp++] = top;
    while (sp) {
        uint32_t x = idx->stack[--sp];
        for (uint32_t c = KVR_NODE(idx, x).first_child; c; c = KVR_NODE(idx, c).next) {
            if (sp == idx->stack_cap) {
                uint32_t *ns = realloc(idx->stack, idx->stack_cap * 2 * sizeof *ns);
                if (!ns)
                    abort(); /* cannot leave a half-freed subtree behind */
                idx->stack = ns;
                idx->stack_cap *= 2;
            }
            idx->stack[sp++] = c;
        }
        uint32_t set = KVR_NODE(idx, x).set;
        if (set != KVR_OSET_EMPTY) {
            const kvr_oset *o = kvr_osets_get(&idx->sets, set);
            const uint32_t *e = kvr_oset_entries(o);
            for (uint32_t i = 0; i < o->len; i++) {
                uint32_t owner = kvr_oset_owner(e[i]);
                uint64_t h = kvr_tree_handle(idx, owner, x, e[i]);
                kvr_handles_del(&idx->owners[owner].handles, h, x);
                if (e[i] & KVR_OSET_EXC)
                    kvr_u64map_del(&idx->exc, (uint64_t)owner << 32 | x, NULL);
                drop_ownership_count(idx, owner);
            }
            kvr_osets_unref(&idx->sets, set);
        }
        kvr_tree_node_release(idx, x);
    }
    if (idx->stack_cap > STACK_MIN) {
        uint32_t *ns = realloc(idx->stack, STACK_MIN * sizeof *ns);
        if (ns) {
            idx->stack = ns;
            idx->stack_cap = STACK_MIN;
        }
    }
}

/* Replaces the owner's entry of node (new_entry 0: the owner leaves it).
 * Returns false on OOM (nothing changed). */
static bool set_entry(kvr_index *idx, uint32_t node, uint32_t owner, uint32_t new_entry)
{
    uint32_t s = kvr_osets_apply(&idx->sets, KVR_NODE(idx, node).set, owner, new_entry);
    if (s == UINT32_MAX)
        return false;
    KVR_NODE(idx, node).set = s;
    return true;
}

typedef struct {
    const kvr_index *idx;
    uint32_t owner;
} handle_ctx;

/* Handle maps keep only a fingerprint: confirm that node is what the owner
 * calls key. */
static bool handle_is(const void *p, uint32_t node, uint64_t key)
{
    const handle_ctx *c = p;
    uint32_t entry = kvr_osets_find(&c->idx->sets, KVR_NODE(c->idx, node).set, c->owner);
    return entry && kvr_tree_handle(c->idx, c->owner, node, entry) == key;
}

static uint32_t handle_get(const kvr_index *idx, uint32_t owner, uint64_t key)
{
    handle_ctx c = {idx, owner};
    return kvr_handles_get(&idx->owners[owner].handles, key, handle_is, &c);
}

/* The owner leaves node entirely (handle h, entry its current entry). */
static void detach(kvr_index *idx, uint32_t owner, uint32_t node, uint64_t h, uint32_t entry)
{
    kvr_handles_del(&idx->owners[owner].handles, h, node);
    if (entry & KVR_OSET_EXC)
        kvr_u64map_del(&idx->exc, (uint64_t)owner << 32 | node, NULL);
    drop_ownership_count(idx, owner);
    if (!set_entry(idx, node, owner, 0))
        abort(); /* removing an entry only needs memory when creating the smaller set */
    if (KVR_NODE(idx, node).set == KVR_OSET_EMPTY)
        reclaim(idx, node);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Exclusive lock for one event or one slice of whole events. If matches
 * are queued behind the previous holder, give them the lock first (bounded,
 * so a descheduled reader cannot stall ingestion). */
void kvr_tree_write_lock(kvr_index *idx)
{
    if (atomic_load_explicit(&idx->readers_waiting, memory_order_relaxed)) {
        uint64_t start = mono_ns();
        while (atomic_load(&idx->readers_waiting) && mono_ns() - start < 200000)
            sched_yield();
    }
    pthread_rwlock_wrlock(&idx->lock);
    idx->write_epoch++;
}

void kvr_index_write_begin(kvr_index *idx) { kvr_tree_write_lock(idx); }

void kvr_index_write_end(kvr_index *idx) { pthread_rwlock_unlock(&idx->lock); }

/* Each handoff costs the writer a wakeup, the readers' turn and a cold
 * cache; handing over after every event (~0.3 us each alone) made the
 * writer ~30x slower than alone. A 20 us slice amortizes a handoff over
 * tens of events while a waiting match still gets in after 20 us plus the
 * event in progress. */
#define WRITE_SLICE_NS 20000u

bool kvr_index_write_yield_due(kvr_index *idx, uint64_t slice_start_ns)
{
    return atomic_load_explicit(&idx->readers_waiting, memory_order_relaxed) &&
           mono_ns() - slice_start_ns >= WRITE_SLICE_NS;
}

uint64_t kvr_index_now_ns(void) { return mono_ns(); }

bool kvr_index_write_yield(kvr_index *idx, uint64_t *slice_start_ns)
{
    if (!kvr_index_write_yield_due(idx, *slice_start_ns))
        return false;
    pthread_rwlock_unlock(&idx->lock);
    kvr_tree_write_lock(idx);
    *slice_start_ns = mono_ns();
    return true;
}

/* ---- lifecycle and owners ---- */

kvr_index *kvr_index_create(void)
{
    static atomic_uint_fast64_t next_uid = 1;
    kvr_index *idx = calloc(1, sizeof *idx);
    if (!idx)
        return NULL;
    idx->uid = atomic_fetch_add(&next_uid, 1);
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    /* matches must not starve event ingestion, and vice versa each call is short */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&idx->lock, &attr);
    atomic_init(&idx->readers_waiting, 0);
    pthread_rwlockattr_destroy(&attr);
    kvr_ids_init(&idx->node_ids);
    kvr_u64map_init(&idx->by_worker);
    kvr_u64map_init(&idx->exc);
    idx->stack = malloc(STACK_MIN * sizeof *idx->stack);
    idx->stack_cap = STACK_MIN;
    if (!idx->stack || kvr_osets_init(&idx->sets) < 0 ||
        kvr_ids_get(&idx->node_ids) != KVR_ROOT || kvr_tree_sync_nodes(idx) < 0) {
        kvr_index_destroy(idx);
        return NULL;
    }
    memset(&KVR_NODE(idx, KVR_ROOT), 0, sizeof(kvr_node));
    KVR_NODE(idx, KVR_ROOT).tag = KVR_ROOT_TAG;
    return idx;
}

void kvr_index_destroy(kvr_index *idx)
{
    if (!idx)
        return;
    for (uint32_t i = 0; i < idx->n_owners; i++)
        kvr_handles_free(&idx->owners[i].handles);
    free(idx->owners);
    free(idx->owner_keys);
    for (uint32_t c = 0; c < idx->n_chunks; c++)
        free(idx->chunks[c]);
    free(idx->chunks);
    free(idx->child);
    free(idx->stack);
    kvr_ids_free(&idx->node_ids);
    kvr_osets_free(&idx->sets);
    kvr_u64map_free(&idx->by_worker);
    kvr_u64map_free(&idx->exc);
    pthread_rwlock_destroy(&idx->lock);
    free(idx);
}

static kvr_owner find_owner_locked(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank)
{
    uint64_t first;
    if (!kvr_u64map_get(&idx->by_worker, worker_id, &first))
        return KVR_OWNER_NONE;
    for (uint32_t o = (uint32_t)first; o != KVR_OWNER_NONE; o = idx->owners[o].next_rank)
        if (idx->owners[o].dp_rank == dp_rank)
            return o;
    return KVR_OWNER_NONE;
}

kvr_owner kvr_index_find_owner(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank)
{
    pthread_rwlock_rdlock(&idx->lock);
    kvr_owner o = find_owner_locked(idx, worker_id, dp_rank);
    pthread_rwlock_unlock(&idx->lock);
    return o;
}

kvr_owner kvr_index_owner(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank)
{
    kvr_tree_write_lock(idx);
    kvr_owner o = find_owner_locked(idx, worker_id, dp_rank);
    if (o != KVR_OWNER_NONE || idx->n_owners > KVR_OSET_MAX_OWNER)
        goto out;
    if (idx->n_owners == idx->owners_cap) {
        uint32_t ncap = idx->owners_cap ? idx->owners_cap * 2 : 16;
        kvr_owner_rec *n = realloc(idx->owners, (size_t)ncap * sizeof *n);
        if (!n)
            goto out;
        idx->owners = n;
        kvr_owner_key *k = realloc(idx->owner_keys, (size_t)ncap * sizeof *k);
        if (!k)
            goto out;
        idx->owner_keys = k;
        idx->owners_cap = ncap;
    }
    if (kvr_osets_reserve(&idx->sets, idx->n_owners + 1) < 0)
        goto out;
    uint64_t first;
    bool known = kvr_u64map_get(&idx->by_worker, worker_id, &first);
    uint32_t id = idx->n_owners;
    if (kvr_u64map_put(&idx->by_worker, worker_id, id) < 0)
        goto out;
    kvr_owner_rec *r = &idx->owners[id];
    memset(r, 0, sizeof *r);
    r->worker_id = worker_id;
    r->dp_rank = dp_rank;
    r->next_rank = known ? (uint32_t)first : KVR_OWNER_NONE;
    idx->owner_keys[id] = (kvr_owner_key){worker_id, dp_rank};
    kvr_handles_init(&r->handles);
    idx->n_owners++;
    o = id;
out:
    pthread_rwlock_unlock(&idx->lock);
    return o;
}

/* ---- events ---- */

#define STORE_AHEAD 8
#define STORE_RING 16 /* power of two > STORE_AHEAD */

/* Applies block (e, l) of a store below cur; returns the node now holding
 * it, or KVR_NIL when the chain cannot continue. */
static uint32_t store_block(kvr_index *idx, uint32_t owner, uint32_t bit, uint32_t cur,
                            uint64_t e, uint64_t l, uint32_t tag, bool *fresh)
{
    kvr_handles *hm = &idx->owners[owner].handles;
    /* a node created by this store has no children yet: skip the lookup */
    uint32_t child = *fresh ? KVR_NIL : kvr_tree_child_tagged(idx, cur, l, tag);
    uint32_t old = handle_get(idx, owner, e);
    bool mapped = old != KVR_HANDLE_NONE && old == child;
    if (old != KVR_HANDLE_NONE && old != child) {
        /* The engine reuses a hash for other content: the newest store wins.
         * Leaving the old node can reclaim a subtree holding cur (when the
         * hash was an ancestor's): then the rest of the chain has no parent. */
        detach(idx, owner, old, e, kvr_osets_find(&idx->sets, KVR_NODE(idx, old).set, owner));
        if (cur != KVR_ROOT && !kvr_ids_used(&idx->node_ids, cur))
            return KVR_NIL;
        if (cur != KVR_ROOT && KVR_NODE(idx, cur).set == KVR_OSET_EMPTY)
            return KVR_NIL;
        child = kvr_tree_child(idx, cur, l);
    }
    bool created = false;
    if (child == KVR_NIL) {
        child = kvr_tree_node_new(idx, cur, l, e);
        if (child == KVR_NIL)
            return KVR_NIL;
        created = true;
    }
    *fresh = created;
    uint32_t entry = created ? 0 : kvr_osets_find(&idx->sets, KVR_NODE(idx, child).set, owner);
    uint32_t tiers = entry & KVR_OSET_TIERS;
    bool was_exc = entry & KVR_OSET_EXC;
    if (entry && !mapped) {
        /* same block under a new engine hash: the new one replaces it */
        kvr_handles_del(hm, kvr_tree_handle(idx, owner, child, entry), child);
    }
    bool exc = e != KVR_NODE(idx, child).engine;
    uint64_t exc_key = (uint64_t)owner << 32 | child;
    if ((exc && kvr_u64map_put(&idx->exc, exc_key, e) < 0) ||
        !set_entry(idx, child, owner, kvr_oset_entry(owner, tiers | bit, exc))) {
        if (created) {
            kvr_tree_node_unlink(idx, child);
            kvr_tree_node_release(idx, child);
        }
        return KVR_NIL; /* out of memory: stop the chain here */
    }
    if (!mapped && kvr_handles_add(hm, e, child) < 0)
        abort(); /* an ownership without its handle could never be removed */
    if (was_exc && !exc)
        kvr_u64map_del(&idx->exc, exc_key, NULL);
    if (!entry) {
        idx->ownerships++;
        idx->owners[owner].blocks++;
    }
    return child;
}

kvr_drop_reason kvr_index_store_locked(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                                       bool has_parent, uint64_t parent,
                                       const uint64_t *engine_hashes,
                                       const uint64_t *local_hashes, size_t n)
{
    if ((unsigned)tier >= KVR_TIER_COUNT)
        return KVR_DROP_UNKNOWN_TIER;
    if (owner >= idx->n_owners)
        return KVR_DROP_PARENT_NOT_FOUND;
    kvr_tree_child_fit(idx, n < UINT32_MAX ? (uint32_t)n : UINT32_MAX);
    kvr_drop_reason r = KVR_DROP_NONE;
    uint32_t cur = KVR_ROOT;
    if (has_parent) {
        cur = handle_get(idx, owner, parent);
        if (cur == KVR_HANDLE_NONE)
            return KVR_DROP_PARENT_NOT_FOUND;
    }
    /* Prefetch the handle and child-table slots of the blocks ahead: the
     * slots depend only on the event, not on the blocks before. */
    const kvr_handles *hm = &idx->owners[owner].handles;
    uint32_t tags[STORE_RING];
    uint32_t tag = KVR_NODE(idx, cur).tag;
    size_t ahead = 0;
    bool fresh = false;
    for (size_t i = 0; i < n; i++) {
        for (; ahead < n && ahead <= i + STORE_AHEAD; ahead++) {
            tag = kvr_chain_tag(tag, local_hashes[ahead]);
            tags[ahead % STORE_RING] = tag;
            __builtin_prefetch(kvr_child_home(idx, tag));
            kvr_handles_prefetch(hm, engine_hashes[ahead]);
        }
        cur = store_block(idx, owner, 1u << tier, cur, engine_hashes[i], local_hashes[i],
                          tags[i % STORE_RING], &fresh);
        if (cur == KVR_NIL) {
            r = KVR_DROP_PARENT_NOT_FOUND;
            break;
        }
    }
    return r;
}

kvr_drop_reason kvr_index_store(kvr_index *idx, kvr_owner owner, kvr_tier tier, bool has_parent,
                                uint64_t parent, const uint64_t *engine_hashes,
                                const uint64_t *local_hashes, size_t n)
{
    if ((unsigned)tier >= KVR_TIER_COUNT)
        return KVR_DROP_UNKNOWN_TIER;
    kvr_tree_write_lock(idx);
    kvr_drop_reason r = kvr_index_store_locked(idx, owner, tier, has_parent, parent,
                                               engine_hashes, local_hashes, n);
    pthread_rwlock_unlock(&idx->lock);
    return r;
}

size_t kvr_index_remove_locked(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                               const uint64_t *engine_hashes, size_t n)
{
    if ((unsigned)tier >= KVR_TIER_COUNT || owner >= idx->n_owners)
        return n;
    kvr_tree_child_fit(idx, 0);
    size_t unknown = 0;
    uint32_t bit = 1u << tier;
    /* Removals are three dependent misses per block (handle slot, node,
     * child-table slot and parent): prefetch them in stages ahead. */
    const kvr_handles *hm = &idx->owners[owner].handles;
    uint32_t hint[STORE_RING] = {0};
    for (size_t i = 0; i < n; i++) {
        if (i + 8 < n)
            kvr_handles_prefetch(hm, engine_hashes[i + 8]);
        if (i + 4 < n) {
            uint32_t c = kvr_handles_peek(hm, engine_hashes[i + 4]);
            hint[(i + 4) % STORE_RING] = c;
            if (c && kvr_ids_used(&idx->node_ids, c))
                __builtin_prefetch(&KVR_NODE(idx, c));
        }
        if (i + 2 < n) {
            uint32_t c = hint[(i + 2) % STORE_RING];
            if (c && kvr_ids_used(&idx->node_ids, c)) {
                const kvr_node *nd = &KVR_NODE(idx, c);
                __builtin_prefetch(kvr_child_home(idx, nd->tag));
                if (kvr_ids_used(&idx->node_ids, nd->parent))
                    __builtin_prefetch(&KVR_NODE(idx, nd->parent));
            }
        }
        uint32_t node = handle_get(idx, owner, engine_hashes[i]);
        uint32_t entry =
            node == KVR_HANDLE_NONE ? 0 : kvr_osets_find(&idx->sets, KVR_NODE(idx, node).set, owner);
        if (!(entry & bit)) { /* unknown handle, or not held on this tier */
            unknown++;
            continue;
        }
        if ((entry & KVR_OSET_TIERS) == bit)
            detach(idx, owner, node, engine_hashes[i], entry);
        else if (!set_entry(idx, node, owner, entry & ~bit))
            unknown++;
    }
    return unknown;
}

size_t kvr_index_remove(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                        const uint64_t *engine_hashes, size_t n)
{
    if ((unsigned)tier >= KVR_TIER_COUNT)
        return n;
    kvr_tree_write_lock(idx);
    size_t unknown = kvr_index_remove_locked(idx, owner, tier, engine_hashes, n);
    pthread_rwlock_unlock(&idx->lock);
    return unknown;
}

void kvr_index_clear_owner_locked(kvr_index *idx, kvr_owner owner)
{
    if (owner >= idx->n_owners)
        return;
    kvr_tree_child_fit(idx, 0);
    kvr_handles *hm = &idx->owners[owner].handles;
    size_t n = kvr_handles_len(hm), k = 0, it = 0;
    uint32_t *nodes = malloc((n ? n : 1) * sizeof *nodes);
    uint32_t val;
    if (!nodes)
        abort(); /* a clear that silently kept state would route to a dead cache */
    while (kvr_handles_next(hm, &it, &val))
        nodes[k++] = val;
    /* Handles go first, so reclamation below finds none of this owner's. */
    kvr_handles_free(hm);
    for (size_t i = 0; i < k; i++) {
        /* the nodes are known up front: prefetch each, then its child slot
         * and parent, a few steps before it is released */
        if (i + 8 < k && kvr_ids_used(&idx->node_ids, nodes[i + 8]))
            __builtin_prefetch(&KVR_NODE(idx, nodes[i + 8]));
        if (i + 4 < k && kvr_ids_used(&idx->node_ids, nodes[i + 4])) {
            const kvr_node *nd = &KVR_NODE(idx, nodes[i + 4]);
            __builtin_prefetch(kvr_child_home(idx, nd->tag));
            if (kvr_ids_used(&idx->node_ids, nd->parent))
                __builtin_prefetch(&KVR_NODE(idx, nd->parent));
        }
        uint32_t x = nodes[i];
        /* an earlier reclamation may have freed it with its subtree (no
         * allocation happens here, so a freed id is not reused meanwhile) */
        if (!kvr_ids_used(&idx->node_ids, x) || KVR_NODE(idx, x).set == KVR_OSET_EMPTY)
            continue;
        uint32_t entry = kvr_osets_find(&idx->sets, KVR_NODE(idx, x).set, owner);
        if (!entry)
            continue;
        if (entry & KVR_OSET_EXC)
            kvr_u64map_del(&idx->exc, (uint64_t)owner << 32 | x, NULL);
        drop_ownership_count(idx, owner);
        if (!set_entry(idx, x, owner, 0))
            abort();
        if (KVR_NODE(idx, x).set == KVR_OSET_EMPTY)
            reclaim(idx, x);
    }
    free(nodes);
}

void kvr_index_clear_owner(kvr_index *idx, kvr_owner owner)
{
    kvr_tree_write_lock(idx);
    kvr_index_clear_owner_locked(idx, owner);
    pthread_rwlock_unlock(&idx->lock);
}

void kvr_index_stats_get(kvr_index *idx, kvr_index_stats *out)
{
    pthread_rwlock_rdlock(&idx->lock);
    size_t bytes = sizeof *idx + (size_t)idx->n_chunks * KVR_NODE_CHUNK * sizeof(kvr_node) +
                   (size_t)idx->chunks_cap * sizeof(kvr_node *) +
                   kvr_ids_bytes(&idx->node_ids) + (size_t)idx->child_cap * sizeof(uint64_t) +
                   kvr_osets_bytes(&idx->sets) + (size_t)idx->owners_cap * (sizeof(kvr_owner_rec) + sizeof(kvr_owner_key)) +
                   kvr_u64map_bytes(&idx->by_worker) + kvr_u64map_bytes(&idx->exc) +
                   idx->stack_cap * sizeof(uint32_t);
    for (uint32_t i = 0; i < idx->n_owners; i++)
        bytes += kvr_handles_bytes(&idx->owners[i].handles);
    out->nodes = idx->node_ids.count - 1;
    out->ownerships = idx->ownerships;
    out->owners = idx->n_owners;
    out->bytes = bytes;
    pthread_rwlock_unlock(&idx->lock);
}
