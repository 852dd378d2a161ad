/* A mock engine's prefix cache (SPEC §9): fixed capacity in blocks, blocks
 * keyed by chain key (unique per prefix), LRU eviction of leaves only, as
 * SGLang's radix cache does. Reports what a real engine would publish:
 * stores of the missing suffix (parent-linked) and evictions. */
#ifndef KVR_MOCK_PREFIX_CACHE_H
#define KVR_MOCK_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kvr_prefix_cache kvr_prefix_cache;

typedef struct {
    void (*stored)(void *ud, bool has_parent, uint64_t parent, const uint64_t *keys, size_t n);
    void (*evicted)(void *ud, const uint64_t *keys, size_t n);
    void *ud;
} kvr_prefix_cache_sink;

kvr_prefix_cache *kvr_prefix_cache_create(size_t capacity_blocks);
void kvr_prefix_cache_destroy(kvr_prefix_cache *c);

/* keys[i] is the chain key of block i (unique per prefix, e.g. kvr_hash_chain),
 * so block i's parent is keys[i-1]. Returns the number of leading cached
 * blocks and touches them (most recently used). */
size_t kvr_prefix_cache_match(kvr_prefix_cache *c, const uint64_t *keys, size_t n);

/* Ensures blocks [0,n) are cached: touches the cached prefix, evicts LRU
 * leaves not in this request to make room (sink->evicted, in eviction order,
 * batched), then stores the missing suffix (sink->stored, parent =
 * keys[first_missing-1] or none). If n > capacity only the first `capacity`
 * blocks are stored. Returns the number of blocks newly stored. sink may be
 * NULL. */
size_t kvr_prefix_cache_insert(kvr_prefix_cache *c, const uint64_t *keys, size_t n,
                               const kvr_prefix_cache_sink *sink);

/* Drops everything (no events: the engine publishes AllBlocksCleared). */
void kvr_prefix_cache_clear(kvr_prefix_cache *c);

size_t kvr_prefix_cache_size(const kvr_prefix_cache *c);
/* Whether the block with this chain key is cached (no touch). */
bool kvr_prefix_cache_contains(const kvr_prefix_cache *c, uint64_t key);

#endif
