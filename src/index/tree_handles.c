#include "index/tree_handles.h"

#include <stdlib.h>

#define MIN_CAP 8u

void kvr_handles_init(kvr_handles *m)
{
    m->slots = NULL;
    m->cap = m->len = 0;
}

void kvr_handles_free(kvr_handles *m)
{
    free(m->slots);
    kvr_handles_init(m);
}

size_t kvr_handles_len(const kvr_handles *m) { return m->len; }
size_t kvr_handles_bytes(const kvr_handles *m) { return (size_t)m->cap * sizeof(kvr_handle_slot); }

/* Slot holding key, or UINT32_MAX. */
static uint32_t find(const kvr_handles *m, uint64_t key, kvr_handle_check check, const void *ctx)
{
    if (m->cap == 0)
        return UINT32_MAX;
    uint32_t fp = kvr_handle_fp(key);
    for (uint32_t i = kvr_fastrange(fp, m->cap);; i = kvr_probe_next(i, m->cap)) {
        const kvr_handle_slot *s = &m->slots[i];
        if (!s->node)
            return UINT32_MAX;
        if (s->fp == fp && check(ctx, s->node, key))
            return i;
    }
}

uint32_t kvr_handles_get(const kvr_handles *m, uint64_t key, kvr_handle_check check,
                         const void *ctx)
{
    uint32_t i = find(m, key, check, ctx);
    return i == UINT32_MAX ? KVR_HANDLE_NONE : m->slots[i].node;
}

static void place(kvr_handle_slot *slots, uint32_t cap, kvr_handle_slot s)
{
    uint32_t j = kvr_fastrange(s.fp, cap);
    while (slots[j].node)
        j = kvr_probe_next(j, cap);
    slots[j] = s;
}

static int resize(kvr_handles *m, uint32_t new_cap)
{
    kvr_handle_slot *slots = NULL;
    if (new_cap) {
        slots = calloc(new_cap, sizeof *slots);
        if (!slots)
            return -1;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->slots[i].node)
                place(slots, new_cap, m->slots[i]);
    }
    free(m->slots);
    m->slots = slots;
    m->cap = new_cap;
    return 0;
}

int kvr_handles_add(kvr_handles *m, uint64_t key, uint32_t node)
{
    /* max load 85% and 1.5x growth: one entry per ownership, so the load
     * factor is most of the index's bytes per ownership */
    if ((uint64_t)(m->len + 1) * 20 > (uint64_t)m->cap * 17 &&
        resize(m, m->cap ? m->cap + m->cap / 2 : MIN_CAP) < 0)
        return -1;
    place(m->slots, m->cap, (kvr_handle_slot){kvr_handle_fp(key), node});
    m->len++;
    return 0;
}

bool kvr_handles_del(kvr_handles *m, uint64_t key, uint32_t node)
{
    if (m->cap == 0)
        return false;
    uint32_t fp = kvr_handle_fp(key);
    uint32_t i = kvr_fastrange(fp, m->cap);
    while (m->slots[i].fp != fp || m->slots[i].node != node) {
        if (!m->slots[i].node)
            return false;
        i = kvr_probe_next(i, m->cap);
    }
    uint32_t hole = i;
    for (uint32_t j = kvr_probe_next(i, m->cap); m->slots[j].node; j = kvr_probe_next(j, m->cap)) {
        if (!kvr_probe_stays(hole, j, kvr_fastrange(m->slots[j].fp, m->cap))) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole] = (kvr_handle_slot){0, 0};
    m->len--;
    if (m->len == 0)
        resize(m, 0);
    else if (m->cap > MIN_CAP && m->len * 8 < m->cap)
        resize(m, m->cap / 2); /* on OOM keep the larger table */
    return true;
}

bool kvr_handles_next(const kvr_handles *m, size_t *it, uint32_t *node)
{
    while (*it < m->cap) {
        const kvr_handle_slot *s = &m->slots[(*it)++];
        if (s->node) {
            *node = s->node;
            return true;
        }
    }
    return false;
}
