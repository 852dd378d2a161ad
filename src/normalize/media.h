/* The vLLM media rule of the event side (media.c): internal to the
 * normalizer. */
#ifndef KVR_NORMALIZE_MEDIA_H
#define KVR_NORMALIZE_MEDIA_H

#include "kvrouter/wire.h"

typedef struct {
    uint32_t block_size;
    bool eagle;
    bool has_image_token_id;
    uint32_t image_token_id;
} kvr_norm_media;

/* Substitutes media pads into tokens (the store's narrowed tokens) for its
 * blocks [0, limit), and into the last one's Eagle overlap token. Returns
 * the first block that cannot be mapped (limit when all can): one listing
 * media the worker has no image_token_id for, media without a placeholder
 * run, opaque extra keys (prompt embeddings), or (Eagle) an overlap
 * placeholder nothing names. Blocks from there on are left as they were. */
size_t kvr_norm_media_substitute(const kvr_norm_media *m, const kvr_raw_event *ev,
                                 uint32_t *tokens, size_t n_tokens, size_t limit);

#endif
