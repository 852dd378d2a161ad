/* Types shared by every layer of kvrouter: tiers, drop reasons, strings;
 * and the one error policy of the library.
 *
 * Errors are values. A call that can fail in more than one way returns a
 * named enum whose every value is documented with the exact condition that
 * produces it (kvr_reg_result, kvr_registry_result, kvr_listen_result,
 * kvr_route_status, ...); a call that can only succeed or fail returns 0 /
 * -1, a pointer or NULL, or a bool, and says which in its comment. No
 * tri-state ints. A failed call leaves the state as it was before it: code
 * that must allocate does so before it changes anything (see the
 * registry's prepare step), or undoes what it did.
 *
 * Input from outside (wire bytes, HTTP bodies, config files, discovery
 * answers) failing a check is not an error of the program: it is refused
 * with a value that names the field (4xx, a usage error), or dropped and
 * counted by reason, and it never touches indexed state.
 *
 * Out of memory: every allocation is checked and the failure is returned
 * as a value (NO_MEMORY, -1, NULL, a 500/503 reply, a dropped event
 * counted), never abort()ed. Sizes are checked for overflow before they
 * are multiplied (util/grow.h for arrays that grow).
 *
 * What has no caller to return to (the ingest thread, a background poll)
 * logs through kvr_log (log.h), rate-limited when an engine can repeat it,
 * and counts it; a failure returned to a caller is not also logged by the
 * library. A broken internal invariant is a bug, not an error value. */
#ifndef KVROUTER_COMMON_H
#define KVROUTER_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Storage tier of a cached block (SPEC §1). Values are bit positions in
 * ownership masks, so they must stay below 8. */
typedef enum {
    KVR_TIER_GPU = 0,
    KVR_TIER_CPU = 1,
    KVR_TIER_DISK = 2,
    KVR_TIER_EXTERNAL = 3,
    KVR_TIER_COUNT = 4
} kvr_tier;

const char *kvr_tier_name(kvr_tier tier);
/* Returns -1 for an unknown name. Accepts the API names "gpu", "cpu", ... */
int kvr_tier_from_name(const char *name);

/* Why one event was dropped, as one list: X(ENUM, "name", "help"). Every
 * reason is a counter per (worker, rank); the names are part of the HTTP and
 * metrics contract, so a new reason is one line here and nothing else. */
#define KVR_DROP_REASONS(X)                                                                \
    X(NONE, "none", "not dropped")                                                         \
    X(MALFORMED_EVENT, "malformed_event", "wrong msgpack types or shape inside one event") \
    X(UNKNOWN_EVENT, "unknown_event", "an event type kvrouter does not know")              \
    X(OVERSIZED_EVENT, "oversized_event", "a length above the SPEC 3 bounds")              \
    X(UNKNOWN_TIER, "unknown_tier", "a medium outside the SPEC 3 table")                   \
    X(NON_MAIN_ATTENTION, "non_main_attention",                                            \
      "sliding-window or other non-indexed attention, or an unlearned group")              \
    X(REMOTE_LOCALITY, "remote_locality", "locality REMOTE or unknown")                    \
    X(BLOCK_SIZE_MISMATCH, "block_size_mismatch",                                          \
      "event block_size differs from the registered one")                                  \
    X(DUPLICATE_IDS, "duplicate_ids", "a store whose parent and hashes repeat an id")      \
    X(PARENT_NOT_FOUND, "parent_not_found", "a store whose parent the index does not hold")\
    X(BLOCK_NOT_FOUND, "block_not_found", "a removed block the index does not hold")

typedef enum {
#define KVR_DROP_ENUM_(e, name, help) KVR_DROP_##e,
    KVR_DROP_REASONS(KVR_DROP_ENUM_)
#undef KVR_DROP_ENUM_
    KVR_DROP_COUNT
} kvr_drop_reason;

const char *kvr_drop_reason_name(kvr_drop_reason reason);
const char *kvr_drop_reason_help(kvr_drop_reason reason);

/* How a counter of an X-macro list is exposed: a counter only grows (summed
 * into a *_total family), a gauge is a current value with its own metric. */
typedef enum { KVR_METRIC_COUNTER = 0, KVR_METRIC_GAUGE = 1 } kvr_metric_kind;

/* One entry of a counter list, for code that renders every counter in a
 * loop: the value is the uint64_t at `offset` of the counters struct. */
typedef struct {
    const char *name;
    kvr_metric_kind kind;
    const char *help;
    size_t offset;
} kvr_counter_desc;

static inline uint64_t kvr_counter_value(const void *counters, const kvr_counter_desc *d)
{
    return *(const uint64_t *)((const char *)counters + d->offset);
}

/* A borrowed byte string (not NUL-terminated). ptr == NULL means absent/nil. */
typedef struct {
    const char *ptr;
    uint32_t len;
} kvr_str;

static inline bool kvr_str_present(kvr_str s) { return s.ptr != NULL; }
static inline bool kvr_str_nonempty(kvr_str s) { return s.ptr != NULL && s.len > 0; }
bool kvr_str_eq(kvr_str s, const char *cstr);
bool kvr_str_eq_nocase(kvr_str s, const char *cstr);

/* Multimodal identity format of a worker's engine build (SPEC §5). */
typedef enum {
    KVR_MM_LEGACY = 0,
    KVR_MM_ENGINE_WIDE = 1,
    KVR_MM_AUTO = 2
} kvr_mm_identity;

const char *kvr_mm_identity_name(kvr_mm_identity m);
int kvr_mm_identity_from_name(const char *name); /* -1 if unknown */

/* SPEC §5 token classes. */
#define KVR_TEXT_TOKEN_LIMIT 1000000u
#define KVR_LEGACY_PAD_BASE 1000000u
#define KVR_WIDE_SENTINEL 0xFFFFFFFFu

/* Legacy multimodal pad token (SPEC §4): 1 000 000 + (mm_hash & (2^30 - 1)).
 * Request side (route) and event side (the normalizer's vLLM media rule)
 * must give the same tokens, hence one definition for both. */
static inline uint32_t kvr_pad_value(uint64_t mm_hash)
{
    return KVR_LEGACY_PAD_BASE + (uint32_t)(mm_hash & ((1u << 30) - 1));
}

/* Which engine a worker runs (SPEC §5 "vLLM media identity"): it says how a
 * 64-hex mm_hash reads and which identity field /route forwards. */
typedef enum {
    KVR_ENGINE_SGLANG = 0, /* the default */
    KVR_ENGINE_VLLM = 1,
    KVR_ENGINE_COUNT
} kvr_engine;

const char *kvr_engine_name(kvr_engine e);    /* "sglang", "vllm" */
int kvr_engine_from_name(const char *name);   /* -1 if unknown */

#ifdef __cplusplus
}
#endif
#endif
