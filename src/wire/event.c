/* Event level of the wire decoder (SPEC §3): tagged arrays and maps feed the
 * same field readers (fields.c). Fields are read in wire order in one pass
 * when the event's type is known first (tagged arrays; maps whose first key
 * is "type", as msgspec writes them); other maps are scanned for positions
 * first. A bad field drops its event alone; the batch goes on. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <string.h>

typedef kvr_drop_reason drop;
typedef enum kvr_wire_field field;

/* Map keys, in enum order. */
static const char *const field_keys[KVR_F_COUNT] = {
    "block_hashes", "parent_block_hash",  "token_ids",
    "block_size",   "lora_id",            "medium",
    "lora_name",    "extra_keys",         "group_idx",
    "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality",
    "cache_salt",   "session_id",
};

/* Tagged-array positions (index 1..) of BlockStored and BlockRemoved. The
 * removal's fields after kv_cache_spec_kind follow the store's order. */
static const field stored_order[] = {
    KVR_F_HASHES,     KVR_F_PARENT,    KVR_F_TOKENS,    KVR_F_BLOCK_SIZE,
    KVR_F_LORA_ID,    KVR_F_MEDIUM,    KVR_F_POS7,      KVR_F_EXTRA_KEYS,
    KVR_F_GROUP_IDX,  KVR_F_SPEC_KIND, KVR_F_SLIDING,   KVR_F_LOCALITY};
static const field removed_order[] = {KVR_F_HASHES,    KVR_F_MEDIUM,  KVR_F_GROUP_IDX,
                                      KVR_F_SPEC_KIND, KVR_F_SLIDING, KVR_F_LOCALITY};

#define BIT(f) (1u << (f))
/* Fields each type reads; a removal ignores store-only keys of a map. */
static const uint32_t removed_fields = BIT(KVR_F_HASHES) | BIT(KVR_F_MEDIUM) |
                                       BIT(KVR_F_GROUP_IDX) | BIT(KVR_F_SPEC_KIND) |
                                       BIT(KVR_F_SLIDING) | BIT(KVR_F_LOCALITY);

static uint32_t fields_of(kvr_event_type t)
{
    if (t == KVR_EV_STORED)
        return BIT(KVR_F_COUNT) - 1;
    return t == KVR_EV_REMOVED ? removed_fields : 0;
}

/* The tag against a literal, its length known here (one tag per event). */
#define TAG_IS(tag, lit) ((tag).len == sizeof lit - 1 && memcmp((tag).ptr, lit, sizeof lit - 1) == 0)

static kvr_event_type type_of(kvr_str tag)
{
    if (TAG_IS(tag, "BlockStored"))
        return KVR_EV_STORED;
    if (TAG_IS(tag, "BlockRemoved"))
        return KVR_EV_REMOVED;
    if (TAG_IS(tag, "AllBlocksCleared"))
        return KVR_EV_CLEARED;
    return KVR_EV_DROPPED;
}

/* The type named by a msgpack value at *p (advanced past it). */
static drop read_type(const char **p, kvr_event_type *type)
{
    if (mp_typeof(**p) != MP_STR) {
        mp_next(p);
        return KVR_DROP_MALFORMED_EVENT;
    }
    kvr_str tag;
    tag.ptr = mp_decode_str(p, &tag.len);
    *type = type_of(tag);
    return *type == KVR_EV_DROPPED ? KVR_DROP_UNKNOWN_EVENT : KVR_DROP_NONE;
}

static int key_field(kvr_str key)
{
    for (int j = 0; j < KVR_F_COUNT; j++)
        if (kvr_str_eq(key, field_keys[j]))
            return j;
    /* "metadata": another name for the SGLang position-7 map */
    return kvr_str_eq(key, "metadata") ? KVR_F_POS7 : -1;
}

/* Reads field f at *cur unless the event already failed; always leaves
 * *cur after the value. */
static void field_or_skip(kvr_wire_event_ctx *c, field f, const char **cur, drop *d)
{
    if (*d) {
        mp_next(cur);
        return;
    }
    const char *start = *cur;
    *d = kvr_wire_read_field(c, f, cur);
    if (*d) {
        *cur = start;
        mp_next(cur);
    }
}

static drop tagged_event(kvr_wire_event_ctx *c, const char **cur, kvr_event_type *type,
                         uint32_t *seen)
{
    uint32_t n = mp_decode_array(cur);
    if (n == 0)
        return KVR_DROP_MALFORMED_EVENT;
    drop d = read_type(cur, type);
    const field *order = *type == KVR_EV_STORED ? stored_order : removed_order;
    uint32_t n_order = *type == KVR_EV_STORED    ? sizeof stored_order / sizeof(field)
                       : *type == KVR_EV_REMOVED ? sizeof removed_order / sizeof(field)
                                                 : 0;
    /* k walks the layout; it runs one ahead of the position after a
     * layout without group_idx (a string in its slot is the attention kind,
     * with group 0, and the fields after it move up one). */
    for (uint32_t i = 1, k = 0; i < n; i++, k++) {
        if (k < n_order && order[k] == KVR_F_GROUP_IDX && mp_typeof(**cur) == MP_STR) {
            c->ev->has_group_idx = true;
            c->ev->group_idx = 0;
            *seen |= BIT(KVR_F_GROUP_IDX);
            k++;
        }
        if (k < n_order) {
            *seen |= BIT(order[k]);
            field_or_skip(c, order[k], cur, &d);
        } else {
            mp_next(cur);
        }
    }
    /* a store may end after any field from block_size (index 4) on */
    if (!d && *type == KVR_EV_STORED && n < 5)
        d = KVR_DROP_MALFORMED_EVENT;
    return d;
}

/* Map with "type" first: one pass in wire order. */
static drop map_in_order(kvr_wire_event_ctx *c, const char **cur, uint32_t n,
                         kvr_event_type type, uint32_t *seen)
{
    drop d = KVR_DROP_NONE;
    uint32_t wanted = fields_of(type);
    for (uint32_t i = 1; i < n; i++) {
        int f = -1;
        if (mp_typeof(**cur) == MP_STR) {
            kvr_str key;
            key.ptr = mp_decode_str(cur, &key.len);
            f = key_field(key);
        } else {
            mp_next(cur);
        }
        if (f < 0 || !(wanted & BIT(f))) {
            mp_next(cur);
            continue;
        }
        *seen |= BIT(f);
        field_or_skip(c, (field)f, cur, &d);
    }
    return d;
}

/* Map with "type" elsewhere: find every field's position, then read them. */
static drop map_by_position(kvr_wire_event_ctx *c, const char **cur, uint32_t n,
                            kvr_event_type *type, uint32_t *seen)
{
    const char *at[KVR_F_COUNT] = {0};
    const char *tag = NULL;
    for (uint32_t i = 0; i < n; i++) {
        int f = -1;
        if (mp_typeof(**cur) == MP_STR) {
            kvr_str key;
            key.ptr = mp_decode_str(cur, &key.len);
            if (kvr_str_eq(key, "type"))
                tag = *cur;
            else
                f = key_field(key);
        } else {
            mp_next(cur);
        }
        if (f >= 0)
            at[f] = *cur;
        mp_next(cur);
    }
    if (!tag)
        return KVR_DROP_MALFORMED_EVENT;
    drop d = read_type(&tag, type);
    uint32_t wanted = fields_of(*type);
    for (int f = 0; f < KVR_F_COUNT && !d; f++) {
        if (at[f] && (wanted & BIT(f))) {
            *seen |= BIT(f);
            d = kvr_wire_read_field(c, (field)f, &at[f]);
        }
    }
    return d;
}

static drop map_event(kvr_wire_event_ctx *c, const char **cur, kvr_event_type *type,
                      uint32_t *seen)
{
    uint32_t n = mp_decode_map(cur);
    const char *first = *cur;
    if (n > 0 && mp_typeof(*first) == MP_STR) {
        kvr_str key;
        key.ptr = mp_decode_str(&first, &key.len);
        if (kvr_str_eq(key, "type")) {
            drop d = read_type(&first, type);
            *cur = first;
            if (d) {
                for (uint32_t i = 1; i < n; i++) {
                    mp_next(cur);
                    mp_next(cur);
                }
                return d;
            }
            return map_in_order(c, cur, n, *type, seen);
        }
    }
    drop d = map_by_position(c, cur, n, type, seen);
    if (d)
        return d;
    /* maps name their fields: the required ones must be there */
    if (*type == KVR_EV_STORED && (!(*seen & BIT(KVR_F_HASHES)) || !(*seen & BIT(KVR_F_TOKENS))))
        return KVR_DROP_MALFORMED_EVENT;
    return KVR_DROP_NONE;
}

void kvr_wire_decode_event(kvr_batch *b, const char **cur)
{
    kvr_raw_event *ev = &b->ev;
    memset(ev, 0, sizeof *ev);
    b->ev_fast_clean = false; /* it sets fields the fast decoder never clears */
    ev->tier = KVR_TIER_GPU;
    size_t used = 0;
    kvr_wire_event_ctx c = {.b = b, .used = &used, .ev = ev};
    const char *start = *cur;
    kvr_event_type type = KVR_EV_DROPPED;
    uint32_t seen = 0;
    drop d;
    switch (mp_typeof(**cur)) {
    case MP_ARRAY:
        d = tagged_event(&c, cur, &type, &seen);
        break;
    case MP_MAP:
        d = map_event(&c, cur, &type, &seen);
        break;
    default:
        mp_next(cur);
        d = KVR_DROP_MALFORMED_EVENT;
    }
    if (c.oom) {
        /* the field readers stopped midway: find the event's end again */
        *cur = start;
        mp_next(cur);
        d = KVR_DROP_OVERSIZED_EVENT;
    }
    if (!d && type != KVR_EV_CLEARED && !(seen & BIT(KVR_F_HASHES)))
        d = KVR_DROP_MALFORMED_EVENT;
    if (!d && type == KVR_EV_STORED && !(seen & BIT(KVR_F_TOKENS)))
        d = KVR_DROP_MALFORMED_EVENT;
    if (d) {
        memset(ev, 0, sizeof *ev);
        ev->type = KVR_EV_DROPPED;
        ev->drop_reason = d;
        return;
    }
    /* top-level map keys win over the metadata map, which wins over vLLM's
     * salt among the first block's extra keys */
    if (c.top_salt.ptr)
        ev->cache_salt = c.top_salt;
    if (c.top_session.ptr)
        ev->session_id = c.top_session;
    if (!ev->cache_salt.ptr && ev->extra_keys)
        ev->cache_salt = kvr_wire_salt_from_extra_keys(ev);
    ev->type = type;
}
