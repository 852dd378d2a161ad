/* Prefix match (SPEC §6): walk the request's local hashes from the root and
 * compute, per owner, the gpu run and the reach when cpu, then disk,
 * continue it.
 *
 * Per-owner counters live in a per-thread scratch stamped with an epoch, so
 * nothing is cleared between matches. Only owners of the first block can
 * ever have a non-zero reach, and an owner can extend a counter at depth i
 * only if that counter equals i. When a node's interned owner set is the
 * same as the previous node's, exactly the counters that advanced there
 * advance again: such runs are counted and applied in one pass when the set
 * changes, so a long prefix shared by many workers costs one child lookup
 * per block, not one step per (block, owner). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index/tree_internal.h"

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
    size_t explicit_cap;
    /* out[0..tpl_len) already holds owner, worker and rank of every entry
     * of this first set (index uid, set content hash and length): with a
     * fleet-wide first block, consecutive matches start from the same set
     * and only the counters need writing. */
    uint64_t tpl_index, tpl_hash;
    uint32_t tpl_len;
    kvr_match_ctx_stats stats;
};

void kvr_match_ctx_stats_get(const kvr_match_ctx *ctx, kvr_match_ctx_stats *out)
{
    *out = ctx->stats;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void read_lock(kvr_index *idx, kvr_match_ctx *ctx)
{
    ctx->stats.matches++;
    if (pthread_rwlock_tryrdlock(&idx->lock) == 0)
        return;
    uint64_t t0 = now_ns();
    atomic_fetch_add(&idx->readers_waiting, 1);
    pthread_rwlock_rdlock(&idx->lock);
    atomic_fetch_sub(&idx->readers_waiting, 1);
    uint64_t dt = now_ns() - t0;
    ctx->stats.waits++;
    ctx->stats.wait_ns += dt;
    if (dt > ctx->stats.max_wait_ns)
        ctx->stats.max_wait_ns = dt;
}

kvr_match_ctx *kvr_match_ctx_create(void) { return calloc(1, sizeof(kvr_match_ctx)); }

void kvr_match_ctx_destroy(kvr_match_ctx *ctx)
{
    if (!ctx)
        return;
    free(ctx->st);
    free(ctx->out);
    free(ctx->explicit_at);
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
    if (out > ctx->out_cap) {
        kvr_match_entry *n = realloc(ctx->out, out * sizeof *n);
        if (!n)
            return -1;
        ctx->out = n;
        ctx->out_cap = out;
    }
    if (out > ctx->explicit_cap) {
        uint32_t *n = realloc(ctx->explicit_at, out * sizeof *n);
        if (!n)
            return -1;
        ctx->explicit_at = n;
        ctx->explicit_cap = out;
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

#define AHEAD 32
#define RING 64 /* power of two > AHEAD */

/* Prefetches the node the first slot carrying tag points at (the slot
 * itself was prefetched earlier). */
static inline void prefetch_node(const kvr_index *idx, uint32_t tag)
{
    uint32_t cap = idx->child_cap;
    for (uint32_t i = kvr_fastrange(tag, cap), k = 0; k < 4; i = kvr_probe_next(i, cap), k++) {
        uint64_t s = idx->child[i];
        if (!s)
            return;
        if ((uint32_t)(s >> 32) == tag) {
            __builtin_prefetch(&KVR_NODE(idx, (uint32_t)s));
            return;
        }
    }
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

size_t kvr_index_match(kvr_index *idx, kvr_match_ctx *ctx, const uint64_t *local_hashes,
                       size_t n, const kvr_match_entry **out)
{
    *out = ctx->out;
    if (n == 0)
        return 0;
    if (n > UINT32_MAX - 1)
        n = UINT32_MAX - 1;
    read_lock(idx, ctx);
    size_t found = 0;
    uint32_t first = kvr_tree_child(idx, KVR_ROOT, local_hashes[0]);
    if (first == KVR_NIL)
        goto done;
    uint32_t first_set = KVR_NODE(idx, first).set;
    const kvr_oset *fs = kvr_osets_get(&idx->sets, first_set);
    if (ctx_reserve(ctx, idx->n_owners, fs->len) < 0)
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
     * its tiers in it. Owners get explicit counters only at the first node
     * whose set differs (materialize); the others stay frozen at depth L. */
    bool any = (fs->tiers & (T_G | T_C | T_D)) != 0;
    bool materialized = false;
    uint32_t n_explicit = 0;
    uint32_t L = 1;
    uint32_t cur = first, prev_set = first_set, explicit_depth = 0, run = 0;
    /* A chain stored by one event gets consecutive node ids, and popular
     * prefixes are old and stay put: along the bench's 128-block matches 99%
     * of steps go from node x to node x + 1. So the walk first reads x + 1
     * (sequential memory, prefetched a few nodes ahead): a live node with
     * this parent and local hash is the child, (parent, local) being unique.
     * Only when it is not does the walk use the child table, and from then
     * on the slots of the blocks ahead (their tags chain from the request
     * alone) are prefetched AHEAD blocks early and the candidate nodes
     * AHEAD/2 early, so a scattered path does not stall on every block. */
    uint32_t ring[RING];
    uint32_t ahead = 0, tag = 0; /* no tags until the first step off x + 1 */
    for (uint32_t i = 1; any && i < (uint32_t)n; i++) {
        if (ahead) {
            if (ahead < (uint32_t)n) {
                tag = kvr_chain_tag(tag, local_hashes[ahead]);
                ring[ahead % RING] = tag;
                __builtin_prefetch(kvr_child_home(idx, tag));
                ahead++;
            }
            if (i + AHEAD / 2 < ahead)
                prefetch_node(idx, ring[(i + AHEAD / 2) % RING]);
        }
        uint32_t child = KVR_NIL, next = cur + 1;
        if (next + 8 < idx->node_ids.top)
            __builtin_prefetch(&KVR_NODE(idx, next + 8));
        if (kvr_ids_used(&idx->node_ids, next)) {
            const kvr_node *nd = &KVR_NODE(idx, next);
            if (nd->parent == cur && nd->local == local_hashes[i] && nd->set != KVR_OSET_EMPTY)
                child = next;
        }
        if (child == KVR_NIL) {
            if (!ahead) {
                /* a node's tag is its path's: the chain goes on from cur's */
                tag = KVR_NODE(idx, cur).tag;
                for (ahead = i; ahead < (uint32_t)n && ahead <= i + AHEAD; ahead++) {
                    tag = kvr_chain_tag(tag, local_hashes[ahead]);
                    ring[ahead % RING] = tag;
                    __builtin_prefetch(kvr_child_home(idx, tag));
                }
            }
            child = kvr_tree_child_tagged(idx, cur, local_hashes[i], ring[i % RING]);
        }
        if (child == KVR_NIL)
            break;
        uint32_t set = KVR_NODE(idx, child).set;
        cur = child;
        if (set == prev_set) {
            run++;
            continue;
        }
        const kvr_oset *o = kvr_osets_get(&idx->sets, set);
        const uint32_t *e = kvr_oset_entries(o);
        if (!materialized) {
            L = i;
            run = 0;
            materialized = true;
            n_explicit = materialize(st, epoch, fe, fs->len, e, o->len, L, ctx->explicit_at);
        } else if (run) {
            apply_run(st, epoch, kvr_osets_get(&idx->sets, prev_set), explicit_depth + 1, run);
            run = 0;
        }
        any = false;
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
        prev_set = set;
        explicit_depth = i;
    }
    if (!materialized)
        L = 1 + run;
    else if (run)
        apply_run(st, epoch, kvr_osets_get(&idx->sets, prev_set), explicit_depth + 1, run);
    /* One entry per first-block owner: with a fleet-wide prefix this loop
     * is the floor of every match. Owner, worker and rank are written only
     * when the first set is not the last match's (tpl_*); every owner gets
     * its counters after L blocks of the first set, then the few given
     * explicit counters (listed by position) are patched: the scratch is not
     * read per owner. */
    const kvr_owner_key *keys = idx->owner_keys;
    kvr_match_entry *res = ctx->out;
    uint32_t unreached = 0;
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
    }
    for (uint32_t k = 0; k < fs->len; k++) {
        owner_state c;
        implicit(&c, fe[k], L);
        res[k].gpu_blocks = c.g;
        res[k].cpu_blocks = c.c;
        res[k].disk_blocks = c.d;
        unreached += c.d == 0;
    }
    for (uint32_t x = 0; x < n_explicit; x++) {
        kvr_match_entry *r = &res[ctx->explicit_at[x]];
        const owner_state *s = &st[r->owner];
        r->gpu_blocks = s->g;
        r->cpu_blocks = s->c;
        r->disk_blocks = s->d;
    }
    found = fs->len;
    /* Owners holding the first block on no tier that counts (external
     * only) are not part of the result. */
    if (unreached) {
        ctx->tpl_len = 0; /* entries move: the next match writes them whole */
        found = 0;
        for (uint32_t k = 0; k < fs->len; k++)
            if (res[k].disk_blocks)
                res[found++] = res[k];
    }
done:
    pthread_rwlock_unlock(&idx->lock);
    *out = ctx->out;
    return found;
}
