#include "mock/prefix_cache.h"

#include <stdlib.h>

#include "util/u64map.h"

#define NONE UINT32_MAX

typedef struct {
    uint64_t key;
    uint64_t tick;      /* last touch; a parent's tick is never older than its children's */
    uint32_t parent;    /* or NONE; next free id while on the free list */
    uint32_t nchildren;
    uint32_t heap_pos;  /* position in the leaf heap, NONE if not a leaf */
} pc_node;

struct kvr_prefix_cache {
    size_t capacity;
    pc_node *nodes;
    uint32_t nodes_cap, nodes_used, free_head;
    size_t size;
    kvr_u64map by_key; /* chain key -> node id */
    /* Min-heap of leaves by tick: evicting only leaves keeps every cached
     * block's prefix cached, and an internal node becomes evictable exactly
     * when its last child goes. */
    uint32_t *heap;
    uint32_t heap_len;
    uint64_t tick;
    uint64_t *evict_buf;
    size_t evict_cap;
};

static void heap_set(kvr_prefix_cache *c, uint32_t pos, uint32_t id)
{
    c->heap[pos] = id;
    c->nodes[id].heap_pos = pos;
}

static void heap_up(kvr_prefix_cache *c, uint32_t pos)
{
    uint32_t id = c->heap[pos];
    uint64_t t = c->nodes[id].tick;
    while (pos > 0) {
        uint32_t p = (pos - 1) / 2;
        if (c->nodes[c->heap[p]].tick <= t)
            break;
        heap_set(c, pos, c->heap[p]);
        pos = p;
    }
    heap_set(c, pos, id);
}

static void heap_down(kvr_prefix_cache *c, uint32_t pos)
{
    uint32_t id = c->heap[pos];
    uint64_t t = c->nodes[id].tick;
    for (;;) {
        uint32_t l = 2 * pos + 1;
        if (l >= c->heap_len)
            break;
        uint32_t m = l;
        if (l + 1 < c->heap_len && c->nodes[c->heap[l + 1]].tick < c->nodes[c->heap[l]].tick)
            m = l + 1;
        if (c->nodes[c->heap[m]].tick >= t)
            break;
        heap_set(c, pos, c->heap[m]);
        pos = m;
    }
    heap_set(c, pos, id);
}

static void heap_push(kvr_prefix_cache *c, uint32_t id)
{
    uint32_t pos = c->heap_len++;
    heap_set(c, pos, id);
    heap_up(c, pos);
}

static void heap_remove(kvr_prefix_cache *c, uint32_t id)
{
    uint32_t pos = c->nodes[id].heap_pos;
    c->nodes[id].heap_pos = NONE;
    uint32_t last = c->heap[--c->heap_len];
    if (pos == c->heap_len)
        return;
    heap_set(c, pos, last);
    heap_up(c, pos);
    heap_down(c, c->nodes[last].heap_pos);
}

kvr_prefix_cache *kvr_prefix_cache_create(size_t capacity_blocks)
{
    if (capacity_blocks >= NONE)
        return NULL;
    kvr_prefix_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->capacity = capacity_blocks;
    c->free_head = NONE;
    kvr_u64map_init(&c->by_key);
    return c;
}

void kvr_prefix_cache_clear(kvr_prefix_cache *c)
{
    free(c->nodes);
    free(c->heap);
    c->nodes = NULL;
    c->heap = NULL;
    c->nodes_cap = c->nodes_used = c->heap_len = 0;
    c->free_head = NONE;
    c->size = 0;
    kvr_u64map_clear(&c->by_key);
}

void kvr_prefix_cache_destroy(kvr_prefix_cache *c)
{
    if (!c)
        return;
    kvr_prefix_cache_clear(c);
    free(c->evict_buf);
    free(c);
}

size_t kvr_prefix_cache_size(const kvr_prefix_cache *c) { return c->size; }

static uint32_t find(const kvr_prefix_cache *c, uint64_t key)
{
    uint64_t v;
    return kvr_u64map_get(&c->by_key, key, &v) ? (uint32_t)v : NONE;
}

bool kvr_prefix_cache_contains(const kvr_prefix_cache *c, uint64_t key)
{
    return find(c, key) != NONE;
}

/* Walks the cached prefix and stamps it with a fresh tick, so everything in
 * this request is newer than any other block. */
static size_t touch_prefix(kvr_prefix_cache *c, const uint64_t *keys, size_t n, uint32_t *last)
{
    uint64_t t = ++c->tick;
    uint32_t prev = NONE;
    size_t i = 0;
    for (; i < n; i++) {
        uint32_t id = find(c, keys[i]);
        if (id == NONE || c->nodes[id].parent != prev)
            break;
        c->nodes[id].tick = t;
        if (c->nodes[id].heap_pos != NONE)
            heap_down(c, c->nodes[id].heap_pos);
        prev = id;
    }
    *last = prev;
    return i;
}

size_t kvr_prefix_cache_match(kvr_prefix_cache *c, const uint64_t *keys, size_t n)
{
    uint32_t last;
    return touch_prefix(c, keys, n, &last);
}

static uint32_t alloc_node(kvr_prefix_cache *c)
{
    if (c->free_head != NONE) {
        uint32_t id = c->free_head;
        c->free_head = c->nodes[id].parent;
        return id;
    }
    if (c->nodes_used == c->nodes_cap) {
        size_t ncap = c->nodes_cap ? (size_t)c->nodes_cap * 2 : 64;
        if (ncap > c->capacity)
            ncap = c->capacity;
        if (ncap <= c->nodes_cap)
            return NONE;
        pc_node *nn = realloc(c->nodes, ncap * sizeof *nn);
        uint32_t *nh = realloc(c->heap, ncap * sizeof *nh);
        if (nn)
            c->nodes = nn;
        if (nh)
            c->heap = nh;
        if (!nn || !nh)
            return NONE;
        c->nodes_cap = (uint32_t)ncap;
    }
    return c->nodes_used++;
}

static bool evict_one(kvr_prefix_cache *c, uint64_t now)
{
    if (c->heap_len == 0)
        return false;
    uint32_t id = c->heap[0];
    if (c->nodes[id].tick >= now)
        return false; /* only this request's blocks are left */
    if (c->size > c->evict_cap) {
        size_t ncap = c->evict_cap ? c->evict_cap * 2 : 64;
        while (ncap < c->size)
            ncap *= 2;
        uint64_t *nb = realloc(c->evict_buf, ncap * sizeof *nb);
        if (!nb)
            return false;
        c->evict_buf = nb;
        c->evict_cap = ncap;
    }
    heap_remove(c, id);
    pc_node *nd = &c->nodes[id];
    kvr_u64map_del(&c->by_key, nd->key, NULL);
    uint32_t parent = nd->parent;
    nd->parent = c->free_head;
    c->free_head = id;
    c->size--;
    if (parent != NONE && --c->nodes[parent].nchildren == 0)
        heap_push(c, parent);
    return true;
}

size_t kvr_prefix_cache_insert(kvr_prefix_cache *c, const uint64_t *keys, size_t n,
                               const kvr_prefix_cache_sink *sink)
{
    if (n > c->capacity)
        n = c->capacity;
    uint32_t prev;
    size_t m = touch_prefix(c, keys, n, &prev);
    if (m == n)
        return 0;
    uint64_t now = c->tick;
    size_t evicted = 0;
    while (c->size + (n - m) > c->capacity && evict_one(c, now))
        c->evict_buf[evicted++] = c->nodes[c->free_head].key;
    if (evicted && sink && sink->evicted)
        sink->evicted(sink->ud, c->evict_buf, evicted);
    size_t stored = 0;
    for (size_t i = m; i < n && c->size < c->capacity; i++) {
        /* A key cached elsewhere (a chain-key collision or a repeated key)
         * cannot be stored twice: stop the chain there. */
        if (find(c, keys[i]) != NONE)
            break;
        uint32_t id = alloc_node(c);
        if (id == NONE || kvr_u64map_put(&c->by_key, keys[i], id) < 0) {
            if (id != NONE) {
                c->nodes[id].parent = c->free_head;
                c->free_head = id;
            }
            break;
        }
        pc_node *nd = &c->nodes[id];
        nd->key = keys[i];
        nd->tick = now;
        nd->parent = prev;
        nd->nchildren = 0;
        nd->heap_pos = NONE;
        if (prev != NONE) {
            if (c->nodes[prev].nchildren++ == 0 && c->nodes[prev].heap_pos != NONE)
                heap_remove(c, prev);
        }
        prev = id;
        c->size++;
        stored++;
    }
    if (stored) {
        heap_push(c, prev);
        if (sink && sink->stored)
            sink->stored(sink->ud, m > 0, m > 0 ? keys[m - 1] : 0, keys + m, stored);
    }
    return stored;
}
