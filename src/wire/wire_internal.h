/* Private helpers shared by the wire decoder's files. */
#ifndef KVR_WIRE_INTERNAL_H
#define KVR_WIRE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvrouter/wire.h"

/* msgpuck is compiled into this layer (msgpuck_source.c). Declared hidden,
 * its parser tables are reached directly from position-independent code,
 * not through the GOT (decode --bench: 1 % fewer instructions). The system
 * headers it includes come first, so that only msgpuck's own names are
 * hidden. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#pragma GCC visibility push(hidden)
#include <msgpuck.h>
#pragma GCC visibility pop

/* Validates a whole payload before anything reads it: a structural walk
 * that bounds nesting at KVR_WIRE_MAX_DEPTH and checks every container count
 * against the bytes left, then mp_check (no truncation, no trailing bytes).
 * The walk comes first because mp_check keeps its pending-element counter in
 * an int: a forged 32-bit array/map count wraps it (mp_check then accepts
 * counts that run past the end) or overflows it (undefined behaviour). After
 * this returns OK, mp_decode_* and mp_next stay inside [p, p + len). */
/* Where the top-level container's elements start, noted by the validating
 * walk so the batch level finds its fields without walking again. */
#define KVR_WIRE_TOP_MAX 16u
typedef struct {
    const char *at[KVR_WIRE_TOP_MAX]; /* element i of the top array, or map key/value i */
    uint32_t n;                       /* elements noted (at most KVR_WIRE_TOP_MAX) */
} kvr_wire_top;

kvr_batch_error kvr_wire_validate(const char *p, size_t len, kvr_wire_top *top);
/* Bytes of a scalar item of at most 32 bytes by its first byte, 0 for any
 * other item (validate.c). */
extern const uint8_t kvr_wire_scalar_bytes[256];

/* Makes room for `extra` more u64s after b->u64_buf[used], for the event
 * being decoded (ev, which lives in b). The scratch grows to exactly what
 * the event needs (rounded up a little): it holds one event at a time, so
 * doubling would buy nothing and cost the bound. The buffer may move: ev's
 * pointers into it are rebased. */
bool kvr_wire_u64_reserve(kvr_batch *b, kvr_raw_event *ev, size_t used, size_t extra);

/* Reads a non-negative int of either msgpack family (engines may send a
 * positive value in a signed format) that is at most max. On false nothing
 * sensible was read and *p is unspecified. */
bool kvr_wire_read_uint(const char **p, uint64_t max, uint64_t *out);

/* Reads a non-negative integer in the unsigned formats only (positive
 * fixint, uint 8/16/32/64) at *p, with no type dispatch: the token and hash
 * arrays engines send. False, *p untouched, for any other item (the caller
 * falls back to kvr_wire_read_uint or the general decoder). */
static inline bool kvr_wire_take_uint(const char **p, uint64_t *v)
{
    unsigned char c = (unsigned char)**p;
    const char *q = *p + 1;
    if (c < 0x80) {
        *v = c;
    } else {
        switch (c) {
        case 0xcc: *v = mp_load_u8(&q); break;
        case 0xcd: *v = mp_load_u16(&q); break;
        case 0xce: *v = mp_load_u32(&q); break;
        case 0xcf: *v = mp_load_u64(&q); break;
        default: return false;
        }
    }
    *p = q;
    return true;
}

/* Fields of a BlockStored / BlockRemoved event, whatever its encoding. */
enum kvr_wire_field {
    KVR_F_HASHES,
    KVR_F_PARENT,
    KVR_F_TOKENS,
    KVR_F_BLOCK_SIZE,
    KVR_F_LORA_ID,
    KVR_F_MEDIUM,
    KVR_F_POS7, /* lora_name string or SGLang metadata map */
    KVR_F_EXTRA_KEYS,
    KVR_F_GROUP_IDX,
    KVR_F_SPEC_KIND,
    KVR_F_SLIDING,
    KVR_F_LOCALITY,
    KVR_F_CACHE_SALT, /* map events only: top-level keys */
    KVR_F_SESSION_ID,
    KVR_F_COUNT
};

/* State of the event being decoded into b->ev. */
typedef struct {
    kvr_batch *b;
    size_t *used;       /* u64s of b->u64_buf in use */
    kvr_raw_event *ev;
    kvr_str top_salt;   /* top-level map keys, applied last: they win */
    kvr_str top_session;
    bool oom;
} kvr_wire_event_ctx;

/* Decodes field f of the event from *p and advances *p past it on success.
 * On failure returns the drop reason and *p is unspecified. */
kvr_drop_reason kvr_wire_read_field(kvr_wire_event_ctx *c, enum kvr_wire_field f,
                                    const char **p);

/* The extra_keys field (extra_keys.c): nil, or entries nil / arrays. */
kvr_drop_reason kvr_wire_read_extra_keys(kvr_raw_event *ev, const char **p);
/* vLLM's cache_salt of an event that names none: the first string of its
 * first extra_keys entry that is neither the LoRA name nor 64 hex digits. */
kvr_str kvr_wire_salt_from_extra_keys(const kvr_raw_event *ev);

/* Decodes one event (a tagged array or a map) at *cur into b->ev, its
 * hashes and tokens into b->u64_buf from 0, and advances *cur past the event
 * (the payload must have passed kvr_wire_validate). A bad event becomes
 * KVR_EV_DROPPED; so does one whose scratch cannot be allocated
 * (oversized_event: the event is lost, counted, and the batch goes on). */
void kvr_wire_decode_event(kvr_batch *b, const char **cur);
/* The common tagged shapes only (event_fast.c), tried first: true when it
 * decoded the event at *cur into b->ev, as kvr_wire_decode_event would, and
 * advanced *cur; false, *cur untouched, for anything kvr_wire_decode_event
 * must decode (b->ev and the scratch are then garbage). */
bool kvr_wire_decode_event_fast(kvr_batch *b, const char **cur);

#endif
