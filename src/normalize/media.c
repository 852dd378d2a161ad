/* SPEC §5 "vLLM media identity", event side. vLLM's token_ids carry the
 * model's placeholder token at every media position and the media identity
 * in the block's extra_keys, so two images would hash alike as tokens. Per
 * block, the k-th maximal run of image_token_id in the block's tokens takes
 * pad_value(k-th media item) — the token the request side writes over the
 * item's positions — and a block whose media cannot be mapped that way is
 * unsupported: the store stops there (fail closed, never placeholders).
 *
 * Eagle windows (B + 1 tokens) overlap the next block by one token. That
 * token is the next block's first, so it takes the substitution it gets
 * there, as the request side does: item 0 of the next block's entry (vLLM
 * lists the item continuing from this block first). When the event has no
 * entry for the next block (the store ends there), a run continuing over
 * the boundary keeps its item; a new one starting exactly there cannot be
 * known, so the last block is unsupported. */
#include "normalize/media.h"

/* Block i's own B tokens: the k-th run of itid takes the k-th media item
 * (runs past the last item keep the last one). *ends_in_run: the block's
 * last token was a placeholder. Returns the runs seen. */
static uint32_t substitute_block(uint32_t *t, uint32_t b, uint32_t itid, kvr_extra_items *items,
                                 bool *ends_in_run)
{
    uint32_t runs = 0, pad = 0;
    bool in_run = false;
    for (uint32_t j = 0; j < b; j++) {
        if (t[j] != itid) {
            in_run = false;
            continue;
        }
        if (!in_run) {
            uint64_t id;
            if (kvr_extra_items_next_media(items, &id))
                pad = kvr_pad_value(id);
            runs++;
            in_run = true;
        }
        t[j] = pad;
    }
    *ends_in_run = in_run;
    return runs;
}

/* Block idx's entry of the event's extra_keys (false: none listed). */
static bool entry_at(const kvr_raw_event *ev, size_t idx, kvr_extra_items *items,
                     kvr_extra_summary *sum)
{
    kvr_extra_keys x;
    kvr_extra_keys_begin(&x, ev);
    for (size_t i = 0; i < idx; i++)
        if (!kvr_extra_keys_next(&x, ev->lora_name, items, sum))
            return false;
    return kvr_extra_keys_next(&x, ev->lora_name, items, sum);
}

/* Blocks [0, limit) substituted; returns the first that cannot be mapped.
 * *ends_in_run: the last kept block's last token was a placeholder. */
static size_t substitute_blocks(const kvr_norm_media *m, const kvr_raw_event *ev,
                                uint32_t *tokens, size_t limit, bool *ends_in_run)
{
    kvr_extra_keys x;
    kvr_extra_keys_begin(&x, ev);
    uint32_t b = m->block_size;
    for (size_t i = 0; i < limit; i++) {
        kvr_extra_items items;
        kvr_extra_summary sum;
        bool run_at_end = false;
        if (!kvr_extra_keys_next(&x, ev->lora_name, &items, &sum) ||
            (sum.n_media == 0 && !sum.opaque)) {
            *ends_in_run = false;
            continue; /* no media in this block: its tokens are what vLLM hashed */
        }
        if (sum.opaque || !m->has_image_token_id ||
            substitute_block(tokens + i * b, b, m->image_token_id, &items, &run_at_end) == 0)
            return i; /* media it cannot carry, or listed without a placeholder run */
        *ends_in_run = run_at_end;
    }
    return limit;
}

size_t kvr_norm_media_substitute(const kvr_norm_media *m, const kvr_raw_event *ev,
                                 uint32_t *tokens, size_t n_tokens, size_t limit)
{
    bool ends_in_run = false;
    size_t kept = substitute_blocks(m, ev, tokens, limit, &ends_in_run);
    size_t p = kept * m->block_size; /* the last kept block's Eagle overlap token */
    if (!m->eagle || kept == 0 || p >= n_tokens || !m->has_image_token_id ||
        tokens[p] != m->image_token_id)
        return kept;
    kvr_extra_items items;
    kvr_extra_summary sum;
    uint64_t id;
    if (entry_at(ev, kept, &items, &sum)) {
        if (!sum.opaque && kvr_extra_items_next_media(&items, &id)) {
            tokens[p] = kvr_pad_value(id);
            return kept;
        }
    } else if (ends_in_run) { /* no entry: a run going on keeps its item */
        tokens[p] = tokens[p - 1];
        return kept;
    }
    return kept - 1;
}
