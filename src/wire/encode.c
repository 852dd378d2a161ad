/* Engine-side msgpack encoder (SPEC §3) on msgpuck's mp_encode_*: the
 * simulator's mock engines and the tests publish real bytes with it. */
#include "kvrouter/wire_encode.h"
#include "util/grow.h"
#include "wire/wire_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void kvr_wbuf_init(kvr_wbuf *w)
{
    memset(w, 0, sizeof *w);
}

void kvr_wbuf_free(kvr_wbuf *w)
{
    free(w->data);
    memset(w, 0, sizeof *w);
}

void kvr_wbuf_reset(kvr_wbuf *w)
{
    w->len = 0;
}

/* Room for n more bytes at the end of w, or NULL when the buffer cannot
 * grow: the batch being encoded is then abandoned (every later put_*
 * that needs more room writes nothing), and kvr_wire_encode_batch resets
 * the buffer to where the batch started and reports it. Writes that still
 * fit land in that discarded tail; the fast path stays one comparison. */
static char *room(kvr_wbuf *w, size_t n)
{
    if (w->cap - w->len >= n)
        return w->data + w->len;
    if (w->failed || n > SIZE_MAX - w->len ||
        kvr_grow((void **)&w->data, &w->cap, w->len + n, 1, 256) != 0) {
        w->failed = true;
        return NULL;
    }
    return w->data + w->len;
}

static void done(kvr_wbuf *w, char *end)
{
    w->len = (size_t)(end - w->data);
}

/* Each put_* writes one msgpack value, or nothing once room() has failed. */
static void put_array(kvr_wbuf *w, uint32_t n)
{
    char *p = room(w, 5);
    if (p)
        done(w, mp_encode_array(p, n));
}

static void put_map(kvr_wbuf *w, uint32_t n)
{
    char *p = room(w, 5);
    if (p)
        done(w, mp_encode_map(p, n));
}

static void put_nil(kvr_wbuf *w)
{
    char *p = room(w, 1);
    if (p)
        done(w, mp_encode_nil(p));
}

static void put_u64(kvr_wbuf *w, uint64_t v)
{
    char *p = room(w, 9);
    if (p)
        done(w, mp_encode_uint(p, v));
}

static void put_double(kvr_wbuf *w, double v)
{
    char *p = room(w, 9);
    if (p)
        done(w, mp_encode_double(p, v));
}

static void put_i64(kvr_wbuf *w, int64_t v)
{
    /* msgpuck's mp_encode_int takes negative values only */
    if (v >= 0) {
        put_u64(w, (uint64_t)v);
        return;
    }
    char *p = room(w, 9);
    if (p)
        done(w, mp_encode_int(p, v));
}

static void put_bytes_str(kvr_wbuf *w, const char *s, uint32_t n)
{
    char *p = room(w, mp_sizeof_str(n));
    if (p)
        done(w, mp_encode_str(p, s, n));
}

static void put_cstr(kvr_wbuf *w, const char *s)
{
    put_bytes_str(w, s, (uint32_t)strlen(s));
}

static void put_str(kvr_wbuf *w, kvr_str s)
{
    if (!s.ptr) {
        put_nil(w);
        return;
    }
    put_bytes_str(w, s.ptr, s.len);
}

/* key + string value, only when the string is present */
static void put_opt_kv(kvr_wbuf *w, const char *key, kvr_str v)
{
    if (v.ptr) {
        put_cstr(w, key);
        put_str(w, v);
    }
}

static void put_opt_i64(kvr_wbuf *w, bool has, int64_t v)
{
    if (has)
        put_i64(w, v);
    else
        put_nil(w);
}

static void put_u64s(kvr_wbuf *w, const uint64_t *v, uint32_t n)
{
    put_array(w, n);
    for (uint32_t i = 0; i < n; i++)
        put_u64(w, v[i]);
}

/* Eagle bigram form: n tokens -> n-1 pairs (t_i, t_{i+1}). */
static void put_tokens(kvr_wbuf *w, const kvr_raw_event *ev)
{
    if (!ev->eagle || ev->n_token_ids < 2) {
        put_u64s(w, ev->token_ids, ev->n_token_ids);
        return;
    }
    put_array(w, ev->n_token_ids - 1);
    for (uint32_t i = 0; i + 1 < ev->n_token_ids; i++) {
        put_array(w, 2);
        put_u64(w, ev->token_ids[i]);
        put_u64(w, ev->token_ids[i + 1]);
    }
}

static const char *medium_name(kvr_tier t)
{
    switch (t) {
    case KVR_TIER_CPU:
        return "CPU";
    case KVR_TIER_DISK:
        return "DISK";
    case KVR_TIER_EXTERNAL:
        return "EXTERNAL";
    default:
        return "GPU";
    }
}

static bool has_group_fields(const kvr_raw_event *ev)
{
    return ev->has_group_idx || ev->kv_cache_spec_kind.ptr || ev->has_sliding_window ||
           ev->locality.ptr;
}

/* SGLang position 7: the metadata map when a salt or session is set (it also
 * carries lora_name then, so nothing is lost), else the lora_name string. */
static void put_pos7(kvr_wbuf *w, const kvr_raw_event *ev)
{
    if (!ev->cache_salt.ptr && !ev->session_id.ptr) {
        put_str(w, ev->lora_name);
        return;
    }
    uint32_t n = (ev->cache_salt.ptr != NULL) + (ev->session_id.ptr != NULL) +
                 (ev->lora_name.ptr != NULL);
    put_map(w, n);
    put_opt_kv(w, "cache_salt", ev->cache_salt);
    put_opt_kv(w, "session_id", ev->session_id);
    put_opt_kv(w, "lora_name", ev->lora_name);
}

/* extra_keys as the event holds them: its entries' bytes, verbatim. */
static void put_extra_keys(kvr_wbuf *w, const kvr_raw_event *ev)
{
    if (!ev->extra_keys) {
        put_nil(w);
        return;
    }
    const char *end = ev->extra_keys;
    for (uint32_t i = 0; i < ev->n_extra_keys; i++)
        mp_next(&end);
    size_t len = (size_t)(end - ev->extra_keys);
    put_array(w, ev->n_extra_keys);
    memcpy(room(w, len), ev->extra_keys, len);
    done(w, w->data + w->len + len);
}

static void put_group_tail(kvr_wbuf *w, const kvr_raw_event *ev)
{
    put_opt_i64(w, ev->has_group_idx, ev->group_idx);
    put_str(w, ev->kv_cache_spec_kind);
    put_opt_i64(w, ev->has_sliding_window, ev->sliding_window);
    put_str(w, ev->locality);
}

static void tagged_event(kvr_wbuf *w, const kvr_raw_event *ev)
{
    bool tail = has_group_fields(ev);
    switch (ev->type) {
    case KVR_EV_STORED:
        tail |= ev->extra_keys != NULL;
        put_array(w, tail ? 13 : 8);
        put_cstr(w, "BlockStored");
        put_u64s(w, ev->block_hashes, ev->n_block_hashes);
        if (ev->has_parent)
            put_u64(w, ev->parent);
        else
            put_nil(w);
        put_tokens(w, ev);
        put_u64(w, ev->block_size);
        put_opt_i64(w, ev->has_lora_id, ev->lora_id);
        put_cstr(w, medium_name(ev->tier));
        put_pos7(w, ev);
        if (tail) {
            put_extra_keys(w, ev);
            put_group_tail(w, ev);
        }
        break;
    case KVR_EV_REMOVED:
        put_array(w, tail ? 7 : 3);
        put_cstr(w, "BlockRemoved");
        put_u64s(w, ev->block_hashes, ev->n_block_hashes);
        put_cstr(w, medium_name(ev->tier));
        if (tail)
            put_group_tail(w, ev);
        break;
    default:
        put_array(w, 1);
        put_cstr(w, "AllBlocksCleared");
    }
}

/* vLLM map form: only the keys the event has (nil where vLLM sends nil). */
static void map_event(kvr_wbuf *w, const kvr_raw_event *ev)
{
    bool stored = ev->type == KVR_EV_STORED;
    if (ev->type != KVR_EV_STORED && ev->type != KVR_EV_REMOVED) {
        put_map(w, 1);
        put_cstr(w, "type");
        put_cstr(w, "AllBlocksCleared");
        return;
    }
    uint32_t n = 3; /* type, block_hashes, medium */
    if (stored)
        n += 5 + (ev->cache_salt.ptr != NULL) + (ev->session_id.ptr != NULL) +
             (ev->extra_keys != NULL);
    n += (ev->has_group_idx != 0) + (ev->kv_cache_spec_kind.ptr != NULL) +
         (ev->has_sliding_window != 0) + (ev->locality.ptr != NULL);
    put_map(w, n);
    put_cstr(w, "type");
    put_cstr(w, stored ? "BlockStored" : "BlockRemoved");
    put_cstr(w, "block_hashes");
    put_u64s(w, ev->block_hashes, ev->n_block_hashes);
    if (stored) {
        put_cstr(w, "parent_block_hash");
        if (ev->has_parent)
            put_u64(w, ev->parent);
        else
            put_nil(w);
        put_cstr(w, "token_ids");
        put_tokens(w, ev);
        put_cstr(w, "block_size");
        put_u64(w, ev->block_size);
        put_cstr(w, "lora_id");
        put_opt_i64(w, ev->has_lora_id, ev->lora_id);
        put_cstr(w, "lora_name");
        put_str(w, ev->lora_name);
        put_opt_kv(w, "cache_salt", ev->cache_salt);
        put_opt_kv(w, "session_id", ev->session_id);
        if (ev->extra_keys) {
            put_cstr(w, "extra_keys");
            put_extra_keys(w, ev);
        }
    }
    put_cstr(w, "medium");
    put_cstr(w, medium_name(ev->tier));
    if (ev->has_group_idx) {
        put_cstr(w, "group_idx");
        put_i64(w, ev->group_idx);
    }
    put_opt_kv(w, "kv_cache_spec_kind", ev->kv_cache_spec_kind);
    if (ev->has_sliding_window) {
        put_cstr(w, "kv_cache_spec_sliding_window");
        put_i64(w, ev->sliding_window);
    }
    put_opt_kv(w, "locality", ev->locality);
}

bool kvr_wire_encode_batch(kvr_wbuf *w, kvr_wire_style style, double ts,
                           const kvr_raw_event *events, size_t n, bool has_rank, uint32_t rank)
{
    size_t start = w->len;
    /* dropped events have no wire form: they are left out */
    uint32_t live = 0;
    for (size_t i = 0; i < n; i++)
        live += events[i].type != KVR_EV_DROPPED;
    put_array(w, 3);
    put_double(w, ts);
    put_array(w, live);
    for (size_t i = 0; i < n; i++) {
        if (events[i].type == KVR_EV_DROPPED)
            continue;
        if (style == KVR_WIRE_VLLM)
            map_event(w, &events[i]);
        else
            tagged_event(w, &events[i]);
    }
    if (has_rank)
        put_u64(w, rank);
    else
        put_nil(w);
    if (w->failed) {
        w->failed = false; /* the buffer is usable again for a later batch */
        w->len = start;
        return false;
    }
    return true;
}

void kvr_wire_encode_seq(uint64_t seq, unsigned char out[8])
{
    for (int i = 7; i >= 0; i--) {
        out[i] = (unsigned char)(seq & 0xff);
        seq >>= 8;
    }
}
