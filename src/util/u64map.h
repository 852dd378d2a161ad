/* Open-addressing u64 -> u64 hash map (linear probing, backward-shift
 * deletion, no tombstones). It shrinks when it empties, so memory returns to
 * its baseline after churn. Not thread-safe. */
#ifndef KVR_UTIL_U64MAP_H
#define KVR_UTIL_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t key;
    uint64_t val;
} kvr_u64map_slot;

typedef struct {
    kvr_u64map_slot *slots; /* key 0 marks an empty slot; key 0 itself lives aside */
    size_t cap;             /* power of two, or 0 */
    size_t len;             /* entries in slots (key 0 not counted) */
    bool has_zero;
    uint64_t zero_val;
} kvr_u64map;

static inline uint64_t kvr_mix64(uint64_t k)
{
    /* murmur3 finalizer: engine hashes in tests are small integers. */
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

void kvr_u64map_init(kvr_u64map *m);
void kvr_u64map_free(kvr_u64map *m);
/* Empties the map and releases its memory. */
void kvr_u64map_clear(kvr_u64map *m);
/* Empties the map and keeps its memory: for a map refilled per request. */
void kvr_u64map_reset(kvr_u64map *m);
static inline size_t kvr_u64map_len(const kvr_u64map *m)
{
    return m->len + (m->has_zero ? 1 : 0);
}
size_t kvr_u64map_bytes(const kvr_u64map *m);

/* Pointer to the value of key, or NULL. Invalidated by put/del. */
uint64_t *kvr_u64map_find(const kvr_u64map *m, uint64_t key);
static inline bool kvr_u64map_get(const kvr_u64map *m, uint64_t key, uint64_t *val)
{
    uint64_t *p = kvr_u64map_find(m, key);
    if (p && val)
        *val = *p;
    return p != NULL;
}
/* Grows the map so that n entries fit without another growth; 0, or -1
 * on OOM (the map unchanged). */
int kvr_u64map_reserve(kvr_u64map *m, size_t n);
/* Inserts or overwrites. Returns 1 if the key existed, 0 if added, -1 on OOM. */
int kvr_u64map_put(kvr_u64map *m, uint64_t key, uint64_t val);
/* Removes key; returns whether it was present (old value in *val). */
bool kvr_u64map_del(kvr_u64map *m, uint64_t key, uint64_t *val);

/* Iteration: size_t it = 0; while (kvr_u64map_next(m, &it, &k, &v)) ...
 * The map must not be modified while iterating. */
bool kvr_u64map_next(const kvr_u64map *m, size_t *it, uint64_t *key, uint64_t *val);

#endif
