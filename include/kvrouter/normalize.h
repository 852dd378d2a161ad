/* Normalizer (SPEC §3 filters, §5 multimodal rules): raw events of one
 * (worker, dp_rank) -> router events with u32 tokens, media blocks excluded. */
#ifndef KVROUTER_NORMALIZE_H
#define KVROUTER_NORMALIZE_H

#include "kvrouter/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVR_MM_DEFAULT_CAPACITY (1u << 20)

typedef struct {
    uint32_t block_size;
    bool eagle;
    kvr_mm_identity mm_identity;
    uint32_t mm_capacity; /* recorded exclusion ids across tiers; 0 -> default 2^20 */
    uint64_t worker_id;   /* for warnings only */
    uint32_t dp_rank;
    /* The model's media placeholder token (SPEC §5 "vLLM media identity"):
     * runs of it in a block whose extra_keys list media take those media's
     * pad values. Without it such blocks are unsupported. */
    bool has_image_token_id;
    uint32_t image_token_id;
} kvr_normalizer_config;

/* Counters of one (worker, rank), as one list: X(name, COUNTER|GAUGE,
 * "help"). The list expands into kvr_normalizer_counters, its sum and its
 * descriptors (which /workers and /metrics render), so a new counter is one
 * line here plus the code that moves it. Names are the HTTP/metrics contract.
 * mm_blocks_excluded: blocks kept from the index by media rules, in every
 * mode: the first unsupported block and all after it (legacy truncation
 * included), whole descendant stores, and stores with a parent in fallback. */
#define KVR_NORMALIZER_COUNTERS(X)                                                         \
    X(mm_blocks_excluded, COUNTER, "blocks kept from the index by the media rules")        \
    X(mm_stores_truncated, COUNTER, "stores cut at their own first unsupported block")     \
    X(mm_descendant_stores_excluded, COUNTER,                                              \
      "engine_wide stores excluded whole because their parent is excluded")                \
    X(mm_removals_filtered, COUNTER, "removed hashes found in an exclusion set")           \
    X(mm_excluded_ids, GAUGE, "recorded excluded block ids, across tiers")                 \
    X(mm_fallback, GAUGE, "ranks whose exclusion set is full (fallback until a clear)")    \
    X(mm_fallback_entries, COUNTER, "times the exclusion set filled up")                   \
    X(wide_tokens_seen, COUNTER, "token ids above u32 received, in every mode")            \
    X(mm_unmapped_blocks, COUNTER,                                                         \
      "blocks whose extra_keys media could not be mapped to pad values (store cut there)") \
    X(groups_over_limit, COUNTER,                                                          \
      "stores naming a new attention group past 4,096 learned per rank (judged per event, not learned)") \
    X(group_kinds_lost, COUNTER,                                                           \
      "stores naming a new attention group whose kind could not be learned for want of memory (judged per event)")

typedef struct {
#define KVR_NORM_COUNTER_FIELD_(name, kind, help) uint64_t name;
    KVR_NORMALIZER_COUNTERS(KVR_NORM_COUNTER_FIELD_)
#undef KVR_NORM_COUNTER_FIELD_
    uint64_t drops[KVR_DROP_COUNT]; /* by kvr_drop_reason (KVR_DROP_REASONS) */
} kvr_normalizer_counters;

/* The list above in order, for renderers that loop over it. */
extern const kvr_counter_desc kvr_normalizer_counter_descs[];
extern const size_t kvr_normalizer_counter_count;
/* a += b, every field of the list and every drop reason (sums over the ranks
 * of a worker; gauges sum too: excluded ids across ranks, ranks in fallback). */
void kvr_normalizer_counters_add(kvr_normalizer_counters *a, const kvr_normalizer_counters *b);

typedef enum {
    KVR_NORM_STORE = 0,
    KVR_NORM_REMOVE = 1, /* n_block_hashes may be 0: an empty removal, applies as a no-op */
    KVR_NORM_CLEAR = 2,
    KVR_NORM_DROP = 3
} kvr_norm_kind;

/* One normalized event. Arrays point into the normalizer's scratch or the raw
 * event and stay valid until the next kvr_normalize call. */
typedef struct {
    kvr_norm_kind kind;
    kvr_drop_reason drop_reason; /* KVR_NORM_DROP */
    kvr_tier tier;
    bool has_parent;
    uint64_t parent;
    const uint64_t *block_hashes; /* store: kept blocks only; remove: filtered */
    uint32_t n_block_hashes;
    const uint32_t *tokens; /* store: narrowed tokens of the kept blocks
                               (n_block_hashes*B, +1 overlap token for Eagle) */
    uint32_t n_tokens;
    bool eagle;
    kvr_str lora_name;  /* as the event gave it (may be absent) */
    kvr_str cache_salt; /* as the event gave it; absent when it gave none or "" */
    bool duplicate_ids; /* store: {parent} ∪ hashes repeats (SPEC §5 rule 1); it
                           passes unchanged and conversion rejects it */
} kvr_norm_event;

typedef struct kvr_normalizer kvr_normalizer;

kvr_normalizer *kvr_normalizer_create(const kvr_normalizer_config *cfg);
void kvr_normalizer_destroy(kvr_normalizer *n);
/* Normalizes one raw event. Dropped wire events come back as KVR_NORM_DROP
 * with their reason. Updates counters (drops included).
 * - A store keeps min(n_block_hashes, whole blocks of its tokens) blocks at
 *   most; hashes without tokens cannot be hashed and are not indexed.
 * - A store left with no block becomes an empty KVR_NORM_REMOVE.
 * - A store with repeated ids ({parent} ∪ hashes) comes back unchanged (all
 *   hashes, all narrowed tokens): kvr_convert_store rejects it.
 * - The store that would push the exclusion sets past mm_capacity enters
 *   fallback and is itself handled by the fallback rules (nothing recorded). */
void kvr_normalize(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out);
/* Count a drop decided by a later layer (convert, index) for this rank. */
void kvr_normalizer_count_drop(kvr_normalizer *n, kvr_drop_reason reason);
void kvr_normalizer_counters_get(const kvr_normalizer *n, kvr_normalizer_counters *out);
/* The mode in force: for AUTO, LEGACY until the first wide id, then ENGINE_WIDE. */
kvr_mm_identity kvr_normalizer_effective_mode(const kvr_normalizer *n);
bool kvr_normalizer_wide_seen(const kvr_normalizer *n);
/* Warnings this normalizer wrote to stderr (legacy wide ids, fallback,
 * rate-limited block size mismatch): lets tests and /workers see them. */
uint64_t kvr_normalizer_warnings(const kvr_normalizer *n);
/* Heap bytes held (exclusion sets, learned groups, scratch buffers). */
size_t kvr_normalizer_bytes(const kvr_normalizer *n);
/* Gives back the scratch a huge store made grow (each buffer above
 * KVR_NORM_SCRATCH_KEEP_BYTES is freed; steady-state stores keep theirs).
 * Call between batches: the last normalized event's arrays go with it. */
#define KVR_NORM_SCRATCH_KEEP_BYTES (256u << 10)
void kvr_normalizer_trim(kvr_normalizer *n);
/* Forget exclusion sets and learned group kinds (used on clear/restart). */
void kvr_normalizer_reset(kvr_normalizer *n);

#ifdef __cplusplus
}
#endif
#endif
