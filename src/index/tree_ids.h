/* Id allocator that always hands out the lowest free id (a 64-ary bitmap
 * tree), so live ids stay packed at the bottom and the arrays they index can
 * shrink back after churn. */
#ifndef KVR_INDEX_TREE_IDS_H
#define KVR_INDEX_TREE_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVR_IDS_LEVELS 6

typedef struct {
    uint64_t *bits; /* levels concatenated, leaves first; a set bit means used (or full) */
    uint32_t off[KVR_IDS_LEVELS];
    int nlevels;
    uint32_t cap;   /* ids live in [0, cap) */
    uint32_t count; /* ids in use */
    uint32_t top;   /* 1 + highest id in use, 0 when empty */
} kvr_ids;

void kvr_ids_init(kvr_ids *a);
void kvr_ids_free(kvr_ids *a);
/* Lowest free id; doubles cap when full. UINT32_MAX on OOM or
 * exhaustion. Callers compare a->cap with their arrays afterwards. */
uint32_t kvr_ids_get(kvr_ids *a);
static inline bool kvr_ids_used(const kvr_ids *a, uint32_t id)
{
    return id < a->cap && (a->bits[id / 64] >> (id % 64) & 1);
}
/* Marks a free id used, propagating "full" upward. */
static inline void kvr_ids_mark(kvr_ids *a, uint32_t id)
{
    for (int l = 0; l < a->nlevels; l++) {
        uint64_t *word = &a->bits[a->off[l] + id / 64];
        *word |= 1ULL << (id % 64);
        if (*word != ~0ULL)
            break;
        id /= 64;
    }
}
/* Takes this id if it is free and below cap (a caller that wants ids next
 * to each other asks for the neighbour first). */
static inline bool kvr_ids_take(kvr_ids *a, uint32_t id)
{
    if (kvr_ids_used(a, id) || id >= a->cap)
        return false;
    kvr_ids_mark(a, id);
    a->count++;
    if (id >= a->top)
        a->top = id + 1;
    return true;
}
/* Takes the free ids id, id + 1, ... below cap, at most max of them,
 * stopping at the first used one; returns how many it took. A word of the
 * bitmap at a time: a chain stored in one event takes its ids so. */
uint32_t kvr_ids_take_range(kvr_ids *a, uint32_t id, uint32_t max);
/* Frees id; may shrink cap when the top half is free. */
void kvr_ids_put(kvr_ids *a, uint32_t id);
/* Frees the ids [id, id + n), which must all be used, a word at a time
 * (a reclaimed run frees its blocks so); may shrink cap as kvr_ids_put. */
void kvr_ids_put_range(kvr_ids *a, uint32_t id, uint32_t n);
size_t kvr_ids_bytes(const kvr_ids *a);

#endif
