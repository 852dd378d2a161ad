/* The /query and /query_by_hash reply body (SPEC §7), shared by both
 * endpoints so they cannot drift:
 *   {"scores":    {"<worker_id>": {"<dp_rank>": gpu_tokens}},
 *    "instances": {"<worker_id>": {"longest_matched": t, "gpu": t, "cpu": t, "disk": t,
 *                                  "dp": {"<dp_rank>": {"gpu": t, "cpu": t, "disk": t}}}}}
 * All counts are tokens (blocks x block size). cpu and disk are reaches
 * (gpu <= cpu <= disk: how far the prefix goes when those tiers continue
 * it, SPEC §6). Per instance, gpu/cpu/disk are the best over its ranks and
 * longest_matched is the longest reach on any tier (= the best disk reach).
 * A (worker, rank) appears only when it matched at least one block on some
 * tier; worker ids are decimal u64 keys. */
#ifndef KVR_SERVER_SCORES_JSON_H
#define KVR_SERVER_SCORES_JSON_H

#include <jansson.h>

#include "kvrouter/index.h"

/* {"scores": {}, "instances": {}}; NULL on out of memory. */
json_t *kvr_scores_json_new(void);
/* Adds one (worker, rank) result; skipped when disk_blocks == 0. Returns 0,
 * or -1 on out of memory. Adding the same (worker, rank) twice overwrites. */
int kvr_scores_json_add(json_t *root, uint64_t worker_id, uint32_t dp_rank, uint32_t gpu_blocks,
                        uint32_t cpu_blocks, uint32_t disk_blocks, uint32_t block_size);

/* The whole body from match results (kvr_indexer_match_hashes); NULL on OOM. */
json_t *kvr_scores_json(const kvr_match_entry *m, size_t n, uint32_t block_size);

#endif
