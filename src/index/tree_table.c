/* Open-addressing id tables of the prefix index: fingerprint/id tables
 * (tree_table.h) and bare-id tables (tree_keytab.h), sized alike. */
#include "index/tree_keytab.h"

#include <stdlib.h>
#include <sys/mman.h>

#define MIN_CAP 8u

void kvr_idtab_init(kvr_idtab *t)
{
    t->slot = NULL;
    t->cap = t->len = 0;
}

void kvr_idtab_free(kvr_idtab *t)
{
    free(t->slot);
    kvr_idtab_init(t);
}

size_t kvr_idtab_bytes(const kvr_idtab *t) { return (size_t)t->cap * sizeof(uint64_t); }

static bool overfull(uint64_t len, uint32_t cap) { return kvr_idtab_overfull(len, cap); }
static bool sparse(uint64_t len, uint32_t cap) { return kvr_idtab_sparse(len, cap); }

static uint32_t fit_cap(uint64_t cap, uint64_t len)
{
    if (len == 0)
        return 0;
    if (overfull(len, (uint32_t)cap)) {
        /* Doubling: an entry is moved about once over a table's growth
         * (twice at 1.5x), and a grown table probes shorter (load 0.4, not
         * 0.53). The engine table, sized from this with twice the slots of
         * half the width (kvr_keytab_fit_cap), holds one slot per block, so
         * its bytes are a good part of the bytes per block: those of 0.4-0.8
         * here keep them under 32 per ownership on the benchmark streams. */
        for (cap = cap ? cap : MIN_CAP; overfull(len, (uint32_t)cap); cap *= 2)
            if (cap >= UINT32_MAX / 2)
                return UINT32_MAX;
        return (uint32_t)cap;
    }
    while (sparse(len, (uint32_t)cap) && !overfull(len, (uint32_t)(cap / 2)))
        cap /= 2;
    return (uint32_t)cap;
}

uint32_t kvr_idtab_fit_cap(const kvr_idtab *t, uint64_t len) { return fit_cap(t->cap, len); }

static void place(uint64_t *slots, uint32_t cap, uint64_t s)
{
    uint32_t i = kvr_fastrange(kvr_idtab_fp(s), cap);
    while (slots[i])
        i = kvr_probe_next(i, cap);
    slots[i] = s;
}

/* Large tables are probed at random: ask for transparent huge pages so a
 * probe does not also miss the TLB (a hint; ignored where THP is off). */
static void hugepage_hint(void *p, size_t bytes)
{
    const uintptr_t huge = 2u << 20;
    if (bytes < 2 * huge)
        return;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t b = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (b > a)
        madvise((void *)a, b - a, MADV_HUGEPAGE);
}

/* A zeroed array of cap slots of `width` bytes (both table shapes); NULL
 * on OOM. */
static void *slots_alloc(uint32_t cap, size_t width)
{
    void *s = calloc(cap, width);
    if (s)
        hugepage_hint(s, (size_t)cap * width);
    return s;
}

uint64_t *kvr_idtab_rehash(const kvr_idtab *t, uint32_t cap)
{
    if (cap == 0)
        return NULL;
    uint64_t *s = slots_alloc(cap, sizeof *s);
    if (!s)
        return NULL;
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->slot[i])
            place(s, cap, t->slot[i]);
    return s;
}

uint64_t *kvr_idtab_install(kvr_idtab *t, uint64_t *slots, uint32_t cap)
{
    uint64_t *old = t->slot;
    t->slot = slots;
    t->cap = slots ? cap : 0;
    return old;
}

int kvr_idtab_reserve(kvr_idtab *t, uint32_t more)
{
    uint32_t cap = kvr_idtab_fit_cap(t, (uint64_t)t->len + more);
    if (cap == UINT32_MAX)
        return -1;
    if (cap == t->cap)
        return 0;
    uint64_t *s = kvr_idtab_rehash(t, cap);
    if (cap && !s)
        return -1;
    free(kvr_idtab_install(t, s, cap));
    return 0;
}

int kvr_idtab_add(kvr_idtab *t, uint64_t slot)
{
    if (kvr_idtab_room(t, 1) < 0)
        return -1;
    place(t->slot, t->cap, slot);
    t->len++;
    return 0;
}

void kvr_idtab_replace(kvr_idtab *t, uint64_t old_slot, uint64_t new_slot)
{
    t->slot[kvr_idtab_find(t, old_slot)] = new_slot;
}

/* ---- bare-id tables (tree_keytab.h) ---- */

void kvr_keytab_init(kvr_keytab *t)
{
    t->slot = NULL;
    t->cap = t->len = 0;
}

void kvr_keytab_free(kvr_keytab *t)
{
    free(t->slot);
    kvr_keytab_init(t);
}

size_t kvr_keytab_bytes(const kvr_keytab *t) { return (size_t)t->cap * sizeof(uint32_t); }

/* Twice the slots of the fingerprint table's size for len: a 4-byte slot
 * at half the load, the same bytes, the same rebuild points. */
uint32_t kvr_keytab_fit_cap(const kvr_keytab *t, uint64_t len)
{
    uint32_t half = fit_cap(t->cap / 2, len);
    if (half == UINT32_MAX || half > UINT32_MAX / 2)
        return UINT32_MAX;
    return half * 2;
}

uint32_t *kvr_keytab_alloc(uint32_t cap) { return slots_alloc(cap, sizeof(uint32_t)); }

uint32_t *kvr_keytab_install(kvr_keytab *t, uint32_t *slots, uint32_t cap)
{
    uint32_t *old = t->slot;
    t->slot = slots;
    t->cap = slots ? cap : 0;
    return old;
}

int kvr_keytab_reserve(kvr_keytab *t, uint32_t more, kvr_keytab_fp_fn fp_of, const void *ctx)
{
    uint32_t cap = kvr_keytab_fit_cap(t, (uint64_t)t->len + more);
    if (cap == UINT32_MAX)
        return -1;
    if (cap == t->cap)
        return 0;
    uint32_t *s = kvr_keytab_rehash(t, cap, fp_of, ctx);
    if (cap && !s)
        return -1;
    free(kvr_keytab_install(t, s, cap));
    return 0;
}
