/* Per-owner map engine hash -> node id. Leaner than util/u64map (12-byte
 * slots instead of 16) because there is one entry per (owner, block)
 * ownership, the largest population in the index. Linear probing with
 * backward-shift deletion; shrinks as it empties. */
#ifndef KVR_INDEX_TREE_HANDLES_H
#define KVR_INDEX_TREE_HANDLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/u64map.h"

typedef struct __attribute__((packed)) {
    uint64_t key; /* 0 = empty slot; key 0 lives aside */
    uint32_t val;
} kvr_handle_slot;

typedef struct {
    kvr_handle_slot *slots;
    uint32_t cap, len;
    bool has_zero;
    uint32_t zero_val;
} kvr_handles;

#define KVR_HANDLE_NONE UINT32_MAX

/* Slot of hash h in a table of n slots (any n, not just powers of two, so
 * tables can grow by 1.5x and waste less memory). */
static inline uint32_t kvr_fastrange(uint32_t h, uint32_t n)
{
    return (uint32_t)(((uint64_t)h * n) >> 32);
}
static inline uint32_t kvr_probe_next(uint32_t i, uint32_t n) { return i + 1 == n ? 0 : i + 1; }

/* Backward-shift deletion in a linear-probing table: the entry at j (home
 * slot `home`) stays put unless the hole lies cyclically in [home, j). Shared
 * by the index's open-addressing tables. */
static inline bool kvr_probe_stays(uint32_t hole, uint32_t j, uint32_t home)
{
    return (hole <= j) ? (home > hole && home <= j) : (home > hole || home <= j);
}

void kvr_handles_init(kvr_handles *m);
void kvr_handles_free(kvr_handles *m);
size_t kvr_handles_len(const kvr_handles *m);
size_t kvr_handles_bytes(const kvr_handles *m);
uint32_t kvr_handles_get(const kvr_handles *m, uint64_t key); /* KVR_HANDLE_NONE if absent */
int kvr_handles_put(kvr_handles *m, uint64_t key, uint32_t val); /* 0 ok, -1 OOM */
bool kvr_handles_del(kvr_handles *m, uint64_t key);
static inline void kvr_handles_prefetch(const kvr_handles *m, uint64_t key)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[kvr_fastrange((uint32_t)kvr_mix64(key), m->cap)]);
}
/* it starts at 0; the map must not change while iterating. */
bool kvr_handles_next(const kvr_handles *m, size_t *it, uint64_t *key, uint32_t *val);

#endif
