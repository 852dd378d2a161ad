/* Batch level of the wire decoder (SPEC §3): [ts, events(, dp_rank)] or a
 * map {ts, events, data_parallel_rank|dp_rank|attn_dp_rank}, checked whole
 * before any event is handed out, then its events one at a time (wire.h
 * says why: memory proportional to one event, not to the batch). */
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
    [KVR_BATCH_OVER_LIMIT] = "over_byte_limit",
};

const char *kvr_batch_error_name(kvr_batch_error err)
{
    return (unsigned)err < KVR_BATCH_ERROR_COUNT ? batch_error_names[err] : "unknown";
}

void kvr_batch_init(kvr_batch *b)
{
    memset(b, 0, sizeof *b);
    b->max_bytes = KVR_WIRE_DEFAULT_MAX_BYTES;
}

void kvr_batch_free(kvr_batch *b)
{
    free(b->u64_buf);
    memset(b, 0, sizeof *b);
}

void kvr_batch_set_max_bytes(kvr_batch *b, size_t max_bytes)
{
    b->max_bytes = max_bytes ? max_bytes : KVR_WIRE_DEFAULT_MAX_BYTES;
}

size_t kvr_batch_bytes(const kvr_batch *b)
{
    return b->u64_cap * sizeof *b->u64_buf;
}

/* After a batch that needed more than the keep threshold: back to none, so
 * one huge batch does not pin its scratch for the life of the source. */
static void release_scratch(kvr_batch *b)
{
    if (kvr_batch_bytes(b) <= KVR_WIRE_SCRATCH_KEEP_BYTES)
        return;
    free(b->u64_buf);
    b->u64_buf = NULL;
    b->u64_cap = 0;
}

bool kvr_wire_u64_reserve(kvr_batch *b, kvr_raw_event *ev, size_t used, size_t extra)
{
    if (b->u64_cap - used >= extra)
        return true;
    /* used + extra <= 2^16 + 2^20 + 1 (the SPEC §3 bounds): no overflow */
    size_t cap = (used + extra + 1023) & ~(size_t)1023;
    uint64_t *nb = realloc(b->u64_buf, cap * sizeof *nb);
    if (!nb)
        return false;
    if (ev->block_hashes)
        ev->block_hashes = nb + (ev->block_hashes - b->u64_buf);
    if (ev->token_ids)
        ev->token_ids = nb + (ev->token_ids - b->u64_buf);
    if (ev->token_ids_u32)
        ev->token_ids_u32 =
            (const uint32_t *)(nb + ((const uint64_t *)(const void *)ev->token_ids_u32 - b->u64_buf));
    b->u64_buf = nb;
    b->u64_cap = cap;
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

/* Notes where the events array starts and how long it is: events are
 * decoded one at a time by kvr_batch_next. */
static kvr_batch_error find_events(kvr_batch *b, const char *at)
{
    if (mp_typeof(*at) != MP_ARRAY)
        return KVR_BATCH_BAD_SHAPE;
    uint32_t n = mp_decode_array(&at);
    if (n > KVR_WIRE_MAX_EVENTS)
        return KVR_BATCH_TOO_LARGE;
    b->first = b->next = at;
    b->n_events = n;
    return KVR_BATCH_OK;
}

/* {ts, events, rank}: any order; unknown keys are skipped. The validator
 * noted where the first pairs start; a longer map is walked past them. */
static kvr_batch_error map_batch(const char *cur, const kvr_wire_top *top, kvr_batch *b)
{
    uint32_t n = mp_decode_map(&cur);
    bool has_ts = false, has_events = false;
    for (uint32_t i = 0; i < n; i++) {
        if (2 * i < top->n)
            cur = top->at[2 * i];
        kvr_str key = {NULL, 0};
        if (mp_typeof(*cur) == MP_STR)
            key.ptr = mp_decode_str(&cur, &key.len);
        else
            mp_next(&cur);
        const char *val = cur;
        kvr_batch_error err = KVR_BATCH_OK;
        if (kvr_str_eq(key, "ts")) {
            has_ts = read_ts(&val, &b->ts);
            err = has_ts ? KVR_BATCH_OK : KVR_BATCH_BAD_SHAPE;
        } else if (kvr_str_eq(key, "events")) {
            err = find_events(b, val);
            has_events = true;
        } else if (kvr_str_eq(key, "data_parallel_rank") || kvr_str_eq(key, "dp_rank") ||
                   kvr_str_eq(key, "attn_dp_rank")) {
            err = read_rank(&val, b) ? KVR_BATCH_OK : KVR_BATCH_BAD_SHAPE;
        }
        if (err != KVR_BATCH_OK)
            return err;
        if (2 * i + 2 >= top->n) /* the next key was not noted: step over this value */
            mp_next(&cur);
    }
    return has_ts && has_events ? KVR_BATCH_OK : KVR_BATCH_BAD_SHAPE;
}

/* [ts, events(, rank(, ignored...))] */
static kvr_batch_error array_batch(const char *cur, const kvr_wire_top *top, kvr_batch *b)
{
    uint32_t n = mp_decode_array(&cur);
    const char *ts = top->at[0];
    if (n < 2 || !read_ts(&ts, &b->ts))
        return KVR_BATCH_BAD_SHAPE;
    kvr_batch_error err = find_events(b, top->at[1]);
    const char *rank = n >= 3 ? top->at[2] : NULL;
    if (err == KVR_BATCH_OK && rank && !read_rank(&rank, b))
        err = KVR_BATCH_BAD_SHAPE;
    return err;
}

static void reset(kvr_batch *b)
{
    b->ts = 0;
    b->has_dp_rank = false;
    b->dp_rank = 0;
    b->n_events = 0;
    b->n_read = 0;
    b->first = b->next = NULL;
    b->given = NULL;
    memset(&b->tally, 0, sizeof b->tally);
    memset(&b->ev, 0, sizeof b->ev);
    b->ev_fast_clean = true;
}

kvr_batch_error kvr_batch_decode(kvr_batch *b, const void *payload, size_t len)
{
    reset(b);
    release_scratch(b); /* the last batch may not have been read to its end */
    if (!payload)
        return KVR_BATCH_INVALID_MSGPACK;
    if (len > (b->max_bytes ? b->max_bytes : KVR_WIRE_DEFAULT_MAX_BYTES))
        return KVR_BATCH_OVER_LIMIT;
    const char *cur = payload;
    kvr_wire_top top;
    kvr_batch_error err = kvr_wire_validate(cur, len, &top);
    if (err != KVR_BATCH_OK)
        return err;
    if (mp_typeof(*cur) == MP_ARRAY)
        err = array_batch(cur, &top, b);
    else if (mp_typeof(*cur) == MP_MAP)
        err = map_batch(cur, &top, b);
    else
        err = KVR_BATCH_BAD_SHAPE;
    if (err != KVR_BATCH_OK)
        reset(b); /* a batch applies whole or not at all */
    return err;
}

void kvr_batch_of_events(kvr_batch *b, const kvr_raw_event *evs, uint32_t n)
{
    reset(b);
    b->given = evs;
    b->n_events = evs ? n : 0;
}

void kvr_batch_rewind(kvr_batch *b)
{
    b->next = b->first;
    b->n_read = 0;
    memset(&b->tally, 0, sizeof b->tally);
}

static void count(kvr_batch_tally *t, const kvr_raw_event *ev)
{
    switch (ev->type) {
    case KVR_EV_STORED:
        t->stored++;
        t->blocks_stored += ev->n_block_hashes;
        break;
    case KVR_EV_REMOVED:
        t->removed++;
        t->blocks_removed += ev->n_block_hashes;
        break;
    case KVR_EV_CLEARED:
        t->cleared++;
        break;
    default:
        t->dropped++;
        break;
    }
}

const kvr_raw_event *kvr_batch_next(kvr_batch *b)
{
    if (b->n_read >= b->n_events) {
        release_scratch(b);
        return NULL;
    }
    const kvr_raw_event *ev;
    if (b->given) {
        ev = &b->given[b->n_read];
    } else {
        if (!kvr_wire_decode_event_fast(b, &b->next))
            kvr_wire_decode_event(b, &b->next);
        ev = &b->ev;
    }
    b->n_read++;
    count(&b->tally, ev);
    return ev;
}
