/* The SPEC §3 filters a store or removal passes before the normalizer
 * looks at its blocks (filter.h): the attention group's kind, learned from
 * stores and bounded, the locality, the block size. Apart from
 * normalize.c so the inline pass in filter.h has one whole check behind it. */
#include "normalize/filter.h"

#include "util/clock.h"

/* Values of group_kinds; 0 is never stored so a miss is unambiguous. */
#define GROUP_MAIN 1u
#define GROUP_OTHER 2u

void kvr_norm_filter_init(kvr_norm_filter *f, uint32_t block_size)
{
    kvr_u64map_init(&f->group_kinds);
    f->groups_over_limit = 0;
    f->group_kinds_lost = 0;
    f->block_size = block_size;
    f->mismatch_warned = false;
    f->last_mismatch_warn = 0;
}

void kvr_norm_filter_free(kvr_norm_filter *f)
{
    kvr_u64map_free(&f->group_kinds);
}

void kvr_norm_filter_reset(kvr_norm_filter *f)
{
    kvr_u64map_clear(&f->group_kinds);
}

static bool kind_is_main(kvr_str kind)
{
    return kvr_str_eq_nocase(kind, "full_attention") || kvr_str_eq_nocase(kind, "mla_attention") ||
           kvr_str_eq_nocase(kind, "sink_full_attention");
}

static kvr_drop_reason check_group(kvr_norm_filter *f, const kvr_raw_event *ev)
{
    /* Engines without hybrid attention send no group: that is group 0. */
    uint64_t group = ev->has_group_idx ? (uint64_t)ev->group_idx : 0;
    if (kvr_str_nonempty(ev->kv_cache_spec_kind)) {
        bool main = kind_is_main(ev->kv_cache_spec_kind);
        /* Only stores teach kinds: removals echo what stores announced. */
        if (ev->type == KVR_EV_STORED) {
            if (kvr_u64map_len(&f->group_kinds) < KVR_NORM_MAX_LEARNED_GROUPS ||
                kvr_u64map_find(&f->group_kinds, group)) {
                /* out of memory: judged per event, as past the bound */
                if (kvr_u64map_put(&f->group_kinds, group, main ? GROUP_MAIN : GROUP_OTHER) < 0)
                    f->group_kinds_lost++;
            } else {
                f->groups_over_limit++;
            }
        }
        return main ? KVR_DROP_NONE : KVR_DROP_NON_MAIN_ATTENTION;
    }
    uint64_t learned;
    /* Most engines name no kinds: an empty map costs no lookup. */
    if (kvr_u64map_len(&f->group_kinds) && kvr_u64map_get(&f->group_kinds, group, &learned))
        return learned == GROUP_MAIN ? KVR_DROP_NONE : KVR_DROP_NON_MAIN_ATTENTION;
    /* An unknown group other than the default one may be a sliding-window
     * group whose store we never saw: indexing it would corrupt matches. */
    return group == 0 ? KVR_DROP_NONE : KVR_DROP_NON_MAIN_ATTENTION;
}

static bool locality_ok(kvr_str loc)
{
    /* Fail closed: anything but local (or unset) may describe blocks this
     * worker cannot serve from its own cache. */
    return !kvr_str_nonempty(loc) || kvr_str_eq_nocase(loc, "local");
}

kvr_drop_reason kvr_norm_filter_check_all(kvr_norm_filter *f, const kvr_raw_event *ev)
{
    /* Group first: hybrid models give sliding-window groups other block
     * sizes, and those are non-main-attention, not a misconfiguration. */
    kvr_drop_reason r = check_group(f, ev);
    if (r != KVR_DROP_NONE)
        return r;
    if (!locality_ok(ev->locality))
        return KVR_DROP_REMOTE_LOCALITY;
    if (ev->block_size != 0 && ev->block_size != f->block_size)
        return KVR_DROP_BLOCK_SIZE_MISMATCH;
    return KVR_DROP_NONE;
}

bool kvr_norm_filter_mismatch_warn_due(kvr_norm_filter *f)
{
    double now = kvr_clock_mono();
    if (f->mismatch_warned && now - f->last_mismatch_warn < KVR_MISMATCH_WARN_INTERVAL_S)
        return false;
    f->mismatch_warned = true;
    f->last_mismatch_warn = now;
    return true;
}
