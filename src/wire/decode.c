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

static bool key_is(const char *k, uint32_t klen, const char *name)
{
    return klen == strlen(name) && memcmp(k, name, klen) == 0;
}

/* Finds ts / events / rank in a map batch; unknown keys are skipped. */
static kvr_batch_error map_batch(const char **cur, kvr_batch *b, const char **events)
{
    uint32_t n = mp_decode_map(cur);
    bool has_ts = false;
    for (uint32_t i = 0; i < n; i++) {
        if (mp_typeof(**cur) != MP_STR) {
            mp_next(cur);
            mp_next(cur);
            continue;
        }
        uint32_t klen;
        const char *k = mp_decode_str(cur, &klen);
        if (key_is(k, klen, "ts")) {
            if (!read_ts(cur, &b->ts))
                return KVR_BATCH_BAD_SHAPE;
            has_ts = true;
        } else if (key_is(k, klen, "events")) {
            *events = *cur;
            mp_next(cur);
        } else if (key_is(k, klen, "data_parallel_rank") || key_is(k, klen, "dp_rank") ||
                   key_is(k, klen, "attn_dp_rank")) {
            if (!read_rank(cur, b))
                return KVR_BATCH_BAD_SHAPE;
        } else {
            mp_next(cur);
        }
    }
    return has_ts && *events ? KVR_BATCH_OK : KVR_BATCH_BAD_SHAPE;
}

static kvr_batch_error array_batch(const char **cur, kvr_batch *b, const char **events)
{
    uint32_t n = mp_decode_array(cur);
    if (n < 2 || !read_ts(cur, &b->ts))
        return KVR_BATCH_BAD_SHAPE;
    *events = *cur;
    mp_next(cur);
    if (n >= 3 && !read_rank(cur, b))
        return KVR_BATCH_BAD_SHAPE;
    /* extra elements are ignored (validated already, never read) */
    return KVR_BATCH_OK;
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

    const char *events = NULL;
    switch (mp_typeof(*cur)) {
    case MP_ARRAY:
        err = array_batch(&cur, b, &events);
        break;
    case MP_MAP:
        err = map_batch(&cur, b, &events);
        break;
    default:
        err = KVR_BATCH_BAD_SHAPE;
    }
    if (err == KVR_BATCH_OK && mp_typeof(*events) != MP_ARRAY)
        err = KVR_BATCH_BAD_SHAPE;
    if (err != KVR_BATCH_OK) {
        b->has_dp_rank = false;
        return err;
    }

    uint32_t n = mp_decode_array(&events);
    if (n > KVR_WIRE_MAX_EVENTS)
        return KVR_BATCH_TOO_LARGE;
    if (!events_reserve(b, n))
        return KVR_BATCH_NO_MEMORY;
    size_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!kvr_wire_decode_event(b, &events, i, &used)) {
            b->n_events = 0;
            b->n_dropped = 0;
            return KVR_BATCH_NO_MEMORY;
        }
        b->n_events = i + 1;
        if (b->events[i].type == KVR_EV_DROPPED)
            b->n_dropped++;
    }
    return KVR_BATCH_OK;
}
