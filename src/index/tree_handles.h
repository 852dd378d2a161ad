/* Per-owner map engine hash -> node id, the largest population in the index
 * (one entry per (owner, block) ownership), so slots are 8 bytes: a 32-bit
 * fingerprint of the engine hash (which also gives the home slot) and the
 * node id. The full hash is not stored: the index can recompute the hash an
 * owner uses for a node, and a callback confirms fingerprint matches.
 * Linear probing, backward-shift deletion, shrinks as it empties. */
#ifndef KVR_INDEX_TREE_HANDLES_H
#define KVR_INDEX_TREE_HANDLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/u64map.h"

typedef struct {
    uint32_t fp;
    uint32_t node; /* 0 = empty slot (the root is never a handle's node) */
} kvr_handle_slot;

typedef struct {
    kvr_handle_slot *slots;
    uint32_t cap, len;
} kvr_handles;

#define KVR_HANDLE_NONE UINT32_MAX

/* Whether `node` is what this owner calls `key`. */
typedef bool (*kvr_handle_check)(const void *ctx, uint32_t node, uint64_t key);

/* Slot of hash h in a table of n slots (any n). */
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

static inline uint32_t kvr_handle_fp(uint64_t key) { return (uint32_t)(kvr_mix64(key) >> 32); }

void kvr_handles_init(kvr_handles *m);
void kvr_handles_free(kvr_handles *m);
size_t kvr_handles_len(const kvr_handles *m);
size_t kvr_handles_bytes(const kvr_handles *m);
uint32_t kvr_handles_get(const kvr_handles *m, uint64_t key, kvr_handle_check check,
                         const void *ctx); /* KVR_HANDLE_NONE if absent */
/* Adds key -> node; the caller knows key is absent. 0 ok, -1 OOM. */
int kvr_handles_add(kvr_handles *m, uint64_t key, uint32_t node);
/* Removes key's entry, which must point at node: (fingerprint, node) is
 * unique because an owner has one handle per node, so no check is needed. */
bool kvr_handles_del(kvr_handles *m, uint64_t key, uint32_t node);
/* Node ids, in no order; it starts at 0; the map must not change meanwhile. */
bool kvr_handles_next(const kvr_handles *m, size_t *it, uint32_t *node);
static inline void kvr_handles_prefetch(const kvr_handles *m, uint64_t key)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[kvr_fastrange(kvr_handle_fp(key), m->cap)]);
}

/* Node of the first slot whose fingerprint matches key (unconfirmed), 0 if
 * none nearby: only a prefetch hint. */
static inline uint32_t kvr_handles_peek(const kvr_handles *m, uint64_t key)
{
    if (!m->cap)
        return 0;
    uint32_t fp = kvr_handle_fp(key);
    for (uint32_t i = kvr_fastrange(fp, m->cap), k = 0; k < 8; i = kvr_probe_next(i, m->cap), k++) {
        if (!m->slots[i].node)
            return 0;
        if (m->slots[i].fp == fp)
            return m->slots[i].node;
    }
    return 0;
}

#endif
