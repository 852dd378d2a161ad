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
    const kvr_idtab *t = &idx->engine;
    if (!t->cap)
        return KVR_NIL;
    /* a block's creator hash is the owner's handle for it unless the owner
     * names it otherwise (then the exception table had it) */
    for (uint32_t i = kvr_idtab_home(t, fp); t->slot[i]; i = kvr_probe_next(i, t->cap)) {
        uint64_t s = t->slot[i];
        if (kvr_idtab_fp(s) == fp && KVR_ENGINE(idx, kvr_idtab_id(s)) == e &&
            kvr_tree_holds_plain(idx, owner, kvr_idtab_id(s), entry))
            return kvr_idtab_id(s);
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
