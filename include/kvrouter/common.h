/* Types shared by every layer of kvrouter: tiers, drop reasons, strings. */
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

/* Why one event was dropped. Every reason is a counter per (worker, rank);
 * the names are part of the HTTP and metrics contract. */
typedef enum {
    KVR_DROP_NONE = 0,
    KVR_DROP_MALFORMED_EVENT,    /* wrong msgpack types / shape inside one event */
    KVR_DROP_UNKNOWN_EVENT,      /* event type we do not know */
    KVR_DROP_OVERSIZED_EVENT,    /* a length above the SPEC §3 bounds */
    KVR_DROP_UNKNOWN_TIER,       /* medium not in the SPEC §3 table */
    KVR_DROP_NON_MAIN_ATTENTION, /* sliding window etc., or unlearned group */
    KVR_DROP_REMOTE_LOCALITY,    /* locality REMOTE or unknown */
    KVR_DROP_BLOCK_SIZE_MISMATCH,
    KVR_DROP_DUPLICATE_IDS,      /* {parent} ∪ hashes repeats */
    KVR_DROP_PARENT_NOT_FOUND,
    KVR_DROP_BLOCK_NOT_FOUND,
    KVR_DROP_COUNT
} kvr_drop_reason;

const char *kvr_drop_reason_name(kvr_drop_reason reason);

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

#ifdef __cplusplus
}
#endif
#endif
