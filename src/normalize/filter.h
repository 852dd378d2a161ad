/* SPEC §3 event filters of one (worker, rank): attention-group kind,
 * locality, block size. Internal to the normalizer. */
#ifndef KVR_NORMALIZE_FILTER_H
#define KVR_NORMALIZE_FILTER_H

#include "kvrouter/wire.h"
#include "util/u64map.h"

/* A stream that names endless group ids must not grow memory without bound:
 * past this many learned groups per (worker, rank) new ones are judged per
 * event only, and counted (groups_over_limit). */
#define KVR_NORM_MAX_LEARNED_GROUPS 4096u

/* Seconds between two block-size-mismatch warnings of one (worker, rank). */
#define KVR_MISMATCH_WARN_INTERVAL_S 10.0

typedef struct {
    kvr_u64map group_kinds; /* group_idx -> learned kind (main or not) */
    uint64_t groups_over_limit; /* stores of a new group past the learned bound */
    uint64_t group_kinds_lost;  /* stores of a new group not learned: out of memory */
    uint32_t block_size;
    bool mismatch_warned;
    double last_mismatch_warn; /* CLOCK_MONOTONIC seconds */
} kvr_norm_filter;

void kvr_norm_filter_init(kvr_norm_filter *f, uint32_t block_size);
void kvr_norm_filter_free(kvr_norm_filter *f);
/* Forgets the learned group kinds. */
void kvr_norm_filter_reset(kvr_norm_filter *f);
/* KVR_DROP_NONE if a store/removal passes; learns group kinds from stores. */
kvr_drop_reason kvr_norm_filter_check_all(kvr_norm_filter *f, const kvr_raw_event *ev);
/* The same, with the event most engines send judged inline: no group, kind
 * nor locality, nothing learned, the registered block size (or none) passes
 * without the call, whose entry and exit cost more than these tests. */
static inline kvr_drop_reason kvr_norm_filter_check(kvr_norm_filter *f, const kvr_raw_event *ev)
{
    if (!ev->has_group_idx && !ev->kv_cache_spec_kind.len && !ev->locality.len &&
        !kvr_u64map_len(&f->group_kinds) && (ev->block_size == 0 || ev->block_size == f->block_size))
        return KVR_DROP_NONE;
    return kvr_norm_filter_check_all(f, ev);
}
/* Rate limit for the block-size warning: true at most once per interval. */
bool kvr_norm_filter_mismatch_warn_due(kvr_norm_filter *f);

#endif
