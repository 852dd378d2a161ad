/* Interned owner sets. A run's owners are a sorted array of entries
 * (owner << 5 | exc << 4 | tier bits); identical arrays are stored once and
 * shared by every run that has them (hash-consing), so a match can tell in
 * O(1) that a run's owners equal its parent's. A set held by one run is
 * changed in place when that run's owners change (its id stays, its
 * generation moves on). A set's references are the
 * runs holding it; it also heads the list of those runs (kvr_run.set_next),
 * through which an owner's runs are found when it is cleared. */
#ifndef KVR_INDEX_TREE_SETS_H
#define KVR_INDEX_TREE_SETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/tree_ids.h"

#define KVR_OSET_EMPTY 0u
#define KVR_OSET_TIERS 0xFu
#define KVR_OSET_COUNTED 0x7u /* gpu, cpu, disk: the tiers a match counts */
#define KVR_OSET_EXC 0x10u /* this owner's engine hash differs from the node's */
#define KVR_OSET_SHIFT 5
#define KVR_OSET_MAX_OWNER ((1u << (32 - KVR_OSET_SHIFT)) - 1)

static inline uint32_t kvr_oset_entry(uint32_t owner, uint32_t tiers, bool exc)
{
    return owner << KVR_OSET_SHIFT | (exc ? KVR_OSET_EXC : 0) | (tiers & KVR_OSET_TIERS);
}
static inline uint32_t kvr_oset_owner(uint32_t e) { return e >> KVR_OSET_SHIFT; }

typedef struct {
    uint64_t hash; /* sum of mix64(entry): updatable in O(1) */
    uint32_t len;
    uint32_t ref;  /* runs holding it; 0 = free slot */
    uint32_t gen;  /* bumped on free and on an in-place rewrite: memo entries are validated */
    uint32_t tiers; /* union of the entries' tier bits */
    uint32_t uncounted; /* entries on no tier a match counts (external only) */
    uint32_t runs;  /* first run holding it (list kept by the tree) */
    union {
        uint32_t inl[2]; /* len <= 2 needs no allocation */
        uint32_t *ext;
    } e;
} kvr_oset;

typedef struct {
    uint32_t from, from_gen, owner, entry, to, to_gen;
} kvr_oset_memo;

#define KVR_OSET_MEMO 1024u

typedef struct {
    kvr_oset *sets;
    uint32_t sets_cap;
    kvr_ids ids;
    uint32_t *intern; /* open addressing of set ids keyed by hash; 0 = empty */
    uint32_t intern_cap, intern_len;
    uint32_t *scratch;
    uint32_t scratch_cap;
    size_t entry_bytes;
    kvr_oset_memo memo[KVR_OSET_MEMO];
} kvr_osets;

int kvr_osets_init(kvr_osets *s);
void kvr_osets_free(kvr_osets *s);
size_t kvr_osets_bytes(const kvr_osets *s);

static inline const uint32_t *kvr_oset_entries(const kvr_oset *o)
{
    return o->len <= 2 ? o->e.inl : o->e.ext;
}
static inline const kvr_oset *kvr_osets_get(const kvr_osets *s, uint32_t id)
{
    return &s->sets[id];
}
uint32_t kvr_osets_search(const uint32_t *e, uint32_t len, uint32_t owner);
/* The owner's entry in the set, 0 if absent. Most sets are a few owners:
 * those are scanned, larger ones searched. */
static inline uint32_t kvr_osets_find(const kvr_osets *s, uint32_t id, uint32_t owner)
{
    const kvr_oset *o = &s->sets[id];
    const uint32_t *e = kvr_oset_entries(o);
    if (o->len <= 8) {
        for (uint32_t i = 0; i < o->len; i++)
            if (kvr_oset_owner(e[i]) == owner)
                return e[i];
        return 0;
    }
    uint32_t i = kvr_osets_search(e, o->len, owner);
    return i < o->len && kvr_oset_owner(e[i]) == owner ? e[i] : 0;
}
/* Replaces (or inserts, or with entry 0 removes) the owner's entry of set
 * `from`; returns the resulting set with a reference taken and drops one
 * reference of `from` (KVR_OSET_EMPTY holds none). UINT32_MAX on OOM (then
 * nothing changed). */
uint32_t kvr_osets_apply(kvr_osets *s, uint32_t from, uint32_t owner, uint32_t entry);
/* Another reference to a set (a run split off one holding it). */
static inline void kvr_osets_ref(kvr_osets *s, uint32_t id)
{
    if (id != KVR_OSET_EMPTY)
        s->sets[id].ref++;
}
/* Scratch for sets of up to max_len entries (the owner count), reserved as
 * owners are created so that churn does not change the footprint. */
int kvr_osets_reserve(kvr_osets *s, uint32_t max_len);
void kvr_osets_unref(kvr_osets *s, uint32_t id);

#endif
