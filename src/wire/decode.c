/* Batch level of the wire decoder (SPEC §3): [ts, events(, dp_rank)] or a
 * map {ts, events, data_parallel_rank|dp_rank|attn_dp_rank}. */
#include "wire/wire_internal.h"

#include <msgpuck.h>
#include <stdlib.h>
#include <string.h>

static const char *const batch_error_names[KVR_BATCH_ERROR_COUNT] = {
    [KVR_BATCH_OK] = "ok",
    [KVR_BATCH_INVALID_MSGPACK] = "invalid_msgpack",
    [KVR_BATCH_BAD_SHAPE] = "bad_shape",
    [KVR_BATCH_TOO_LARGE] = "too_large",
    [KVR_BATCH_NO_MEMORY] = "no_memory",
};

const char *kvr_batch_error_name(kvr_batch_error err)
{
    return (unsigned)err < KVR_BATCH_ERROR_COUNT ? batch_error_names[err] : "unknown";
}

void kvr_batch_init(kvr_batch *b)
{
    memset(b, 0, sizeof *b);
}

void kvr_batch_free(kvr_batch *b)
{
    free(b->events);
    free(b->u64_buf);
    memset(b, 0, sizeof *b);
}

bool kvr_wire_u64_reserve(kvr_batch *b, size_t used, size_t extra, uint32_t n_live)
{
    if (b->u64_cap - used >= extra)
        return true;
    size_t cap = b->u64_cap ? b->u64_cap : 256;
    while (cap - used < extra)
        cap *= 2;
    /* malloc + copy rather than realloc: the old block must still be valid
     * while the events' pointers into it are rebased. */
    uint64_t *nb = malloc(cap * sizeof *nb);
    if (!nb)
        return false;
    uint64_t *old = b->u64_buf;
    if (used)
        memcpy(nb, old, used * sizeof *nb);
    for (uint32_t i = 0; i < n_live; i++) {
        kvr_raw_event *ev = &b->events[i];
        if (ev->block_hashes)
            ev->block_hashes = nb + (ev->block_hashes - old);
        if (ev->token_ids)
            ev->token_ids = nb + (ev->token_ids - old);
    }
    free(old);
    b->u64_buf = nb;
    b->u64_cap = cap;
    return true;
}

static bool events_reserve(kvr_batch *b, uint32_t n)
{
    if (b->events_cap >= n)
        return true;
    size_t cap = b->events_cap ? b->events_cap : 64;
    while (cap < n)
        cap *= 2;
    kvr_raw_event *ne = realloc(b->events, cap * sizeof *ne);
    if (!ne)
        return false;
    b->events = ne;
    b->events_cap = cap;
    return true;
}

static bool read_ts(const char **cur, double *ts)
{
    switch (mp_typeof(**cur)) {
    case MP_DOUBLE:
        *ts = mp_decode_double(cur);
        return true;
    case MP_FLOAT:
        *ts = mp_decode_float(cur);
        return true;
    case MP_UINT:
        *ts = (double)mp_decode_uint(cur);
        return true;
    case MP_INT:
        *ts = (double)mp_decode_int(cur);
        return true;
    default:
        return false;
    }
}

/* nil -> no rank; a non-negative int that fits u32 -> rank; else bad. */
static bool read_rank(const char **cur, kvr_batch *b)
{
    if (mp_typeof(**cur) == MP_NIL) {
        mp_next(cur);
        b->has_dp_rank = false;
        return true;
    }
    uint64_t v;
    if (!kvr_wire_read_uint(cur, UINT32_MAX, &v))
        return false;
    b->has_dp_rank = true;
    b->dp_rank = (uint32_t)v;
    return true;
}

/* Decodes the events array at *cur in place (one pass over the payload)
 * and leaves *cur after it. */
static kvr_batch_error decode_events(kvr_batch *b, const char **cur)
{
    b->n_events = 0;
    b->n_dropped = 0;
    if (mp_typeof(**cur) != MP_ARRAY)
        return KVR_BATCH_BAD_SHAPE;
    uint32_t n = mp_decode_array(cur);
    if (n > KVR_WIRE_MAX_EVENTS)
        return KVR_BATCH_TOO_LARGE;
    if (!events_reserve(b, n))
        return KVR_BATCH_NO_MEMORY;
    size_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!kvr_wire_decode_event(b, cur, i, &used))
            return KVR_BATCH_NO_MEMORY;
        b->n_events = i + 1;
        if (b->events[i].type == KVR_EV_DROPPED)
            b->n_dropped++;
    }
    return KVR_BATCH_OK;
}

/* {ts, events, rank}: any order; unknown keys are skipped. */
static kvr_batch_error map_batch(const char **cur, kvr_batch *b)
{
    uint32_t n = mp_decode_map(cur);
    bool has_ts = false, has_events = false;
    for (uint32_t i = 0; i < n; i++) {
        kvr_str key = {NULL, 0};
        if (mp_typeof(**cur) == MP_STR)
            key.ptr = mp_decode_str(cur, &key.len);
        else
            mp_next(cur);
        kvr_batch_error err = KVR_BATCH_OK;
        if (kvr_str_eq(key, "ts")) {
            has_ts = read_ts(cur, &b->ts);
            err = has_ts ? KVR_BATCH_OK : KVR_BATCH_BAD_SHAPE;
        } else if (kvr_str_eq(key, "events")) {
            err = decode_events(b, cur);
            has_events = true;
        } else if (kvr_str_eq(key, "data_parallel_rank") || kvr_str_eq(key, "dp_rank") ||
                   kvr_str_eq(key, "attn_dp_rank")) {
            err = read_rank(cur, b) ? KVR_BATCH_OK : KVR_BATCH_BAD_SHAPE;
        } else {
            mp_next(cur);
        }
        if (err != KVR_BATCH_OK)
            return err;
    }
    return has_ts && has_events ? KVR_BATCH_OK : KVR_BATCH_BAD_SHAPE;
}

/* [ts, events(, rank(, ignored...))] */
static kvr_batch_error array_batch(const char **cur, kvr_batch *b)
{
    uint32_t n = mp_decode_array(cur);
    if (n < 2 || !read_ts(cur, &b->ts))
        return KVR_BATCH_BAD_SHAPE;
    kvr_batch_error err = decode_events(b, cur);
    if (err == KVR_BATCH_OK && n >= 3 && !read_rank(cur, b))
        err = KVR_BATCH_BAD_SHAPE;
    return err;
}

kvr_batch_error kvr_batch_decode(kvr_batch *b, const void *payload, size_t len)
{
    b->ts = 0;
    b->has_dp_rank = false;
    b->dp_rank = 0;
    b->n_events = 0;
    b->n_dropped = 0;
    if (!payload)
        return KVR_BATCH_INVALID_MSGPACK;
    const char *cur = payload;
    kvr_batch_error err = kvr_wire_validate(cur, len);
    if (err != KVR_BATCH_OK)
        return err;
    if (mp_typeof(*cur) == MP_ARRAY)
        err = array_batch(&cur, b);
    else if (mp_typeof(*cur) == MP_MAP)
        err = map_batch(&cur, b);
    else
        err = KVR_BATCH_BAD_SHAPE;
    if (err != KVR_BATCH_OK) {
        /* a batch applies whole or not at all */
        b->has_dp_rank = false;
        b->n_events = 0;
        b->n_dropped = 0;
    }
    return err;
}
