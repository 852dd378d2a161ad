/* Interned owner sets. A node's owners are a sorted array of entries
 * (owner << 5 | exc << 4 | tier bits); identical arrays are stored once and
 * shared by every node that has them (hash-consing). Long chains owned by
 * the same workers then cost one 4-byte set id per node, and a match can
 * tell in O(1) that a node's owners equal its parent's. */
#ifndef KVR_INDEX_TREE_SETS_H
#define KVR_INDEX_TREE_SETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/tree_handles.h"
#include "index/tree_ids.h"

#define KVR_OSET_EMPTY 0u
#define KVR_OSET_TIERS 0xFu
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
    uint32_t ref;  /* nodes holding it; 0 = free slot */
    uint32_t gen;  /* bumped on free, so memo entries can be validated */
    uint32_t tiers; /* union of the entries' tier bits */
    union {
        uint32_t inl[2]; /* len <= 2 needs no allocation */
        uint32_t *ext;
    } e;
} kvr_oset;

typedef struct {
    uint32_t from, from_gen, owner, entry, to, to_gen;
} kvr_oset_memo;

#define KVR_OSET_MEMO 4096u

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
/* The owner's entry in the set, 0 if absent. */
uint32_t kvr_osets_find(const kvr_osets *s, uint32_t id, uint32_t owner);
/* Replaces (or inserts, or with entry 0 removes) the owner's entry of set
 * `from`; returns the resulting set with a reference taken and drops one
 * reference of `from` (KVR_OSET_EMPTY holds none). UINT32_MAX on OOM (then
 * nothing changed). */
uint32_t kvr_osets_apply(kvr_osets *s, uint32_t from, uint32_t owner, uint32_t entry);
/* Scratch for sets of up to max_len entries (the owner count), reserved as
 * owners are created so that churn does not change the footprint. */
int kvr_osets_reserve(kvr_osets *s, uint32_t max_len);
void kvr_osets_unref(kvr_osets *s, uint32_t id);

#endif
