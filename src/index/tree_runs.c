/* Blocks and runs of the prefix index (layout in tree_internal.h): their
 * storage, and the one structural operation events need, giving an owner
 * an entry on a range of blocks (kvr_tree_set_range), with the splits,
 * merges and subtree reclamation that keep runs maximal and memory at the
 * live size. */
#include <stdlib.h>
#include <string.h>

#include "index/tree_internal.h"
#include "util/grow.h"

/* ---- storage ---- */

/* Chunks cover the ids below the allocator's top (plus one spare, so a
 * count hovering at a chunk boundary does not allocate and free
 * repeatedly); the root's chunk always stays. */
static uint32_t chunks_needed(const kvr_ids *ids)
{
    return (ids->top + KVR_CHUNK - 1) >> KVR_CHUNK_BITS;
}

static uint32_t chunks_kept(const kvr_ids *ids, uint32_t need)
{
    return ids->count <= 1 ? 1 : need + 1;
}

/* The chunk pointer array halves while a quarter of it or less is used. */
static bool array_shrinks(uint32_t n, uint32_t cap)
{
    return cap > 8 && n * 4 <= cap;
}

static int sync(void ***chunks, uint32_t *n, uint32_t *cap, size_t bytes, const kvr_ids *ids)
{
    uint32_t need = chunks_needed(ids);
    while (*n < need) {
        if (*n == *cap) {
            uint32_t ncap = *cap ? *cap * 2 : 8;
            void **nc = realloc(*chunks, (size_t)ncap * sizeof *nc);
            if (!nc)
                return -1;
            *chunks = nc;
            *cap = ncap;
        }
        void *c = malloc(bytes);
        if (!c)
            return -1;
        (*chunks)[(*n)++] = c;
    }
    uint32_t keep = chunks_kept(ids, need);
    while (*n > keep)
        free((*chunks)[--*n]);
    uint32_t ncap = *cap;
    while (array_shrinks(*n, ncap))
        ncap /= 2;
    if (ncap != *cap) {
        void **nc = realloc(*chunks, (size_t)ncap * sizeof *nc);
        if (nc) {
            *chunks = nc;
            *cap = ncap;
        }
    }
    return 0;
}

/* Whether sync would change nothing (every reclaimed run asks). */
static bool in_sync(uint32_t n, uint32_t cap, const kvr_ids *ids)
{
    uint32_t need = chunks_needed(ids);
    return n >= need && n <= chunks_kept(ids, need) && !array_shrinks(n, cap);
}

int kvr_tree_sync_chunks(kvr_index *idx)
{
    if (in_sync(idx->n_bchunks, idx->bchunks_cap, &idx->block_ids) &&
        in_sync(idx->n_rchunks, idx->rchunks_cap, &idx->run_ids))
        return 0;
    int a = sync((void ***)&idx->blocks, &idx->n_bchunks, &idx->bchunks_cap,
                 sizeof(kvr_block_chunk), &idx->block_ids);
    int b = sync((void ***)&idx->runs, &idx->n_rchunks, &idx->rchunks_cap, sizeof(kvr_run_chunk),
                 &idx->run_ids);
    return a < 0 || b < 0 ? -1 : 0;
}

void kvr_tree_runs_free(kvr_index *idx)
{
    for (uint32_t c = 0; c < idx->n_bchunks; c++)
        free(idx->blocks[c]);
    for (uint32_t c = 0; c < idx->n_rchunks; c++)
        free(idx->runs[c]);
    free(idx->blocks);
    free(idx->runs);
    kvr_ids_free(&idx->block_ids);
    kvr_ids_free(&idx->run_ids);
}

uint32_t kvr_tree_block_new(kvr_index *idx, uint32_t prefer)
{
    uint32_t b = prefer && kvr_ids_take(&idx->block_ids, prefer) ? prefer
                                                                 : kvr_ids_get(&idx->block_ids);
    if (b == UINT32_MAX)
        return KVR_NIL;
    if (b >= idx->n_bchunks * KVR_CHUNK && kvr_tree_sync_chunks(idx) < 0) {
        kvr_ids_put(&idx->block_ids, b);
        return KVR_NIL;
    }
    return b;
}

uint32_t kvr_tree_run_new(kvr_index *idx)
{
    uint32_t r = kvr_ids_get(&idx->run_ids);
    if (r == UINT32_MAX)
        return KVR_NIL;
    if (r >= idx->n_rchunks * KVR_CHUNK && kvr_tree_sync_chunks(idx) < 0) {
        kvr_ids_put(&idx->run_ids, r);
        return KVR_NIL;
    }
    memset(&KVR_RUN(idx, r), 0, sizeof(kvr_run));
    return r;
}

/* ---- links ---- */

static uint64_t child_slot(const kvr_index *idx, const kvr_run *r, uint32_t id)
{
    return kvr_idtab_slot(kvr_child_fp(r->parent, KVR_LOCAL(idx, r->start)), id);
}

/* The lists of runs (tree_internal.h, kvr_link): push at the head, remove,
 * and put run n in run r's place. */
static void list_push(kvr_index *idx, int list, uint32_t *head, uint32_t r)
{
    kvr_link *l = &KVR_RUN(idx, r).link[list];
    l->prev = KVR_NIL;
    l->next = *head;
    if (l->next)
        KVR_RUN(idx, l->next).link[list].prev = r;
    *head = r;
}

static void list_remove(kvr_index *idx, int list, uint32_t *head, uint32_t r)
{
    const kvr_link *l = &KVR_RUN(idx, r).link[list];
    if (l->prev)
        KVR_RUN(idx, l->prev).link[list].next = l->next;
    else
        *head = l->next;
    if (l->next)
        KVR_RUN(idx, l->next).link[list].prev = l->prev;
}

static void list_replace(kvr_index *idx, int list, uint32_t *head, uint32_t r, uint32_t n)
{
    kvr_link *l = &KVR_RUN(idx, n).link[list];
    *l = KVR_RUN(idx, r).link[list];
    if (l->prev)
        KVR_RUN(idx, l->prev).link[list].next = n;
    else
        *head = n;
    if (l->next)
        KVR_RUN(idx, l->next).link[list].prev = n;
}

static uint32_t *set_head(kvr_index *idx, uint32_t r)
{
    return &idx->sets.sets[KVR_RUN(idx, r).set].runs;
}

static uint32_t *siblings_head(kvr_index *idx, uint32_t r)
{
    return &KVR_RUN(idx, KVR_RUNOF(idx, KVR_RUN(idx, r).parent)).first_child;
}

static void set_link(kvr_index *idx, uint32_t r) { list_push(idx, KVR_SAME_SET, set_head(idx, r), r); }

static void set_unlink(kvr_index *idx, uint32_t r)
{
    list_remove(idx, KVR_SAME_SET, set_head(idx, r), r);
}

/* First among the children of r's parent block; the child table must have
 * room for one more slot. */
static void child_link(kvr_index *idx, uint32_t r)
{
    if (kvr_idtab_add(&idx->child, child_slot(idx, &KVR_RUN(idx, r), r)) < 0)
        abort(); /* callers make room first */
    list_push(idx, KVR_SIBLINGS, siblings_head(idx, r), r);
}

static void child_unlink(kvr_index *idx, uint32_t r)
{
    kvr_idtab_del(&idx->child, child_slot(idx, &KVR_RUN(idx, r), r));
    list_remove(idx, KVR_SIBLINGS, siblings_head(idx, r), r);
}

/* Run n takes the place of run r (same parent and first block) among its
 * siblings and in the child table. */
static void child_replace(kvr_index *idx, uint32_t r, uint32_t n)
{
    const kvr_run *R = &KVR_RUN(idx, r);
    kvr_idtab_replace(&idx->child, child_slot(idx, R, r), child_slot(idx, R, n));
    list_replace(idx, KVR_SIBLINGS, siblings_head(idx, r), r, n);
}

int kvr_tree_run_link(kvr_index *idx, uint32_t r)
{
    if (kvr_idtab_room(&idx->child, 1) < 0)
        return -1;
    child_link(idx, r);
    set_link(idx, r);
    return 0;
}

static void relabel(kvr_index *idx, uint32_t b, uint32_t k, uint32_t r)
{
    for (uint32_t x = b; x < b + k; x++)
        KVR_RUNOF(idx, x) = r;
}

static void release_run(kvr_index *idx, uint32_t r)
{
    kvr_run *R = &KVR_RUN(idx, r);
    set_unlink(idx, r);
    kvr_osets_unref(&idx->sets, R->set);
    R->len = 0;
    kvr_ids_put(&idx->run_ids, r);
}

/* ---- split and merge ---- */

/* Block `at` (inside its run, not its first block) starts a run of its
 * own. The side with fewer blocks gets the new run id, so relabeling costs
 * the smaller part. -1 on OOM (nothing changed). */
int kvr_tree_split(kvr_index *idx, uint32_t at)
{
    if (kvr_idtab_room(&idx->child, 1) < 0)
        return -1;
    uint32_t n = kvr_tree_run_new(idx);
    if (!n)
        return -1;
    uint32_t r = KVR_RUNOF(idx, at);
    kvr_run *R = &KVR_RUN(idx, r), *N = &KVR_RUN(idx, n);
    uint32_t head = at - R->start, tail = kvr_run_end(R) - at;
    N->set = R->set;
    kvr_osets_ref(&idx->sets, N->set);
    set_link(idx, n);
    if (tail <= head) {
        N->start = at;
        N->len = tail;
        N->parent = at - 1;
        N->first_child = R->first_child;
        R->len = head;
        R->first_child = KVR_NIL;
        relabel(idx, at, tail, n);
        child_link(idx, n);
    } else {
        N->start = R->start;
        N->len = head;
        N->parent = R->parent;
        child_replace(idx, r, n);
        N->first_child = r;
        R->start = at;
        R->len = tail;
        R->parent = at - 1;
        R->link[KVR_SIBLINGS] = (kvr_link){KVR_NIL, KVR_NIL};
        relabel(idx, N->start, head, n);
        if (kvr_idtab_add(&idx->child, child_slot(idx, R, r)) < 0)
            abort(); /* room was made above */
    }
    return 0;
}

/* Run c and its parent run become one when they can: same owners, c the
 * only child, consecutive ids. Returns the run now holding c's blocks. */
static uint32_t merge_up(kvr_index *idx, uint32_t c)
{
    kvr_run *C = &KVR_RUN(idx, c);
    if (C->parent == KVR_ROOT)
        return c;
    uint32_t p = KVR_RUNOF(idx, C->parent);
    kvr_run *P = &KVR_RUN(idx, p);
    if (P->set != C->set || P->first_child != c || kvr_run_next(C) || kvr_run_end(P) != C->start)
        return c;
    kvr_idtab_del(&idx->child, child_slot(idx, C, c));
    if (C->len <= P->len) {
        P->len += C->len;
        P->first_child = C->first_child;
        relabel(idx, C->start, C->len, p);
        release_run(idx, c);
        return p;
    }
    P->first_child = KVR_NIL;
    child_replace(idx, p, c);
    relabel(idx, P->start, P->len, c);
    C->start = P->start;
    C->len += P->len;
    C->parent = P->parent;
    release_run(idx, p);
    return c;
}

/* After run r changed owners: merge it with its parent and its only child
 * where they now agree. */
static void merge_around(kvr_index *idx, uint32_t r)
{
    r = merge_up(idx, r);
    uint32_t c = KVR_RUN(idx, r).first_child;
    if (c && !kvr_run_next(&KVR_RUN(idx, c)))
        merge_up(idx, c);
}

/* ---- reclamation ---- */

static void push(kvr_index *idx, size_t *sp, uint32_t r)
{
    if (kvr_grow((void **)&idx->stack, &idx->stack_cap, *sp + 1, sizeof *idx->stack, 64) < 0)
        abort(); /* cannot leave a half-freed subtree behind */
    idx->stack[(*sp)++] = r;
}

#define STACK_MIN 64u

/* Frees run `top` and its subtree (reclaim), leaving the chunks and the
 * parent's remaining children as they are. */
static void reclaim_subtree(kvr_index *idx, uint32_t top)
{
    child_unlink(idx, top);
    size_t sp = 0;
    push(idx, &sp, top);
    while (sp) {
        uint32_t r = idx->stack[--sp];
        kvr_run *R = &KVR_RUN(idx, r);
        for (uint32_t c = R->first_child; c; c = kvr_run_next(&KVR_RUN(idx, c)))
            push(idx, &sp, c);
        if (r != top)
            kvr_idtab_del(&idx->child, child_slot(idx, R, r));
        if (R->set != KVR_OSET_EMPTY) {
            const kvr_oset *o = kvr_osets_get(&idx->sets, R->set);
            const uint32_t *e = kvr_oset_entries(o);
            for (uint32_t k = 0; k < o->len; k++) {
                uint32_t owner = kvr_oset_owner(e[k]);
                kvr_tree_owned_sub(idx, owner, R->len);
                if (e[k] & KVR_OSET_EXC)
                    for (uint32_t b = R->start; b < kvr_run_end(R); b++)
                        kvr_tree_exc_del(idx, owner, b);
            }
            set_unlink(idx, r);
            kvr_osets_unref(&idx->sets, R->set);
        }
        for (uint32_t b = R->start; b < kvr_run_end(R); b++)
            kvr_tree_engine_del(idx, b);
        kvr_ids_put_range(&idx->block_ids, R->start, R->len);
        R->len = 0;
        kvr_ids_put(&idx->run_ids, r);
    }
    if (idx->stack_cap > STACK_MIN) {
        uint32_t *ns = realloc(idx->stack, STACK_MIN * sizeof *ns);
        if (ns) {
            idx->stack = ns;
            idx->stack_cap = STACK_MIN;
        }
    }
}

/* Run `top` lost its last owner: it and its whole subtree are unreachable
 * by any match. Free them, dropping what other owners hold in the subtree
 * (their exception handles too), so nothing leaks and a later store under
 * such a handle is a parent_not_found like any unknown parent. */
static void reclaim(kvr_index *idx, uint32_t top)
{
    uint32_t parent = KVR_RUN(idx, top).parent;
    reclaim_subtree(idx, top);
    kvr_tree_sync_chunks(idx);
    /* the parent may be left with one child it can merge with */
    uint32_t c = KVR_RUN(idx, KVR_RUNOF(idx, parent)).first_child;
    if (c && !kvr_run_next(&KVR_RUN(idx, c)))
        merge_up(idx, c);
}

/* Blocks [at, end) of run r, the end of the run, lose their one owner
 * (leaf-first eviction): they and the subtree below them go, and the run
 * keeps its head and its set. A split there and the reclamation of the
 * split-off run cost a run id, a child-table slot and a set reference
 * made only to be undone. No merge follows: the run's parent and set are
 * unchanged, and it has no children left. */
static void cut_tail(kvr_index *idx, uint32_t r, uint32_t at)
{
    uint32_t c;
    while ((c = KVR_RUN(idx, r).first_child))
        reclaim_subtree(idx, c);
    kvr_run *R = &KVR_RUN(idx, r);
    uint32_t end = kvr_run_end(R);
    for (uint32_t b = at; b < end; b++)
        kvr_tree_engine_del(idx, b);
    kvr_ids_put_range(&idx->block_ids, at, end - at);
    R->len = at - R->start;
    kvr_tree_sync_chunks(idx);
}

int kvr_tree_set_range(kvr_index *idx, uint32_t b, uint32_t k, uint32_t owner, uint32_t entry)
{
    uint32_t r = KVR_RUNOF(idx, b);
    uint32_t old = kvr_osets_find(&idx->sets, KVR_RUN(idx, r).set, owner);
    if (old == entry)
        return 0;
    if (!entry && kvr_osets_get(&idx->sets, KVR_RUN(idx, r).set)->len == 1 &&
        b + k == kvr_run_end(&KVR_RUN(idx, r))) {
        /* the run's one owner leaves its end (or all of it): no set to
         * intern, no split */
        kvr_tree_owned_sub(idx, owner, k);
        kvr_run *R = &KVR_RUN(idx, r);
        if (b > R->start) {
            cut_tail(idx, r, b);
            return 0;
        }
        set_unlink(idx, r);
        kvr_osets_unref(&idx->sets, R->set);
        R->set = KVR_OSET_EMPTY;
        reclaim(idx, r);
        return 0;
    }
    if (b > KVR_RUN(idx, r).start && kvr_tree_split(idx, b) < 0)
        return -1;
    r = KVR_RUNOF(idx, b);
    if (b + k < kvr_run_end(&KVR_RUN(idx, r)) && kvr_tree_split(idx, b + k) < 0) {
        merge_around(idx, KVR_RUNOF(idx, b));
        return -1;
    }
    r = KVR_RUNOF(idx, b);
    kvr_run *M = &KVR_RUN(idx, r);
    set_unlink(idx, r);
    uint32_t to = kvr_osets_apply(&idx->sets, M->set, owner, entry);
    if (to == UINT32_MAX) {
        set_link(idx, r);
        merge_around(idx, r);
        return -1;
    }
    M->set = to;
    if (!old) {
        kvr_tree_owned_add(idx, owner, k);
    } else if (!entry) {
        kvr_tree_owned_sub(idx, owner, k);
    }
    if (to == KVR_OSET_EMPTY) {
        reclaim(idx, r);
        return 0;
    }
    set_link(idx, r);
    merge_around(idx, r);
    return 0;
}
