/* Router block hashing (SPEC §4). The router hashes tokens itself; engine
 * hashes are only handles. */
#ifndef KVROUTER_HASH_H
#define KVROUTER_HASH_H

#include "kvrouter/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVR_HASH_SEED 1337u

uint64_t kvr_hash_bytes(const void *data, size_t len, uint64_t seed);
/* seed = 1337 (+ XXH3(lora, 0) if non-empty) (+ XXH3(salt, 1) if non-empty), wrapping. */
uint64_t kvr_hash_seed(kvr_str lora_name, kvr_str cache_salt);
/* XXH3-64 over tokens as u32 little-endian. */
uint64_t kvr_hash_tokens(const uint32_t *tokens, size_t n, uint64_t seed);
uint64_t kvr_hash_chain(uint64_t parent_chain, uint64_t local);
/* Number of whole blocks in n tokens: n/B, or (n-1)/B for Eagle windows. */
size_t kvr_hash_block_count(size_t n_tokens, uint32_t block_size, bool eagle);
/* Writes one local hash per whole block (B tokens, or B+1 with stride B for
 * Eagle) into out[0..cap); returns the number of blocks (may exceed cap: only
 * cap are written). No heap allocation. */
size_t kvr_hash_blocks(const uint32_t *tokens, size_t n_tokens, uint32_t block_size, bool eagle,
                       uint64_t seed, uint64_t *out, size_t cap);
/* kvr_pad_value (the legacy pad token) is in common.h. */

#ifdef __cplusplus
}
#endif
#endif
