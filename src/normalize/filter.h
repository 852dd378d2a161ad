/* SPEC §3 event filters of one (worker, rank): attention-group kind,
 * locality, block size. Internal to the normalizer. */
#ifndef KVR_NORMALIZE_FILTER_H
#define KVR_NORMALIZE_FILTER_H

#include "kvrouter/wire.h"
#include "util/u64map.h"

/* Seconds between two block-size-mismatch warnings of one (worker, rank). */
#define KVR_MISMATCH_WARN_INTERVAL_S 10.0

typedef struct {
    kvr_u64map group_kinds; /* group_idx -> learned kind (main or not) */
    bool learned;           /* group_kinds holds any: else no lookup per event */
    uint32_t block_size;
    bool mismatch_warned;
    double last_mismatch_warn; /* CLOCK_MONOTONIC seconds */
} kvr_norm_filter;

void kvr_norm_filter_init(kvr_norm_filter *f, uint32_t block_size);
void kvr_norm_filter_free(kvr_norm_filter *f);
/* Forgets the learned group kinds. */
void kvr_norm_filter_reset(kvr_norm_filter *f);
/* KVR_DROP_NONE if a store/removal passes; learns group kinds from stores. */
kvr_drop_reason kvr_norm_filter_check(kvr_norm_filter *f, const kvr_raw_event *ev);
/* Rate limit for the block-size warning: true at most once per interval. */
bool kvr_norm_filter_mismatch_warn_due(kvr_norm_filter *f);

#endif
