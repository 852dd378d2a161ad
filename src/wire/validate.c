/* Whole-payload validation: the only place that trusts nothing about the
 * bytes. See wire_internal.h for why mp_check alone is not enough. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <stdint.h>

/* Bytes of an item that is a scalar of at most 32 bytes, by its first byte
 * (1 + msgpuck's hint where the hint is >= 0); 0 for containers (empty
 * fixarray / fixmap included: a level the depth bound counts) and for
 * strings, bins and exts of an explicit length. test_wire_fast_path checks
 * it against mp_parser_hint byte by byte. */
#define R8(v) v, v, v, v, v, v, v, v
const uint8_t kvr_wire_scalar_bytes[256] = {
    R8(1), R8(1), R8(1), R8(1), R8(1), R8(1), R8(1), R8(1),         /* 0x00: fixint */
    R8(1), R8(1), R8(1), R8(1), R8(1), R8(1), R8(1), R8(1),         /* 0x40 */
    R8(0), R8(0), R8(0), R8(0),                                     /* 0x80: fixmap, fixarray */
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,          /* 0xa0: fixstr */
    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, /* 0xb0 */
    1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 5, 9, 2, 3, 5, 9, /* 0xc0: nil, bool, bin, ext, float, uint */
    2, 3, 5, 9, 3, 4, 6, 10, 18, 0, 0, 0, 0, 0, 0, 0, /* 0xd0: int, fixext, str, array, map */
    R8(1), R8(1), R8(1), R8(1),                                     /* 0xe0: negative fixint */
};
#undef R8

/* Steps over the leading scalars of the next n items (token ids, block
 * hashes and an event's small fields are most of a batch), each checked to
 * lie inside [*cur, end) as the walk would; returns how many. */
/* always inlined: called twice per container, where a call costs as much as
 * the few items an event's arrays hold */
static inline __attribute__((always_inline)) uint64_t
skip_scalars(const char **cur, const char *end, uint64_t n)
{
    const char *p = *cur;
    uint64_t k = 0;
    /* while n items of 32 bytes surely fit, no bound check per item */
    if ((uint64_t)(end - p) / 32 >= n) {
        for (; k < n; k++) {
            size_t len = kvr_wire_scalar_bytes[(unsigned char)*p];
            if (!len)
                break;
            p += len;
        }
    } else {
        for (; k < n && p < end; k++) {
            size_t len = kvr_wire_scalar_bytes[(unsigned char)*p];
            if (!len || len > (size_t)(end - p))
                break;
            p += len;
        }
    }
    *cur = p;
    return k;
}

/* An array header (fixarray or array 16, the forms engines send for hashes,
 * tokens and events) at *cur: its count, *cur past it; false, *cur
 * untouched, for any other item. */
static inline __attribute__((always_inline)) bool
take_array_header(const char **cur, const char *end, uint64_t *n)
{
    const char *p = *cur;
    unsigned char c = (unsigned char)*p;
    if ((c & 0xf0) == 0x90) {
        *n = c & 0x0f;
        *cur = p + 1;
        return true;
    }
    if (c == 0xdc && end - p >= 3) {
        p++;
        *n = mp_load_u16(&p);
        *cur = p;
        return true;
    }
    return false;
}

/* The steps over flat arrays below: one over the next n items that takes
 * their leading scalars and arrays whose elements `inner` takes whole,
 * those arrays one level deeper (the caller checked the depth bound has
 * room for it); returns how many. An array holding anything else is left
 * whole to the walk (*cur back at its header), so every count taken here
 * was honest: all its elements lay inside [*cur, end). */
typedef uint64_t skip_fn(const char **cur, const char *end, uint64_t n);

static inline __attribute__((always_inline)) uint64_t
skip_arrays_of(const char **cur, const char *end, uint64_t n, skip_fn *inner)
{
    uint64_t k = 0;
    for (;;) {
        k += skip_scalars(cur, end, n - k);
        const char *item = *cur;
        uint64_t m;
        if (k == n || item >= end || !take_array_header(cur, end, &m))
            return k;
        if (inner(cur, end, m) != m) {
            *cur = item;
            return k;
        }
        k++;
    }
}

/* Scalars or arrays of scalars: one level. */
static inline __attribute__((always_inline)) uint64_t
skip_flat1(const char **cur, const char *end, uint64_t n)
{
    return skip_arrays_of(cur, end, n, skip_scalars);
}

/* Scalars or arrays of what skip_flat1 steps over (a batch's events array:
 * every tagged event with its hash and token arrays): two levels. */
static inline __attribute__((always_inline)) uint64_t
skip_flat2(const char **cur, const char *end, uint64_t n)
{
    return skip_arrays_of(cur, end, n, skip_flat1);
}

/* The leading items of the next n, at depth `depth`, that need no trip
 * through the walk's loop: as deep as the depth bound leaves room for. */
static inline __attribute__((always_inline)) uint64_t
skip_items(const char **cur, const char *end, uint64_t n, unsigned depth)
{
    if (depth + 2 <= KVR_WIRE_MAX_DEPTH)
        return skip_flat2(cur, end, n);
    if (depth + 1 <= KVR_WIRE_MAX_DEPTH)
        return skip_flat1(cur, end, n);
    return skip_scalars(cur, end, n);
}

/* Iterative walk over msgpuck's own item boundaries (mp_parser_hint, the
 * table mp_check steps with, so both see the same items): rem is the number
 * of elements still to read in the container open at depth `depth` (depth
 * 0 is the single top-level value), left[d] that of the container open at
 * depth d < depth. Every count is checked against the bytes left before it
 * is trusted, so when the walk ends at `end` every count was honest. */
static kvr_batch_error walk(const char *p, const char *end, kvr_wire_top *top)
{
    uint64_t left[KVR_WIRE_MAX_DEPTH];
    uint64_t rem = 1;
    unsigned depth = 0;
    top->n = 0;
    const char *cur = p;
    for (;;) {
        if (rem == 0) {
            if (depth == 0)
                return cur == end ? KVR_BATCH_OK : KVR_BATCH_INVALID_MSGPACK;
            rem = left[--depth];
            if (depth >= 2)
                rem -= skip_items(&cur, end, rem, depth);
            continue;
        }
        rem--;
        if (cur >= end)
            return KVR_BATCH_INVALID_MSGPACK;
        if (depth == 1 && top->n < KVR_WIRE_TOP_MAX)
            top->at[top->n++] = cur;
        unsigned char c = (unsigned char)*cur++;
        int l = mp_parser_hint[c];
        if (l >= 0) {
            /* a scalar of l more bytes (fixstr included), or an empty
             * fixarray / fixmap, which still counts as a level */
            if ((size_t)l > (size_t)(end - cur))
                return KVR_BATCH_INVALID_MSGPACK;
            cur += l;
            if (l == 0 && (c & 0xef) == 0x80 && depth + 1 > KVR_WIRE_MAX_DEPTH)
                return KVR_BATCH_TOO_LARGE;
            continue;
        }
        uint64_t n;
        if (l > MP_HINT) { /* fixarray, fixmap: -l items */
            n = (uint64_t)-l;
        } else {
            /* str/bin, array, map, ext of a 1, 2 or 4-byte length */
            unsigned bytes;
            switch (l) {
            case MP_HINT_STR_8: case MP_HINT_EXT_8: bytes = 1; break;
            case MP_HINT_STR_16: case MP_HINT_ARRAY_16: case MP_HINT_MAP_16: case MP_HINT_EXT_16:
                bytes = 2;
                break;
            default: bytes = 4; break;
            }
            bool ext = l <= MP_HINT_EXT_8;
            if (bytes + ext > (size_t)(end - cur))
                return KVR_BATCH_INVALID_MSGPACK;
            const char *q = cur; /* msgpuck's big-endian loads */
            n = bytes == 1 ? mp_load_u8(&q) : bytes == 2 ? mp_load_u16(&q) : mp_load_u32(&q);
            cur += bytes + ext;
            if (l == MP_HINT_STR_8 || l == MP_HINT_STR_16 || l == MP_HINT_STR_32 || ext) {
                if (n > (uint64_t)(end - cur))
                    return KVR_BATCH_INVALID_MSGPACK;
                cur += n;
                continue;
            }
            if (l == MP_HINT_MAP_16 || l == MP_HINT_MAP_32)
                n *= 2;
        }
        /* every element takes at least one byte */
        if (n > (uint64_t)(end - cur))
            return KVR_BATCH_INVALID_MSGPACK;
        if (depth + 1 > KVR_WIRE_MAX_DEPTH)
            return KVR_BATCH_TOO_LARGE;
        left[depth++] = rem;
        rem = n;
        /* deeper than the top container's elements, no position is noted:
         * scalars and flat arrays there need no trip through the loop */
        if (depth >= 2)
            rem -= skip_items(&cur, end, n, depth);
    }
}

/* mp_check over the whole payload, inlined here (flatten) so that its cursor
 * is this function's local: called out of line it stores the cursor through
 * its `const char **` after every item, and reloads it, since the bytes it
 * reads (chars) may alias it (callgrind ingest: 15 instructions an item out
 * of line). */
__attribute__((flatten)) static bool check_whole(const char *p, const char *end)
{
    const char *cur = p;
    return mp_check(&cur, end) == 0 && cur == end;
}

kvr_batch_error kvr_wire_validate(const char *p, size_t len, kvr_wire_top *top)
{
    /* msgpuck counts pending elements in an int. A forged count can bring
     * it next to INT_MAX, and mp_check's next step then overflows it
     * (undefined behaviour: fuzz_wire found a payload doing so), so mp_check
     * only sees payloads whose counts the walk found honest: then its count
     * of pending elements never exceeds the bytes left (< 2^29).
     * Why no cheaper guard stands in for the walk: only array 16 / map 16
     * counts (int arithmetic) can overflow it, by at most 2 * 65535 per 3
     * bytes, so a payload under 48 KiB with no 0xdd / 0xdf byte could go to
     * mp_check unwalked; but array 32 / map 32 counts (unsigned arithmetic)
     * wrap it silently, so mp_check may accept a count the bytes do not
     * hold, and a byte scan cannot tell a header from a token's bytes: every
     * one of bench --pipeline's first 300 batches (median 62 KB) holds
     * such a byte, as do 31 % of its events alone. The walk also applies
     * SPEC 3's depth bound (32), which only a walk can see. */
    if (len == 0)
        return KVR_BATCH_INVALID_MSGPACK;
    if (len > (size_t)INT32_MAX / 4)
        return KVR_BATCH_TOO_LARGE;
    const char *end = p + len;
    kvr_batch_error err = walk(p, end, top);
    if (err != KVR_BATCH_OK)
        return err;
    return check_whole(p, end) ? KVR_BATCH_OK : KVR_BATCH_INVALID_MSGPACK;
}

kvr_batch_error kvr_msgpack_validate(const char *p, size_t len)
{
    kvr_wire_top top;
    return kvr_wire_validate(p, len, &top);
}
