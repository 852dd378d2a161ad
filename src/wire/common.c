/* Names of the shared enums: they are the HTTP, metrics and CLI contract. */
#include "kvrouter/common.h"

#include <string.h>
#include <strings.h>

static const char *const tier_names[KVR_TIER_COUNT] = {"gpu", "cpu", "disk", "external"};

const char *kvr_tier_name(kvr_tier tier)
{
    return (unsigned)tier < KVR_TIER_COUNT ? tier_names[tier] : "unknown";
}

int kvr_tier_from_name(const char *name)
{
    for (int i = 0; i < KVR_TIER_COUNT; i++)
        if (name && strcmp(name, tier_names[i]) == 0)
            return i;
    return -1;
}

static const char *const drop_names[KVR_DROP_COUNT] = {
    [KVR_DROP_NONE] = "none",
    [KVR_DROP_MALFORMED_EVENT] = "malformed_event",
    [KVR_DROP_UNKNOWN_EVENT] = "unknown_event",
    [KVR_DROP_OVERSIZED_EVENT] = "oversized_event",
    [KVR_DROP_UNKNOWN_TIER] = "unknown_tier",
    [KVR_DROP_NON_MAIN_ATTENTION] = "non_main_attention",
    [KVR_DROP_REMOTE_LOCALITY] = "remote_locality",
    [KVR_DROP_BLOCK_SIZE_MISMATCH] = "block_size_mismatch",
    [KVR_DROP_DUPLICATE_IDS] = "duplicate_ids",
    [KVR_DROP_PARENT_NOT_FOUND] = "parent_not_found",
    [KVR_DROP_BLOCK_NOT_FOUND] = "block_not_found",
};

const char *kvr_drop_reason_name(kvr_drop_reason reason)
{
    return (unsigned)reason < KVR_DROP_COUNT ? drop_names[reason] : "unknown";
}

bool kvr_str_eq(kvr_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.ptr && s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

bool kvr_str_eq_nocase(kvr_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.ptr && s.len == n && strncasecmp(s.ptr, cstr, n) == 0;
}

static const char *const mm_names[] = {"legacy", "engine_wide", "auto"};

const char *kvr_mm_identity_name(kvr_mm_identity m)
{
    return (unsigned)m < 3 ? mm_names[m] : "unknown";
}

int kvr_mm_identity_from_name(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, mm_names[i]) == 0)
            return i;
    return -1;
}
