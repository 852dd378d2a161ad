/* Index events (SPEC §6): store, remove and clear for one owner.
 *
 * A store walks its chain from the parent. Where the blocks exist, the
 * owner joins a whole stretch of a run at once (one split, one set change,
 * no table work when its engine hashes are the blocks' own); where they do
 * not, new blocks take the next ids and extend the chain's run in place.
 * A removal of neighbouring blocks of one run (an engine evicting a chain
 * leaf first) is applied as one range. Anything unusual (an owner naming
 * blocks by other engine hashes than their creator, a hash reused for
 * other content) takes the general path one block at a time, with the
 * semantics of the reference model (tests/index/tree_model.h). */
#include <stdlib.h>

#include "index/tree_internal.h"

static bool singleton(const kvr_index *idx, uint32_t set, uint32_t entry)
{
    const kvr_oset *o = kvr_osets_get(&idx->sets, set);
    return o->len == 1 && kvr_oset_entries(o)[0] == entry;
}

/* Block b (no engine table entry yet) in a run of its own under p, held
 * by the owner with entry. false on OOM (nothing kept). */
static bool new_run(kvr_index *idx, uint32_t owner, uint32_t entry, uint32_t p, uint32_t b)
{
    uint32_t set = kvr_osets_apply(&idx->sets, KVR_OSET_EMPTY, owner, entry);
    if (set == UINT32_MAX)
        return false;
    uint32_t r = kvr_tree_run_new(idx);
    if (r) {
        kvr_run *R = &KVR_RUN(idx, r);
        R->start = b;
        R->len = 1;
        R->parent = p;
        R->set = set;
        KVR_RUNOF(idx, b) = r;
        if (kvr_tree_run_link(idx, r) == 0)
            return true;
        R->len = 0;
        kvr_ids_put(&idx->run_ids, r);
    }
    kvr_osets_unref(&idx->sets, set);
    return false;
}

/* New blocks for the local hashes l[0..n) as a chain under *cur, held by
 * the owner with `entry` under their own engine hashes e. They take the
 * next ids where free and extend *cur's run when the owner alone holds it
 * with this entry and nothing hangs below. Stops before a block whose
 * engine hash the owner already holds (the caller applies that one alone)
 * or on OOM (*oom). Returns how many were added; *cur is the last. */
static size_t append(kvr_index *idx, uint32_t owner, uint32_t entry, uint32_t *cur,
                     const uint64_t *e, const uint64_t *l, size_t n, bool *oom)
{
    uint32_t p = *cur;
    /* inside a run, p's only child is the next block: branch off there */
    if (n && p + 1 < kvr_run_end(&KVR_RUN(idx, KVR_RUNOF(idx, p))) &&
        kvr_tree_split(idx, p + 1) < 0) {
        *oom = true;
        return 0;
    }
    size_t j = 0;
    while (j < n) {
        uint32_t b = kvr_tree_block_new(idx, p + 1);
        if (!b) {
            *oom = true;
            break;
        }
        KVR_LOCAL(idx, b) = l[j];
        KVR_ENGINE(idx, b) = e[j];
        if (kvr_tree_engine_add(idx, owner, b) != KVR_NIL) {
            kvr_ids_put(&idx->block_ids, b);
            break;
        }
        uint32_t pr = KVR_RUNOF(idx, p);
        kvr_run *P = &KVR_RUN(idx, pr);
        if (pr != KVR_ROOT && b == kvr_run_end(P) && !P->first_child && singleton(idx, P->set, entry)) {
            P->len++;
            KVR_RUNOF(idx, b) = pr;
        } else if (!new_run(idx, owner, entry, p, b)) {
            kvr_tree_engine_del(idx, b);
            kvr_ids_put(&idx->block_ids, b);
            *oom = true;
            break;
        }
        kvr_tree_owned_add(idx, owner, 1);
        p = b;
        j++;
        /* b's run is now the owner's alone with this entry and ends at b
         * with nothing below: the next blocks extend it while the next id
         * is free */
        uint32_t r = KVR_RUNOF(idx, p);
        kvr_run *R = &KVR_RUN(idx, r);
        uint32_t first = p + 1, want = n - j < UINT32_MAX ? (uint32_t)(n - j) : UINT32_MAX;
        uint32_t got = want ? kvr_ids_take_range(&idx->block_ids, first, want) : 0, k = 0;
        if (got && first + got > idx->n_bchunks * KVR_CHUNK && kvr_tree_sync_chunks(idx) < 0) {
            kvr_ids_put_range(&idx->block_ids, first, got);
            *oom = true;
            got = 0;
        }
        bool held = false;
        if (got)
            kvr_tree_engine_room(idx, got);
        bool exc = idx->owners[owner].exc.len != 0;
        for (; k < got; k++) {
            b = first + k;
            KVR_LOCAL(idx, b) = l[j + k];
            KVR_ENGINE(idx, b) = e[j + k];
            if ((exc && kvr_tree_exc_find(idx, owner, e[j + k], kvr_engine_fp(e[j + k]))) ||
                kvr_tree_engine_put(idx, owner, b) != KVR_NIL) {
                held = true;
                break;
            }
            KVR_RUNOF(idx, b) = r;
        }
        if (k < got) /* the owner holds block j + k's hash elsewhere */
            kvr_ids_put_range(&idx->block_ids, first + k, got - k);
        R->len += k;
        p += k;
        j += k;
        kvr_tree_owned_add(idx, owner, k);
        if (*oom || held)
            break;
    }
    *cur = p;
    return j;
}

/* The owner leaves block b (entry: its entry there). -1 on OOM. */
static int leave(kvr_index *idx, uint32_t owner, uint32_t b, uint32_t entry)
{
    if (kvr_tree_set_range(idx, b, 1, owner, 0) < 0)
        return -1;
    if (entry & KVR_OSET_EXC)
        kvr_tree_exc_del(idx, owner, b);
    return 0;
}

/* Block (e, l) of a store below cur, the general way; returns the block now
 * holding it, or KVR_NIL when the chain cannot continue. *added grows by 1
 * when the owner gains the tier on a block, and falls by 1 when it leaves
 * another block holding e on it (the ownership moved: onto a block it did
 * not hold, no more blocks held; onto one it held, one fewer). */
static uint32_t store_one(kvr_index *idx, uint32_t owner, uint32_t bit, uint32_t cur, uint64_t e,
                          uint64_t l, int64_t *added)
{
    uint32_t child = kvr_tree_child(idx, cur, l);
    uint32_t held, v = kvr_tree_lookup(idx, owner, e, &held);
    if (v != KVR_NIL && v != child) {
        /* The engine reuses a hash for other content: the newest store wins.
         * Leaving the old block can reclaim a subtree holding cur (when the
         * hash was an ancestor's): then the rest of the chain has no parent. */
        if (leave(idx, owner, v, held) < 0 || !kvr_tree_block_live(idx, cur))
            return KVR_NIL;
        *added -= (held & bit) != 0;
        child = kvr_tree_child(idx, cur, l);
    }
    if (child == KVR_NIL) {
        bool oom = false;
        if (append(idx, owner, kvr_oset_entry(owner, bit, false), &cur, &e, &l, 1, &oom) != 1)
            return KVR_NIL;
        *added += 1;
        return cur;
    }
    uint32_t entry = kvr_tree_entry(idx, child, owner);
    bool renamed = !entry || kvr_tree_handle(idx, owner, child, entry) != e;
    bool exc = e != KVR_ENGINE(idx, child);
    if (kvr_tree_set_range(idx, child, 1, owner,
                           kvr_oset_entry(owner, (entry & KVR_OSET_TIERS) | bit, exc)) < 0)
        return KVR_NIL; /* out of memory: stop the chain here */
    *added += !(entry & bit);
    if (renamed) {
        /* the same block under a new engine hash: the new one replaces it */
        if (entry & KVR_OSET_EXC)
            kvr_tree_exc_del(idx, owner, child);
        if (exc && kvr_tree_exc_add(idx, owner, child, e) < 0)
            abort(); /* an ownership without its handle could never be removed */
    }
    return child;
}

kvr_drop_reason kvr_index_store_locked(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                                       bool has_parent, uint64_t parent,
                                       const uint64_t *engine_hashes,
                                       const uint64_t *local_hashes, size_t n, int64_t *added)
{
    *added = 0;
    if ((unsigned)tier >= KVR_TIER_COUNT)
        return KVR_DROP_UNKNOWN_TIER;
    if (owner >= idx->n_owners)
        return KVR_DROP_PARENT_NOT_FOUND;
    uint32_t nb = n < UINT32_MAX / 4 ? (uint32_t)n : UINT32_MAX / 4;
    kvr_tree_fit(idx, nb, 2 * nb + 2);
    uint32_t cur = KVR_ROOT, held;
    if (has_parent && (cur = kvr_tree_lookup(idx, owner, parent, &held)) == KVR_NIL)
        return KVR_DROP_PARENT_NOT_FOUND;
    const uint64_t *e = engine_hashes, *l = local_hashes;
    uint32_t bit = 1u << tier, fresh = kvr_oset_entry(owner, bit, false);
    const kvr_idtab *exc = &idx->owners[owner].exc;
    for (size_t i = 0; i < n;) {
        uint32_t b = kvr_tree_child(idx, cur, l[i]);
        if (b == KVR_NIL) {
            bool oom = false;
            size_t k = append(idx, owner, fresh, &cur, e + i, l + i, n - i, &oom);
            i += k;
            *added += (int64_t)k;
            if (oom)
                return KVR_DROP_PARENT_NOT_FOUND;
            if (i == n)
                break;
            /* the owner already holds block i's hash elsewhere */
            if ((cur = store_one(idx, owner, bit, cur, e[i], l[i], added)) == KVR_NIL)
                return KVR_DROP_PARENT_NOT_FOUND;
            i++;
            continue;
        }
        uint32_t r = KVR_RUNOF(idx, b);
        uint32_t entry = kvr_osets_find(&idx->sets, KVR_RUN(idx, r).set, owner);
        /* The owner calls the blocks by their creator hashes: it holds them
         * that way already, or it joins and (no duplicate creator hashes,
         * no exception handles) cannot hold those hashes anywhere else. */
        bool plain = KVR_ENGINE(idx, b) == e[i] &&
                     (entry ? !(entry & KVR_OSET_EXC) : !idx->engine_dups && !exc->len);
        if (!plain) {
            if ((cur = store_one(idx, owner, bit, cur, e[i], l[i], added)) == KVR_NIL)
                return KVR_DROP_PARENT_NOT_FOUND;
            i++;
            continue;
        }
        uint32_t end = kvr_run_end(&KVR_RUN(idx, r)), k = 1;
        while (i + k < n && b + k < end && KVR_LOCAL(idx, b + k) == l[i + k] &&
               KVR_ENGINE(idx, b + k) == e[i + k])
            k++;
        /* one set for the whole run: the owner gains the tier on all k
         * blocks or on none (a re-store of held blocks changes nothing) */
        uint32_t to = entry ? entry | bit : fresh;
        if (to != entry) {
            if (kvr_tree_set_range(idx, b, k, owner, to) < 0)
                return KVR_DROP_PARENT_NOT_FOUND; /* out of memory: stop the chain here */
            *added += (int64_t)k;
        }
        cur = b + k - 1;
        i += k;
    }
    return KVR_DROP_NONE;
}

kvr_drop_reason kvr_index_store(kvr_index *idx, kvr_owner owner, kvr_tier tier, bool has_parent,
                                uint64_t parent, const uint64_t *engine_hashes,
                                const uint64_t *local_hashes, size_t n)
{
    if ((unsigned)tier >= KVR_TIER_COUNT)
        return KVR_DROP_UNKNOWN_TIER;
    int64_t added;
    kvr_tree_write_lock(idx);
    kvr_drop_reason r = kvr_index_store_locked(idx, owner, tier, has_parent, parent,
                                               engine_hashes, local_hashes, n, &added);
    kvr_tree_write_unlock(idx);
    return r;
}

/* Removals waiting to be applied as one range: blocks [lo, lo + n) of one
 * run, where the owner has `entry` and gets `to`. */
typedef struct {
    uint32_t lo, n, run, entry, to;
    uint32_t start; /* the run's first block (no change until the flush) */
    bool empties;   /* the range loses its last owner: its subtree goes */
} pending;

/* Applies the range; returns how many removals count as unknown (all of
 * them on OOM: nothing was removed). */
static size_t flush(kvr_index *idx, uint32_t owner, pending *g)
{
    uint32_t lo = g->lo, n = g->n;
    g->n = 0;
    if (kvr_tree_set_range(idx, lo, n, owner, g->to) < 0)
        return n;
    if (!g->to && (g->entry & KVR_OSET_EXC))
        for (uint32_t b = lo; b < lo + n; b++)
            kvr_tree_exc_del(idx, owner, b);
    return 0;
}

#define REMOVE_AHEAD 8

size_t kvr_index_remove_locked(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                               const uint64_t *engine_hashes, size_t n)
{
    if ((unsigned)tier >= KVR_TIER_COUNT || owner >= idx->n_owners)
        return n;
    uint32_t nb = n < UINT32_MAX / 4 ? (uint32_t)n : UINT32_MAX / 4;
    kvr_tree_fit(idx, 0, 2 * nb + 2);
    size_t unknown = 0;
    uint32_t bit = 1u << tier;
    pending g = {0};
    for (size_t i = 0; i < n; i++) {
        /* Leaf first, the next hash usually names the block before the
         * range in its run: the owner calls it by its creator hash (the
         * run's entry is no exception), so that is the one block it names
         * so, found without a lookup. */
        if (g.n && g.lo > g.start && !(g.entry & KVR_OSET_EXC) &&
            KVR_ENGINE(idx, g.lo - 1) == engine_hashes[i]) {
            g.lo--;
            g.n++;
            continue;
        }
        if (i + REMOVE_AHEAD < n)
            kvr_keytab_prefetch(&idx->engine, kvr_engine_fp(engine_hashes[i + REMOVE_AHEAD]));
        uint32_t entry, b = kvr_tree_lookup(idx, owner, engine_hashes[i], &entry);
        if (b == KVR_NIL || !(entry & bit)) { /* unknown handle, or not held on this tier */
            unknown++;
            continue;
        }
        uint32_t r = KVR_RUNOF(idx, b);
        if (g.n && r == g.run) {
            if (b >= g.lo && b < g.lo + g.n) { /* again in this event: already going */
                unknown++;
                continue;
            }
            if (b + 1 == g.lo) { /* the parent: leaf-first eviction */
                g.lo--;
                g.n++;
                continue;
            }
            /* a child joins unless the range's subtree goes (its removal
             * would then find the child gone) */
            if (b == g.lo + g.n && !g.empties) {
                g.n++;
                continue;
            }
        }
        if (g.n) {
            unknown += flush(idx, owner, &g);
            i--; /* look it up again in the changed index */
            continue;
        }
        uint32_t to = entry & ~bit;
        const kvr_run *R = &KVR_RUN(idx, r);
        g = (pending){b, 1, r, entry, to & KVR_OSET_TIERS ? to : 0, R->start, false};
        g.empties = !g.to && kvr_osets_get(&idx->sets, R->set)->len == 1;
    }
    if (g.n)
        unknown += flush(idx, owner, &g);
    return unknown;
}

size_t kvr_index_remove(kvr_index *idx, kvr_owner owner, kvr_tier tier,
                        const uint64_t *engine_hashes, size_t n)
{
    if ((unsigned)tier >= KVR_TIER_COUNT)
        return n;
    kvr_tree_write_lock(idx);
    size_t unknown = kvr_index_remove_locked(idx, owner, tier, engine_hashes, n);
    kvr_tree_write_unlock(idx);
    return unknown;
}

/* The owner's runs, through the sets holding it, into runs (cap entries);
 * returns how many. Reads only. */
static size_t owner_runs(const kvr_index *idx, uint32_t owner, uint32_t *runs, size_t cap)
{
    const kvr_osets *s = &idx->sets;
    size_t k = 0;
    for (uint32_t set = 1; set < s->sets_cap && k < cap; set++)
        if (s->sets[set].ref && kvr_osets_find(s, set, owner))
            for (uint32_t r = s->sets[set].runs; r && k < cap; r = KVR_RUN(idx, r).link[KVR_SAME_SET].next)
                runs[k++] = r;
    return k;
}

/* Above this many owner sets, the scan for the owner's runs runs under a
 * read lock (a clear of a 1000-owner index spent ~2 ms of its write lock
 * on it, and matches waited that long). */
#define CLEAR_SCAN_INLINE 4096u

void kvr_index_clear_owner_locked(kvr_index *idx, kvr_owner owner)
{
    if (owner >= idx->n_owners)
        return;
    kvr_tree_fit(idx, 0, 0);
    /* Collected first, as leaving them changes the lists. Leaving a whole
     * run never splits, so no run id is handed out again meanwhile: a freed
     * one stays free. */
    size_t cap = idx->owners[owner].blocks + 1, k = 0;
    uint32_t *runs = malloc(cap * sizeof *runs);
    if (!runs)
        abort(); /* a clear that silently kept state would route to a dead cache */
    bool scanned = false;
    if (idx->sets.sets_cap > CLEAR_SCAN_INLINE) {
        /* As kvr_tree_fit: matches go on meanwhile; if another writer came
         * between, the list may be stale and is taken again. */
        uint64_t epoch = idx->write_epoch;
        kvr_tree_write_unlock(idx);
        pthread_rwlock_rdlock(&idx->lock);
        k = owner_runs(idx, owner, runs, cap);
        pthread_rwlock_unlock(&idx->lock);
        kvr_tree_write_lock(idx);
        scanned = idx->write_epoch == epoch + 1;
    }
    if (!scanned) {
        cap = idx->owners[owner].blocks + 1;
        uint32_t *n = realloc(runs, cap * sizeof *runs);
        if (!n)
            abort();
        runs = n;
        k = owner_runs(idx, owner, runs, cap);
    }
    kvr_osets *s = &idx->sets;
    for (size_t i = 0; i < k; i++) {
        if (!kvr_ids_used(&idx->run_ids, runs[i]))
            continue; /* reclaimed with a subtree, or merged into another */
        kvr_run *R = &KVR_RUN(idx, runs[i]);
        uint32_t entry = kvr_osets_find(s, R->set, owner);
        if (!entry)
            continue;
        uint32_t start = R->start, len = R->len;
        if (kvr_tree_set_range(idx, start, len, owner, 0) < 0)
            abort();
        if (entry & KVR_OSET_EXC)
            for (uint32_t b = start; b < start + len; b++)
                kvr_tree_exc_del(idx, owner, b);
    }
    free(runs);
}

void kvr_index_clear_owner(kvr_index *idx, kvr_owner owner)
{
    kvr_tree_write_lock(idx);
    kvr_index_clear_owner_locked(idx, owner);
    kvr_tree_write_unlock(idx);
}
