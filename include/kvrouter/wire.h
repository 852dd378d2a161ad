/* Wire layer (SPEC §2-3): ZeroMQ frames and msgpack batches -> raw events.
 * Tokens stay u64 here so wide Kimi ids survive decoding.
 *
 * Decoding choices where SPEC §3 is silent:
 * - The whole payload passes mp_check, then a bounded structural walk
 *   (depth <= KVR_WIRE_MAX_DEPTH, every container count <= bytes left):
 *   msgpuck's mp_check keeps its pending count in an int that a forged
 *   32-bit count wraps. Payloads above INT32_MAX/4 bytes are TOO_LARGE.
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
 *   accepted wherever a non-negative int is expected. */
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

    uint32_t block_size;       /* 0 when absent */
    bool has_lora_id;
    int64_t lora_id;
    kvr_str lora_name;         /* vLLM string at position 7 */
    kvr_str cache_salt;        /* SGLang metadata map, or top-level map key */
    kvr_str session_id;        /* SGLang metadata map */

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
    KVR_BATCH_ERROR_COUNT
} kvr_batch_error;

const char *kvr_batch_error_name(kvr_batch_error err);

/* A decoded batch. Reusable: decode into the same struct again without
 * freeing; its buffers grow to the largest batch seen (no allocation per
 * event in steady state). String fields of the events borrow from the
 * payload bytes, which must outlive the batch's use; hashes and tokens live
 * in u64_buf until the next decode. On any error n_events is 0: a batch
 * applies whole or not at all. */
typedef struct {
    double ts;
    bool has_dp_rank;
    uint32_t dp_rank;
    kvr_raw_event *events; /* every event of the batch in order, dropped ones included */
    uint32_t n_events;
    uint32_t n_dropped;

    /* private storage */
    uint64_t *u64_buf;
    size_t u64_cap;
    size_t events_cap;
} kvr_batch;

void kvr_batch_init(kvr_batch *b);
void kvr_batch_free(kvr_batch *b);
kvr_batch_error kvr_batch_decode(kvr_batch *b, const void *payload, size_t len);

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
