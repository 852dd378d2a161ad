/* Open-addressing table of bare 32-bit ids whose keys the caller keeps,
 * at half the load of kvr_idtab for the same bytes: the prefix index's
 * engine table (blocks by the engine hash of their creator), which holds
 * one slot per block and is touched by every block stored or reclaimed.
 *
 * Why not kvr_idtab there: its 8-byte fp << 32 | id slots spare probing
 * the key of an entry whose fingerprint differs, but at its 0.4-0.8 load
 * an insert walked ~4.7 slots to the cluster's empty slot and a delete
 * scanned ~3.7 more for backward shifts (13-15 % and 7-13 % of a replay
 * of the benchmark streams). Four-byte slots at 0.2-0.4 load (doubled at
 * 2/5, halved below 1/16) cost exactly the same bytes at every size
 * (twice the slots of half the width) and make a cluster short: an
 * insert meets ~0.5 occupied slots, a delete moves ~0.5 entries, so the
 * key reads that replace the fingerprints are few, and a lookup reads the
 * key of the block it confirms anyway.
 *
 * Same probing as kvr_idtab (linear, from fastrange(fp, cap), slot 0 is
 * empty so id 0 is never stored; deletion shifts entries back, no
 * tombstones). The caller supplies fp_of(ctx, id), the fingerprint of a
 * stored id's key, to the calls that must find an entry's home (delete,
 * rebuild); the inline ones inline it too when it is a constant. Probing:
 *
 *     for (uint32_t i = kvr_keytab_home(t, fp); t->slot[i]; i = kvr_probe_next(i, t->cap))
 *         ... candidate t->slot[i]: compare its key
 *
 * Sizing and rebuilding under a read lock work as for kvr_idtab. */
#ifndef KVR_INDEX_TREE_KEYTAB_H
#define KVR_INDEX_TREE_KEYTAB_H

#include "index/tree_table.h"

typedef struct {
    uint32_t *slot;
    uint32_t cap, len;
} kvr_keytab;

typedef uint32_t (*kvr_keytab_fp_fn)(const void *ctx, uint32_t id);

static inline uint32_t kvr_keytab_home(const kvr_keytab *t, uint32_t fp)
{
    return kvr_fastrange(fp, t->cap);
}

static inline void kvr_keytab_prefetch(const kvr_keytab *t, uint32_t fp)
{
    if (t->cap)
        __builtin_prefetch(&t->slot[kvr_keytab_home(t, fp)]);
}

void kvr_keytab_init(kvr_keytab *t);
void kvr_keytab_free(kvr_keytab *t);
size_t kvr_keytab_bytes(const kvr_keytab *t);
/* As kvr_idtab_fit_cap: the capacity for len entries (max load 2/5, min
 * 1/16), 0 for none, UINT32_MAX when len cannot fit. */
uint32_t kvr_keytab_fit_cap(const kvr_keytab *t, uint64_t len);
static inline bool kvr_keytab_overfull(uint64_t len, uint32_t cap)
{
    return len * 5 > (uint64_t)cap * 2;
}
/* Whether kvr_keytab_fit_cap(t, len) is t's capacity (kvr_idtab_fits). */
static inline bool kvr_keytab_fits(const kvr_keytab *t, uint64_t len)
{
    return len ? !kvr_keytab_overfull(len, t->cap) && !kvr_idtab_sparse(len, t->cap / 2) : !t->cap;
}
/* A zeroed array of cap slots (cap > 0); NULL on OOM. */
uint32_t *kvr_keytab_alloc(uint32_t cap);
/* Puts id (fingerprint fp) into an array of cap slots being filled. */
static inline void kvr_keytab_place(uint32_t *s, uint32_t cap, uint32_t id, uint32_t fp)
{
    uint32_t j = kvr_fastrange(fp, cap);
    while (s[j])
        j = kvr_probe_next(j, cap);
    s[j] = id;
}
/* A copy of t's entries in a new array of cap slots; reads t only, so it
 * can run while others read t. NULL on OOM or cap 0. Inline: a rebuild
 * reads every entry's key, through fp_of. */
static inline __attribute__((always_inline)) uint32_t *
kvr_keytab_rehash(const kvr_keytab *t, uint32_t cap, kvr_keytab_fp_fn fp_of, const void *ctx)
{
    uint32_t *s = cap ? kvr_keytab_alloc(cap) : NULL;
    if (!s)
        return NULL;
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->slot[i])
            kvr_keytab_place(s, cap, t->slot[i], fp_of(ctx, t->slot[i]));
    return s;
}
/* Makes slots (cap entries) the table; returns the old array. */
uint32_t *kvr_keytab_install(kvr_keytab *t, uint32_t *slots, uint32_t cap);
/* Resizes in place to kvr_keytab_fit_cap(t, len + more). -1 on OOM (the
 * table is unchanged). */
int kvr_keytab_reserve(kvr_keytab *t, uint32_t more, kvr_keytab_fp_fn fp_of, const void *ctx);
/* Makes room for n more entries. -1 on OOM. */
static inline int kvr_keytab_room(kvr_keytab *t, uint32_t n, kvr_keytab_fp_fn fp_of,
                                  const void *ctx)
{
    return kvr_keytab_overfull((uint64_t)t->len + n, t->cap) ? kvr_keytab_reserve(t, n, fp_of, ctx)
                                                             : 0;
}
/* Stores id at the empty slot i where a probe for its fingerprint ended;
 * the table must have had room before the probe. */
static inline void kvr_keytab_put_at(kvr_keytab *t, uint32_t id, uint32_t i)
{
    t->slot[i] = id;
    t->len++;
}

/* Removes id, which must be present under fingerprint fp; an emptied
 * table is freed. An entry after the hole moves into it when the hole lies
 * between its home and it; up to the array's end no index wraps, so the
 * loop there compares plain distances, past it the general test. */
static inline __attribute__((always_inline)) void kvr_keytab_del(kvr_keytab *t, uint32_t id,
                                                                 uint32_t fp,
                                                                 kvr_keytab_fp_fn fp_of,
                                                                 const void *ctx)
{
    uint32_t *s = t->slot, cap = t->cap, hole = kvr_keytab_home(t, fp);
    while (s[hole] != id)
        hole = kvr_probe_next(hole, cap);
    uint32_t j = hole + 1;
    for (; j < cap && s[j]; j++) {
        uint32_t home = kvr_fastrange(fp_of(ctx, s[j]), cap);
        if (home <= hole || home > j) {
            s[hole] = s[j];
            hole = j;
        }
    }
    if (j == cap)
        for (j = 0; s[j]; j = kvr_probe_next(j, cap))
            if (!kvr_probe_stays(hole, j, kvr_fastrange(fp_of(ctx, s[j]), cap))) {
                s[hole] = s[j];
                hole = j;
            }
    s[hole] = 0;
    if (--t->len == 0)
        kvr_keytab_free(t);
}

#endif
