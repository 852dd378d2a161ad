/* Whole-payload validation: the only place that trusts nothing about the
 * bytes. See wire_internal.h for why mp_check alone is not enough. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <stdint.h>

/* Bytes of a non-negative integer by its first byte (positive fixint,
 * uint 8/16/32/64), 0 for anything else: token ids and block hashes are
 * most of a batch, stepped over here without the general dispatch. */
static const uint8_t uint_bytes[256] = {
#define R16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
    R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1),
    R16(0), R16(0), R16(0), R16(0),
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 5, 9, /* 0xc0 .. 0xcf */
    R16(0), R16(0), R16(0),
#undef R16
};

/* Steps over the leading non-negative integers of the next n elements,
 * each inside [*cur, end); returns how many. */
static uint64_t skip_uints(const char **cur, const char *end, uint64_t n)
{
    const char *p = *cur;
    uint64_t k = 0;
    /* the first `sure` elements fit whatever their length (9 bytes at
     * most): no bound check for them */
    uint64_t sure = (uint64_t)(end - p) / 9;
    if (sure > n)
        sure = n;
    for (; k < sure; k++) {
        size_t len = uint_bytes[(unsigned char)*p];
        if (!len)
            goto out;
        p += len;
    }
    for (; k < n && p < end; k++) {
        size_t len = uint_bytes[(unsigned char)*p];
        if (!len || len > (size_t)(end - p))
            break;
        p += len;
    }
out:
    *cur = p;
    return k;
}

/* The big-endian length of `bytes` bytes at p (1, 2 or 4). */
static uint32_t load_len(const char *p, unsigned bytes)
{
    const unsigned char *u = (const unsigned char *)p;
    return bytes == 1 ? u[0] : bytes == 2 ? (uint32_t)u[0] << 8 | u[1]
                                           : (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
                                                 (uint32_t)u[2] << 8 | u[3];
}

/* Iterative walk over msgpuck's own item boundaries (mp_parser_hint, the
 * table mp_check steps with, so both see the same items): left[d] is the
 * number of elements still to read in the container open at depth d (depth
 * 0 is the single top-level value). Every count is checked against the
 * bytes left before it is trusted, so when the walk ends at `end` every
 * count was honest. */
static kvr_batch_error walk(const char *p, const char *end, kvr_wire_top *top)
{
    uint64_t left[KVR_WIRE_MAX_DEPTH + 1];
    unsigned depth = 0;
    top->n = 0;
    left[0] = 1;
    const char *cur = p;
    for (;;) {
        while (left[depth] == 0) {
            if (depth == 0)
                return cur == end ? KVR_BATCH_OK : KVR_BATCH_INVALID_MSGPACK;
            depth--;
        }
        left[depth]--;
        if (cur >= end)
            return KVR_BATCH_INVALID_MSGPACK;
        if (depth == 1 && top->n < KVR_WIRE_TOP_MAX)
            top->at[top->n++] = cur;
        unsigned char c = (unsigned char)*cur++;
        int l = mp_parser_hint[c];
        uint64_t n;
        bool is_array;
        if (l > 0) { /* a scalar of l more bytes, fixstr included */
            if ((size_t)l > (size_t)(end - cur))
                return KVR_BATCH_INVALID_MSGPACK;
            cur += l;
            continue;
        }
        if (l == 0) { /* a one-byte scalar, or an empty fixarray / fixmap */
            if ((c & 0xef) != 0x80)
                continue;
            n = 0;
            is_array = c == 0x90;
        } else if (l > MP_HINT) { /* fixarray, fixmap: -l elements */
            n = (uint64_t)-l;
            is_array = c >= 0x90;
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
            n = load_len(cur, bytes);
            cur += bytes + ext;
            if (l == MP_HINT_STR_8 || l == MP_HINT_STR_16 || l == MP_HINT_STR_32 || ext) {
                if (n > (uint64_t)(end - cur))
                    return KVR_BATCH_INVALID_MSGPACK;
                cur += n;
                continue;
            }
            is_array = l == MP_HINT_ARRAY_16 || l == MP_HINT_ARRAY_32;
            if (!is_array)
                n *= 2;
        }
        /* every element takes at least one byte */
        if (n > (uint64_t)(end - cur))
            return KVR_BATCH_INVALID_MSGPACK;
        if (depth + 1 > KVR_WIRE_MAX_DEPTH)
            return KVR_BATCH_TOO_LARGE;
        left[++depth] = n;
        /* deeper than the top container's elements, no position is noted:
         * integers there need no trip through the loop */
        if (is_array && depth >= 2)
            left[depth] -= skip_uints(&cur, end, n);
    }
}
kvr_batch_error kvr_wire_validate(const char *p, size_t len, kvr_wire_top *top)
{
    /* msgpuck counts pending elements in an int. A forged count can bring
     * it next to INT_MAX, and mp_check's next step then overflows it
     * (undefined behaviour: fuzz_wire found a payload doing so), so mp_check
     * only sees payloads whose counts the walk found honest: then its count
     * of pending elements never exceeds the bytes left (< 2^29). */
    if (len == 0)
        return KVR_BATCH_INVALID_MSGPACK;
    if (len > (size_t)INT32_MAX / 4)
        return KVR_BATCH_TOO_LARGE;
    const char *end = p + len;
    kvr_batch_error err = walk(p, end, top);
    if (err != KVR_BATCH_OK)
        return err;
    const char *cur = p;
    if (mp_check(&cur, end) != 0 || cur != end)
        return KVR_BATCH_INVALID_MSGPACK;
    return KVR_BATCH_OK;
}

kvr_batch_error kvr_msgpack_validate(const char *p, size_t len)
{
    kvr_wire_top top;
    return kvr_wire_validate(p, len, &top);
}
