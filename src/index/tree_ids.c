#include "index/tree_ids.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 64u
#define MAX_CAP (1u << 31)

void kvr_ids_init(kvr_ids *a) { memset(a, 0, sizeof *a); }

void kvr_ids_free(kvr_ids *a)
{
    free(a->bits);
    kvr_ids_init(a);
}

size_t kvr_ids_bytes(const kvr_ids *a)
{
    if (!a->bits)
        return 0;
    return (size_t)(a->off[a->nlevels - 1] + 1) * sizeof(uint64_t);
}

static uint32_t words_for(uint32_t n) { return (n + 63) / 64; }

/* Rebuilds the bitmap for new_cap keeping the used bits of ids below it
 * (the caller guarantees none above). */
static int rebuild(kvr_ids *a, uint32_t new_cap)
{
    uint32_t nw[KVR_IDS_LEVELS], off[KVR_IDS_LEVELS], total = 0;
    int nl = 0;
    uint32_t n = new_cap;
    do {
        nw[nl] = words_for(n);
        off[nl] = total;
        total += nw[nl];
        n = nw[nl];
        nl++;
    } while (nw[nl - 1] > 1);
    uint64_t *bits = calloc(total, sizeof *bits);
    if (!bits)
        return -1;
    if (a->bits) {
        uint32_t keep = words_for(a->cap < new_cap ? a->cap : new_cap);
        memcpy(bits, a->bits, keep * sizeof *bits);
        /* the old padding bits of the last word are not ids any more */
        if (a->cap < new_cap && a->cap % 64)
            bits[keep - 1] &= (1ULL << (a->cap % 64)) - 1;
    }
    for (int l = 0; l < nl; l++) {
        uint32_t valid = l == 0 ? new_cap : nw[l - 1];
        if (valid % 64)
            bits[off[l] + nw[l] - 1] |= ~0ULL << (valid % 64);
        if (l + 1 < nl)
            for (uint32_t w = 0; w < nw[l]; w++)
                if (bits[off[l] + w] == ~0ULL)
                    bits[off[l + 1] + w / 64] |= 1ULL << (w % 64);
    }
    free(a->bits);
    a->bits = bits;
    memcpy(a->off, off, sizeof off);
    a->nlevels = nl;
    a->cap = new_cap;
    return 0;
}

uint32_t kvr_ids_get(kvr_ids *a)
{
    if (a->count == a->cap) {
        uint32_t ncap = a->cap ? a->cap * 2 : MIN_CAP;
        if (a->cap >= MAX_CAP || rebuild(a, ncap) < 0)
            return UINT32_MAX;
    }
    uint32_t w = 0;
    for (int l = a->nlevels - 1; l >= 0; l--)
        w = w * 64 + (uint32_t)__builtin_ctzll(~a->bits[a->off[l] + w]);
    kvr_ids_mark(a, w);
    a->count++;
    if (w >= a->top)
        a->top = w + 1;
    return w;
}

/* Bits [bit, bit + n) of leaf word w become set; when the word fills,
 * the levels above learn it. */
static void mark_bits(kvr_ids *a, uint32_t w, uint32_t bit, uint32_t n)
{
    uint64_t *word = &a->bits[w];
    *word |= (n == 64 ? ~0ULL : ((1ULL << n) - 1)) << bit;
    for (int l = 1; l < a->nlevels && *word == ~0ULL; l++) {
        word = &a->bits[a->off[l] + w / 64];
        *word |= 1ULL << (w % 64);
        w /= 64;
    }
}

/* Bits [bit, bit + n) of leaf word w become clear; a word that was full
 * tells the levels above. */
static void clear_bits(kvr_ids *a, uint32_t w, uint32_t bit, uint32_t n)
{
    uint64_t *word = &a->bits[w];
    bool was_full = *word == ~0ULL;
    *word &= ~((n == 64 ? ~0ULL : ((1ULL << n) - 1)) << bit);
    for (int l = 1; l < a->nlevels && was_full; l++) {
        word = &a->bits[a->off[l] + w / 64];
        was_full = *word == ~0ULL;
        *word &= ~(1ULL << (w % 64));
        w /= 64;
    }
}

uint32_t kvr_ids_take_range(kvr_ids *a, uint32_t id, uint32_t max)
{
    uint32_t n = 0;
    while (n < max && id + n < a->cap) {
        uint32_t x = id + n, w = x / 64, bit = x % 64;
        /* free ids from bit on: the low set bits of ~word >> bit (bits
         * past cap are marked used, so the run stops there) */
        uint64_t free_run = ~a->bits[w] >> bit;
        uint32_t run = ~free_run ? (uint32_t)__builtin_ctzll(~free_run) : 64;
        if (run > 64 - bit)
            run = 64 - bit;
        if (run > max - n)
            run = max - n;
        if (!run)
            break;
        mark_bits(a, w, bit, run);
        n += run;
        if (bit + run < 64 && n < max)
            break; /* stopped by a used id */
    }
    a->count += n;
    if (n && id + n > a->top)
        a->top = id + n;
    return n;
}

/* After ids were freed: the new top, a word at a time, and a smaller
 * bitmap when the top half is free. */
static void after_put(kvr_ids *a, uint32_t id, uint32_t n)
{
    if (a->count == 0) {
        kvr_ids_free(a);
        return;
    }
    if (id + n == a->top) {
        uint32_t w = (a->top - 1) / 64;
        uint64_t word = a->bits[w] & (a->top % 64 ? (1ULL << (a->top % 64)) - 1 : ~0ULL);
        while (word == 0)
            word = a->bits[--w];
        a->top = w * 64 + 64 - (uint32_t)__builtin_clzll(word);
    }
    if (a->cap > MIN_CAP && a->top <= a->cap / 2) {
        uint32_t cap = (a->top + a->top / 4 + 63) / 64 * 64;
        rebuild(a, cap < MIN_CAP ? MIN_CAP : cap); /* on OOM keep the larger bitmap */
    }
}

void kvr_ids_put_range(kvr_ids *a, uint32_t id, uint32_t n)
{
    for (uint32_t x = id, end = id + n; x < end;) {
        uint32_t bit = x % 64, run = 64 - bit < end - x ? 64 - bit : end - x;
        clear_bits(a, x / 64, bit, run);
        x += run;
    }
    a->count -= n;
    if (n)
        after_put(a, id, n);
}

void kvr_ids_put(kvr_ids *a, uint32_t id)
{
    if (!kvr_ids_used(a, id))
        return;
    clear_bits(a, id / 64, id % 64, 1);
    a->count--;
    after_put(a, id, 1);
}
