/* Event level of the wire decoder (SPEC §3). Both encodings (tagged array and
 * map) are first reduced to a table of field positions, then one routine
 * decodes the fields by their msgpack type. A bad field drops its event
 * alone; the batch goes on. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <string.h>

enum field {
    F_HASHES,
    F_PARENT,
    F_TOKENS,
    F_BLOCK_SIZE,
    F_LORA_ID,
    F_MEDIUM,
    F_POS7, /* lora_name string or SGLang metadata map */
    F_EXTRA_KEYS,
    F_GROUP_IDX,
    F_SPEC_KIND,
    F_SLIDING,
    F_LOCALITY,
    F_CACHE_SALT, /* map events only: top-level keys */
    F_SESSION_ID,
    F_COUNT
};

/* Map keys, in enum order. "metadata" is accepted as another name for the
 * position-7 map. */
static const char *const field_keys[F_COUNT] = {
    "block_hashes", "parent_block_hash", "token_ids",  "block_size",
    "lora_id",      "medium",            "lora_name",  "extra_keys",
    "group_idx",    "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
    "locality",     "cache_salt",        "session_id",
};

/* Tagged-array positions (index 1..) of BlockStored and BlockRemoved. The
 * removal's fields after kv_cache_spec_kind follow the store's order. */
static const enum field stored_order[] = {F_HASHES,   F_PARENT,    F_TOKENS,    F_BLOCK_SIZE,
                                          F_LORA_ID,  F_MEDIUM,    F_POS7,      F_EXTRA_KEYS,
                                          F_GROUP_IDX, F_SPEC_KIND, F_SLIDING,   F_LOCALITY};
static const enum field removed_order[] = {F_HASHES, F_MEDIUM, F_GROUP_IDX, F_SPEC_KIND,
                                           F_SLIDING, F_LOCALITY};

typedef struct {
    const char *at[F_COUNT]; /* start of each field's value; NULL = absent */
} fields;

/* Decode failure inside one event: the drop reason. */
typedef kvr_drop_reason drop;

static bool is_nil(const char *p)
{
    return p == NULL || mp_typeof(*p) == MP_NIL;
}

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
        uint32_t from = len > 8 ? len - 8 : 0;
        uint64_t v = 0;
        for (uint32_t i = from; i < len; i++)
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

/* int of either msgpack family within [lo, hi]; nil leaves *present false. */
static drop read_int(const char *p, int64_t lo, uint64_t hi, bool *present, int64_t *out)
{
    *present = false;
    if (is_nil(p))
        return KVR_DROP_NONE;
    if (mp_typeof(*p) == MP_UINT) {
        uint64_t v = mp_decode_uint(&p);
        if (v > hi)
            return KVR_DROP_MALFORMED_EVENT;
        *out = (int64_t)v;
    } else if (mp_typeof(*p) == MP_INT) {
        int64_t v = mp_decode_int(&p);
        if (v < lo || (v >= 0 && (uint64_t)v > hi))
            return KVR_DROP_MALFORMED_EVENT;
        *out = v;
    } else {
        return KVR_DROP_MALFORMED_EVENT;
    }
    *present = true;
    return KVR_DROP_NONE;
}

static drop read_str(const char *p, kvr_str *out)
{
    out->ptr = NULL;
    out->len = 0;
    if (is_nil(p))
        return KVR_DROP_NONE;
    if (mp_typeof(*p) != MP_STR)
        return KVR_DROP_MALFORMED_EVENT;
    out->ptr = mp_decode_str(&p, &out->len);
    return KVR_DROP_NONE;
}

typedef struct {
    kvr_batch *b;
    uint32_t index; /* event being decoded: pointers up to it are live */
    size_t *used;
} u64_sink;

static uint64_t *sink_reserve(u64_sink *s, size_t n, bool *oom)
{
    if (!kvr_wire_u64_reserve(s->b, *s->used, n, s->index + 1)) {
        *oom = true;
        return NULL;
    }
    return s->b->u64_buf + *s->used;
}

static drop read_hashes(u64_sink *s, const char *p, kvr_raw_event *ev, bool *oom)
{
    if (p == NULL || mp_typeof(*p) != MP_ARRAY)
        return KVR_DROP_MALFORMED_EVENT;
    uint32_t n = mp_decode_array(&p);
    if (n > KVR_WIRE_MAX_HASHES)
        return KVR_DROP_OVERSIZED_EVENT;
    if (n == 0)
        return KVR_DROP_NONE;
    uint64_t *out = sink_reserve(s, n, oom);
    if (!out)
        return KVR_DROP_MALFORMED_EVENT;
    for (uint32_t i = 0; i < n; i++) {
        drop d = read_hash(&p, &out[i]);
        if (d)
            return d;
    }
    ev->block_hashes = out;
    ev->n_block_hashes = n;
    *s->used += n;
    return KVR_DROP_NONE;
}

/* Eagle bigram form [(a0,a1),(a1,a2),...] -> a0..an; the chain must link. */
static drop read_bigrams(const char **p, uint32_t n, uint64_t *out)
{
    for (uint32_t i = 0; i < n; i++) {
        if (mp_typeof(**p) != MP_ARRAY || mp_decode_array(p) != 2)
            return KVR_DROP_MALFORMED_EVENT;
        uint64_t a, c;
        drop d = read_token(p, &a);
        if (!d)
            d = read_token(p, &c);
        if (d)
            return d;
        if (i == 0)
            out[0] = a;
        else if (out[i] != a)
            return KVR_DROP_MALFORMED_EVENT;
        out[i + 1] = c;
    }
    return KVR_DROP_NONE;
}

static drop read_tokens(u64_sink *s, const char *p, kvr_raw_event *ev, bool *oom)
{
    if (p == NULL || mp_typeof(*p) != MP_ARRAY)
        return KVR_DROP_MALFORMED_EVENT;
    uint32_t n = mp_decode_array(&p);
    if (n == 0)
        return KVR_DROP_NONE;
    bool eagle = mp_typeof(*p) == MP_ARRAY;
    uint64_t n_tokens = eagle ? (uint64_t)n + 1 : n;
    if (n_tokens > KVR_WIRE_MAX_TOKENS)
        return KVR_DROP_OVERSIZED_EVENT;
    uint64_t *out = sink_reserve(s, (size_t)n_tokens, oom);
    if (!out)
        return KVR_DROP_MALFORMED_EVENT;
    if (eagle) {
        drop d = read_bigrams(&p, n, out);
        if (d)
            return d;
    } else {
        for (uint32_t i = 0; i < n; i++) {
            drop d = read_token(&p, &out[i]);
            if (d)
                return d;
        }
    }
    ev->token_ids = out;
    ev->n_token_ids = (uint32_t)n_tokens;
    ev->eagle = eagle;
    *s->used += n_tokens;
    return KVR_DROP_NONE;
}

/* Position 7: vLLM lora_name string, or the SGLang metadata map. The map may
 * also carry lora_name (our encoder puts it there when both are set). */
static drop read_pos7(const char *p, kvr_raw_event *ev)
{
    if (is_nil(p))
        return KVR_DROP_NONE;
    if (mp_typeof(*p) == MP_STR)
        return read_str(p, &ev->lora_name);
    if (mp_typeof(*p) != MP_MAP)
        return KVR_DROP_MALFORMED_EVENT;
    uint32_t n = mp_decode_map(&p);
    for (uint32_t i = 0; i < n; i++) {
        kvr_str *dst = NULL;
        if (mp_typeof(*p) == MP_STR) {
            uint32_t klen;
            const char *k = mp_decode_str(&p, &klen);
            kvr_str key = {k, klen};
            if (kvr_str_eq(key, "cache_salt"))
                dst = &ev->cache_salt;
            else if (kvr_str_eq(key, "session_id"))
                dst = &ev->session_id;
            else if (kvr_str_eq(key, "lora_name"))
                dst = &ev->lora_name;
        } else {
            mp_next(&p);
        }
        if (dst && read_str(p, dst))
            return KVR_DROP_MALFORMED_EVENT;
        mp_next(&p);
    }
    return KVR_DROP_NONE;
}

static drop read_medium(const char *p, kvr_raw_event *ev)
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

/* Fields common to stores and removals after the hashes. */
static drop read_group_fields(const fields *f, kvr_raw_event *ev)
{
    drop d = read_medium(f->at[F_MEDIUM], ev);
    if (!d)
        d = read_int(f->at[F_GROUP_IDX], INT64_MIN, INT64_MAX, &ev->has_group_idx,
                     &ev->group_idx);
    if (!d)
        d = read_str(f->at[F_SPEC_KIND], &ev->kv_cache_spec_kind);
    if (!d)
        d = read_int(f->at[F_SLIDING], INT64_MIN, INT64_MAX, &ev->has_sliding_window,
                     &ev->sliding_window);
    if (!d)
        d = read_str(f->at[F_LOCALITY], &ev->locality);
    return d;
}

static drop decode_stored(u64_sink *s, const fields *f, kvr_raw_event *ev, bool *oom)
{
    drop d = read_hashes(s, f->at[F_HASHES], ev, oom);
    if (d)
        return d;
    if (!is_nil(f->at[F_PARENT])) {
        const char *p = f->at[F_PARENT];
        if ((d = read_hash(&p, &ev->parent)))
            return d;
        ev->has_parent = true;
    }
    if ((d = read_tokens(s, f->at[F_TOKENS], ev, oom)))
        return d;
    bool has;
    int64_t v = 0;
    if ((d = read_int(f->at[F_BLOCK_SIZE], 0, UINT32_MAX, &has, &v)))
        return d;
    ev->block_size = (uint32_t)v;
    if ((d = read_int(f->at[F_LORA_ID], INT64_MIN, INT64_MAX, &ev->has_lora_id, &ev->lora_id)))
        return d;
    if ((d = read_pos7(f->at[F_POS7], ev)))
        return d;
    /* top-level map keys win over the metadata map */
    if (f->at[F_CACHE_SALT] && !is_nil(f->at[F_CACHE_SALT]) &&
        (d = read_str(f->at[F_CACHE_SALT], &ev->cache_salt)))
        return d;
    if (f->at[F_SESSION_ID] && !is_nil(f->at[F_SESSION_ID]) &&
        (d = read_str(f->at[F_SESSION_ID], &ev->session_id)))
        return d;
    return read_group_fields(f, ev);
}

static kvr_event_type type_of(kvr_str tag)
{
    if (kvr_str_eq(tag, "BlockStored"))
        return KVR_EV_STORED;
    if (kvr_str_eq(tag, "BlockRemoved"))
        return KVR_EV_REMOVED;
    if (kvr_str_eq(tag, "AllBlocksCleared"))
        return KVR_EV_CLEARED;
    return KVR_EV_DROPPED;
}

/* Fills f from a tagged array; returns the reason when the shape is wrong. */
static drop tagged_fields(const char **cur, fields *f, kvr_event_type *type)
{
    uint32_t n = mp_decode_array(cur);
    if (n == 0 || mp_typeof(**cur) != MP_STR)
        return KVR_DROP_MALFORMED_EVENT;
    kvr_str tag;
    tag.ptr = mp_decode_str(cur, &tag.len);
    *type = type_of(tag);
    const enum field *order = NULL;
    uint32_t n_order = 0, min = 1;
    if (*type == KVR_EV_STORED) {
        order = stored_order;
        n_order = sizeof stored_order / sizeof stored_order[0];
        min = 5; /* may end after any field from block_size on */
    } else if (*type == KVR_EV_REMOVED) {
        order = removed_order;
        n_order = sizeof removed_order / sizeof removed_order[0];
        min = 2;
    }
    for (uint32_t i = 1; i < n; i++) {
        if (i - 1 < n_order)
            f->at[order[i - 1]] = *cur;
        mp_next(cur);
    }
    if (*type == KVR_EV_DROPPED)
        return KVR_DROP_UNKNOWN_EVENT;
    return n < min ? KVR_DROP_MALFORMED_EVENT : KVR_DROP_NONE;
}

static drop map_fields(const char **cur, fields *f, kvr_event_type *type)
{
    uint32_t n = mp_decode_map(cur);
    const char *tag = NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (mp_typeof(**cur) != MP_STR) {
            mp_next(cur);
            mp_next(cur);
            continue;
        }
        uint32_t klen;
        const char *k = mp_decode_str(cur, &klen);
        kvr_str key = {k, klen};
        if (kvr_str_eq(key, "type")) {
            tag = *cur;
        } else if (kvr_str_eq(key, "metadata")) {
            f->at[F_POS7] = *cur;
        } else {
            for (int j = 0; j < F_COUNT; j++)
                if (kvr_str_eq(key, field_keys[j])) {
                    f->at[j] = *cur;
                    break;
                }
        }
        mp_next(cur);
    }
    if (!tag || mp_typeof(*tag) != MP_STR)
        return KVR_DROP_MALFORMED_EVENT;
    kvr_str t;
    t.ptr = mp_decode_str(&tag, &t.len);
    *type = type_of(t);
    if (*type == KVR_EV_DROPPED)
        return KVR_DROP_UNKNOWN_EVENT;
    if (*type == KVR_EV_STORED && (!f->at[F_HASHES] || !f->at[F_TOKENS]))
        return KVR_DROP_MALFORMED_EVENT;
    if (*type == KVR_EV_REMOVED && !f->at[F_HASHES])
        return KVR_DROP_MALFORMED_EVENT;
    return KVR_DROP_NONE;
}

bool kvr_wire_decode_event(kvr_batch *b, const char **cur, uint32_t index, size_t *used)
{
    kvr_raw_event *ev = &b->events[index];
    memset(ev, 0, sizeof *ev);
    ev->tier = KVR_TIER_GPU;
    fields f;
    memset(&f, 0, sizeof f);
    kvr_event_type type = KVR_EV_DROPPED;
    drop d;
    const char *start = *cur;
    switch (mp_typeof(**cur)) {
    case MP_ARRAY:
        d = tagged_fields(cur, &f, &type);
        break;
    case MP_MAP:
        d = map_fields(cur, &f, &type);
        break;
    default:
        d = KVR_DROP_MALFORMED_EVENT;
    }
    /* skip the whole event whatever the field readers consumed */
    *cur = start;
    mp_next(cur);

    size_t mark = *used;
    bool oom = false;
    u64_sink s = {b, index, used};
    if (!d && type == KVR_EV_STORED)
        d = decode_stored(&s, &f, ev, &oom);
    else if (!d && type == KVR_EV_REMOVED) {
        d = read_hashes(&s, f.at[F_HASHES], ev, &oom);
        if (!d)
            d = read_group_fields(&f, ev);
    }
    if (oom)
        return false;
    if (d) {
        memset(ev, 0, sizeof *ev);
        ev->type = KVR_EV_DROPPED;
        ev->drop_reason = d;
        *used = mark; /* the dropped event's u64s are reused */
        return true;
    }
    ev->type = type;
    return true;
}
