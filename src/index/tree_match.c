/* Prefix match (SPEC §6): walk the request's local hashes from the root and
 * compute, per owner, the gpu run and the reach when cpu, then disk,
 * continue it.
 *
 * The walk goes run by run (tree_internal.h): inside a run it compares
 * local hashes with consecutive blocks, and looks a child up only where a
 * run ends. Per-owner counters live in a per-thread scratch stamped with an
 * epoch, so nothing is cleared between matches. Only owners of the first
 * block can ever have a non-zero reach, and an owner can extend a counter
 * at depth i only if that counter equals i. Along blocks with the same
 * owner set as the one before (the rest of a run, or a next run with equal
 * owners), exactly the counters that advanced there advance again: such
 * stretches are counted and applied in one pass when the set changes, so a
 * long prefix shared by many workers costs no step per (block, owner). */
#include <stdlib.h>
#include <string.h>

#include "index/tree_internal.h"
#include "util/grow.h"

#define T_G (1u << KVR_TIER_GPU)
#define T_C (1u << KVR_TIER_CPU)
#define T_D (1u << KVR_TIER_DISK)

typedef struct {
    uint32_t stamp, g, c, d;
} owner_state;

struct kvr_match_ctx {
    uint32_t epoch;
    uint32_t cap;
    owner_state *st;
    kvr_match_entry *out;
    size_t out_cap;
    uint32_t *explicit_at; /* positions in the first set of the owners given counters */
    uint32_t *last_explicit; /* the same for the last result (tpl_depth) */
    uint32_t n_last_explicit;
    size_t explicit_cap;
    /* out[0..tpl_len) already holds owner, worker and rank of every entry
     * of this first set (index uid, set content hash and length): with a
     * fleet-wide first block, consecutive matches start from the same set
     * and only the counters need writing. */
    uint64_t tpl_index, tpl_hash;
    uint32_t tpl_len;
    /* and when tpl_depth is not 0, every counter of it is as if the first
     * set had held for tpl_depth blocks except at last_explicit: a match
     * with the same first set and depth rewrites only those */
    uint32_t tpl_depth;
    kvr_match_ctx_stats stats;
};

void kvr_match_ctx_stats_get(const kvr_match_ctx *ctx, kvr_match_ctx_stats *out)
{
    *out = ctx->stats;
}

static void read_lock(kvr_index *idx, kvr_match_ctx *ctx)
{
    ctx->stats.matches++;
    if (pthread_rwlock_tryrdlock(&idx->lock) == 0)
        return;
    uint64_t t0 = kvr_index_now_ns();
    atomic_fetch_add(&idx->readers_waiting, 1);
    pthread_rwlock_rdlock(&idx->lock);
    atomic_fetch_sub(&idx->readers_waiting, 1);
    uint64_t t1 = kvr_index_now_ns(), dt = t1 - t0;
    ctx->stats.waits++;
    ctx->stats.wait_ns += dt;
    if (dt > ctx->stats.max_wait_ns) {
        ctx->stats.max_wait_ns = dt;
        ctx->stats.max_wait_end_ns = t1;
    }
}

kvr_match_ctx *kvr_match_ctx_create(void) { return calloc(1, sizeof(kvr_match_ctx)); }

void kvr_match_ctx_destroy(kvr_match_ctx *ctx)
{
    if (!ctx)
        return;
    free(ctx->st);
    free(ctx->out);
    free(ctx->explicit_at);
    free(ctx->last_explicit);
    free(ctx);
}

static int ctx_reserve(kvr_match_ctx *ctx, uint32_t owners, size_t out)
{
    if (owners > ctx->cap) {
        uint32_t ncap = owners < 64 ? 64 : owners * 2;
        owner_state *n = realloc(ctx->st, (size_t)ncap * sizeof *n);
        if (!n)
            return -1;
        memset(n + ctx->cap, 0, (size_t)(ncap - ctx->cap) * sizeof *n);
        ctx->st = n;
        ctx->cap = ncap;
    }
    /* Doubling: the first block's owners grow one join at a time, and a
     * realloc per match that saw one more was 2 % of a 1000-owner replay. */
    if (out > ctx->out_cap && KVR_GROW(ctx->out, ctx->out_cap, out) < 0)
        return -1;
    if (out > ctx->explicit_cap) {
        /* two arrays, one capacity: both grow the same steps */
        size_t cap = ctx->explicit_cap, last_cap = ctx->explicit_cap;
        if (KVR_GROW(ctx->explicit_at, cap, out) < 0 ||
            KVR_GROW(ctx->last_explicit, last_cap, out) < 0)
            return -1;
        ctx->explicit_cap = cap;
    }
    return 0;
}

/* Counters of a first-block owner (entry t) after L blocks of the first set. */
static inline void implicit(owner_state *s, uint32_t t, uint32_t L)
{
    s->d = (t & (T_G | T_C | T_D)) ? L : 0;
    s->c = (t & (T_G | T_C)) ? L : 0;
    s->g = (t & T_G) ? L : 0;
}

/* Gives explicit counters to the owners of entries e that also own the
 * first block (fe), as they stand after L blocks of the first set, and
 * writes their positions in fe to at, ascending. Both arrays are sorted by
 * owner: merge when e is large, else binary search. Returns how many. */
static uint32_t materialize(owner_state *st, uint32_t epoch, const uint32_t *fe, uint32_t flen,
                            const uint32_t *e, uint32_t len, uint32_t L, uint32_t *at)
{
    uint32_t n = 0;
    if ((uint64_t)len * 16 >= flen) {
        uint32_t j = 0;
        for (uint32_t k = 0; k < len; k++) {
            uint32_t o = kvr_oset_owner(e[k]);
            while (j < flen && kvr_oset_owner(fe[j]) < o)
                j++;
            if (j == flen)
                break;
            if (kvr_oset_owner(fe[j]) == o) {
                st[o].stamp = epoch;
                implicit(&st[o], fe[j], L);
                at[n++] = j;
            }
        }
        return n;
    }
    for (uint32_t k = 0; k < len; k++) {
        uint32_t o = kvr_oset_owner(e[k]), lo = 0, hi = flen;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (kvr_oset_owner(fe[mid]) < o)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < flen && kvr_oset_owner(fe[lo]) == o) {
            st[o].stamp = epoch;
            implicit(&st[o], fe[lo], L);
            at[n++] = lo;
        }
    }
    return n;
}

/* Counters that advanced at the last explicit depth (value v) advance run
 * more blocks. */
static void apply_run(owner_state *st, uint32_t epoch, const kvr_oset *set, uint32_t v,
                      uint32_t run)
{
    const uint32_t *e = kvr_oset_entries(set);
    for (uint32_t k = 0; k < set->len; k++) {
        owner_state *s = &st[kvr_oset_owner(e[k])];
        if (s->stamp != epoch)
            continue;
        if (s->d == v)
            s->d += run;
        if (s->c == v)
            s->c += run;
        if (s->g == v)
            s->g += run;
    }
}


/* Counters at depth i of the owners of set o that own the first block:
 * each advances by one when its counter reached i and the owner holds the
 * block on a counting tier. Returns whether any advanced. */
static bool step(owner_state *st, uint32_t epoch, const kvr_oset *o, uint32_t i)
{
    const uint32_t *e = kvr_oset_entries(o);
    bool any = false;
    for (uint32_t k = 0; k < o->len; k++) {
        uint32_t t = e[k];
        owner_state *s = &st[kvr_oset_owner(t)];
        if (s->stamp != epoch || s->d != i || !(t & (T_G | T_C | T_D)))
            continue;
        s->d = i + 1;
        any = true;
        if ((t & (T_G | T_C)) && s->c == i) {
            s->c = i + 1;
            if ((t & T_G) && s->g == i)
                s->g = i + 1;
        }
    }
    return any;
}

/* The run after block `last` whose first block has this local hash. A
 * chain stored in one event has consecutive ids and keeps them when later
 * stores split it into runs, so the run starting at last + 1 is tried
 * before the child table. */
static uint32_t next_run(const kvr_index *idx, uint32_t last, uint64_t local)
{
    uint32_t x = last + 1;
    if (kvr_ids_used(&idx->block_ids, x)) {
        uint32_t c = KVR_RUNOF(idx, x);
        const kvr_run *C = &KVR_RUN(idx, c);
        if (C->start == x && C->parent == last && KVR_LOCAL(idx, x) == local)
            return c;
    }
    return kvr_tree_child_run(idx, last, local);
}

/* Fills ctx->out with one entry per owner of the first set fs (entries
 * fe) after a walk in which the first set held for L blocks and the
 * owners at explicit_at[0..n_explicit) got counters in the scratch.
 * Returns the number of entries. */
static size_t result(const kvr_index *idx, kvr_match_ctx *ctx, const kvr_oset *fs,
                     const uint32_t *fe, uint32_t L, uint32_t n_explicit)
{
    /* One entry per first-block owner: with a fleet-wide prefix this is the
     * floor of every match. Owner, worker and rank are written only when
     * the first set is not the last match's (tpl_*); the counters only
     * where they can differ from the last result's (its and this match's
     * explicit owners) when the depth is the last one's too; otherwise
     * every owner gets its counters after L blocks of the first set, then
     * the explicit ones are patched: the scratch is not read per owner. */
    const kvr_owner_key *keys = idx->owner_keys;
    kvr_match_entry *res = ctx->out;
    bool same_owners = ctx->tpl_index == idx->uid && ctx->tpl_hash == fs->hash &&
                       ctx->tpl_len == fs->len && res[0].owner == kvr_oset_owner(fe[0]) &&
                       res[fs->len - 1].owner == kvr_oset_owner(fe[fs->len - 1]);
    if (!same_owners) {
        for (uint32_t k = 0; k < fs->len; k++) {
            uint32_t owner = kvr_oset_owner(fe[k]);
            res[k].owner = owner;
            res[k].worker_id = keys[owner].worker_id;
            res[k].dp_rank = keys[owner].dp_rank;
        }
        ctx->tpl_index = idx->uid;
        ctx->tpl_hash = fs->hash;
        ctx->tpl_len = fs->len;
        ctx->tpl_depth = 0;
    }
    owner_state c;
    if (ctx->tpl_depth == L) {
        for (uint32_t x = 0; x < ctx->n_last_explicit; x++) {
            uint32_t k = ctx->last_explicit[x];
            implicit(&c, fe[k], L);
            res[k].gpu_blocks = c.g;
            res[k].cpu_blocks = c.c;
            res[k].disk_blocks = c.d;
        }
    } else {
        for (uint32_t k = 0; k < fs->len; k++) {
            implicit(&c, fe[k], L);
            res[k].gpu_blocks = c.g;
            res[k].cpu_blocks = c.c;
            res[k].disk_blocks = c.d;
        }
    }
    for (uint32_t x = 0; x < n_explicit; x++) {
        kvr_match_entry *r = &res[ctx->explicit_at[x]];
        const owner_state *s = &ctx->st[r->owner];
        r->gpu_blocks = s->g;
        r->cpu_blocks = s->c;
        r->disk_blocks = s->d;
    }
    if (!fs->uncounted) {
        uint32_t *t = ctx->last_explicit;
        ctx->last_explicit = ctx->explicit_at;
        ctx->explicit_at = t;
        ctx->n_last_explicit = n_explicit;
        ctx->tpl_depth = L;
        return fs->len;
    }
    /* Owners holding the first block on no tier that counts (external
     * only) are not part of the result; entries move, so the next match
     * writes them whole. */
    ctx->tpl_len = 0;
    size_t found = 0;
    for (uint32_t k = 0; k < fs->len; k++)
        if (res[k].disk_blocks)
            res[found++] = res[k];
    return found;
}

size_t kvr_index_match(kvr_index *idx, kvr_match_ctx *ctx, const uint64_t *local_hashes,
                       size_t n, const kvr_match_entry **out)
{
    *out = ctx->out;
    if (n == 0)
        return 0;
    if (n > UINT32_MAX - 1)
        n = UINT32_MAX - 1;
    const uint64_t *l = local_hashes;
    read_lock(idx, ctx);
    size_t found = 0;
    uint32_t r = kvr_tree_child_run(idx, KVR_ROOT, l[0]);
    if (r == KVR_NIL)
        goto done;
    const kvr_run *R = &KVR_RUN(idx, r);
    uint32_t first_set = R->set;
    const kvr_oset *fs = kvr_osets_get(&idx->sets, first_set);
    if (!(fs->tiers & (T_G | T_C | T_D)) || ctx_reserve(ctx, idx->n_owners, fs->len) < 0)
        goto done;
    if (++ctx->epoch == 0) {
        memset(ctx->st, 0, (size_t)ctx->cap * sizeof *ctx->st);
        ctx->epoch = 1;
    }
    uint32_t epoch = ctx->epoch;
    owner_state *st = ctx->st;
    const uint32_t *fe = kvr_oset_entries(fs);
    /* The first block's owners are not initialized one by one (a prompt
     * prefix shared by the whole fleet has every worker there): while the
     * walk sees the first set again, each of its owners advances exactly by
     * its tiers in it. Owners get explicit counters only at the first block
     * whose set differs (materialize); the others stay frozen at depth L. */
    bool materialized = false;
    uint32_t n_explicit = 0, L = 1;
    uint32_t prev_set = first_set, explicit_depth = 0, run = 0;
    for (uint32_t i = 0;;) { /* i: depth of R's first block */
        uint32_t m = 1, lim = R->len < n - i ? R->len : (uint32_t)n - i;
        while (m < lim && KVR_LOCAL(idx, R->start + m) == l[i + m])
            m++;
        if (i == 0) {
            run = m - 1;
        } else if (R->set == prev_set) {
            run += m;
        } else {
            const kvr_oset *o = kvr_osets_get(&idx->sets, R->set);
            if (!materialized) {
                L = i;
                materialized = true;
                n_explicit = materialize(st, epoch, fe, fs->len, kvr_oset_entries(o), o->len, L,
                                         ctx->explicit_at);
            } else if (run) {
                apply_run(st, epoch, kvr_osets_get(&idx->sets, prev_set), explicit_depth + 1, run);
            }
            run = 0;
            if (!step(st, epoch, o, i))
                break;
            run = m - 1;
            prev_set = R->set;
            explicit_depth = i;
        }
        i += m;
        if (m < R->len || i >= n)
            break;
        if ((r = next_run(idx, R->start + R->len - 1, l[i])) == KVR_NIL)
            break;
        R = &KVR_RUN(idx, r);
    }
    if (!materialized)
        L = 1 + run;
    else if (run)
        apply_run(st, epoch, kvr_osets_get(&idx->sets, prev_set), explicit_depth + 1, run);
    found = result(idx, ctx, fs, fe, L, n_explicit);
done:
    pthread_rwlock_unlock(&idx->lock);
    *out = ctx->out;
    return found;
}
