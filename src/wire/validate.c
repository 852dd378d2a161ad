/* Whole-payload validation: the only place that trusts nothing about the
 * bytes. See wire_internal.h for why mp_check alone is not enough. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <stdint.h>

/* Checks one scalar lies inside [*cur, end) and steps over it. msgpuck's
 * per-type checks are inline; they cover the values a batch is made of, and
 * mp_check (one header + body for a scalar) takes the rest. */
static bool scalar_fits(const char **cur, const char *end, enum mp_type t)
{
    const char *p = *cur;
    switch (t) {
    case MP_UINT:
        if (mp_check_uint(p, end) > 0)
            return false;
        break;
    case MP_INT:
        if (mp_check_int(p, end) > 0)
            return false;
        break;
    case MP_NIL:
        break; /* one byte, and p < end */
    case MP_STR: {
        if (mp_check_strl(p, end) > 0)
            return false;
        uint32_t len = mp_decode_strl(&p);
        if (len > (size_t)(end - p))
            return false;
        *cur = p + len;
        return true;
    }
    default:
        return mp_check(cur, end) == 0;
    }
    mp_next(cur);
    return true;
}

/* Bytes of a non-negative integer by its first byte (positive fixint,
 * uint 8/16/32/64), 0 for anything else. */
static uint8_t uint_bytes(unsigned char c)
{
    return c < 0x80 ? 1 : c == 0xcc ? 2 : c == 0xcd ? 3 : c == 0xce ? 5 : c == 0xcf ? 9 : 0;
}

/* Steps over the leading non-negative integers of the next n elements
 * (token ids and block hashes are most of a batch), each checked to lie
 * inside [*cur, end) as scalar_fits would; returns how many. */
static uint64_t skip_uints(const char **cur, const char *end, uint64_t n)
{
    const char *p = *cur;
    uint64_t k = 0;
    for (; k < n && p < end; k++) {
        uint8_t len = uint_bytes((unsigned char)*p);
        if (!len || len > (size_t)(end - p))
            break;
        p += len;
    }
    *cur = p;
    return k;
}

/* Iterative walk: left[d] is the number of elements still to read in the
 * container open at depth d (depth 0 is the single top-level value). Every
 * count is checked against the bytes left before it is trusted, so when the
 * walk ends at `end` every count was honest. */
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
        enum mp_type t = mp_typeof(*cur);
        if (t == MP_ARRAY || t == MP_MAP) {
            uint64_t n;
            if (t == MP_ARRAY) {
                if (mp_check_array(cur, end) > 0)
                    return KVR_BATCH_INVALID_MSGPACK;
                n = mp_decode_array(&cur);
            } else {
                if (mp_check_map(cur, end) > 0)
                    return KVR_BATCH_INVALID_MSGPACK;
                n = 2 * (uint64_t)mp_decode_map(&cur);
            }
            /* every element takes at least one byte */
            if (n > (uint64_t)(end - cur))
                return KVR_BATCH_INVALID_MSGPACK;
            if (depth + 1 > KVR_WIRE_MAX_DEPTH)
                return KVR_BATCH_TOO_LARGE;
            left[++depth] = n;
            /* deeper than the top container's elements, no position is
             * noted: integers there need no trip through the loop */
            if (t == MP_ARRAY && depth >= 2)
                left[depth] -= skip_uints(&cur, end, n);
        } else if (!scalar_fits(&cur, end, t)) {
            return KVR_BATCH_INVALID_MSGPACK;
        }
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
