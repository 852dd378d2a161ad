#include "index/tree_handles.h"

#include <stdlib.h>

#include "util/u64map.h"

#define MIN_CAP 8u

void kvr_handles_init(kvr_handles *m)
{
    m->slots = NULL;
    m->cap = m->len = 0;
    m->has_zero = false;
    m->zero_val = 0;
}

void kvr_handles_free(kvr_handles *m)
{
    free(m->slots);
    kvr_handles_init(m);
}

size_t kvr_handles_len(const kvr_handles *m) { return m->len + (m->has_zero ? 1u : 0u); }
size_t kvr_handles_bytes(const kvr_handles *m) { return (size_t)m->cap * sizeof(kvr_handle_slot); }

static inline uint32_t home(uint64_t key, uint32_t cap)
{
    return kvr_fastrange((uint32_t)kvr_mix64(key), cap);
}

uint32_t kvr_handles_get(const kvr_handles *m, uint64_t key)
{
    if (key == 0)
        return m->has_zero ? m->zero_val : KVR_HANDLE_NONE;
    if (m->cap == 0)
        return KVR_HANDLE_NONE;
    for (uint32_t i = home(key, m->cap);; i = kvr_probe_next(i, m->cap)) {
        uint64_t k = m->slots[i].key;
        if (k == key)
            return m->slots[i].val;
        if (k == 0)
            return KVR_HANDLE_NONE;
    }
}

static int resize(kvr_handles *m, uint32_t new_cap)
{
    kvr_handle_slot *slots = NULL;
    if (new_cap) {
        slots = calloc(new_cap, sizeof *slots);
        if (!slots)
            return -1;
        for (uint32_t i = 0; i < m->cap; i++) {
            uint64_t k = m->slots[i].key;
            if (k == 0)
                continue;
            uint32_t j = home(k, new_cap);
            while (slots[j].key != 0)
                j = kvr_probe_next(j, new_cap);
            slots[j].key = k;
            slots[j].val = m->slots[i].val;
        }
    }
    free(m->slots);
    m->slots = slots;
    m->cap = new_cap;
    return 0;
}

int kvr_handles_put(kvr_handles *m, uint64_t key, uint32_t val)
{
    if (key == 0) {
        m->has_zero = true;
        m->zero_val = val;
        return 0;
    }
    /* one entry per ownership: max load 4/5 (2x growth: a 1.5x growth saved
     * 3 bytes per entry but cost 40% more replay time in rehash and page
     * clearing) */
    if ((uint64_t)(m->len + 1) * 5 > (uint64_t)m->cap * 4 &&
        resize(m, m->cap ? m->cap * 2 : MIN_CAP) < 0)
        return -1;
    uint32_t i = home(key, m->cap);
    for (;; i = kvr_probe_next(i, m->cap)) {
        uint64_t k = m->slots[i].key;
        if (k == key) {
            m->slots[i].val = val;
            return 0;
        }
        if (k == 0)
            break;
    }
    m->slots[i].key = key;
    m->slots[i].val = val;
    m->len++;
    return 0;
}

bool kvr_handles_del(kvr_handles *m, uint64_t key)
{
    if (key == 0) {
        bool had = m->has_zero;
        m->has_zero = false;
        return had;
    }
    if (m->cap == 0)
        return false;
    uint32_t i = home(key, m->cap);
    while (m->slots[i].key != key) {
        if (m->slots[i].key == 0)
            return false;
        i = kvr_probe_next(i, m->cap);
    }
    uint32_t hole = i;
    for (uint32_t j = kvr_probe_next(i, m->cap); m->slots[j].key != 0;
         j = kvr_probe_next(j, m->cap)) {
        uint32_t h = home(m->slots[j].key, m->cap);
        if (!kvr_probe_stays(hole, j, h)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].key = 0;
    m->len--;
    if (m->len == 0)
        resize(m, 0);
    else if (m->cap > MIN_CAP && m->len * 8 < m->cap)
        resize(m, m->cap / 2); /* on OOM keep the larger table */
    return true;
}

bool kvr_handles_next(const kvr_handles *m, size_t *it, uint64_t *key, uint32_t *val)
{
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
