/* Open-addressing table of 32-bit ids under a 32-bit fingerprint of their
 * key, one of the prefix index's two table shapes (the other, bare ids:
 * tree_keytab.h): each slot is fp << 32 | id (0 = empty, so id 0 is never
 * stored). The index keeps the keys with the ids (a run's parent and first
 * local hash, an owner's exception hash for a block), so callers confirm a
 * fingerprint match themselves, and a key may be held by several ids.
 * Linear probing from fastrange(fp, cap) with any cap: every entry of a
 * key lies between its home slot and the next empty slot, where an insert
 * for it goes. Deletion shifts entries back, so there are no tombstones.
 * Probing:
 *
 *     for (uint32_t i = kvr_idtab_home(t, fp); t->slot[i]; i = kvr_probe_next(i, t->cap))
 *         if (kvr_idtab_fp(t->slot[i]) == fp) ... candidate kvr_idtab_id(t->slot[i])
 *
 * Used for the child table (runs by parent block and first local hash)
 * and the per-owner tables of exception handles; the engine table holds
 * bare ids at half the load instead (tree_keytab.h). Sizing:
 * kvr_idtab_fit_cap says what capacity a table should have for a number
 * of entries (doubled at 4/5 load, halved below 1/8); a large table is
 * rebuilt with kvr_idtab_rehash while readers still use the old one, then
 * swapped in with kvr_idtab_install. */
#ifndef KVR_INDEX_TREE_TABLE_H
#define KVR_INDEX_TREE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *slot;
    uint32_t cap, len;
} kvr_idtab;

/* Slot of hash h in a table of n slots (any n). */
static inline uint32_t kvr_fastrange(uint32_t h, uint32_t n)
{
    return (uint32_t)(((uint64_t)h * n) >> 32);
}
static inline uint32_t kvr_probe_next(uint32_t i, uint32_t n) { return i + 1 == n ? 0 : i + 1; }

/* Backward-shift deletion in a linear-probing table: the entry at j (home
 * slot `home`) stays put unless the hole lies cyclically in [home, j).
 * Shared by the index's open-addressing tables. */
static inline bool kvr_probe_stays(uint32_t hole, uint32_t j, uint32_t home)
{
    return (hole <= j) ? (home > hole && home <= j) : (home > hole || home <= j);
}

static inline uint64_t kvr_idtab_slot(uint32_t fp, uint32_t id) { return (uint64_t)fp << 32 | id; }
static inline uint32_t kvr_idtab_fp(uint64_t slot) { return (uint32_t)(slot >> 32); }
static inline uint32_t kvr_idtab_id(uint64_t slot) { return (uint32_t)slot; }

/* First slot to probe for fp; the table must have a capacity. */
static inline uint32_t kvr_idtab_home(const kvr_idtab *t, uint32_t fp)
{
    return kvr_fastrange(fp, t->cap);
}

static inline void kvr_idtab_prefetch(const kvr_idtab *t, uint32_t fp)
{
    if (t->cap)
        __builtin_prefetch(&t->slot[kvr_idtab_home(t, fp)]);
}

void kvr_idtab_init(kvr_idtab *t);
void kvr_idtab_free(kvr_idtab *t);
size_t kvr_idtab_bytes(const kvr_idtab *t);
/* The capacity for len entries: the current one unless len overfills it
 * (then grown) or leaves it sparse (then shrunk); 0 for none. UINT32_MAX
 * when len cannot fit. */
uint32_t kvr_idtab_fit_cap(const kvr_idtab *t, uint64_t len);
/* A copy of t's entries in a new array of cap slots; reads t only, so it
 * can run while others read t. NULL on OOM or cap 0. */
uint64_t *kvr_idtab_rehash(const kvr_idtab *t, uint32_t cap);
/* Makes slots (cap entries, from kvr_idtab_rehash of t) the table; returns
 * the old array for the caller to free when no reader can hold it. */
uint64_t *kvr_idtab_install(kvr_idtab *t, uint64_t *slots, uint32_t cap);
/* Resizes in place to kvr_idtab_fit_cap(t, len + more). -1 on OOM (the
 * table is unchanged). */
int kvr_idtab_reserve(kvr_idtab *t, uint32_t more);
/* Max load 4/5: slots carry the fingerprint, so a long probe run costs
 * sequential reads of 8-byte slots, not key comparisons. */
static inline bool kvr_idtab_overfull(uint64_t len, uint32_t cap)
{
    return len * 5 > (uint64_t)cap * 4;
}
/* Below 1/8 load a table halves (down to 8 slots). */
static inline bool kvr_idtab_sparse(uint64_t len, uint32_t cap) { return cap > 8 && len * 8 < cap; }
/* Whether kvr_idtab_fit_cap(t, len) is t's capacity: the test every event
 * makes before it changes anything, inline as it nearly always holds. */
static inline bool kvr_idtab_fits(const kvr_idtab *t, uint64_t len)
{
    return len ? !kvr_idtab_overfull(len, t->cap) && !kvr_idtab_sparse(len, t->cap) : !t->cap;
}
/* Makes room for n more slots (growing in place when they would overfill
 * it). -1 on OOM. */
static inline int kvr_idtab_room(kvr_idtab *t, uint32_t n)
{
    return kvr_idtab_overfull((uint64_t)t->len + n, t->cap) ? kvr_idtab_reserve(t, n) : 0;
}
/* Adds a slot (growing in place when full). -1 on OOM. */
int kvr_idtab_add(kvr_idtab *t, uint64_t slot);
/* Adds a slot at the empty slot i where a probe for its fingerprint ended;
 * the table must have had room (kvr_idtab_room) before the probe. */
static inline void kvr_idtab_put_at(kvr_idtab *t, uint64_t slot, uint32_t i)
{
    t->slot[i] = slot;
    t->len++;
}
/* Where the slot, which must be present, lies. */
static inline uint32_t kvr_idtab_find(const kvr_idtab *t, uint64_t slot)
{
    uint32_t i = kvr_idtab_home(t, kvr_idtab_fp(slot));
    while (t->slot[i] != slot)
        i = kvr_probe_next(i, t->cap);
    return i;
}

/* Removes the slot, which must be present; an emptied table is freed.
 * Inline: reclaiming a run deletes one slot per block. */
static inline __attribute__((always_inline)) void kvr_idtab_del(kvr_idtab *t, uint64_t slot)
{
    uint64_t *s = t->slot;
    uint32_t cap = t->cap, hole = kvr_idtab_find(t, slot);
    /* The rest of the cluster: an entry moves into the hole when the hole
     * lies between its home and it (its displacement reaches the hole).
     * Up to the table's end no index wraps, so the loop there compares
     * plain distances; past it, the general test. */
    uint32_t j = hole + 1;
    for (; j < cap && s[j]; j++) {
        uint32_t home = kvr_fastrange(kvr_idtab_fp(s[j]), cap);
        if (home <= hole || home > j) {
            s[hole] = s[j];
            hole = j;
        }
    }
    if (j == cap)
        for (j = 0; s[j]; j = kvr_probe_next(j, cap))
            if (!kvr_probe_stays(hole, j, kvr_idtab_home(t, kvr_idtab_fp(s[j])))) {
                s[hole] = s[j];
                hole = j;
            }
    s[hole] = 0;
    if (--t->len == 0)
        kvr_idtab_free(t);
}

/* Replaces a present slot by another with the same fingerprint. */
void kvr_idtab_replace(kvr_idtab *t, uint64_t old_slot, uint64_t new_slot);

#endif
