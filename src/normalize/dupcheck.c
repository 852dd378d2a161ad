#include "normalize/dupcheck.h"

#include <stdlib.h>
#include <string.h>

#include "util/u64map.h"

/* Below this many ids a pairwise scan is cheaper than clearing a table. */
#define PAIRWISE_MAX 16u

void kvr_dupcheck_init(kvr_dupcheck *d)
{
    d->slots = NULL;
    d->cap = 0;
}

void kvr_dupcheck_free(kvr_dupcheck *d)
{
    free(d->slots);
    kvr_dupcheck_init(d);
}

static bool pairwise(bool has_parent, uint64_t parent, const uint64_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (has_parent && h[i] == parent)
            return true;
        for (size_t j = i + 1; j < n; j++)
            if (h[i] == h[j])
                return true;
    }
    return false;
}

/* Inserts key; returns true if it was already there. 0 marks empty slots, so
 * the caller tracks key 0 aside. */
static bool insert(uint64_t *slots, size_t mask, uint64_t key)
{
    for (size_t i = kvr_mix64(key) & mask;; i = (i + 1) & mask) {
        if (slots[i] == key)
            return true;
        if (slots[i] == 0) {
            slots[i] = key;
            return false;
        }
    }
}

bool kvr_dupcheck_has_repeat_in(kvr_dupcheck *d, bool has_parent, uint64_t parent,
                                const uint64_t *hashes, size_t n)
{
    size_t total = n + (has_parent ? 1 : 0);
    if (total < 2)
        return false;
    if (total <= PAIRWISE_MAX)
        return pairwise(has_parent, parent, hashes, n);

    size_t cap = 32;
    while (cap < 2 * total)
        cap *= 2;
    if (cap > d->cap) {
        uint64_t *s = realloc(d->slots, cap * sizeof *s);
        if (!s)
            return true;
        d->slots = s;
        d->cap = cap;
    }
    /* Only the part used for this store is cleared: O(n) per check. */
    memset(d->slots, 0, cap * sizeof *d->slots);
    size_t mask = cap - 1;
    bool zero_seen = false;
    for (size_t i = 0; i < total; i++) {
        uint64_t key = i < n ? hashes[i] : parent;
        if (key == 0) {
            if (zero_seen)
                return true;
            zero_seen = true;
        } else if (insert(d->slots, mask, key)) {
            return true;
        }
    }
    return false;
}
