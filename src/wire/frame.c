/* ZeroMQ frame shape (SPEC §2) and the medium -> tier table (SPEC §3). */
#include "kvrouter/wire.h"

#include <stddef.h>

static const char *const frame_error_names[] = {
    [KVR_FRAME_OK] = "ok",
    [KVR_FRAME_WRONG_COUNT] = "wrong_frame_count",
    [KVR_FRAME_BAD_SEQ_LENGTH] = "bad_seq_length",
};

const char *kvr_frame_error_name(kvr_frame_error err)
{
    return (unsigned)err <= KVR_FRAME_BAD_SEQ_LENGTH ? frame_error_names[err] : "unknown";
}

kvr_frame_error kvr_frame_parse(size_t n_frames, const void *seq_frame, size_t seq_len,
                                uint64_t *seq_out)
{
    if (n_frames != 3)
        return KVR_FRAME_WRONG_COUNT;
    if (seq_len != 8 || seq_frame == NULL)
        return KVR_FRAME_BAD_SEQ_LENGTH;
    const unsigned char *p = seq_frame;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    *seq_out = v;
    return KVR_FRAME_OK;
}

#define MEDIUM(name, tier) {name, sizeof name - 1, tier}
static const struct {
    const char *name;
    uint32_t len; /* names of another length are not compared (a medium per event) */
    kvr_tier tier;
} medium_table[] = {
    MEDIUM("GPU", KVR_TIER_GPU),          MEDIUM("DEVICE", KVR_TIER_GPU),
    MEDIUM("CPU", KVR_TIER_CPU),          MEDIUM("CPU_PINNED", KVR_TIER_CPU),
    MEDIUM("CPU_TIER1", KVR_TIER_CPU),    MEDIUM("CPU_TIER2", KVR_TIER_DISK),
    MEDIUM("DISK", KVR_TIER_DISK),        MEDIUM("NVME", KVR_TIER_DISK),
    MEDIUM("STORAGE", KVR_TIER_DISK),     MEDIUM("EXTERNAL", KVR_TIER_EXTERNAL),
    MEDIUM("NETWORK", KVR_TIER_EXTERNAL), MEDIUM("REMOTE", KVR_TIER_EXTERNAL),
    MEDIUM("SHARED", KVR_TIER_EXTERNAL),
};

/* Engines spell media in upper case; vLLM's Python constants are lower case
 * ("gpu", "cpu"), so the match ignores case. Anything else fails closed. */
int kvr_wire_medium_tier(kvr_str medium)
{
    if (medium.ptr == NULL || medium.len == 0)
        return KVR_TIER_GPU;
    for (size_t i = 0; i < sizeof medium_table / sizeof medium_table[0]; i++)
        if (medium.len == medium_table[i].len && kvr_str_eq_nocase(medium, medium_table[i].name))
            return (int)medium_table[i].tier;
    return -1;
}
