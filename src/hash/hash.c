/* Router block hashing (SPEC §4). */
#include "kvrouter/hash.h"

#include <string.h>
/* XXH3 inlined from the package's header (as xxhash.h documents): a 16-token
 * page is one short-input hash, where the library call and its length
 * dispatch cost about as much as the hashing. Same version, same hashes. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/blocks.h"

uint64_t kvr_hash_bytes(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

uint64_t kvr_hash_seed(kvr_str lora_name, kvr_str cache_salt)
{
    uint64_t seed = KVR_HASH_SEED;
    if (kvr_str_nonempty(lora_name))
        seed += XXH3_64bits_withSeed(lora_name.ptr, lora_name.len, 0);
    if (kvr_str_nonempty(cache_salt))
        seed += XXH3_64bits_withSeed(cache_salt.ptr, cache_salt.len, 1);
    return seed;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
uint64_t kvr_hash_tokens(const uint32_t *tokens, size_t n, uint64_t seed)
{
    /* u32 arrays already are the little-endian byte stream SPEC §4 hashes. */
    return XXH3_64bits_withSeed(tokens, n * sizeof(uint32_t), seed);
}
#else
uint64_t kvr_hash_tokens(const uint32_t *tokens, size_t n, uint64_t seed)
{
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, seed);
    for (size_t i = 0; i < n; i++) {
        uint8_t le[4] = {(uint8_t)tokens[i], (uint8_t)(tokens[i] >> 8),
                         (uint8_t)(tokens[i] >> 16), (uint8_t)(tokens[i] >> 24)};
        XXH3_64bits_update(&st, le, sizeof le);
    }
    return XXH3_64bits_digest(&st);
}
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
uint64_t kvr_hash_chain(uint64_t parent_chain, uint64_t local)
{
    /* The two values already are the little-endian bytes SPEC §4 hashes:
     * written byte by byte they cost three times the hash (16 shifts and
     * stores a block, 125 blocks a 2,000-token /route). */
    const uint64_t buf[2] = {parent_chain, local};
    return XXH3_64bits_withSeed(buf, sizeof buf, KVR_HASH_SEED);
}
#else
uint64_t kvr_hash_chain(uint64_t parent_chain, uint64_t local)
{
    uint8_t buf[16];
    for (int i = 0; i < 8; i++) {
        buf[i] = (uint8_t)(parent_chain >> (8 * i));
        buf[8 + i] = (uint8_t)(local >> (8 * i));
    }
    return XXH3_64bits_withSeed(buf, sizeof buf, KVR_HASH_SEED);
}
#endif

size_t kvr_hash_block_count(size_t n_tokens, uint32_t block_size, bool eagle)
{
    return kvr_whole_blocks(n_tokens, block_size, eagle);
}

size_t kvr_hash_blocks(const uint32_t *tokens, size_t n_tokens, uint32_t block_size, bool eagle,
                       uint64_t seed, uint64_t *out, size_t cap)
{
    size_t blocks = kvr_hash_block_count(n_tokens, block_size, eagle);
    size_t window = (size_t)block_size + (eagle ? 1 : 0);
    size_t todo = blocks < cap ? blocks : cap;
    for (size_t i = 0; i < todo; i++)
        out[i] = kvr_hash_tokens(tokens + i * block_size, window, seed);
    return blocks;
}
