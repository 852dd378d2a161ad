/* Snapshot of an index as parent-linked store events (SPEC §7 /dump): a
 * preorder walk, so every parent is emitted before its children. An owner's
 * block is emitted only while the owner holds every block above it (on any
 * tier): a block behind a gap can never count in a match for that owner,
 * and its parent handle could not be resolved when the dump is loaded. */
#include <stdlib.h>

#include "index/tree_internal.h"

typedef struct {
    uint32_t entry;
    uint64_t handle;
} conn;

typedef struct {
    uint32_t node, next_child;
    size_t off, len; /* this node's connected owners in the arena */
} frame;

typedef struct {
    conn *a;
    size_t len, cap;
    frame *f;
    size_t flen, fcap;
} walk;

static int reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*p, ncap * elem);
    if (!n)
        return -1;
    *p = n;
    *cap = ncap;
    return 0;
}

static void emit(kvr_index *idx, uint32_t x, const conn *c, const conn *pc, kvr_dump_fn fn,
                 void *user)
{
    uint32_t owner = kvr_oset_owner(c->entry);
    const kvr_owner_rec *r = &idx->owners[owner];
    for (int t = 0; t < KVR_TIER_COUNT; t++) {
        if (!(c->entry & (1u << t)))
            continue;
        kvr_dump_store ev = {
            .worker_id = r->worker_id,
            .dp_rank = r->dp_rank,
            .tier = (kvr_tier)t,
            .has_parent = pc != NULL,
            .parent = pc ? pc->handle : 0,
            .engine_hashes = &c->handle,
            .local_hashes = &KVR_NODE(idx, x).local,
            .n = 1,
        };
        fn(user, &ev);
    }
}

/* Pushes node x's frame: the owners of x connected through its parent. */
static int enter(kvr_index *idx, walk *w, uint32_t x, const frame *parent, kvr_dump_fn fn,
                 void *user)
{
    const kvr_oset *o = kvr_osets_get(&idx->sets, KVR_NODE(idx, x).set);
    const uint32_t *e = kvr_oset_entries(o);
    if (reserve((void **)&w->a, &w->cap, w->len + o->len, sizeof *w->a) < 0 ||
        reserve((void **)&w->f, &w->fcap, w->flen + 1, sizeof *w->f) < 0)
        return -1;
    size_t off = w->len;
    size_t pi = 0;
    for (uint32_t k = 0; k < o->len; k++) {
        uint32_t owner = kvr_oset_owner(e[k]);
        const conn *pc = NULL;
        if (parent) {
            /* both lists are sorted by owner */
            while (pi < parent->len && kvr_oset_owner(w->a[parent->off + pi].entry) < owner)
                pi++;
            if (pi == parent->len)
                break;
            pc = &w->a[parent->off + pi];
            if (kvr_oset_owner(pc->entry) != owner)
                continue;
        }
        conn *c = &w->a[w->len++];
        c->entry = e[k];
        c->handle = kvr_tree_handle(idx, owner, x, e[k]);
        emit(idx, x, c, pc, fn, user);
    }
    w->f[w->flen++] = (frame){x, KVR_NODE(idx, x).first_child, off, w->len - off};
    return 0;
}

void kvr_index_dump(kvr_index *idx, kvr_dump_fn fn, void *user)
{
    pthread_rwlock_rdlock(&idx->lock);
    walk w = {0};
    for (uint32_t top = KVR_NODE(idx, KVR_ROOT).first_child; top; top = KVR_NODE(idx, top).next) {
        if (enter(idx, &w, top, NULL, fn, user) < 0)
            goto out;
        while (w.flen) {
            frame *f = &w.f[w.flen - 1];
            if (!f->next_child || f->len == 0) {
                w.len = f->off;
                w.flen--;
                continue;
            }
            uint32_t c = f->next_child;
            f->next_child = KVR_NODE(idx, c).next;
            frame parent = *f; /* enter may move the frame array */
            if (enter(idx, &w, c, &parent, fn, user) < 0)
                goto out;
        }
    }
out:
    free(w.a);
    free(w.f);
    pthread_rwlock_unlock(&idx->lock);
}
