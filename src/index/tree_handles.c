/* Engine hashes -> blocks (tree_internal.h, "Handles"): the engine table
 * of creator hashes, the owners' exception handles, and the lookup of the
 * block an owner calls by a hash. Adding a block to the engine table
 * and deleting one (kvr_tree_engine_add, kvr_tree_engine_del) are inline
 * in tree_internal.h: stores and reclamations do it for every block. */
#include <stdlib.h>

#include "index/tree_internal.h"

static uint64_t exc_key(uint32_t owner, uint32_t b) { return (uint64_t)owner << 32 | b; }

uint32_t kvr_tree_exc_search(const kvr_index *idx, uint32_t owner, uint64_t e, uint32_t fp)
{
    const kvr_idtab *x = &idx->owners[owner].exc;
    for (uint32_t i = kvr_idtab_home(x, fp); x->slot[i]; i = kvr_probe_next(i, x->cap)) {
        if (kvr_idtab_fp(x->slot[i]) != fp)
            continue;
        uint32_t b = kvr_idtab_id(x->slot[i]);
        uint64_t v;
        if (kvr_u64map_get(&idx->exc, exc_key(owner, b), &v) && v == e)
            return b;
    }
    return KVR_NIL;
}

uint32_t kvr_tree_lookup(const kvr_index *idx, uint32_t owner, uint64_t e, uint32_t *entry)
{
    uint32_t fp = kvr_engine_fp(e);
    uint32_t b = kvr_tree_exc_find(idx, owner, e, fp);
    if (b) {
        *entry = kvr_tree_entry(idx, b, owner);
        return b;
    }
    const kvr_keytab *t = &idx->engine;
    if (!t->cap)
        return KVR_NIL;
    /* a block's creator hash is the owner's handle for it unless the owner
     * names it otherwise (then the exception table had it) */
    for (uint32_t i = kvr_keytab_home(t, fp); t->slot[i]; i = kvr_probe_next(i, t->cap)) {
        uint32_t x = t->slot[i];
        if (KVR_ENGINE(idx, x) == e && kvr_tree_holds_plain(idx, owner, x, entry))
            return x;
    }
    return KVR_NIL;
}

int kvr_tree_exc_add(kvr_index *idx, uint32_t owner, uint32_t b, uint64_t e)
{
    if (kvr_u64map_put(&idx->exc, exc_key(owner, b), e) < 0)
        return -1;
    if (kvr_idtab_add(&idx->owners[owner].exc, kvr_idtab_slot(kvr_engine_fp(e), b)) < 0) {
        kvr_u64map_del(&idx->exc, exc_key(owner, b), NULL);
        return -1;
    }
    return 0;
}

void kvr_tree_exc_del(kvr_index *idx, uint32_t owner, uint32_t b)
{
    uint64_t e;
    if (!kvr_u64map_del(&idx->exc, exc_key(owner, b), &e))
        return;
    kvr_idtab *x = &idx->owners[owner].exc;
    kvr_idtab_del(x, kvr_idtab_slot(kvr_engine_fp(e), b));
    kvr_idtab_reserve(x, 0); /* shrinks a sparse table; on OOM it stays */
}

_Static_assert(KVR_CHUNK % 64 == 0, "a word of the id bitmap lies in one block chunk");

uint32_t *kvr_tree_engine_rebuild(const kvr_index *idx, uint32_t cap)
{
    const kvr_ids *ids = &idx->block_ids;
    if (idx->engine.len + 1 != ids->count) /* not every block there: copy the table */
        return kvr_keytab_rehash(&idx->engine, cap, kvr_tree_engine_fp_of, idx);
    uint32_t *s = cap ? kvr_keytab_alloc(cap) : NULL;
    if (!s)
        return NULL;
    /* Every live block but the root is in the table once: walking the
     * blocks reads their engine hashes in order instead of one block per
     * old slot at random, and skips the old table's empty slots. */
    for (uint32_t w = 0; (uint64_t)w * 64 < ids->top; w++) {
        uint64_t used = ids->bits[w] & (w ? ~0ULL : ~1ULL);
        if ((uint64_t)w * 64 + 64 > ids->top && ids->top % 64) /* padding above cap is set */
            used &= (1ULL << (ids->top % 64)) - 1;
        const uint64_t *engine = used ? kvr_bchunk(idx, w * 64)->engine : NULL; /* 64 | chunk */
        for (; used; used &= used - 1) {
            uint32_t b = w * 64 + (uint32_t)__builtin_ctzll(used);
            kvr_keytab_place(s, cap, b, kvr_engine_fp(engine[b & KVR_CHUNK_MASK]));
        }
    }
    return s;
}
