/* Snapshot of an index as parent-linked store events (SPEC §7 /dump): a
 * preorder walk, so every parent is emitted before its children. Blocks are
 * batched per (owner, tier) into chains while the walk keeps extending them;
 * before an owner starts a new chain, all of its open chains are emitted in
 * the order they were opened, which keeps every chain after the one holding
 * its parent (parents only matter within one owner). An owner's
 * block is emitted only while the owner holds every block above it (on any
 * tier): a block behind a gap can never count in a match for that owner,
 * and its parent handle could not be resolved when the dump is loaded. */
#include <stdlib.h>

#include "index/tree_internal.h"
#include "kvrouter/wire.h"
#include "util/grow.h"

typedef struct {
    uint32_t entry;
    uint64_t handle;
} conn;

/* Block-level tree walk over runs (tree_internal.h): inside a run a block's
 * only child is the next one; at a run's end the children are the first
 * blocks of the child runs, siblings of each other. */
static uint32_t first_child(const kvr_index *idx, uint32_t b)
{
    const kvr_run *r = &KVR_RUN(idx, KVR_RUNOF(idx, b));
    if (b + 1 < kvr_run_end(r))
        return b + 1;
    return r->first_child ? KVR_RUN(idx, r->first_child).start : KVR_NIL;
}

static uint32_t next_sibling(const kvr_index *idx, uint32_t b)
{
    const kvr_run *r = &KVR_RUN(idx, KVR_RUNOF(idx, b));
    return b == r->start && kvr_run_next(r) ? KVR_RUN(idx, kvr_run_next(r)).start : KVR_NIL;
}

typedef struct {
    uint32_t block, next_child;
    size_t off, len; /* this block's connected owners in the arena */
} frame;

/* One emitted chain holds at most the wire bound on hashes per event (SPEC §3). */
#define MAX_CHAIN KVR_WIRE_MAX_HASHES

typedef struct {
    uint64_t *e, *l;
    size_t n, ecap, lcap;
    uint64_t parent, seq;
    uint32_t last; /* the last block */
    bool active, has_parent;
} chain;

typedef struct {
    chain c[KVR_TIER_COUNT];
} owner_chains;

typedef struct {
    conn *a;
    size_t len, cap;
    frame *f;
    size_t flen, fcap;
    owner_chains *oc; /* by owner id */
    uint64_t seq;
    bool oom;
    kvr_dump_fn fn;
    void *user;
} walk;

static void flush_owner(kvr_index *idx, walk *w, uint32_t owner)
{
    owner_chains *oc = &w->oc[owner];
    for (;;) {
        chain *next = NULL;
        int tier = 0;
        for (int t = 0; t < KVR_TIER_COUNT; t++)
            if (oc->c[t].active && (!next || oc->c[t].seq < next->seq)) {
                next = &oc->c[t];
                tier = t;
            }
        if (!next)
            return;
        const kvr_owner_rec *r = &idx->owners[owner];
        kvr_dump_store ev = {
            .worker_id = r->worker_id,
            .dp_rank = r->dp_rank,
            .tier = (kvr_tier)tier,
            .has_parent = next->has_parent,
            .parent = next->parent,
            .engine_hashes = next->e,
            .local_hashes = next->l,
            .n = next->n,
        };
        w->fn(w->user, &ev);
        next->active = false;
        next->n = 0;
    }
}

/* Adds block x (child of p, parent handle pc) for the owner of c. */
static void emit(kvr_index *idx, walk *w, uint32_t x, uint32_t p, const conn *c, const conn *pc)
{
    uint32_t owner = kvr_oset_owner(c->entry);
    for (int t = 0; t < KVR_TIER_COUNT; t++) {
        if (!(c->entry & (1u << t)))
            continue;
        chain *ch = &w->oc[owner].c[t];
        if (!ch->active || ch->last != p || ch->n == MAX_CHAIN) {
            flush_owner(idx, w, owner);
            ch->active = true;
            ch->has_parent = pc != NULL;
            ch->parent = pc ? pc->handle : 0;
            ch->seq = ++w->seq;
        }
        if (kvr_grow((void **)&ch->e, &ch->ecap, ch->n + 1, sizeof *ch->e, 16) < 0 ||
            kvr_grow((void **)&ch->l, &ch->lcap, ch->n + 1, sizeof *ch->l, 16) < 0) {
            w->oom = true;
            return;
        }
        ch->e[ch->n] = c->handle;
        ch->l[ch->n++] = KVR_LOCAL(idx, x);
        ch->last = x;
    }
}

/* Pushes block x's frame: the owners of x connected through its parent. */
static int enter(kvr_index *idx, walk *w, uint32_t x, const frame *parent)
{
    const kvr_oset *o = kvr_osets_get(&idx->sets, kvr_tree_set_of(idx, x));
    const uint32_t *e = kvr_oset_entries(o);
    if (kvr_grow((void **)&w->a, &w->cap, w->len + o->len, sizeof *w->a, 64) < 0 ||
        kvr_grow((void **)&w->f, &w->fcap, w->flen + 1, sizeof *w->f, 64) < 0)
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
        emit(idx, w, x, parent ? parent->block : KVR_ROOT, c, pc);
    }
    w->f[w->flen++] = (frame){x, first_child(idx, x), off, w->len - off};
    return w->oom ? -1 : 0;
}

void kvr_index_dump(kvr_index *idx, kvr_dump_fn fn, void *user)
{
    pthread_rwlock_rdlock(&idx->lock);
    walk w = {.fn = fn, .user = user};
    w.oc = calloc(idx->n_owners ? idx->n_owners : 1, sizeof *w.oc);
    if (!w.oc)
        goto out;
    for (uint32_t top = first_child(idx, KVR_ROOT); top; top = next_sibling(idx, top)) {
        if (enter(idx, &w, top, NULL) < 0)
            goto out;
        while (w.flen) {
            frame *f = &w.f[w.flen - 1];
            if (!f->next_child || f->len == 0) {
                w.len = f->off;
                w.flen--;
                continue;
            }
            uint32_t c = f->next_child;
            f->next_child = next_sibling(idx, c);
            frame parent = *f; /* enter may move the frame array */
            if (enter(idx, &w, c, &parent) < 0)
                goto out;
        }
    }
    for (uint32_t o = 0; o < idx->n_owners; o++)
        flush_owner(idx, &w, o);
out:
    if (w.oc)
        for (uint32_t o = 0; o < idx->n_owners; o++)
            for (int t = 0; t < KVR_TIER_COUNT; t++) {
                free(w.oc[o].c[t].e);
                free(w.oc[o].c[t].l);
            }
    free(w.oc);
    free(w.a);
    free(w.f);
    pthread_rwlock_unlock(&idx->lock);
}
