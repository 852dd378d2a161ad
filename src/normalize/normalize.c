/* Normalizer of one (worker, dp_rank): SPEC §3 filters, u64 -> u32 token
 * narrowing, whole blocks, and the SPEC §5 media rules (legacy truncation,
 * engine_wide exclusion with descendants, capacity fallback, auto mode). */
#include "kvrouter/normalize.h"
#include "kvrouter/log.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "normalize/dupcheck.h"
#include "normalize/filter.h"
#include "normalize/media.h"
#include "util/blocks.h"
#include "util/grow.h"
#include "util/u64map.h"

struct kvr_normalizer {
    kvr_normalizer_config cfg; /* mm_capacity resolved */
    kvr_normalizer_counters c;
    bool wide_seen;
    bool legacy_warned;
    uint64_t warnings;
    /* Engine hashes of excluded blocks, one set per tier: the same engine
     * hash may be excluded on one tier and legitimately held on another. */
    kvr_u64map excluded[KVR_TIER_COUNT];
    kvr_norm_filter filter;
    kvr_dupcheck dup;
    uint32_t *tokens; /* narrowed tokens of the current store */
    const uint32_t *store_tokens; /* the current store's: tokens, or the decoder's u32 view */
    size_t tokens_cap;
    uint64_t *hashes; /* filtered hashes of the current removal */
    size_t hashes_cap;
};

kvr_normalizer *kvr_normalizer_create(const kvr_normalizer_config *cfg)
{
    if (!cfg || cfg->block_size == 0 || (unsigned)cfg->mm_identity > KVR_MM_AUTO)
        return NULL;
    kvr_normalizer *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->cfg = *cfg;
    if (n->cfg.mm_capacity == 0)
        n->cfg.mm_capacity = KVR_MM_DEFAULT_CAPACITY;
    for (int t = 0; t < KVR_TIER_COUNT; t++)
        kvr_u64map_init(&n->excluded[t]);
    kvr_norm_filter_init(&n->filter, cfg->block_size);
    kvr_dupcheck_init(&n->dup);
    return n;
}

void kvr_normalizer_destroy(kvr_normalizer *n)
{
    if (!n)
        return;
    for (int t = 0; t < KVR_TIER_COUNT; t++)
        kvr_u64map_free(&n->excluded[t]);
    kvr_norm_filter_free(&n->filter);
    kvr_dupcheck_free(&n->dup);
    free(n->tokens);
    free(n->hashes);
    free(n);
}

static void warn(kvr_normalizer *n, const char *what)
{
    n->warnings++;
    kvr_log_at(KVR_LOG_WARN, KVR_LOG_WORKER_RANK(n->cfg.worker_id, n->cfg.dp_rank), "%s", what);
}

static void update_gauge(kvr_normalizer *n)
{
    uint64_t total = 0;
    for (int t = 0; t < KVR_TIER_COUNT; t++)
        total += kvr_u64map_len(&n->excluded[t]);
    n->c.mm_excluded_ids = total;
}

static void clear_exclusions(kvr_normalizer *n)
{
    for (int t = 0; t < KVR_TIER_COUNT; t++)
        kvr_u64map_clear(&n->excluded[t]);
    n->c.mm_excluded_ids = 0;
    n->c.mm_fallback = 0;
}

void kvr_normalizer_reset(kvr_normalizer *n)
{
    /* The detected auto mode survives: a restarted engine is the same build. */
    clear_exclusions(n);
    kvr_norm_filter_reset(&n->filter);
}

void kvr_normalizer_count_drop(kvr_normalizer *n, kvr_drop_reason reason)
{
    if ((unsigned)reason < KVR_DROP_COUNT)
        n->c.drops[reason]++;
}

void kvr_normalizer_counters_get(const kvr_normalizer *n, kvr_normalizer_counters *out)
{
    *out = n->c;
    out->groups_over_limit = n->filter.groups_over_limit;
    out->group_kinds_lost = n->filter.group_kinds_lost;
}

const kvr_counter_desc kvr_normalizer_counter_descs[] = {
#define KVR_NORM_COUNTER_DESC_(name, kind, help) \
    {#name, KVR_METRIC_##kind, help, offsetof(kvr_normalizer_counters, name)},
    KVR_NORMALIZER_COUNTERS(KVR_NORM_COUNTER_DESC_)
#undef KVR_NORM_COUNTER_DESC_
};
const size_t kvr_normalizer_counter_count =
    sizeof kvr_normalizer_counter_descs / sizeof kvr_normalizer_counter_descs[0];

void kvr_normalizer_counters_add(kvr_normalizer_counters *a, const kvr_normalizer_counters *b)
{
#define KVR_NORM_COUNTER_ADD_(name, kind, help) a->name += b->name;
    KVR_NORMALIZER_COUNTERS(KVR_NORM_COUNTER_ADD_)
#undef KVR_NORM_COUNTER_ADD_
    for (int r = 0; r < KVR_DROP_COUNT; r++)
        a->drops[r] += b->drops[r];
}

kvr_mm_identity kvr_normalizer_effective_mode(const kvr_normalizer *n)
{
    if (n->cfg.mm_identity == KVR_MM_AUTO)
        return n->wide_seen ? KVR_MM_ENGINE_WIDE : KVR_MM_LEGACY;
    return n->cfg.mm_identity;
}

bool kvr_normalizer_wide_seen(const kvr_normalizer *n)
{
    return n->wide_seen;
}

uint64_t kvr_normalizer_warnings(const kvr_normalizer *n)
{
    return n->warnings;
}

size_t kvr_normalizer_bytes(const kvr_normalizer *n)
{
    size_t bytes = sizeof *n + kvr_u64map_bytes(&n->filter.group_kinds) +
                   n->dup.cap * sizeof *n->dup.slots + n->tokens_cap * sizeof *n->tokens +
                   n->hashes_cap * sizeof *n->hashes;
    for (int t = 0; t < KVR_TIER_COUNT; t++)
        bytes += kvr_u64map_bytes(&n->excluded[t]);
    return bytes;
}

void kvr_normalizer_trim(kvr_normalizer *n)
{
    if (n->tokens_cap * sizeof *n->tokens > KVR_NORM_SCRATCH_KEEP_BYTES) {
        free(n->tokens);
        n->tokens = NULL;
        n->tokens_cap = 0;
    }
    if (n->hashes_cap * sizeof *n->hashes > KVR_NORM_SCRATCH_KEEP_BYTES) {
        free(n->hashes);
        n->hashes = NULL;
        n->hashes_cap = 0;
    }
    if (n->dup.cap * sizeof *n->dup.slots > KVR_NORM_SCRATCH_KEEP_BYTES)
        kvr_dupcheck_free(&n->dup);
}

static void drop(kvr_normalizer *n, kvr_norm_event *out, kvr_drop_reason reason)
{
    if (reason == KVR_DROP_NONE || (unsigned)reason >= KVR_DROP_COUNT)
        reason = KVR_DROP_MALFORMED_EVENT;
    out->kind = KVR_NORM_DROP;
    out->drop_reason = reason;
    n->c.drops[reason]++;
}

/* An empty removal keeps event ids contiguous for stores the index must not
 * see; it applies as a no-op. */
static void empty_removal(kvr_norm_event *out)
{
    out->kind = KVR_NORM_REMOVE;
    out->has_parent = false;
    out->parent = 0;
    out->block_hashes = NULL;
    out->n_block_hashes = 0;
    out->tokens = NULL;
    out->n_tokens = 0;
}

static bool grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    return need <= *cap || kvr_grow(buf, cap, need, elem, 256) == 0; /* fits: stays inline */
}

/* Narrows u64 tokens into the scratch buffer. Returns the position of the
 * first sentinel (n_token_ids if none) and counts wide ids. The narrowing
 * pass only copies and notes whether any id was a sentinel or wider (a
 * compare and an or per token); only then does a second pass replace and
 * count them (most events have none). */
static size_t narrow(kvr_normalizer *n, const kvr_raw_event *ev, uint64_t *wide)
{
    size_t nt = ev->n_token_ids;
    const uint64_t *src = ev->token_ids;
    uint32_t *dst = n->tokens;
    bool any = false;
    for (size_t i = 0; i < nt; i++) {
        any |= src[i] >= KVR_WIDE_SENTINEL;
        dst[i] = (uint32_t)src[i];
    }
    *wide = 0;
    if (!any)
        return nt;
    /* A literal 0xFFFFFFFF is no real token either: it counts as media. */
    size_t first = nt, count = 0;
    for (size_t i = 0; i < nt; i++) {
        if (src[i] < KVR_WIDE_SENTINEL)
            continue;
        count += src[i] > UINT32_MAX;
        dst[i] = KVR_WIDE_SENTINEL;
        if (first == nt)
            first = i;
    }
    *wide = count;
    return first;
}

static void note_wide(kvr_normalizer *n, uint64_t wide)
{
    if (wide == 0)
        return;
    n->c.wide_tokens_seen += wide;
    n->wide_seen = true; /* auto switches to engine_wide from this event on */
    if (n->cfg.mm_identity == KVR_MM_LEGACY && !n->legacy_warned) {
        n->legacy_warned = true;
        warn(n, "emits wide (engine-owned) multimodal token ids but is registered with "
                "mm_identity legacy: media blocks are truncated and not tracked; register it "
                "with mm_identity engine_wide or auto");
    }
}

/* Whole blocks this store can be hashed for. Hashes beyond the tokens (an
 * engine that sends fewer tokens than blocks, or an Eagle store whose last
 * overlap token is not known yet) cannot be hashed, so they are not indexed;
 * a later store under such a block is dropped by the index as
 * parent_not_found. */
static size_t hashable_blocks(const kvr_raw_event *ev, uint32_t b, bool eagle)
{
    size_t by_tokens = kvr_whole_blocks(ev->n_token_ids, b, eagle);
    return by_tokens < ev->n_block_hashes ? by_tokens : ev->n_block_hashes;
}

/* Index of the first block whose hash window [iB, iB+B) (Eagle: [iB, iB+B])
 * holds token position p. With Eagle a sentinel at a block boundary also
 * sits in the previous block's overlap token. */
static size_t block_of_sentinel(size_t p, uint32_t b, bool eagle)
{
    if (eagle && p > 0 && p % b == 0)
        return p / b - 1;
    return p / b;
}

/* The store's first n_blocks hashes with n_tokens narrowed tokens. */
static void pass_store(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out,
                       size_t n_blocks, size_t n_tokens)
{
    out->kind = KVR_NORM_STORE;
    out->has_parent = ev->has_parent;
    out->parent = ev->parent;
    out->block_hashes = ev->block_hashes;
    out->n_block_hashes = (uint32_t)n_blocks;
    out->tokens = n->store_tokens;
    out->n_tokens = (uint32_t)n_tokens;
}

static void keep_prefix(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out,
                        size_t kept)
{
    if (kept == 0) {
        empty_removal(out);
        return;
    }
    pass_store(n, ev, out, kept, kept * n->cfg.block_size + (out->eagle ? 1 : 0));
}

/* Records ids in the tier's exclusion set. Returns false, recording nothing,
 * when that would pass the capacity (or memory runs out midway). */
static bool record(kvr_normalizer *n, kvr_tier tier, const uint64_t *ids, size_t count)
{
    kvr_u64map *set = &n->excluded[tier];
    if (n->c.mm_excluded_ids + count > n->cfg.mm_capacity) {
        /* Only ids not yet recorded take room. */
        size_t fresh = 0;
        for (size_t i = 0; i < count; i++)
            fresh += kvr_u64map_find(set, ids[i]) == NULL;
        if (n->c.mm_excluded_ids + fresh > n->cfg.mm_capacity)
            return false;
    }
    bool ok = true;
    for (size_t i = 0; i < count && ok; i++)
        ok = kvr_u64map_put(set, ids[i], 1) >= 0;
    update_gauge(n);
    return ok;
}

static void enter_fallback(kvr_normalizer *n)
{
    if (n->c.mm_fallback)
        return;
    n->c.mm_fallback = 1;
    n->c.mm_fallback_entries++;
    char msg[160];
    snprintf(msg, sizeof msg,
             "media exclusion set is full (%" PRIu32 " ids): fallback until AllBlocksCleared, "
             "only parentless stores are indexed",
             n->cfg.mm_capacity);
    warn(n, msg);
}

/* SPEC §5 rule 6: without a complete exclusion set a parent may be an
 * excluded block we did not record, so only parentless stores are safe. */
static void store_in_fallback(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out,
                              size_t first_bad, size_t hashable)
{
    if (ev->has_parent) {
        n->c.mm_blocks_excluded += ev->n_block_hashes;
        empty_removal(out);
        return;
    }
    if (first_bad < hashable) {
        n->c.mm_stores_truncated++;
        n->c.mm_blocks_excluded += ev->n_block_hashes - first_bad;
    }
    keep_prefix(n, ev, out, first_bad < hashable ? first_bad : hashable);
}

static void store_engine_wide(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out,
                              size_t first_bad, size_t hashable)
{
    if (n->c.mm_fallback) {
        store_in_fallback(n, ev, out, first_bad, hashable);
        return;
    }
    kvr_u64map *set = &n->excluded[ev->tier];
    if (ev->has_parent && kvr_u64map_len(set) > 0 && kvr_u64map_find(set, ev->parent)) {
        /* A descendant of an excluded block: the engine hashed media we
         * cannot reproduce into its prefix, so none of it is matchable. */
        if (!record(n, ev->tier, ev->block_hashes, ev->n_block_hashes)) {
            enter_fallback(n);
            store_in_fallback(n, ev, out, first_bad, hashable);
            return;
        }
        n->c.mm_descendant_stores_excluded++;
        n->c.mm_blocks_excluded += ev->n_block_hashes;
        empty_removal(out);
        return;
    }
    if (first_bad >= hashable) {
        keep_prefix(n, ev, out, hashable);
        return;
    }
    size_t lost = ev->n_block_hashes - first_bad;
    if (!record(n, ev->tier, ev->block_hashes + first_bad, lost)) {
        /* The store that fills the set is handled by the fallback rules too,
         * so no id is recorded past the capacity. */
        enter_fallback(n);
        store_in_fallback(n, ev, out, first_bad, hashable);
        return;
    }
    n->c.mm_stores_truncated++;
    n->c.mm_blocks_excluded += lost;
    keep_prefix(n, ev, out, first_bad);
}

static void normalize_store(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out)
{
    size_t sentinel = ev->n_token_ids;
    /* the decoder's u32 view has no wide id nor sentinel: nothing to narrow,
     * unless media substitution rewrites the tokens (then a copy of them) */
    if (ev->token_ids_u32 && !ev->extra_keys) {
        n->store_tokens = ev->token_ids_u32;
    } else {
        if (!grow((void **)&n->tokens, &n->tokens_cap, ev->n_token_ids, sizeof *n->tokens)) {
            drop(n, out, KVR_DROP_OVERSIZED_EVENT);
            return;
        }
        uint64_t wide;
        sentinel = narrow(n, ev, &wide);
        note_wide(n, wide);
        n->store_tokens = n->tokens;
    }

    if (kvr_dupcheck_has_repeat(&n->dup, ev->has_parent, ev->parent, ev->block_hashes,
                                ev->n_block_hashes)) {
        /* Malformed: the converter rejects it (empty removal + warning).
         * Truncating or recording it here could hide the repeat. */
        pass_store(n, ev, out, ev->n_block_hashes, ev->n_token_ids);
        out->duplicate_ids = true;
        return;
    }

    uint32_t b = n->cfg.block_size;
    size_t hashable = hashable_blocks(ev, b, out->eagle);
    size_t first_bad = hashable;
    if (sentinel < ev->n_token_ids) {
        size_t blk = block_of_sentinel(sentinel, b, out->eagle);
        if (blk < hashable)
            first_bad = blk;
    }
    if (ev->extra_keys) {
        /* vLLM media in extra_keys: pads over placeholders, or cut there */
        kvr_norm_media m = {b, out->eagle, n->cfg.has_image_token_id, n->cfg.image_token_id};
        size_t unmapped = kvr_norm_media_substitute(&m, ev, n->tokens, ev->n_token_ids, first_bad);
        if (unmapped < first_bad) {
            n->c.mm_unmapped_blocks++;
            first_bad = unmapped;
        }
    }

    if (kvr_normalizer_effective_mode(n) == KVR_MM_ENGINE_WIDE) {
        store_engine_wide(n, ev, out, first_bad, hashable);
        return;
    }
    /* legacy (SPEC §5 rule 7): truncate, track nothing. */
    if (first_bad < hashable) {
        n->c.mm_stores_truncated++;
        n->c.mm_blocks_excluded += ev->n_block_hashes - first_bad;
    }
    keep_prefix(n, ev, out, first_bad);
}

static void normalize_removal(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out)
{
    out->kind = KVR_NORM_REMOVE;
    out->block_hashes = ev->block_hashes;
    out->n_block_hashes = ev->n_block_hashes;
    kvr_u64map *set = &n->excluded[ev->tier];
    if (kvr_u64map_len(set) == 0 || ev->n_block_hashes == 0)
        return;
    if (!grow((void **)&n->hashes, &n->hashes_cap, ev->n_block_hashes, sizeof *n->hashes)) {
        drop(n, out, KVR_DROP_OVERSIZED_EVENT);
        return;
    }
    /* Excluded blocks never reached the index: forget them here instead of
     * letting the index count them as block_not_found. */
    uint32_t kept = 0;
    for (uint32_t i = 0; i < ev->n_block_hashes; i++) {
        if (kvr_u64map_del(set, ev->block_hashes[i], NULL))
            n->c.mm_removals_filtered++;
        else
            n->hashes[kept++] = ev->block_hashes[i];
    }
    out->block_hashes = kept ? n->hashes : NULL;
    out->n_block_hashes = kept;
    update_gauge(n);
}

void kvr_normalize(kvr_normalizer *n, const kvr_raw_event *ev, kvr_norm_event *out)
{
    memset(out, 0, sizeof *out);
    out->tier = ev->tier;
    out->eagle = n->cfg.eagle || ev->eagle;
    out->lora_name = ev->lora_name;
    /* SPEC §3: "" is no salt, so the block inherits its parent's namespace
     * as an unsalted block does (conversion resolves the inheritance). */
    if (kvr_str_nonempty(ev->cache_salt))
        out->cache_salt = ev->cache_salt;

    switch (ev->type) {
    case KVR_EV_DROPPED:
        drop(n, out, ev->drop_reason);
        return;
    case KVR_EV_CLEARED:
        out->kind = KVR_NORM_CLEAR;
        clear_exclusions(n);
        return;
    case KVR_EV_STORED:
    case KVR_EV_REMOVED:
        break;
    default:
        drop(n, out, KVR_DROP_UNKNOWN_EVENT);
        return;
    }
    if ((unsigned)ev->tier >= KVR_TIER_COUNT) {
        drop(n, out, KVR_DROP_UNKNOWN_TIER);
        return;
    }
    kvr_drop_reason r = kvr_norm_filter_check(&n->filter, ev);
    if (r != KVR_DROP_NONE) {
        if (r == KVR_DROP_BLOCK_SIZE_MISMATCH && kvr_norm_filter_mismatch_warn_due(&n->filter)) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "event block_size %" PRIu32 " differs from the registered %" PRIu32
                     ": events dropped (block_size_mismatch), nothing will match",
                     ev->block_size, n->cfg.block_size);
            warn(n, msg);
        }
        drop(n, out, r);
        return;
    }
    if (ev->type == KVR_EV_STORED)
        normalize_store(n, ev, out);
    else
        normalize_removal(n, ev, out);
}
