/* kvr_query: every candidate (worker, rank) of (model, group) with its
 * overlap, each worker scored with its own routing sequence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/internal.h"

void kvr_query_result_init(kvr_query_result *res)
{
    memset(res, 0, sizeof *res);
}

void kvr_query_result_free(kvr_query_result *res)
{
    free(res->entries);
    memset(res, 0, sizeof *res);
}

/* Snapshot of the workers' capabilities, kept by the scratch: copied again
 * only when the group's caps changed since (or it held another group's);
 * grows the buffer until it fits. */
static long list_workers(kvr_router *r, route_scratch *s, uintptr_t index, const char *model,
                         const char *group)
{
    if (route_grow((void **)&s->caps, &s->caps_cap, 16, sizeof *s->caps) < 0)
        return -1;
    if (s->caps_index != index) {
        s->caps_index = index;
        s->caps_gen = 0;
    }
    for (;;) {
        size_t n = kvr_indexer_caps_list_since(r->ix, model, group, s->caps, s->caps_cap,
                                               &s->caps_gen);
        if (n <= s->caps_cap)
            return (long)n;
        if (route_grow((void **)&s->caps, &s->caps_cap, n + 4, sizeof *s->caps) < 0)
            return -1;
    }
}

int route_link_matches(route_scratch *s, size_t n_workers)
{
    size_t need = n_workers ? n_workers : 1;
    if (route_grow((void **)&s->first_match, &s->first_match_cap, need, sizeof *s->first_match) < 0)
        return -1;
    size_t old_cap = s->match_stamp_cap;
    if (route_grow((void **)&s->match_stamp, &s->match_stamp_cap, need, sizeof *s->match_stamp) < 0)
        return -1;
    if (s->match_stamp_cap != old_cap)
        memset(s->match_stamp + old_cap, 0, (s->match_stamp_cap - old_cap) * sizeof *s->match_stamp);
    if (s->caps_pos_gen != s->caps_gen || s->caps_pos_index != s->caps_index) {
        s->caps_pos_gen = 0;
        kvr_u64map_reset(&s->caps_pos);
        for (size_t w = 0; w < n_workers; w++)
            if (kvr_u64map_put(&s->caps_pos, s->caps[w].worker_id, w) < 0)
                return -1;
        s->caps_pos_gen = s->caps_gen;
        s->caps_pos_index = s->caps_index;
    }
    if (++s->stamp == 0) { /* wrapped: no stale stamp may equal the new one */
        memset(s->match_stamp, 0, s->match_stamp_cap * sizeof *s->match_stamp);
        s->stamp = 1;
    }
    for (size_t p = 0; p < s->n_profiles; p++) {
        route_profile *pr = &s->profiles[p];
        size_t n = pr->n_matches;
        if (route_grow((void **)&pr->same_worker, &pr->same_worker_cap, n ? n : 1,
                       sizeof *pr->same_worker) < 0)
            return -1;
        for (size_t i = n; i-- > 0;) {
            uint64_t w;
            /* a worker not registered (dump-loaded state), or one scored
             * with another profile: not its candidates' overlap */
            if (!kvr_u64map_get(&s->caps_pos, pr->matches[i].worker_id, &w) || w >= n_workers ||
                s->worker_profile[w] != p) {
                pr->same_worker[i] = UINT32_MAX;
                continue;
            }
            pr->same_worker[i] = route_first_match(s, w);
            s->first_match[w] = (uint32_t)i;
            s->match_stamp[w] = s->stamp;
        }
    }
    return 0;
}

/* The match of dp_rank among the worker's matches (from first, its first
 * one: route_first_match, looked up once per worker). */
static const kvr_match_entry *find_match(const route_profile *pr, uint32_t first,
                                         uint32_t dp_rank)
{
    for (uint32_t i = first; i != UINT32_MAX; i = pr->same_worker[i])
        if (pr->matches[i].dp_rank == dp_rank)
            return &pr->matches[i];
    return NULL;
}

static bool has_rank(const route_scratch *s, size_t w, uint32_t dp_rank)
{
    for (uint32_t k = 0; k < s->spans[w].n; k++)
        if (s->ranks[s->spans[w].off + k] == dp_rank)
            return true;
    return false;
}

/* Whether (worker, rank)'s overlap comes from the approximate index: its
 * engine publishes no events, or (auto) none has been applied on that rank.
 * A rank past the caps snapshot's KVR_CAPS_RANKS counts as having state
 * once any such rank has. */
static bool approximate(const kvr_worker_caps *c, uint32_t dp_rank)
{
    if (c->kv_events == KVR_KV_EVENTS_OFF)
        return true;
    if (c->kv_events == KVR_KV_EVENTS_ON)
        return false;
    if (dp_rank >= KVR_CAPS_RANKS)
        return !c->wide_ranks;
    return !(c->rank_bits >> dp_rank & 1);
}

/* Appends candidate (worker c, dp_rank): base holds the worker's fields. */
static inline void add_entry(kvr_query_result *out, route_scratch *s, const kvr_query_entry *base,
                             const kvr_worker_caps *c, const route_profile *pr, uint32_t profile,
                             uint32_t first, uint32_t dp_rank, bool rank_seen, uint32_t slot)
{
    size_t at = out->n_entries++;
    s->entry_profile[at] = profile;
    s->entry_slot[at] = slot;
    kvr_query_entry *e = &out->entries[at];
    *e = *base;
    e->dp_rank = dp_rank;
    e->rank_seen = rank_seen;
    if (approximate(c, dp_rank)) {
        e->approximate = true; /* its overlaps: route_approx_held, after the loop */
        s->approx_entries[s->n_approx++] = (route_approx_entry){
            (uint32_t)at, dp_rank, c->worker_id, pr->hashes, (uint32_t)pr->n_blocks,
            c->kv_events == KVR_KV_EVENTS_OFF ? 0 : KVR_ROUTE_APPROX_GRACE_S};
        return;
    }
    const kvr_match_entry *m = first != UINT32_MAX ? find_match(pr, first, dp_rank) : NULL;
    if (m) {
        e->gpu_blocks = m->gpu_blocks;
        e->cpu_blocks = m->cpu_blocks;
        e->disk_blocks = m->disk_blocks;
    }
}

/* Candidates of one worker: its known ranks (rank 0 when it has none yet),
 * plus any rank that matched blocks but is newer than the rank cache. */
static void add_worker(kvr_query_result *out, route_scratch *s, size_t w)
{
    const kvr_worker_caps *c = &s->caps[w];
    uint32_t prof = s->worker_profile[w];
    const route_profile *pr = &s->profiles[prof];
    uint32_t first = route_first_match(s, w);
    const kvr_query_entry base = {.worker_id = c->worker_id,
                                  .routing_tokens = pr->n_tokens,
                                  .seq_kind = pr->kind,
                                  .forward_mm_hashes = pr->kind == KVR_SEQ_MM_PADDED,
                                  .engine = c->engine,
                                  .prefill_tps = c->prefill_tps,
                                  .kv_capacity_tokens = c->kv_capacity_tokens};
    const route_rank_span span = s->spans[w];
    const uint32_t *ranks = s->ranks + span.off, *pos = s->rank_pos + span.off;
    for (uint32_t k = 0; k < span.n; k++)
        add_entry(out, s, &base, c, pr, prof, first, ranks[k], true, pos[k]);
    bool zero_listed = span.n == 0;
    for (uint32_t i = first; i != UINT32_MAX; i = pr->same_worker[i]) {
        const kvr_match_entry *m = &pr->matches[i];
        if (has_rank(s, w, m->dp_rank))
            continue;
        if (m->dp_rank == 0)
            zero_listed = false;
        add_entry(out, s, &base, c, pr, prof, first, m->dp_rank, true, KVR_ROUTE_NO_SLOT);
    }
    if (zero_listed)
        add_entry(out, s, &base, c, pr, prof, first, 0, false, span.none_pos);
}

static kvr_route_status fail(kvr_query_result *out, kvr_route_status st, const char *msg)
{
    snprintf(out->error, sizeof out->error, "%s", msg);
    return st;
}

static kvr_route_status unknown_model(kvr_query_result *out, const char *model, const char *group)
{
    snprintf(out->error, sizeof out->error,
             "model_name: no worker registered for model '%.64s' group '%.64s'", model, group);
    return KVR_ROUTE_UNKNOWN_MODEL;
}

kvr_route_status route_query(kvr_router *r, const kvr_query_request *req, kvr_query_result *out,
                             kvr_index **index_out, route_scratch **keep)
{
    if (keep)
        *keep = NULL;
    out->n_entries = 0;
    out->n_hash_passes = 0;
    out->error[0] = 0;
    kvr_route_status st = route_validate(req, out->error, sizeof out->error);
    if (st != KVR_ROUTE_OK)
        return st;
    const char *group = req->routing_group && req->routing_group[0] ? req->routing_group
                                                                     : KVR_DEFAULT_ROUTING_GROUP;
    kvr_index *idx = kvr_indexer_index(r->ix, req->model_name, group);
    uint32_t bs = kvr_indexer_block_size(r->ix, req->model_name, group);
    if (!idx || bs == 0)
        return unknown_model(out, req->model_name, group);
    out->block_size = bs;
    if (index_out)
        *index_out = idx;

    route_scratch *s = route_scratch_acquire(r);
    if (!s)
        return fail(out, KVR_ROUTE_NO_MEMORY, "out of memory");
    long nw = list_workers(r, s, (uintptr_t)idx, req->model_name, group);
    if (nw == 0) {
        route_scratch_release(r, s);
        return unknown_model(out, req->model_name, group);
    }
    if (nw < 0 || route_build_profiles(s, (size_t)nw, req) < 0 ||
        route_match_profiles(s, idx, bs, req) < 0 || route_link_matches(s, (size_t)nw) < 0 ||
        route_ranks_snapshot(r, s, (uintptr_t)idx, req->model_name, group, (size_t)nw) < 0) {
        route_scratch_release(r, s);
        return fail(out, KVR_ROUTE_NO_MEMORY, "out of memory");
    }
    out->n_hash_passes = (uint32_t)s->n_profiles;
    atomic_fetch_add(&r->hash_passes, s->n_profiles);

    /* Upper bound: listed ranks + every match + a rank 0 per worker. */
    size_t need = (size_t)nw;
    for (long w = 0; w < nw; w++)
        need += s->spans[w].n;
    for (size_t p = 0; p < s->n_profiles; p++)
        need += s->profiles[p].n_matches;
    if (route_grow((void **)&out->entries, &out->cap, need, sizeof *out->entries) < 0 ||
        route_grow((void **)&s->entry_profile, &s->ep_cap, need, sizeof *s->entry_profile) < 0 ||
        route_grow((void **)&s->entry_slot, &s->es_cap, need, sizeof *s->entry_slot) < 0 ||
        route_grow((void **)&s->approx_entries, &s->approx_cap, need,
                   sizeof *s->approx_entries) < 0) {
        route_scratch_release(r, s);
        return fail(out, KVR_ROUTE_NO_MEMORY, "out of memory");
    }
    /* Chain hashes name whole prefixes: the approximate index and the
     * bookings hold blocks by them. */
    route_chain_profiles(s);
    s->n_approx = 0;
    for (long w = 0; w < nw; w++)
        add_worker(out, s, (size_t)w);
    if (s->n_approx)
        route_approx_held(&r->approx, (uintptr_t)idx, s->approx_entries, s->n_approx,
                          route_now(r), out->entries);
    if (keep)
        *keep = s;
    else
        route_scratch_release(r, s);
    return KVR_ROUTE_OK;
}

kvr_route_status kvr_query(kvr_router *r, const kvr_query_request *req, kvr_query_result *out)
{
    atomic_fetch_add(&r->queries, 1);
    return route_query(r, req, out, NULL, NULL);
}
