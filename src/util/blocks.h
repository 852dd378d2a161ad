/* Whole-block count of a token run (SPEC §4), shared by the normalizer and
 * the hash layer: the normalizer comes before hash in the layer order, so the
 * formula lives here rather than being written twice. */
#ifndef KVR_UTIL_BLOCKS_H
#define KVR_UTIL_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks of block_size tokens; Eagle windows are block_size + 1 tokens with
 * stride block_size, so the last token only completes the previous window. */
static inline size_t kvr_whole_blocks(size_t n_tokens, uint32_t block_size, bool eagle)
{
    if (block_size == 0)
        return 0;
    size_t n = eagle ? (n_tokens == 0 ? 0 : n_tokens - 1) : n_tokens;
    /* a store of one page (SGLang's, most of a stream) without a division:
     * a 64-bit div takes tens of cycles, about as long as hashing the page */
    if (n < 2 * (size_t)block_size)
        return n >= block_size;
    return n / block_size;
}

#endif
