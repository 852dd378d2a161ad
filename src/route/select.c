/* Selection (SPEC §8): the argmin with a random tie-break, the ttft
 * model's balanced pick among near-equal costs, or softmax sampling, over
 * the costs cost.c gives each candidate, then the booking, all under the
 * router lock so concurrent requests see each other's load. The ttft
 * argmin scores the candidates the model cannot tell apart (idle, nothing
 * cached) once, as a class (idle_class.c); the loops below take compact
 * candidates, each standing for mult[i] of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/internal.h"

void kvr_route_decision_free(kvr_route_decision *d)
{
    free(d->costs);
    d->costs = NULL;
    d->n_costs = 0;
}

static bool same_cost(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (1.0 + fabs(a) + fabs(b));
}

/* Softmax over costs normalized to [0, 1] (so T means the same at every
 * load level); lower cost, higher weight. */
static size_t sample_softmax(kvr_router *r, kvr_route_cost *c, size_t n, double t)
{
    double lo = c[0].cost, hi = c[0].cost;
    for (size_t i = 1; i < n; i++) {
        if (c[i].cost < lo)
            lo = c[i].cost;
        if (c[i].cost > hi)
            hi = c[i].cost;
    }
    double range = hi - lo, sum = 0;
    for (size_t i = 0; i < n; i++) {
        double norm = range > 0 ? (c[i].cost - lo) / range : 0;
        c[i].probability = exp(-norm / t);
        sum += c[i].probability;
    }
    for (size_t i = 0; i < n; i++)
        c[i].probability /= sum;
    double u = route_rng_uniform(r), acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += c[i].probability;
        if (u < acc)
            return i;
    }
    return n - 1;
}

static size_t pick_argmin(kvr_router *r, kvr_route_cost *c, size_t n, size_t *ties)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (c[i].cost < c[best].cost && !same_cost(c[i].cost, c[best].cost))
            best = i;
    size_t nt = 0;
    for (size_t i = 0; i < n; i++)
        if (same_cost(c[i].cost, c[best].cost))
            nt++;
    *ties = nt;
    if (nt > 1) {
        size_t k = (size_t)(route_rng_next(r) % nt);
        for (size_t i = 0; i < n; i++)
            if (same_cost(c[i].cost, c[best].cost) && k-- == 0)
                return i;
    }
    return best;
}

/* ttft: the candidates within tie_tolerance of the lowest predicted TTFT
 * (and within KVR_ROUTE_TIE_MAX_S of it: a long prompt's 5 % is too long a
 * wait to give away; past 1 s within KVR_ROUTE_TIE_MAX_S / cost^2, or with
 * tie_from_error within the model's measured error x cost if wider) are as
 * good as the model can tell (its rates and
 * slowdowns are estimates),
 * provided they give up at most tie_tolerance of the request's tokens of
 * cache against the best of them; among those the one with the least
 * recent work takes the request. A cold request (no conversation cached
 * anywhere, at most a shared system prompt) thus spreads over every
 * worker's cache instead of the few that happen to hold the system prompt,
 * and the prefill work per worker stays even; a request whose conversation
 * is cached somewhere is never moved off it by the tolerance, and none goes
 * to a worker whose decodes slow it more than the best one's (the largest
 * prompts would wait for that: the TTFT tail). Equal work (e.g. none yet):
 * uniformly at random. */
static bool near_best(const kvr_route_cost *c, double cost_limit, double credit_floor,
                      double max_factor)
{
    return c->cost <= cost_limit && c->credit >= credit_floor &&
           c->decode_factor <= max_factor + 1e-12;
}

/* lru_edge tie: edge losses within half a token are the same. */
static bool fewer_loss(const kvr_route_cost *a, const kvr_route_cost *b)
{
    return a->edge_loss_tokens < b->edge_loss_tokens - 0.5;
}

static bool same_loss(const kvr_route_cost *a, const kvr_route_cost *b)
{
    return fabs(a->edge_loss_tokens - b->edge_loss_tokens) <= 0.5;
}

/* c: n compact candidates standing for sp->mult[i] each (the class's
 * representative has its members' least recent work). Returns the least
 * recent work's position; when several tie with it, *draw = which of them
 * (in candidate order, tied[i] marking them, and the class's members
 * within the margin: route_idle_tie) the random tie-break takes, else
 * SIZE_MAX. With edge_tie (lru_edge tie) the fewest tokens pushed past the
 * worker's LRU edge come before the least recent work. */
static size_t pick_balanced(kvr_router *r, kvr_route_cost *c, route_idle_split *sp, size_t n,
                            double tol, double err, uint64_t isl, kvr_route_reason *reason, bool *tied,
                            size_t *draw, bool edge_tie)
{
    const uint32_t *mult = sp->mult;
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (c[i].cost < c[best].cost)
            best = i;
    double window = c[best].cost * tol;
    if (window > KVR_ROUTE_TIE_MAX_S)
        window = KVR_ROUTE_TIE_MAX_S;
    /* Past a second, the wait the request may give away shrinks with the
     * square of its cost (4 s: 6 ms): the largest prompts set the TTFT
     * tail, and spreading them buys less than it costs there. */
    double tail = KVR_ROUTE_TIE_MAX_S / (c[best].cost * c[best].cost);
    /* tie_from_error: at least the model's measured error of such a wait
     * (err > 0 once measured; ve16's 2 % is 80 ms of a 4 s prompt), still
     * within the window above. Only wider: where the model errs little
     * (h32d2, 0.13 %) the narrower window moved the p99 (+25 ms). */
    if (err * c[best].cost > tail)
        tail = err * c[best].cost;
    if (c[best].cost > 1.0 && window > tail)
        window = tail;
    double limit = c[best].cost + window + 1e-12, most = c[best].credit;
    for (size_t i = 0; i < n; i++)
        if (c[i].cost <= limit && c[i].credit > most)
            most = c[i].credit;
    double floor_ = most - tol * (double)isl;
    size_t near = 0, least = best;
    for (size_t i = 0; i < n; i++)
        if (near_best(&c[i], limit, floor_, c[best].decode_factor)) {
            if (!near_best(&c[least], limit, floor_, c[best].decode_factor) ||
                (edge_tie && fewer_loss(&c[i], &c[least])) ||
                ((!edge_tie || same_loss(&c[i], &c[least])) &&
                 c[i].recent_work < c[least].recent_work))
                least = i;
            near += mult[i];
        }
    *reason = near > 1 ? KVR_REASON_BALANCED : KVR_REASON_BEST_COST;
    size_t same = 0;
    for (size_t i = 0; i < n; i++) {
        tied[i] = near_best(&c[i], limit, floor_, c[best].decode_factor) &&
                  (!edge_tie || same_loss(&c[i], &c[least])) &&
                  c[i].recent_work <= c[least].recent_work + 0.5;
        if (tied[i])
            same += i == sp->rep ? route_idle_tie(sp, c[least].recent_work + 0.5) : mult[i];
    }
    *draw = same > 1 ? (size_t)(route_rng_next(r) % same) : SIZE_MAX;
    return least;
}

/* Books the request on the chosen candidate c (entry pick of q); caller
 * holds r->mu. */
static kvr_route_status book(kvr_router *r, kvr_index *idx, const route_cost_params *p,
                             const kvr_route_request *req, const route_scratch *s,
                             const kvr_query_result *q, const kvr_route_cost *c, size_t pick,
                             const uint64_t *unique, uint64_t isl, uint32_t bs, double now,
                             kvr_route_decision *out)
{
    if (r->cfg.max_bookings && r->bk.n_active >= r->cfg.max_bookings) {
        r->bk.rejected++;
        snprintf(out->error, sizeof out->error,
                 "max_bookings: %llu requests are booked, the router's limit (POST /free "
                 "finished requests, or raise the router option max_bookings)",
                 (unsigned long long)r->cfg.max_bookings);
        return KVR_ROUTE_LIMIT;
    }
    route_load *l = route_load_find(&r->bk, (uintptr_t)idx, c->worker_id, c->dp_rank, true);
    /* Pending prefill is what the worker must compute: dynamo counts the
     * tokens its GPU cache does not hold (Dynamo's new_tokens); ttft also
     * counts what host and disk hits still cost. */
    uint64_t cached = (uint64_t)c->gpu_blocks * bs;
    uint64_t prefill = p->model == KVR_COST_TTFT
                           ? (uint64_t)llround(route_uncached_tokens(p, c, isl, bs))
                       : isl > cached ? isl - cached
                                      : 0;
    uint32_t k = s->entry_profile[pick];
    const route_profile *pr = &s->profiles[k];
    uint64_t added = 0;
    route_booking *bk = NULL;
    /* The model's error is timed only where its rate is no guess (measured
     * there, registered, or the operator's with learning off): a fleet's
     * first requests, priced at the default rate, would read as the
     * model's error for the next hundred. Before the booking joins the
     * load's queue. */
    bool known_rate = !r->cfg.learn_prefill_rate || q->entries[pick].prefill_tps > 0 ||
                      route_rate_measured(s->states[pick]->rate) > 0;
    double predicted = p->model == KVR_COST_TTFT && l && known_rate ? c->ttft_s : 0;
    int b = l ? route_book(&r->bk, req->request_id, l, prefill, pr->hashes, (uint32_t)pr->n_blocks,
                           unique[k], now, &added, &bk)
              : -1;
    if (b != 0) {
        snprintf(out->error, sizeof out->error, "%s",
                 b > 0 ? "request_id: already booked (POST /free it first)" : "out of memory");
        return b > 0 ? KVR_ROUTE_DUPLICATE_ID : KVR_ROUTE_NO_MEMORY;
    }
    bk->sample_rate = r->cfg.learn_prefill_rate && c->active_prefill_tokens == 0 &&
                      prefill >= KVR_ROUTE_RATE_MIN_TOKENS;
    bk->decode_factor = route_decode_factor(p, l);
    bk->predicted_s = predicted;
    bk->decoding_at_route = l->decode_context;
    bk->context = isl + req->osl / 2;
    bk->osl = req->osl;
    /* The worker will hold what it is sent: its approximate cache. */
    if (q->entries[pick].approximate)
        route_approx_note(&r->approx, (uintptr_t)idx, c->worker_id, c->dp_rank, pr->hashes,
                          (uint32_t)pr->n_blocks, now);
    route_rate *rt =
        route_rate_add_work(&r->bk, (uintptr_t)idx, c->worker_id, c->dp_rank, (double)prefill, now);
    if (!rt)
        r->bk.work_lost++; /* out of memory: the booking stands, its work is not counted */
    if (p->model == KVR_COST_TTFT && (p->edge_cost || p->edge_tie)) {
        /* what the worker's GPU cache takes in: the prompt past its hit
         * (kept only while a rule reads it: it is memory per worker) */
        uint64_t intake = isl > cached ? isl - cached : 0;
        route_rate_note_edge(&r->bk, rt, pr->hashes, (uint32_t)pr->n_blocks, c->gpu_blocks,
                             (double)cached, (double)isl, (double)intake,
                             (double)q->entries[pick].kv_capacity_tokens, now);
    }
    out->booked_prefill_tokens = prefill;
    out->booked_blocks = added;
    route_share_booked(r, &req->q, c, prefill, pr->hashes, (uint32_t)pr->n_blocks, unique[k],
                       req->request_id);
    return KVR_ROUTE_OK;
}

kvr_route_status kvr_route(kvr_router *r, const kvr_route_request *req, kvr_route_decision *out)
{
    memset(out, 0, sizeof *out);
    atomic_fetch_add(&r->routes, 1);
    kvr_route_status st = route_check_overrides(req, out);
    if (st != KVR_ROUTE_OK)
        return st;

    kvr_query_result q;
    kvr_query_result_init(&q);
    kvr_index *idx = NULL;
    route_scratch *s = NULL;
    st = route_query(r, &req->q, &q, &idx, &s);
    out->n_hash_passes = q.n_hash_passes;
    if (st == KVR_ROUTE_OK && route_filter_candidates(req, &q, s->entry_profile, s->entry_slot) == 0)
        st = KVR_ROUTE_NO_CANDIDATE;
    /* the decision owns the candidates only when it reports them */
    kvr_route_cost *c = NULL, *owned = NULL;
    uint64_t *unique = NULL;
    if (st == KVR_ROUTE_OK) {
        size_t need = q.n_entries + 1;
        if (req->debug)
            c = owned = calloc(need, sizeof *c);
        else if (route_grow((void **)&s->costs, &s->costs_cap, need, sizeof *c) == 0)
            c = s->costs; /* cleared once the compact count is known */
        if (!c || !(unique = malloc(s->n_profiles * sizeof *unique)) ||
            route_grow((void **)&s->states, &s->states_cap, need, sizeof *s->states) < 0 ||
            route_grow((void **)&s->unslotted, &s->unslotted_cap, need, sizeof *s->unslotted) < 0 ||
            route_grow((void **)&s->split, &s->split_cap, 3 * need, sizeof *s->split) < 0 ||
            route_grow((void **)&s->member_work, &s->member_work_cap, need,
                       sizeof *s->member_work) < 0 ||
            route_grow((void **)&s->tied, &s->tied_cap, need, sizeof *s->tied) < 0)
            st = KVR_ROUTE_NO_MEMORY;
    }
    if (st != KVR_ROUTE_OK) {
        snprintf(out->error, sizeof out->error, "%s",
                 st == KVR_ROUTE_NO_MEMORY ? "out of memory" : q.error);
        free(owned);
        route_scratch_release(r, s);
        kvr_query_result_free(&q);
        return st;
    }
    size_t n_all = q.n_entries;
    uint32_t bs = q.block_size;
    uint64_t isl = req->q.n_tokens;
    for (size_t k = 0; k < s->n_profiles; k++)
        unique[k] = route_unique_blocks_of(&s->profiles[k], isl, req->osl, bs);

    pthread_mutex_lock(&r->mu);
    /* r->cfg changes under mu (kvr_router_set_config) */
    route_cost_params p = route_cost_params_of(r, req);
    double now = route_now(r);
    route_bookings_expire(&r->bk, now);
    /* Each candidate's load and rate, walked in the rank cache's order. */
    route_slots *slots = route_slots_for(&r->bk, (uintptr_t)idx, s->rank_gen, s->rank_n);
    for (size_t i = 0; i < n_all; i++) {
        const kvr_query_entry *e = &q.entries[i];
        s->states[i] = route_slot_get(&r->bk, slots, s->entry_slot[i], (uintptr_t)idx,
                                      e->worker_id, e->dp_rank, &s->unslotted[i]);
    }
    bool sampled = p.temperature > 0 && n_all > 1;
    /* The ttft argmin costs the idle candidates once, as a class
     * (idle_class.c); the other rules, and a decision that reports every
     * candidate's cost, score each one. */
    route_idle_split sp = {s->split, s->split + n_all, SIZE_MAX, s->split + 2 * n_all,
                           s->member_work, 0, -1};
    size_t n;
    if (p.model == KVR_COST_TTFT && !sampled && !req->debug) {
        n = route_idle_class(&q, s->states, s->entry_profile, now, &sp);
    } else {
        for (size_t i = 0; i < n_all; i++) {
            sp.at[i] = (uint32_t)i;
            sp.mult[i] = 1;
        }
        n = n_all;
    }
    if (!owned)
        memset(c, 0, n * sizeof *c);
    if (p.model == KVR_COST_TTFT) {
        route_fill_rates(r, &q, s->states, sp.at, c, n, now);
        if (r->cfg.learn_prefill_rate)
            p.decode_share = route_fit_share(&r->bk, (uintptr_t)idx, p.decode_share);
    }
    for (size_t j = 0; j < n; j++) {
        uint32_t i = sp.at[j], k = s->entry_profile[i];
        route_fill_cost(&p, &q.entries[i], s->states[i], &s->profiles[k], unique[k], isl, bs, now,
                  &c[j]);
    }
    if (p.model == KVR_COST_TTFT && route_add_duplicate_cost(&p, c, sp.mult, n, n_all, bs) < 0)
        r->bk.copy_cost_lost++;
    size_t pick_at, pick = SIZE_MAX, ties = 1; /* compact position, candidate */
    kvr_route_reason reason;
    if (sampled) {
        pick_at = sample_softmax(r, c, n, p.temperature);
        reason = KVR_REASON_SAMPLED;
    } else {
        if (p.model == KVR_COST_TTFT) {
            size_t draw;
            double err = r->cfg.tie_from_error ? route_ttft_error(&r->bk) : 0;
            pick_at = pick_balanced(r, c, &sp, n, r->cfg.tie_tolerance, err, isl, &reason,
                                    s->tied, &draw, p.edge_tie);
            size_t drawn_at;
            if (draw != SIZE_MAX &&
                (pick = route_idle_kth(&sp, n, s->tied, draw, &drawn_at)) != SIZE_MAX)
                pick_at = drawn_at;
        } else {
            pick_at = pick_argmin(r, c, n, &ties);
            reason = ties > 1 ? KVR_REASON_TIE_RANDOM : KVR_REASON_BEST_COST;
        }
        for (size_t j = 0; j < n; j++)
            c[j].probability = j == pick_at ? 1.0 : 0.0;
    }
    if (pick == SIZE_MAX)
        pick = sp.at[pick_at];
    /* A member of the class: the representative's cost, its identity. */
    kvr_route_cost *chosen = &c[pick_at];
    chosen->worker_id = q.entries[pick].worker_id;
    chosen->dp_rank = q.entries[pick].dp_rank;
    if (req->has_worker_id)
        reason = KVR_REASON_PINNED;
    if (req->request_id) {
        st = book(r, idx, &p, req, s, &q, chosen, pick, unique, isl, bs, now, out);
        if (st != KVR_ROUTE_OK) {
            pthread_mutex_unlock(&r->mu);
            free(owned);
            free(unique);
            route_scratch_release(r, s);
            kvr_query_result_free(&q);
            return st;
        }
    }
    pthread_mutex_unlock(&r->mu);
    free(unique);

    const kvr_query_entry *e = &q.entries[pick];
    out->worker_id = e->worker_id;
    out->dp_rank = e->dp_rank;
    out->overlap_tokens = e->gpu_blocks * bs;
    out->routing_tokens = e->routing_tokens;
    /* Only MM_PADDED entries forward, and those exist only for workers whose
     * effective accepts_mm_hashes is true with every item hashed. */
    out->forward_mm_hashes = e->forward_mm_hashes;
    out->engine = e->engine;
    out->reason = reason;
    out->cost = chosen->cost;
    out->block_size = bs;
    if (owned) {
        out->costs = owned;
        out->n_costs = n;
    }
    route_scratch_release(r, s);
    kvr_query_result_free(&q);
    return KVR_ROUTE_OK;
}
