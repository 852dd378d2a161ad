/* The common event shapes decoded straight-line: a tagged BlockStored or
 * BlockRemoved (SGLang's one event per page, vLLM's tagged form) whose
 * fields hold what engines send in practice — integer hashes and tokens,
 * a nil or integer parent, a medium string, nil or a string at position 7,
 * and no tail but nils. The general readers (event.c, fields.c) dispatch on
 * every field's type through a table of field readers: about 50
 * instructions a field, as much as the rest of ingestion. Any other shape,
 * and any value the general path would drop, is left to it untouched, so
 * this path decodes a subset of what event.c does, to the same event. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <string.h>

/* nil: true, *p past it */
static inline bool take_nil(const char **p)
{
    if ((unsigned char)**p != 0xc0)
        return false;
    ++*p;
    return true;
}

/* n non-negative integers at *p into dst and, when dst32 is not NULL, as
 * u32 into dst32 too, with the largest in *top (wide when it is not below
 * KVR_WIDE_SENTINEL: a running maximum is a compare and a move an id, where
 * a flag cost a compare, a set and an or; 0 without dst32, where no view
 * is kept). False for any other item. */
static inline __attribute__((always_inline)) bool
take_ids(const char **p, uint64_t *dst, uint32_t *dst32, uint32_t n, uint64_t *top)
{
    const char *q = *p;
    uint64_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v;
        /* uint 32 first: token ids of today's vocabularies (> 65535) */
        if (__builtin_expect((unsigned char)*q == 0xce, 1)) {
            const char *w = q + 1;
            v = mp_load_u32(&w);
            q = w;
        } else if (!kvr_wire_take_uint(&q, &v)) {
            return false;
        }
        dst[i] = v;
        if (dst32) {
            dst32[i] = (uint32_t)v;
            m = v > m ? v : m;
        }
    }
    *top = m;
    *p = q;
    return true;
}

/* An array of non-negative integers, at most max, into the scratch after
 * what the event uses; with `view` and at most KVR_WIRE_U32_VIEW_MAX of
 * them, their u32 view after them (*out32, NULL when an id is not below
 * KVR_WIDE_SENTINEL). False (nothing kept) for any other shape. */
/* always inlined: each of its two calls is specialised (hashes without the
 * view, tokens with it), which took 68 instructions off an event */
static inline __attribute__((always_inline)) bool
take_uints(kvr_batch *b, kvr_raw_event *ev, size_t *used, const char **p, uint32_t max,
           bool view, const uint64_t **out, uint32_t *n_out, const uint32_t **out32)
{
    const char *q = *p;
    uint32_t n;
    if (((unsigned char)*q & 0xf0) == 0x90) /* fixarray: what engines send for a page */
        n = (unsigned char)*q++ & 0x0f;
    else if (mp_typeof(*q) == MP_ARRAY)
        n = mp_decode_array(&q);
    else
        return false;
    /* nothing is reserved for another shape (Eagle bigrams: arrays) */
    if (n > max || (n && mp_typeof(*q) != MP_UINT))
        return false;
    if (n == 0) { /* nothing to keep (the scratch may not exist yet) */
        *out = NULL;
        *n_out = 0;
        if (out32)
            *out32 = NULL;
        *p = q;
        return true;
    }
    view = view && n <= KVR_WIRE_U32_VIEW_MAX;
    size_t words = n + (view ? (n + 1) / 2 : 0);
    if (words > b->u64_cap - *used && !kvr_wire_u64_reserve(b, ev, *used, words))
        return false;
    uint64_t *dst = b->u64_buf + *used;
    uint32_t *dst32 = view ? (uint32_t *)(dst + n) : NULL;
    /* two copies of the loop, with the view and without */
    uint64_t top = 0;
    if (!(view ? take_ids(&q, dst, dst32, n, &top) : take_ids(&q, dst, NULL, n, &top)))
        return false;
    *out = dst;
    *n_out = n;
    if (out32)
        *out32 = view && top < KVR_WIDE_SENTINEL ? dst32 : NULL;
    *used += words;
    *p = q;
    return true;
}

/* The medium other than "GPU": the table; nil is gpu. */
static bool take_other_medium(const char **p, kvr_tier *tier)
{
    const char *q = *p;
    if (take_nil(p))
        return true; /* ev->tier is gpu already */
    if (mp_typeof(*q) != MP_STR)
        return false;
    kvr_str m;
    m.ptr = mp_decode_str(&q, &m.len);
    int t = kvr_wire_medium_tier(m);
    if (t < 0)
        return false;
    *tier = (kvr_tier)t;
    *p = q;
    return true;
}

/* The medium: "GPU" as SGLang and vLLM write it checked inline (the call
 * cost as much as the check), anything else out of line. */
static inline bool take_medium(const char **p, kvr_tier *tier)
{
    const char *q = *p;
    if ((unsigned char)*q == 0xa3 && q[1] == 'G' && q[2] == 'P' && q[3] == 'U') {
        *tier = KVR_TIER_GPU;
        *p = q + 4;
        return true;
    }
    return take_other_medium(p, tier);
}

/* n values that must all be nil (the layout's tail when unused) */
static bool take_nils(const char **p, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!take_nil(p))
            return false;
    return true;
}

/* [tag, hashes, parent, tokens, block_size(, lora_id(, medium(, pos7(, nil...))))] */
static bool stored(kvr_batch *b, kvr_raw_event *ev, const char **p, uint32_t n)
{
    size_t used = 0;
    uint64_t v;
    if (n < 5 || n > 13 ||
        !take_uints(b, ev, &used, p, KVR_WIRE_MAX_HASHES, false, &ev->block_hashes,
                    &ev->n_block_hashes, NULL))
        return false;
    if (!take_nil(p)) {
        if (!kvr_wire_take_uint(p, &ev->parent))
            return false;
        ev->has_parent = true;
    }
    /* the Eagle bigram form (arrays for tokens) is left to the general path */
    if (!take_uints(b, ev, &used, p, KVR_WIRE_MAX_TOKENS, true, &ev->token_ids,
                    &ev->n_token_ids, &ev->token_ids_u32) ||
        !kvr_wire_take_uint(p, &v) || v > UINT32_MAX)
        return false;
    ev->block_size = (uint32_t)v;
    if (n > 5 && !take_nil(p)) {
        if (!kvr_wire_take_uint(p, &v) || v > INT64_MAX)
            return false;
        ev->has_lora_id = true;
        ev->lora_id = (int64_t)v;
    }
    if (n > 6 && !take_medium(p, &ev->tier))
        return false;
    if (n > 7 && !take_nil(p)) {
        if (mp_typeof(**p) != MP_STR)
            return false; /* the SGLang metadata map */
        ev->lora_name.ptr = mp_decode_str(p, &ev->lora_name.len);
    }
    if (n > 8 && !take_nils(p, n - 8))
        return false;
    ev->type = KVR_EV_STORED;
    return true;
}

/* [tag, hashes(, medium(, nil...))] */
static bool removed(kvr_batch *b, kvr_raw_event *ev, const char **p, uint32_t n)
{
    size_t used = 0;
    if (n < 2 || n > 7 ||
        !take_uints(b, ev, &used, p, KVR_WIRE_MAX_HASHES, false, &ev->block_hashes,
                    &ev->n_block_hashes, NULL))
        return false;
    if (n > 2 && !take_medium(p, &ev->tier))
        return false;
    if (n > 3 && !take_nils(p, n - 3))
        return false;
    ev->type = KVR_EV_REMOVED;
    return true;
}

bool kvr_wire_decode_event_fast(kvr_batch *b, const char **cur)
{
    const char *p = *cur;
    unsigned char c = (unsigned char)*p;
    if (c < 0x92 || c > 0x9d) /* a fixarray of 2..13 elements */
        return false;
    uint32_t n = c & 0x0f;
    p++;
    kvr_raw_event *ev = &b->ev;
    if (b->ev_fast_clean) {
        /* after a fast event, only the fields this path sets can be
         * non-zero: ~200 bytes cleared per event cost 38 instructions */
        ev->has_parent = false;
        ev->parent = 0;
        ev->block_hashes = NULL;
        ev->n_block_hashes = 0;
        ev->token_ids = NULL;
        ev->n_token_ids = 0;
        ev->token_ids_u32 = NULL;
        ev->block_size = 0;
        ev->has_lora_id = false;
        ev->lora_id = 0;
        ev->lora_name = (kvr_str){NULL, 0};
    } else {
        memset(ev, 0, sizeof *ev);
        b->ev_fast_clean = true;
    }
    ev->tier = KVR_TIER_GPU;
    bool ok;
    if ((unsigned char)*p == 0xab && memcmp(p + 1, "BlockStored", 11) == 0) {
        p += 12;
        ok = stored(b, ev, &p, n);
    } else if ((unsigned char)*p == 0xac && memcmp(p + 1, "BlockRemoved", 12) == 0) {
        p += 13;
        ok = removed(b, ev, &p, n);
    } else {
        return false;
    }
    if (ok)
        *cur = p;
    return ok;
}
