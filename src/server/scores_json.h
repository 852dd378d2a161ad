/* The /query and /query_by_hash reply body, built in this one place for
 * both endpoints so they cannot drift (SPEC §7, §7.1):
 *   {"scores":      {"<worker_id>": {"<dp_rank>": gpu_tokens}},
 *    "frequencies": [owners of block 0, owners of block 1, ...],
 *    "instances":   {"<worker_id>": {"longest_matched": t, "gpu": t, "cpu": t, "disk": t,
 *                                    "dp": {"<dp_rank>": gpu_tokens},
 *                                    "dp_tiers": {"<dp_rank>": {"gpu": t, "cpu": t,
 *                                                               "disk": t}}}}}
 * The first three keys and dp are Dynamo's standalone-indexer shape; dp_tiers
 * is kvrouter's. Counts are tokens (blocks x block size). cpu and disk are
 * reaches (gpu <= cpu <= disk: how far the prefix goes when those tiers
 * continue it, SPEC §6). Per instance, gpu/cpu/disk are the best over its
 * ranks and longest_matched is the longest reach on any tier (= the best
 * disk reach). A (worker, rank) appears only when it matched at least one
 * block on some tier; worker ids are decimal u64 keys.
 *
 * The body is written as text straight from the results (no jansson
 * tree: building and dumping one was ~70 % of a 64-worker /query,
 * callgrind), workers in ascending id order, each worker's ranks in
 * ascending order.
 *
 * frequencies[i] is how many (worker, rank) owners hold block i of the
 * request on the device tier: an owner whose gpu prefix is g blocks holds
 * blocks 0..g-1. The list stops at the longest gpu prefix, so no entry is 0
 * and entries never increase (the invariants of Dynamo's OverlapScores
 * frequencies, whose values count recent lookups instead; its standalone
 * indexer, which tracks none, always answers []). With media, each worker
 * is scored on its own routing sequence (SPEC §5), and block i is block i of
 * that sequence. */
#ifndef KVR_SERVER_SCORES_JSON_H
#define KVR_SERVER_SCORES_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvrouter/index.h"

typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t gpu, cpu, disk; /* blocks */
} kvr_scores_entry;

typedef struct {
    uint32_t block_size;
    kvr_scores_entry *e;
    size_t n, cap;
    bool failed;
} kvr_scores_json;

/* Starts an empty reply; false on out of memory (then call _free). */
bool kvr_scores_json_init(kvr_scores_json *b, uint32_t block_size);
/* Adds one (worker, rank) result; skipped when disk_blocks == 0. Adding the
 * same (worker, rank) twice is not allowed (frequencies would count it
 * twice); the match results never repeat one. */
void kvr_scores_json_add(kvr_scores_json *b, uint64_t worker_id, uint32_t dp_rank,
                         uint32_t gpu_blocks, uint32_t cpu_blocks, uint32_t disk_blocks);
/* The whole body as JSON text (malloc'd, NUL-terminated, *len bytes; the
 * caller frees it), or NULL on out of memory. Frees the builder either
 * way. */
char *kvr_scores_json_finish(kvr_scores_json *b, size_t *len);
/* Frees a builder that will not be finished. */
void kvr_scores_json_free(kvr_scores_json *b);

/* The whole body from match results (kvr_indexer_match_hashes); NULL on OOM. */
char *kvr_scores_json_from_matches(const kvr_match_entry *m, size_t n, uint32_t block_size,
                                   size_t *len);

#endif
