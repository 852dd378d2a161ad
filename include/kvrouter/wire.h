/* Wire layer (SPEC §2-3): ZeroMQ frames and msgpack batches -> raw events.
 * Tokens stay u64 here so wide Kimi ids survive decoding.
 *
 * Decoding choices where SPEC §3 is silent:
 * - The whole payload passes a bounded structural walk (depth <=
 *   KVR_WIRE_MAX_DEPTH, every container count <= bytes left), then
 *   mp_check: msgpuck's mp_check keeps its pending count in an int that a
 *   forged 32-bit count wraps or overflows, so it only sees honest counts.
 *   Payloads above INT32_MAX/4 bytes are TOO_LARGE.
 * - bin hash: its last 8 bytes big-endian; a bin shorter than 8 bytes is a
 *   big-endian integer (zero-extended on the left); an empty bin is a
 *   malformed event.
 * - medium: the SPEC names, matched case-insensitively ("gpu" == "GPU");
 *   nil, "" or an absent medium is gpu.
 * - A tagged BlockStored needs indexes 0..4 (through block_size); a
 *   BlockRemoved needs its hashes. After kv_cache_spec_kind, a tagged
 *   removal reads sliding_window then locality (the store's order).
 * - Map events: the same field names; "metadata" is another key for the
 *   position-7 map; top-level cache_salt / session_id win over the map's.
 *   The position-7 map may also carry "lora_name" (the encoder writes it
 *   there when an event has both a LoRA and a salt).
 * - group_idx, kv_cache_spec_kind, sliding window and locality are kept raw:
 *   filtering on them is the normalizer's job. A string where a tagged
 *   array holds group_idx (store position 9, removal position 3) is the
 *   kv_cache_spec_kind of a layout without group_idx: group 0, and the
 *   positions after it hold sliding window, then locality.
 * - Ints: any msgpack int family; a positive value in a signed format is
 *   accepted wherever a non-negative int is expected.
 * - extra_keys: at most KVR_WIRE_MAX_HASHES entries, each nil or an array
 *   (anything else drops the event as malformed); items are kept as sent.
 *   vLLM names a request's cache_salt only there (the first block's items:
 *   LoRA name, media, salt, prompt-embedding hashes, in that order), so an
 *   event without a cache_salt of its own takes the first string of its
 *   first entry that is neither its lora_name nor 64 hex digits (as
 *   Dynamo's decoder does). */
#ifndef KVROUTER_WIRE_H
#define KVROUTER_WIRE_H

#include "kvrouter/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SPEC §3 bounds, applied before any allocation. */
#define KVR_WIRE_MAX_HASHES 65536u
#define KVR_WIRE_MAX_TOKENS (1u << 20)
#define KVR_WIRE_MAX_DEPTH 32u
#define KVR_WIRE_MAX_EVENTS (1u << 20)
/* Stores up to this many tokens also get their u32 view (token_ids_u32):
 * 4 bytes more per token, for the one-page events that are most of a
 * stream, never for the large stores the scratch bound is about. */
#define KVR_WIRE_U32_VIEW_MAX 1024u

typedef enum {
    KVR_EV_STORED = 0,
    KVR_EV_REMOVED = 1,
    KVR_EV_CLEARED = 2,
    KVR_EV_DROPPED = 3 /* decoded as far as the batch goes, then rejected */
} kvr_event_type;

typedef struct {
    kvr_event_type type;
    kvr_drop_reason drop_reason; /* when type == KVR_EV_DROPPED */
    kvr_tier tier;               /* stored / removed */

    bool has_parent;
    uint64_t parent;

    const uint64_t *block_hashes; /* engine hashes, u64 bits */
    uint32_t n_block_hashes;

    const uint64_t *token_ids; /* stored: u64 tokens, Eagle bigrams flattened */
    uint32_t n_token_ids;
    bool eagle;                /* token_ids came in the bigram form */
    /* The same tokens as u32, when the decoder wrote them as well (stores
     * of at most KVR_WIRE_U32_VIEW_MAX tokens, every id below
     * KVR_WIDE_SENTINEL): the normalizer's input without a narrowing pass.
     * NULL otherwise; events built by callers leave it NULL. */
    const uint32_t *token_ids_u32;

    uint32_t block_size;       /* 0 when absent */
    bool has_lora_id;
    int64_t lora_id;
    kvr_str lora_name;         /* vLLM string at position 7 */
    kvr_str cache_salt;        /* SGLang metadata map, or top-level map key */
    kvr_str session_id;        /* SGLang metadata map */

    /* vLLM extra_keys (SPEC §3, §5 "vLLM media identity"): the msgpack
     * entries as sent, one per block (nil or an array of items), checked at
     * decode; read them with kvr_extra_keys_*. NULL when absent or nil. */
    const char *extra_keys;
    uint32_t n_extra_keys;

    bool has_group_idx;
    int64_t group_idx;
    kvr_str kv_cache_spec_kind;
    bool has_sliding_window;
    int64_t sliding_window;
    kvr_str locality;
} kvr_raw_event;

typedef enum {
    KVR_BATCH_OK = 0,
    KVR_BATCH_INVALID_MSGPACK, /* mp_check failed, truncated, or trailing bytes */
    KVR_BATCH_BAD_SHAPE,       /* not [ts, events(, rank)] nor a map with events */
    KVR_BATCH_TOO_LARGE,       /* more events than KVR_WIRE_MAX_EVENTS or too deep */
    KVR_BATCH_NO_MEMORY,
    KVR_BATCH_OVER_LIMIT,      /* the payload is longer than the batch's max_bytes */
    KVR_BATCH_ERROR_COUNT
} kvr_batch_error;

const char *kvr_batch_error_name(kvr_batch_error err);

/* The wire's whole-payload check for any msgpack document, not only event
 * batches (the cluster layer's booking batches go through it): no
 * truncation or trailing bytes, nesting at most KVR_WIRE_MAX_DEPTH, every
 * container count within the bytes left (mp_check alone can be fooled by a
 * forged 32-bit count). After OK, mp_decode_* and mp_next stay inside
 * [p, p + len). OK, INVALID_MSGPACK or TOO_LARGE. */
kvr_batch_error kvr_msgpack_validate(const char *p, size_t len);

/* Default per-message byte limit (kvr_batch_set_max_bytes): SGLang and vLLM
 * batches are kilobytes; a store of 2^20 tokens is a few MiB. */
#define KVR_WIRE_DEFAULT_MAX_BYTES (64u << 20)
/* Decoding scratch kept between batches; a batch that needed more gives it
 * back when its last event has been handed out. */
#define KVR_WIRE_SCRATCH_KEEP_BYTES (512u << 10)

/* What kvr_batch_next has handed out of the current batch. */
typedef struct {
    uint32_t stored, removed, cleared, dropped; /* events, by type */
    uint64_t blocks_stored, blocks_removed;     /* hashes named by those stores / removals */
} kvr_batch_tally;

/* A batch, decoded one event at a time. kvr_batch_decode checks the whole
 * payload and the batch's shape (ts, rank, the events array) and decodes
 * no event; kvr_batch_next decodes the next one. So the decoder holds one
 * event at a time: its memory is 8 bytes per hash and token of the largest
 * event of the batch (each takes at least one payload byte: at most 8x the
 * payload, and at most 8.5 MiB by the SPEC §3 bounds; 12 per token for a
 * store of at most KVR_WIRE_U32_VIEW_MAX tokens, which also gets its u32
 * view), not per event of the
 * batch, and it gives back what passed KVR_WIRE_SCRATCH_KEEP_BYTES once the
 * last event was handed out (kvr_batch_bytes says what it holds).
 *
 * Reusable: decode into the same struct again without freeing. String fields
 * of events borrow from the payload, which must outlive the batch's use;
 * hashes and tokens live in the batch's scratch until the next
 * kvr_batch_next. On any kvr_batch_decode error n_events is 0 and next
 * hands out nothing: a batch whose shape is wrong applies not at all, and
 * a bad event inside a good batch comes back KVR_EV_DROPPED, alone. */
typedef struct {
    double ts;
    bool has_dp_rank;
    uint32_t dp_rank;
    uint32_t n_events;    /* events in the batch, dropped ones included */
    kvr_batch_tally tally;

    /* private */
    const char *first;           /* the first event's msgpack */
    const char *next;            /* the next event's */
    const kvr_raw_event *given;  /* kvr_batch_of_events */
    uint32_t n_read;
    kvr_raw_event ev;            /* the event handed out last */
    bool ev_fast_clean;          /* ev's fields the fast decoder never sets are 0 */
    uint64_t *u64_buf;           /* its hashes and tokens */
    size_t u64_cap;
    size_t max_bytes;
} kvr_batch;

void kvr_batch_init(kvr_batch *b);
void kvr_batch_free(kvr_batch *b);
/* Payloads longer than max_bytes are KVR_BATCH_OVER_LIMIT, before any look
 * at them (0 -> KVR_WIRE_DEFAULT_MAX_BYTES). */
void kvr_batch_set_max_bytes(kvr_batch *b, size_t max_bytes);
kvr_batch_error kvr_batch_decode(kvr_batch *b, const void *payload, size_t len);
/* The next event of the batch, in order, dropped ones included, or NULL
 * after the last. The event and its arrays stay valid until the next call
 * (or decode, or free). */
const kvr_raw_event *kvr_batch_next(kvr_batch *b);
/* Hands out the batch's events again from the first (tally from zero):
 * for callers that read a batch twice, or apply one again. */
void kvr_batch_rewind(kvr_batch *b);
/* A batch over events the caller decoded itself (another transport, tests):
 * next hands out evs[0..n) as they are; evs must outlive the batch's use.
 * No ts, no dp_rank. */
void kvr_batch_of_events(kvr_batch *b, const kvr_raw_event *evs, uint32_t n);
/* Heap bytes the batch holds now (its decoding scratch). */
size_t kvr_batch_bytes(const kvr_batch *b);

/* ---- vLLM media identity (SPEC §5) ----------------------------------- */

/* True when s is exactly 64 hex digits (a SHA-256 / BLAKE3 hex digest). */
bool kvr_is_hex64(kvr_str s);
/* A media identifier as a u64: 64 hex digits give their first 16 digits,
 * any other string XXH3_64(identifier, seed 0). */
uint64_t kvr_media_id(kvr_str identifier);

/* extra_keys read block by block. */
typedef struct {
    const char *next; /* the next entry */
    uint32_t left;    /* entries left */
} kvr_extra_keys;

/* One block's items. */
typedef struct {
    const char *next;
    uint32_t left;
    kvr_str lora; /* a string equal to it is the LoRA name, never media */
} kvr_extra_items;

typedef struct {
    /* Media items: [identifier, offset] pairs (offset any int: negative when
     * the item began in an earlier block), and bare 64-hex strings that are
     * not the LoRA name (older vLLM). */
    uint32_t n_media;
    /* Items no token rule reproduces: bin (prompt-embedding hashes) and any
     * type but a string or such a pair. */
    bool opaque;
} kvr_extra_summary;

void kvr_extra_keys_begin(kvr_extra_keys *x, const kvr_raw_event *ev);
/* The next block's entry (its items and their summary), or false when the
 * event listed no more entries (that block has no extra keys). */
bool kvr_extra_keys_next(kvr_extra_keys *x, kvr_str lora, kvr_extra_items *items,
                         kvr_extra_summary *sum);
/* The next media item's identity (kvr_media_id), in listed order; false when
 * none is left. */
bool kvr_extra_items_next_media(kvr_extra_items *it, uint64_t *id);

/* Frame layer: a ZeroMQ message is exactly [topic, seq (8 bytes BE), payload]. */
typedef enum {
    KVR_FRAME_OK = 0,
    KVR_FRAME_WRONG_COUNT,
    KVR_FRAME_BAD_SEQ_LENGTH
} kvr_frame_error;

const char *kvr_frame_error_name(kvr_frame_error err);
kvr_frame_error kvr_frame_parse(size_t n_frames, const void *seq_frame, size_t seq_len,
                                uint64_t *seq_out);
/* Maps a SPEC §3 medium string to a tier; nil/"" -> gpu. -1 if unknown. */
int kvr_wire_medium_tier(kvr_str medium);

#ifdef __cplusplus
}
#endif
#endif
