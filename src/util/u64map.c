#include "util/u64map.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 16u

void kvr_u64map_init(kvr_u64map *m)
{
    m->slots = NULL;
    m->cap = 0;
    m->len = 0;
    m->has_zero = false;
    m->zero_val = 0;
}

void kvr_u64map_free(kvr_u64map *m)
{
    free(m->slots);
    kvr_u64map_init(m);
}

void kvr_u64map_clear(kvr_u64map *m)
{
    kvr_u64map_free(m);
}

void kvr_u64map_reset(kvr_u64map *m)
{
    if (m->len)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->len = 0;
    m->has_zero = false;
    m->zero_val = 0;
}

size_t kvr_u64map_bytes(const kvr_u64map *m)
{
    return m->cap * sizeof(kvr_u64map_slot);
}

uint64_t *kvr_u64map_find(const kvr_u64map *m, uint64_t key)
{
    if (key == 0)
        return m->has_zero ? (uint64_t *)&m->zero_val : NULL;
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = kvr_mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->slots[i].key == key)
            return &m->slots[i].val;
        if (m->slots[i].key == 0)
            return NULL;
    }
}

static void insert_fresh(kvr_u64map_slot *slots, size_t cap, uint64_t key, uint64_t val)
{
    size_t mask = cap - 1;
    size_t i = kvr_mix64(key) & mask;
    while (slots[i].key != 0)
        i = (i + 1) & mask;
    slots[i].key = key;
    slots[i].val = val;
}

static int resize(kvr_u64map *m, size_t new_cap)
{
    if (new_cap == 0) {
        free(m->slots);
        m->slots = NULL;
        m->cap = 0;
        return 0;
    }
    kvr_u64map_slot *slots = calloc(new_cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key != 0)
            insert_fresh(slots, new_cap, m->slots[i].key, m->slots[i].val);
    free(m->slots);
    m->slots = slots;
    m->cap = new_cap;
    return 0;
}

/* Max load 3/4 keeps probe chains short: put grows past it, reserve
 * grows to stay under it. */
static bool overfull(size_t len, size_t cap) { return len * 4 > cap * 3; }

int kvr_u64map_reserve(kvr_u64map *m, size_t n)
{
    if (n == 0)
        return 0;
    size_t cap = m->cap ? m->cap : MIN_CAP;
    while (overfull(n, cap))
        cap *= 2;
    return cap == m->cap ? 0 : resize(m, cap);
}

int kvr_u64map_put(kvr_u64map *m, uint64_t key, uint64_t val)
{
    if (key == 0) {
        int existed = m->has_zero;
        m->has_zero = true;
        m->zero_val = val;
        return existed;
    }
    uint64_t *p = kvr_u64map_find(m, key);
    if (p) {
        *p = val;
        return 1;
    }
    if (overfull(m->len + 1, m->cap) && resize(m, m->cap ? m->cap * 2 : MIN_CAP) != 0)
        return -1;
    insert_fresh(m->slots, m->cap, key, val);
    m->len++;
    return 0;
}

bool kvr_u64map_del(kvr_u64map *m, uint64_t key, uint64_t *val)
{
    if (key == 0) {
        if (!m->has_zero)
            return false;
        if (val)
            *val = m->zero_val;
        m->has_zero = false;
        return true;
    }
    if (m->cap == 0)
        return false;
    size_t mask = m->cap - 1;
    size_t i = kvr_mix64(key) & mask;
    while (m->slots[i].key != key) {
        if (m->slots[i].key == 0)
            return false;
        i = (i + 1) & mask;
    }
    if (val)
        *val = m->slots[i].val;
    /* Backward-shift: pull later entries of the probe run into the hole so
     * lookups never need tombstones. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->slots[j].key != 0; j = (j + 1) & mask) {
        size_t home = kvr_mix64(m->slots[j].key) & mask;
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        bool home_after_hole = (hole <= j) ? (home > hole && home <= j)
                                           : (home > hole || home <= j);
        if (!home_after_hole) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].key = 0;
    m->slots[hole].val = 0;
    m->len--;
    /* Shrink at 1/8 load so a drained map gives its memory back. */
    if (m->len == 0)
        resize(m, 0);
    else if (m->cap > MIN_CAP && m->len * 8 < m->cap)
        resize(m, m->cap / 2);
    return true;
}

bool kvr_u64map_next(const kvr_u64map *m, size_t *it, uint64_t *key, uint64_t *val)
{
    /* it 0 visits the aside key-0 entry; it k >= 1 visits slot k-1. */
    if (*it == 0) {
        *it = 1;
        if (m->has_zero) {
            *key = 0;
            *val = m->zero_val;
            return true;
        }
    }
    while (*it - 1 < m->cap) {
        size_t i = *it - 1;
        (*it)++;
        if (m->slots[i].key != 0) {
            *key = m->slots[i].key;
            *val = m->slots[i].val;
            return true;
        }
    }
    return false;
}
