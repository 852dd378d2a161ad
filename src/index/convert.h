/* Converter (SPEC §1 "convert"): router block hash per block of a normalized
 * store, with the worker's lora and the store's cache_salt in the seed and
 * Eagle windows; cache_salt propagates from parent to children within one
 * (worker, rank) when later stores omit it. Rejects duplicate-id stores. */
#ifndef KVR_INDEX_CONVERT_H
#define KVR_INDEX_CONVERT_H

#include "kvrouter/normalize.h"

typedef struct kvr_converter kvr_converter; /* one per (worker, rank) */

/* worker_lora: the registered adapter, used when an event names none. */
kvr_converter *kvr_converter_create(uint32_t block_size, bool eagle, const char *worker_lora);
void kvr_converter_destroy(kvr_converter *c);
/* Forget all per-block state (AllBlocksCleared, restart). */
void kvr_converter_reset(kvr_converter *c);

/* Fills out_local[0..store->n_block_hashes). Returns KVR_DROP_NONE, or
 * KVR_DROP_DUPLICATE_IDS when the normalizer flagged the store's
 * {parent} ∪ hashes as repeating (store->duplicate_ids): the caller then
 * applies an empty removal (never a clear) and logs a warning; or
 * KVR_DROP_MALFORMED_EVENT when the store has fewer whole-block tokens than
 * hashes (the normalizer never produces that). */
kvr_drop_reason kvr_convert_store(kvr_converter *c, const kvr_norm_event *store,
                                  uint64_t *out_local);
/* Drop per-block state of engine hashes removed from one tier: the salt of a
 * block stays known while another tier still holds it (gpu eviction after
 * cpu offload); it is forgotten once no tier holds it. */
void kvr_convert_removed_tier(kvr_converter *c, kvr_tier tier, const uint64_t *engine_hashes,
                              size_t n);
/* Seed of the registered adapter without salt. */
uint64_t kvr_converter_default_seed(const kvr_converter *c);
/* Blocks whose non-default seed is remembered (memory check). */
size_t kvr_converter_tracked_blocks(const kvr_converter *c);

#endif
