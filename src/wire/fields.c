/* Field readers of the wire decoder (SPEC §3 field rules): each dispatches
 * on the msgpack type of one field and drops the event on a wrong type or
 * an oversized length, checked before anything is stored. */
#include "wire/wire_internal.h"

#include <msgpuck.h>

typedef kvr_drop_reason drop;

static drop read_hash(const char **p, uint64_t *out)
{
    switch (mp_typeof(**p)) {
    case MP_UINT:
        *out = mp_decode_uint(p);
        return KVR_DROP_NONE;
    case MP_INT:
        *out = (uint64_t)mp_decode_int(p);
        return KVR_DROP_NONE;
    case MP_BIN: {
        /* Last 8 bytes big-endian; a shorter bin is a big-endian integer
         * (zero-extended on the left). An empty bin names nothing. */
        uint32_t len;
        const unsigned char *d = (const unsigned char *)mp_decode_bin(p, &len);
        if (len == 0)
            return KVR_DROP_MALFORMED_EVENT;
        uint64_t v = 0;
        for (uint32_t i = len > 8 ? len - 8 : 0; i < len; i++)
            v = v << 8 | d[i];
        *out = v;
        return KVR_DROP_NONE;
    }
    default:
        return KVR_DROP_MALFORMED_EVENT;
    }
}

bool kvr_wire_read_uint(const char **p, uint64_t max, uint64_t *out)
{
    uint64_t v;
    if (mp_typeof(**p) == MP_UINT) {
        v = mp_decode_uint(p);
    } else if (mp_typeof(**p) == MP_INT) {
        int64_t i = mp_decode_int(p);
        if (i < 0)
            return false;
        v = (uint64_t)i;
    } else {
        return false;
    }
    *out = v;
    return v <= max;
}

static drop read_token(const char **p, uint64_t *out)
{
    return kvr_wire_read_uint(p, UINT64_MAX, out) ? KVR_DROP_NONE : KVR_DROP_MALFORMED_EVENT;
}

/* int of either msgpack family within [lo, hi]; nil leaves *present false */
static drop read_int(const char **p, int64_t lo, uint64_t hi, bool *present, int64_t *out)
{
    *present = false;
    if (mp_typeof(**p) == MP_NIL) {
        mp_next(p);
        return KVR_DROP_NONE;
    }
    if (mp_typeof(**p) == MP_UINT) {
        uint64_t v = mp_decode_uint(p);
        if (v > hi)
            return KVR_DROP_MALFORMED_EVENT;
        *out = (int64_t)v;
    } else if (mp_typeof(**p) == MP_INT) {
        int64_t v = mp_decode_int(p);
        if (v < lo || (v >= 0 && (uint64_t)v > hi))
            return KVR_DROP_MALFORMED_EVENT;
        *out = v;
    } else {
        return KVR_DROP_MALFORMED_EVENT;
    }
    *present = true;
    return KVR_DROP_NONE;
}

/* string (borrowed from the payload) or nil */
static drop read_str(const char **p, kvr_str *out)
{
    out->ptr = NULL;
    out->len = 0;
    if (mp_typeof(**p) == MP_NIL) {
        mp_next(p);
        return KVR_DROP_NONE;
    }
    if (mp_typeof(**p) != MP_STR)
        return KVR_DROP_MALFORMED_EVENT;
    out->ptr = mp_decode_str(p, &out->len);
    return KVR_DROP_NONE;
}

/* Room for n more u64s; rebases the event's arrays if it moves. */
static uint64_t *reserve(kvr_wire_event_ctx *c, size_t n)
{
    if (!kvr_wire_u64_reserve(c->b, c->ev, *c->used, n)) {
        c->oom = true;
        return NULL;
    }
    return c->b->u64_buf + *c->used;
}

static drop read_hashes(kvr_wire_event_ctx *c, const char **p)
{
    if (mp_typeof(**p) != MP_ARRAY)
        return KVR_DROP_MALFORMED_EVENT;
    uint32_t n = mp_decode_array(p);
    if (n > KVR_WIRE_MAX_HASHES)
        return KVR_DROP_OVERSIZED_EVENT;
    if (n == 0)
        return KVR_DROP_NONE;
    uint64_t *out = reserve(c, n);
    if (!out)
        return KVR_DROP_MALFORMED_EVENT;
    for (uint32_t i = 0; i < n; i++) {
        drop d = read_hash(p, &out[i]);
        if (d)
            return d;
    }
    c->ev->block_hashes = out;
    c->ev->n_block_hashes = n;
    *c->used += n;
    return KVR_DROP_NONE;
}

/* Eagle bigram form [(a0,a1),(a1,a2),...] -> a0..an; the chain must link. */
static drop read_bigrams(const char **p, uint32_t n, uint64_t *out)
{
    for (uint32_t i = 0; i < n; i++) {
        if (mp_typeof(**p) != MP_ARRAY || mp_decode_array(p) != 2)
            return KVR_DROP_MALFORMED_EVENT;
        uint64_t a, z;
        drop d = read_token(p, &a);
        if (!d)
            d = read_token(p, &z);
        if (d)
            return d;
        if (i == 0)
            out[0] = a;
        else if (out[i] != a)
            return KVR_DROP_MALFORMED_EVENT;
        out[i + 1] = z;
    }
    return KVR_DROP_NONE;
}

/* Reads the leading non-negative integers of n into out and returns how
 * many: the usual token array, decoded without a type dispatch per token
 * (the payload was validated: their bytes are there). */
static uint32_t read_uints(const char **p, uint32_t n, uint64_t *out)
{
    uint32_t i = 0;
    while (i < n && kvr_wire_take_uint(p, &out[i]))
        i++;
    return i;
}

static drop read_tokens(kvr_wire_event_ctx *c, const char **p)
{
    if (mp_typeof(**p) != MP_ARRAY)
        return KVR_DROP_MALFORMED_EVENT;
    uint32_t n = mp_decode_array(p);
    if (n == 0)
        return KVR_DROP_NONE;
    bool eagle = mp_typeof(**p) == MP_ARRAY;
    uint64_t n_tokens = eagle ? (uint64_t)n + 1 : n;
    if (n_tokens > KVR_WIRE_MAX_TOKENS)
        return KVR_DROP_OVERSIZED_EVENT;
    uint64_t *out = reserve(c, (size_t)n_tokens);
    if (!out)
        return KVR_DROP_MALFORMED_EVENT;
    drop d = KVR_DROP_NONE;
    if (eagle)
        d = read_bigrams(p, n, out);
    else
        for (uint32_t i = read_uints(p, n, out); i < n && !d; i++)
            d = read_token(p, &out[i]);
    if (d)
        return d;
    c->ev->token_ids = out;
    c->ev->n_token_ids = (uint32_t)n_tokens;
    c->ev->eagle = eagle;
    *c->used += n_tokens;
    return KVR_DROP_NONE;
}

/* Position 7: vLLM lora_name string, or the SGLang metadata map. The map may
 * also carry lora_name (our encoder puts it there when both are set). */
static drop read_pos7(kvr_raw_event *ev, const char **p)
{
    if (mp_typeof(**p) != MP_MAP)
        return read_str(p, &ev->lora_name);
    uint32_t n = mp_decode_map(p);
    for (uint32_t i = 0; i < n; i++) {
        kvr_str *dst = NULL;
        if (mp_typeof(**p) == MP_STR) {
            kvr_str key;
            key.ptr = mp_decode_str(p, &key.len);
            if (kvr_str_eq(key, "cache_salt"))
                dst = &ev->cache_salt;
            else if (kvr_str_eq(key, "session_id"))
                dst = &ev->session_id;
            else if (kvr_str_eq(key, "lora_name"))
                dst = &ev->lora_name;
        } else {
            mp_next(p);
        }
        if (!dst)
            mp_next(p);
        else if (read_str(p, dst))
            return KVR_DROP_MALFORMED_EVENT;
    }
    return KVR_DROP_NONE;
}

static drop read_medium(kvr_raw_event *ev, const char **p)
{
    kvr_str m;
    if (read_str(p, &m))
        return KVR_DROP_MALFORMED_EVENT;
    int tier = kvr_wire_medium_tier(m);
    if (tier < 0)
        return KVR_DROP_UNKNOWN_TIER;
    ev->tier = (kvr_tier)tier;
    return KVR_DROP_NONE;
}

kvr_drop_reason kvr_wire_read_field(kvr_wire_event_ctx *c, enum kvr_wire_field f,
                                    const char **p)
{
    kvr_raw_event *ev = c->ev;
    bool has;
    int64_t v = 0;
    drop d;
    switch (f) {
    case KVR_F_HASHES:
        return read_hashes(c, p);
    case KVR_F_PARENT:
        if (mp_typeof(**p) == MP_NIL) {
            mp_next(p);
            return KVR_DROP_NONE;
        }
        ev->has_parent = true;
        return read_hash(p, &ev->parent);
    case KVR_F_TOKENS:
        return read_tokens(c, p);
    case KVR_F_BLOCK_SIZE:
        d = read_int(p, 0, UINT32_MAX, &has, &v);
        ev->block_size = (uint32_t)v;
        return d;
    case KVR_F_LORA_ID:
        return read_int(p, INT64_MIN, INT64_MAX, &ev->has_lora_id, &ev->lora_id);
    case KVR_F_MEDIUM:
        return read_medium(ev, p);
    case KVR_F_POS7:
        return read_pos7(ev, p);
    case KVR_F_GROUP_IDX:
        return read_int(p, INT64_MIN, INT64_MAX, &ev->has_group_idx, &ev->group_idx);
    case KVR_F_SPEC_KIND:
        return read_str(p, &ev->kv_cache_spec_kind);
    case KVR_F_SLIDING:
        return read_int(p, INT64_MIN, INT64_MAX, &ev->has_sliding_window, &ev->sliding_window);
    case KVR_F_LOCALITY:
        return read_str(p, &ev->locality);
    case KVR_F_CACHE_SALT:
        return read_str(p, &c->top_salt);
    case KVR_F_SESSION_ID:
        return read_str(p, &c->top_session);
    case KVR_F_EXTRA_KEYS:
        return kvr_wire_read_extra_keys(ev, p);
    default:
        mp_next(p);
        return KVR_DROP_NONE;
    }
}
