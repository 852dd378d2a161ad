/* vLLM extra_keys (SPEC §3, §5 "vLLM media identity"): vLLM hashes media
 * into each block's extra keys instead of the tokens, so these readers are
 * how the normalizer learns which media a block holds. Checked once at
 * decode (the field reader), read again block by block by the normalizer:
 * the items are few and nothing is copied. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <string.h>
#include <xxhash.h>

#include "util/hex.h"

bool kvr_is_hex64(kvr_str s)
{
    if (!s.ptr || s.len != 64)
        return false;
    for (uint32_t i = 0; i < 64; i++)
        if (kvr_hex_digit(s.ptr[i]) < 0)
            return false;
    return true;
}

uint64_t kvr_media_id(kvr_str identifier)
{
    if (kvr_is_hex64(identifier)) {
        uint64_t x = 0;
        for (int i = 0; i < 16; i++)
            x = x << 4 | (uint64_t)kvr_hex_digit(identifier.ptr[i]);
        return x;
    }
    return XXH3_64bits_withSeed(identifier.ptr ? identifier.ptr : "", identifier.len, 0);
}

kvr_drop_reason kvr_wire_read_extra_keys(kvr_raw_event *ev, const char **p)
{
    if (mp_typeof(**p) == MP_NIL) {
        mp_next(p);
        return KVR_DROP_NONE;
    }
    if (mp_typeof(**p) != MP_ARRAY)
        return KVR_DROP_MALFORMED_EVENT;
    uint32_t n = mp_decode_array(p);
    if (n > KVR_WIRE_MAX_HASHES)
        return KVR_DROP_OVERSIZED_EVENT;
    const char *first = *p;
    for (uint32_t i = 0; i < n; i++) {
        enum mp_type t = mp_typeof(**p);
        if (t != MP_NIL && t != MP_ARRAY)
            return KVR_DROP_MALFORMED_EVENT;
        mp_next(p);
    }
    ev->extra_keys = n ? first : NULL;
    ev->n_extra_keys = n;
    return KVR_DROP_NONE;
}

void kvr_extra_keys_begin(kvr_extra_keys *x, const kvr_raw_event *ev)
{
    x->next = ev->extra_keys;
    x->left = ev->extra_keys ? ev->n_extra_keys : 0;
}

/* A [string, int] pair: *id_str set. */
static bool read_pair(const char *p, kvr_str *id_str)
{
    if (mp_typeof(*p) != MP_ARRAY || mp_decode_array(&p) != 2 || mp_typeof(*p) != MP_STR)
        return false;
    id_str->ptr = mp_decode_str(&p, &id_str->len);
    return mp_typeof(*p) == MP_UINT || mp_typeof(*p) == MP_INT;
}

static bool same(kvr_str a, kvr_str b)
{
    return a.ptr && b.ptr && a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* The item at *p: media (with its identifier), ignorable text, or opaque. */
typedef enum { ITEM_TEXT, ITEM_MEDIA, ITEM_OPAQUE } item_kind;

static item_kind classify(const char *p, kvr_str lora, kvr_str *id)
{
    if (mp_typeof(*p) == MP_STR) {
        id->ptr = mp_decode_str(&p, &id->len);
        return kvr_is_hex64(*id) && !same(*id, lora) ? ITEM_MEDIA : ITEM_TEXT;
    }
    return read_pair(p, id) ? ITEM_MEDIA : ITEM_OPAQUE;
}

bool kvr_extra_keys_next(kvr_extra_keys *x, kvr_str lora, kvr_extra_items *items,
                         kvr_extra_summary *sum)
{
    sum->n_media = 0;
    sum->opaque = false;
    items->left = 0;
    items->next = NULL;
    items->lora = lora;
    if (x->left == 0)
        return false;
    x->left--;
    const char *p = x->next;
    mp_next(&x->next);
    if (mp_typeof(*p) != MP_ARRAY) /* nil: nothing for this block */
        return true;
    items->left = mp_decode_array(&p);
    items->next = p;
    for (uint32_t i = 0; i < items->left; i++) {
        kvr_str id;
        item_kind k = classify(p, lora, &id);
        sum->n_media += k == ITEM_MEDIA;
        sum->opaque |= k == ITEM_OPAQUE;
        mp_next(&p);
    }
    return true;
}

bool kvr_extra_items_next_media(kvr_extra_items *it, uint64_t *id)
{
    while (it->left) {
        it->left--;
        kvr_str s;
        item_kind k = classify(it->next, it->lora, &s);
        mp_next(&it->next);
        if (k == ITEM_MEDIA) {
            *id = kvr_media_id(s);
            return true;
        }
    }
    return false;
}

kvr_str kvr_wire_salt_from_extra_keys(const kvr_raw_event *ev)
{
    kvr_str none = {NULL, 0};
    const char *p = ev->extra_keys; /* the first block's entry */
    if (!p || mp_typeof(*p) != MP_ARRAY)
        return none;
    uint32_t n = mp_decode_array(&p);
    for (uint32_t i = 0; i < n; i++) {
        kvr_str s;
        if (mp_typeof(*p) == MP_STR && classify(p, ev->lora_name, &s) == ITEM_TEXT &&
            !kvr_is_hex64(s) && !same(s, ev->lora_name))
            return s;
        mp_next(&p);
    }
    return none;
}
