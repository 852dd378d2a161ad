/* Converter of one (worker, rank): router block hashes for normalized
 * stores (SPEC §4), with cache_salt inherited from parent blocks. */
#include "index/convert.h"

#include <stdlib.h>
#include <string.h>

#include "kvrouter/hash.h"
#include "util/u64map.h"

struct kvr_converter {
    uint32_t block_size;
    bool eagle;
    char *lora; /* registered adapter, or NULL */
    kvr_str lora_str;
    uint64_t default_seed; /* registered adapter, no salt */
    /* Engine hash -> seed, only for blocks whose seed is not default_seed:
     * an unsalted fleet keeps both maps empty. The tier mask says on which
     * tiers the engine holds the block, so an eviction from gpu does not
     * forget the salt of the copy still on cpu. */
    kvr_u64map seeds;
    kvr_u64map tiers;
};

kvr_converter *kvr_converter_create(uint32_t block_size, bool eagle, const char *worker_lora)
{
    if (block_size == 0)
        return NULL;
    kvr_converter *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->block_size = block_size;
    c->eagle = eagle;
    if (worker_lora && worker_lora[0]) {
        c->lora = strdup(worker_lora);
        if (!c->lora) {
            free(c);
            return NULL;
        }
        c->lora_str.ptr = c->lora;
        c->lora_str.len = (uint32_t)strlen(c->lora);
    }
    kvr_str none = {NULL, 0};
    c->default_seed = kvr_hash_seed(c->lora_str, none);
    kvr_u64map_init(&c->seeds);
    kvr_u64map_init(&c->tiers);
    return c;
}

void kvr_converter_destroy(kvr_converter *c)
{
    if (!c)
        return;
    kvr_u64map_free(&c->seeds);
    kvr_u64map_free(&c->tiers);
    free(c->lora);
    free(c);
}

void kvr_converter_reset(kvr_converter *c)
{
    kvr_u64map_clear(&c->seeds);
    kvr_u64map_clear(&c->tiers);
}

uint64_t kvr_converter_default_seed(const kvr_converter *c)
{
    return c->default_seed;
}

size_t kvr_converter_tracked_blocks(const kvr_converter *c)
{
    return kvr_u64map_len(&c->seeds);
}

static uint64_t store_seed(const kvr_converter *c, const kvr_norm_event *s)
{
    kvr_str lora = kvr_str_nonempty(s->lora_name) ? s->lora_name : c->lora_str;
    /* A salt the store names is its own choice (the normalizer turns "" into
     * none, SPEC §3). */
    if (kvr_str_present(s->cache_salt))
        return kvr_hash_seed(lora, s->cache_salt);
    /* SGLang names the salt on the first store of a request only: children
     * continue their parent's namespace. */
    uint64_t inherited;
    if (s->has_parent && kvr_u64map_get(&c->seeds, s->parent, &inherited))
        return inherited;
    /* An event naming the registered adapter reuses the seed computed at
     * creation instead of hashing the name again on every store. */
    if (lora.ptr == c->lora_str.ptr || (c->lora && kvr_str_eq(lora, c->lora)))
        return c->default_seed;
    kvr_str none = {NULL, 0};
    return kvr_hash_seed(lora, none);
}

static void remember(kvr_converter *c, const kvr_norm_event *s, uint64_t seed)
{
    uint64_t bit = 1ull << ((unsigned)s->tier & 7u);
    for (uint32_t i = 0; i < s->n_block_hashes; i++) {
        uint64_t h = s->block_hashes[i];
        uint64_t mask = 0;
        kvr_u64map_get(&c->tiers, h, &mask);
        /* Out of memory: the block's children fall back to the default seed
         * and simply do not match, which is safe. */
        if (kvr_u64map_put(&c->seeds, h, seed) < 0 || kvr_u64map_put(&c->tiers, h, mask | bit) < 0) {
            kvr_u64map_del(&c->seeds, h, NULL);
            kvr_u64map_del(&c->tiers, h, NULL);
        }
    }
}

kvr_drop_reason kvr_convert_store(kvr_converter *c, const kvr_norm_event *store,
                                  uint64_t *out_local)
{
    /* The normalizer found the repeat (it is the only place that looks). */
    if (store->duplicate_ids)
        return KVR_DROP_DUPLICATE_IDS;
    if (store->n_block_hashes == 0)
        return KVR_DROP_NONE;
    uint64_t seed = store_seed(c, store);
    size_t blocks = kvr_hash_blocks(store->tokens, store->n_tokens, c->block_size,
                                    store->eagle || c->eagle, seed, out_local,
                                    store->n_block_hashes);
    /* The normalizer hands over whole blocks only; fewer tokens than blocks
     * means a caller bypassed it. */
    if (blocks < store->n_block_hashes)
        return KVR_DROP_MALFORMED_EVENT;
    if (seed != c->default_seed)
        remember(c, store, seed);
    return KVR_DROP_NONE;
}

void kvr_convert_removed_tier(kvr_converter *c, kvr_tier tier, const uint64_t *engine_hashes,
                              size_t n)
{
    if (kvr_u64map_len(&c->seeds) == 0)
        return;
    uint64_t bit = 1ull << ((unsigned)tier & 7u);
    for (size_t i = 0; i < n; i++) {
        uint64_t *mask = kvr_u64map_find(&c->tiers, engine_hashes[i]);
        if (!mask)
            continue;
        if ((*mask &= ~bit) == 0) {
            kvr_u64map_del(&c->seeds, engine_hashes[i], NULL);
            kvr_u64map_del(&c->tiers, engine_hashes[i], NULL);
        }
    }
}
