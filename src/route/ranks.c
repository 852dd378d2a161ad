/* Candidate ranks per worker: those with index state and those registered
 * (kvr_indexer_declare_rank; a kv_events off rank has no state). The
 * facade's cheap per-request snapshot (kvr_indexer_caps_list) has no rank
 * list and the full worker info locks
 * every rank (contending with event application), so ranks are cached per
 * (model, group) and refreshed from kvr_indexer_list when the cache is older
 * than rank_refresh_s or a worker it has never seen shows up. Ranks that
 * matched blocks are merged in by the caller, so a fresh rank with overlap
 * is never missed; only a fresh rank with no overlap waits for a refresh. */
#include <stdlib.h>
#include <string.h>

#include "route/internal.h"

#define NO_RANK UINT32_MAX /* registered worker with no rank state yet */

static int cmp_wr(const void *a, const void *b)
{
    const route_wr *x = a, *y = b;
    if (x->worker_id != y->worker_id)
        return x->worker_id < y->worker_id ? -1 : 1;
    return (x->dp_rank > y->dp_rank) - (x->dp_rank < y->dp_rank);
}

/* Index of the first pair of worker_id, or n. */
static size_t lower_bound(const route_wr *p, size_t n, uint64_t worker_id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p[mid].worker_id < worker_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Builds a sorted (worker, rank) table outside any router lock. */
static route_wr *load_ranks(kvr_indexer *ix, const char *model, const char *group, size_t *n_out)
{
    size_t cap = kvr_indexer_list(ix, model, group, NULL, 0) + 4;
    kvr_worker_info *infos = malloc(cap * sizeof *infos);
    if (!infos)
        return NULL;
    size_t nw = kvr_indexer_list(ix, model, group, infos, cap);
    if (nw > cap)
        nw = cap; /* registered meanwhile: picked up by the next refresh */
    size_t np = 0;
    for (size_t w = 0; w < nw; w++) {
        size_t listed = (size_t)infos[w].n_ranks + infos[w].n_declared_ranks;
        np += listed ? listed : 1;
    }
    route_wr *pairs = malloc((np ? np : 1) * sizeof *pairs);
    if (pairs) {
        /* the ranks with state and the registered ones (kv_events off
         * ranks have no state), each pair once */
        size_t k = 0;
        for (size_t w = 0; w < nw; w++) {
            const kvr_worker_info *in = &infos[w];
            if (in->n_ranks == 0 && in->n_declared_ranks == 0)
                pairs[k++] = (route_wr){in->worker_id, NO_RANK};
            for (uint32_t i = 0; i < in->n_ranks; i++)
                pairs[k++] = (route_wr){in->worker_id, in->ranks[i].dp_rank};
            for (uint32_t i = 0; i < in->n_declared_ranks; i++)
                pairs[k++] = (route_wr){in->worker_id, in->declared_ranks[i]};
        }
        qsort(pairs, k, sizeof *pairs, cmp_wr);
        size_t u = 0;
        for (size_t i = 0; i < k; i++)
            if (u == 0 || cmp_wr(&pairs[u - 1], &pairs[i]) != 0)
                pairs[u++] = pairs[i];
        *n_out = u;
    }
    free(infos);
    return pairs;
}

/* Field by field: route_wr has padding. */
static bool same_pairs(const route_rank_group *g, const route_wr *pairs, size_t n)
{
    if (!g->pairs || g->n != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (g->pairs[i].worker_id != pairs[i].worker_id || g->pairs[i].dp_rank != pairs[i].dp_rank)
            return false;
    return true;
}

static route_rank_group *group_find(kvr_router *r, uintptr_t index)
{
    for (route_rank_group *g = r->rank_groups; g; g = g->next)
        if (g->index == index)
            return g;
    return NULL;
}

/* Copies the cached ranks of each worker of s->caps into s->ranks. A
 * worker missing from the cache makes it return 1 (it needs a refresh), or
 * when lenient gets no ranks. 0 done, -1 out of memory. */
static int copy_ranks(route_scratch *s, const route_rank_group *g, size_t n_workers, bool lenient)
{
    size_t total = 0, next = 0;
    /* at most every cached pair plus one per worker: grown once */
    if (route_grow((void **)&s->ranks, &s->ranks_cap, g->n + n_workers + 1, sizeof *s->ranks) < 0 ||
        route_grow((void **)&s->rank_pos, &s->rank_pos_cap, g->n + n_workers + 1,
                   sizeof *s->rank_pos) < 0)
        return -1;
    s->rank_gen = g->gen;
    s->rank_n = g->n;
    for (size_t w = 0; w < n_workers; w++) {
        uint64_t id = s->caps[w].worker_id;
        /* workers usually come in the cache's order: try where the last
         * one ended before searching */
        size_t i = next < g->n && g->pairs[next].worker_id == id &&
                           (next == 0 || g->pairs[next - 1].worker_id != id)
                       ? next
                       : lower_bound(g->pairs, g->n, id);
        if ((i == g->n || g->pairs[i].worker_id != id) && !lenient)
            return 1;
        size_t j = i;
        while (j < g->n && g->pairs[j].worker_id == id)
            j++;
        next = j;
        s->spans[w].off = (uint32_t)total;
        s->spans[w].none_pos = KVR_ROUTE_NO_SLOT;
        for (size_t k = i; k < j; k++) {
            if (g->pairs[k].dp_rank == NO_RANK) {
                s->spans[w].none_pos = (uint32_t)k;
                continue;
            }
            s->rank_pos[total] = (uint32_t)k;
            s->ranks[total++] = g->pairs[k].dp_rank;
        }
        s->spans[w].n = (uint32_t)(total - s->spans[w].off);
    }
    return 0;
}

int route_ranks_snapshot(kvr_router *r, route_scratch *s, uintptr_t index, const char *model,
                         const char *group, size_t n_workers)
{
    if (route_grow((void **)&s->spans, &s->spans_cap, n_workers + 1, sizeof *s->spans) < 0)
        return -1;
    double now = route_now(r);
    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_mutex_lock(&r->ranks_mu);
        route_rank_group *g = group_find(r, index);
        if (g && (attempt > 0 || now - g->refreshed_at < r->cfg.rank_refresh_s)) {
            /* The same workers (caps generation) and the same cache: the
             * copy the scratch holds is this one. */
            if (s->ranks_caps_gen && s->ranks_caps_gen == s->caps_gen &&
                s->ranks_index == index && s->rank_gen == g->gen && s->rank_n == g->n) {
                pthread_mutex_unlock(&r->ranks_mu);
                return 0;
            }
            /* After a refresh a worker still missing registered meanwhile:
             * it is a candidate without ranks until the next refresh. */
            s->ranks_caps_gen = 0;
            int rc = copy_ranks(s, g, n_workers, attempt > 0);
            if (rc != 1) {
                /* a lenient copy may have missed a worker: not kept */
                if (rc == 0 && attempt == 0)
                    s->ranks_caps_gen = s->caps_gen;
                s->ranks_index = index;
                pthread_mutex_unlock(&r->ranks_mu);
                return rc;
            }
        }
        pthread_mutex_unlock(&r->ranks_mu);

        size_t np = 0;
        route_wr *pairs = load_ranks(r->ix, model, group, &np);
        if (!pairs)
            return -1;
        pthread_mutex_lock(&r->ranks_mu);
        g = group_find(r, index);
        if (!g && (g = calloc(1, sizeof *g))) {
            g->index = index;
            g->next = r->rank_groups;
            r->rank_groups = g;
        }
        if (!g) {
            pthread_mutex_unlock(&r->ranks_mu);
            free(pairs);
            return -1;
        }
        /* Positions name the router's state slots: a new generation
         * only when they change (a refresh usually finds the same). */
        if (!same_pairs(g, pairs, np))
            g->gen = ++r->rank_gen;
        free(g->pairs);
        g->pairs = pairs;
        g->n = np;
        g->refreshed_at = now;
        pthread_mutex_unlock(&r->ranks_mu);
    }
    return -1;
}

void route_ranks_free(kvr_router *r)
{
    while (r->rank_groups) {
        route_rank_group *g = r->rank_groups;
        r->rank_groups = g->next;
        free(g->pairs);
        free(g);
    }
}
