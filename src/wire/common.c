/* Names of the shared enums: they are the HTTP, metrics and CLI contract. */
#include "kvrouter/common.h"

#include <string.h>

/* One lookup for every name table below: the enum value named name, or -1. */
static int name_index(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (name && strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

static const char *const tier_names[KVR_TIER_COUNT] = {"gpu", "cpu", "disk", "external"};

const char *kvr_tier_name(kvr_tier tier)
{
    return (unsigned)tier < KVR_TIER_COUNT ? tier_names[tier] : "unknown";
}

int kvr_tier_from_name(const char *name)
{
    return name_index(tier_names, KVR_TIER_COUNT, name);
}

static const char *const drop_names[KVR_DROP_COUNT] = {
#define KVR_DROP_NAME_(e, name, help) [KVR_DROP_##e] = name,
    KVR_DROP_REASONS(KVR_DROP_NAME_)
#undef KVR_DROP_NAME_
};

static const char *const drop_helps[KVR_DROP_COUNT] = {
#define KVR_DROP_HELP_(e, name, help) [KVR_DROP_##e] = help,
    KVR_DROP_REASONS(KVR_DROP_HELP_)
#undef KVR_DROP_HELP_
};

const char *kvr_drop_reason_name(kvr_drop_reason reason)
{
    return (unsigned)reason < KVR_DROP_COUNT ? drop_names[reason] : "unknown";
}

const char *kvr_drop_reason_help(kvr_drop_reason reason)
{
    return (unsigned)reason < KVR_DROP_COUNT ? drop_helps[reason] : "unknown";
}

bool kvr_str_eq(kvr_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.ptr && s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

static char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* ASCII only (media and tags are): a byte loop, as the names are a few
 * letters and compared once per event. */
bool kvr_str_eq_nocase(kvr_str s, const char *cstr)
{
    if (!s.ptr)
        return false;
    for (uint32_t i = 0; i < s.len; i++)
        if (!cstr[i] || ascii_lower(s.ptr[i]) != ascii_lower(cstr[i]))
            return false;
    return cstr[s.len] == 0;
}

static const char *const mm_names[] = {"legacy", "engine_wide", "auto"};

const char *kvr_mm_identity_name(kvr_mm_identity m)
{
    return (unsigned)m < 3 ? mm_names[m] : "unknown";
}

int kvr_mm_identity_from_name(const char *name)
{
    return name_index(mm_names, 3, name);
}

static const char *const engine_names[KVR_ENGINE_COUNT] = {"sglang", "vllm"};

const char *kvr_engine_name(kvr_engine e)
{
    return (unsigned)e < KVR_ENGINE_COUNT ? engine_names[e] : "unknown";
}

int kvr_engine_from_name(const char *name)
{
    return name_index(engine_names, KVR_ENGINE_COUNT, name);
}
