/* Selection (SPEC §8): cost per candidate (worker, rank), argmin with a
 * random tie-break or softmax sampling, then the booking, all under the
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

typedef struct {
    kvr_cost_model model;
    double credit_scale, load_scale, cpu_w, disk_w, temperature;
    bool unclamped;
    double cut_w;
    double decode_share, max_slowdown, recompute_weight;
    /* ttft: whether the reuse a placement pushes past the worker's LRU edge
     * is charged, and the share of the prompts at an edge that came back
     * (route_edge_counts, learned) */
    bool edge_cost, edge_tie;
    double return_share;
    bool decode_ahead;
    bool report; /* fill the costs' figures only a debug decision shows */
} cost_params;

/* SPEC §8 / Dynamo: credit and cost of a candidate whose overlaps and load
 * are set. */
static void cost_dynamo(const cost_params *p, kvr_route_cost *c, uint64_t isl, uint32_t bs,
                        uint64_t cut_blocks)
{
    double cpu_extra = (double)c->cpu_blocks - (double)c->gpu_blocks;
    double disk_extra = (double)c->disk_blocks - (double)c->cpu_blocks;
    c->credit = p->credit_scale * c->gpu_blocks + p->cpu_w * cpu_extra + p->disk_w * disk_extra;
    double prefill = ((double)c->active_prefill_tokens + (double)isl) / bs - c->credit;
    c->cost = p->load_scale * (prefill > 0 || p->unclamped ? prefill : 0) +
              (double)c->active_decode_blocks + (double)c->new_blocks;
    if (cut_blocks && p->cut_w > 0)
        c->cost += p->cut_w * (double)cut_blocks;
}

/* Tokens a candidate still has to prefill: host and disk hits save only
 * their weight's share of a token (the copy back to the GPU is not free). */
static double uncached_tokens(const cost_params *p, const kvr_route_cost *c, uint64_t isl,
                              uint32_t bs)
{
    double saved = (double)bs * ((double)c->gpu_blocks +
                                 p->cpu_w * ((double)c->cpu_blocks - c->gpu_blocks) +
                                 p->disk_w * ((double)c->disk_blocks - c->cpu_blocks));
    double u = (double)isl - saved;
    return u > 0 ? u : 0;
}

/* How much decodes reading `context` KV tokens slow a prefill, bounded
 * (route.h). */
static double slowdown_of(const cost_params *p, double context)
{
    double slow = p->decode_share * context;
    return 1.0 + (slow < p->max_slowdown ? slow : p->max_slowdown);
}

/* How much the worker's decodes slow its prefill now. */
static double decode_factor(const cost_params *p, const route_load *l)
{
    return l ? slowdown_of(p, (double)l->decode_context) : 1.0;
}

/* The context the bookings still prefilling there will read once they
 * decode (the queue is a few requests: walked, not kept). */
static double pending_context(const route_load *l)
{
    double sum = 0;
    for (const route_booking *bk = l->pending_head; bk; bk = bk->pnext)
        sum += (double)bk->context;
    return sum;
}

/* The ttft model: predicted seconds to the first token; c->prefill_tps and
 * the load are set. The queue ahead is what is still to prefill now, at
 * the slowdown of the worker's decodes now (c->decode_factor). With
 * decode_ahead the request's own prefill also runs behind the decodes of
 * the requests queued ahead: each turns into a decode when its prefill
 * ends and reads its context for every output token while this one
 * prefills. (A short request queued ahead of a 66k-token prompt took twice
 * its own 35 ms from the prompt's 3.3 s in the simulator.) */
static void cost_ttft(const cost_params *p, kvr_route_cost *c, const route_load *l, double now,
                      uint64_t isl, uint32_t bs)
{
    double u = uncached_tokens(p, c, isl, bs);
    c->credit = (double)isl - u;
    c->decode_factor = decode_factor(p, l);
    double rate = c->prefill_tps / c->decode_factor;
    c->queued_tokens = l ? route_load_pending_tokens(l, rate, now) : 0;
    if (p->decode_ahead && l && l->pending_head) {
        double own = slowdown_of(p, (double)l->decode_context + pending_context(l));
        c->cost = c->queued_tokens / rate + u * own / c->prefill_tps;
    } else {
        c->cost = (c->queued_tokens + u) / rate;
    }
}

/* ttft, once every candidate's cost is set: the cached blocks a candidate
 * lacks and others hold would become one more copy of that prefix in the
 * fleet, which evicts cache other conversations come back to. A block held
 * by k candidates is worth 1/k of a copy (the system prompt every worker
 * holds costs next to nothing; a conversation held by one worker, all of
 * it), and each copied token costs recompute_weight prefill tokens of the
 * candidate's time. Depth = the blocks a candidate's tiers reach.
 *
 * below[v] for every reach v some candidate has, walking the reaches from
 * the deepest: blocks between two consecutive distinct reaches are held by
 * the candidates above the lower one. A count per reach value instead of a
 * sort: the reaches are block counts of one prompt (a 2,000-token prompt
 * has ~125), while a 1000-worker group has 1000 candidates, whose qsort
 * was a seventh of a /route. Same additions in the same order as the
 * sorted walk (equal reaches add nothing), so the same doubles. */
static void copies_by_reach(const uint32_t *count, uint32_t max_reach, double *below)
{
    double acc = 0;
    uint64_t above = 0;
    bool seen = false;
    uint32_t prev = 0;
    for (uint32_t v = max_reach + 1; v-- > 0;) {
        if (!count[v])
            continue;
        if (seen)
            acc += (double)(prev - v) / (double)above;
        below[v] = acc;
        above += count[v];
        prev = v;
        seen = true;
    }
}

/* c: n compact candidates standing for mult[i] each, n_all in all. */
static void add_duplicate_cost(const cost_params *p, kvr_route_cost *c, const uint32_t *mult,
                               size_t n, size_t n_all, uint32_t bs)
{
    if (!(p->recompute_weight > 0) || n_all < 2)
        return;
    uint32_t max_reach = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].disk_blocks > max_reach)
            max_reach = c[i].disk_blocks;
    /* The walk costs max_reach, at most the request's blocks: the
     * hashing already paid that much. */
    uint32_t *count = calloc((size_t)max_reach + 1, sizeof *count);
    double *below = malloc(((size_t)max_reach + 1) * sizeof *below);
    if (!count || !below) {
        free(count);
        free(below);
        return; /* the costs stay plain TTFT */
    }
    for (size_t i = 0; i < n; i++)
        count[c[i].disk_blocks] += mult[i];
    copies_by_reach(count, max_reach, below);
    for (size_t i = 0; i < n; i++)
        c[i].cost += p->recompute_weight * below[c[i].disk_blocks] * bs / c[i].prefill_tps;
    free(count);
    free(below);
}

/* What the request would hold on a worker scored with profile pr: its
 * routing blocks (identified by chain hash) and, per request, the rest of
 * the prompt past them plus the expected output. Those share the last
 * partial block, as the engine's allocator does, so a lone request holds
 * ceil((isl + osl) / B) blocks. */
static uint64_t unique_blocks_of(const route_profile *pr, uint64_t isl, uint32_t osl, uint32_t bs)
{
    uint64_t rest = isl - (uint64_t)pr->n_blocks * bs + osl;
    return (rest + bs - 1) / bs;
}

/* ttft: the reuse this request's new tokens would push past the worker's
 * LRU edge (edge.c), at the share of such prompts that come back, costs
 * its prefill again then: in seconds of the worker's prefill (lru_edge
 * cost), or orders the candidates within the tie window (tie). */
static void add_edge_cost(const cost_params *p, const kvr_query_entry *e, const route_slot *st,
                          const route_profile *pr, uint64_t isl, uint32_t bs, kvr_route_cost *c)
{
    const route_edge *g = st->rate ? st->rate->edge : NULL;
    if (p->report)
        c->prefix_age_tokens = route_edge_age(g, pr->hashes, e->gpu_blocks);
    if (!(p->edge_cost || p->edge_tie) || !e->kv_capacity_tokens || !route_edge_live(g))
        return;
    uint64_t cached = (uint64_t)e->gpu_blocks * bs;
    double u = isl > cached ? (double)(isl - cached) : 0;
    c->edge_loss_tokens = route_edge_loss(g, (double)e->kv_capacity_tokens, u, pr->hashes,
                                          e->gpu_blocks);
    if (p->edge_cost)
        c->cost += p->return_share * c->edge_loss_tokens / c->prefill_tps;
}

/* Candidate i's overlaps, its current load and its cost; caller holds r->mu. */
static void fill_cost(const cost_params *p, const kvr_query_entry *e, const route_slot *st,
                      const route_profile *pr, uint64_t unique, uint64_t isl, uint32_t bs,
                      double now, kvr_route_cost *c)
{
    c->worker_id = e->worker_id;
    c->dp_rank = e->dp_rank;
    c->gpu_blocks = e->gpu_blocks;
    c->cpu_blocks = e->cpu_blocks;
    c->disk_blocks = e->disk_blocks;
    c->routing_tokens = e->routing_tokens;
    const route_load *l = st->load;
    uint32_t held = 0;
    if (l) {
        c->active_prefill_tokens = l->prefill_tokens;
        c->active_decode_blocks = route_load_blocks(l);
        /* the ttft cost does not read new_blocks: a lookup per block of
         * a busy worker's held map was a sixth of a 1000-worker /route */
        if (p->model != KVR_COST_TTFT || p->report)
            held = route_load_held_prefix(l, pr->hashes, (uint32_t)pr->n_blocks);
    }
    c->new_blocks = (uint64_t)(pr->n_blocks - held) + unique;
    if (p->model == KVR_COST_TTFT) {
        cost_ttft(p, c, l, now, isl, bs);
        add_edge_cost(p, e, st, pr, isl, bs, c);
        return;
    }
    uint64_t whole = isl / bs;
    uint64_t cut = pr->kind == KVR_SEQ_TEXT_PREFIX && whole > pr->n_blocks ? whole - pr->n_blocks : 0;
    cost_dynamo(p, c, isl, bs, cut);
}

/* Each candidate's prefill rate for the ttft model (route.h): measured,
 * else registered, else the mean measured rate of the candidates, else the
 * configured one. A measured rate within KVR_ROUTE_RATE_SAME of the mean
 * is taken as the mean: workers of one kind measure a little apart by
 * chance, and a worker measured 3 % faster would otherwise win every cold
 * request of an idle fleet; engines of different kinds differ by far more. */
static void fill_rates(kvr_router *r, const kvr_query_result *q, const route_slot *const *st,
                       const uint32_t *at, kvr_route_cost *c, size_t n, double now)
{
    double sum = 0;
    size_t measured = 0;
    for (size_t i = 0; i < n; i++) {
        const kvr_query_entry *e = &q->entries[at[i]];
        const route_slot *sl = st[at[i]];
        c[i].prefill_tps = route_rate_measured(sl->rate);
        c[i].recent_work = route_rate_recent_work(sl->rate, now);
        if (c[i].prefill_tps > 0) {
            sum += c[i].prefill_tps;
            measured++;
        } else if (e->prefill_tps > 0) {
            c[i].prefill_tps = e->prefill_tps;
        }
    }
    double mean = measured ? sum / (double)measured : 0;
    double fallback = measured ? mean : r->cfg.prefill_tps;
    for (size_t i = 0; i < n; i++)
        if (!(c[i].prefill_tps > 0) ||
            (mean > 0 && fabs(c[i].prefill_tps / mean - 1) < KVR_ROUTE_RATE_SAME))
            c[i].prefill_tps = fallback;
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
 * wait to give away; past 1 s within KVR_ROUTE_TIE_MAX_S / cost^2) are as
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
                            double tol, uint64_t isl, kvr_route_reason *reason, bool *tied,
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

static cost_params params_of(const kvr_router *r, const kvr_route_request *req)
{
    cost_params p = {r->cfg.cost_model, r->cfg.overlap_score_credit, r->cfg.prefill_load_scale,
                     r->cfg.cpu_hit_weight, r->cfg.disk_hit_weight, r->cfg.temperature,
                     r->cfg.unclamped_prefill, r->cfg.media_cut_weight,
                     r->cfg.decode_kv_share, r->cfg.max_decode_slowdown,
                     r->cfg.recompute_weight, false, false, 0, false, false};
    if (req->has_overlap_score_credit)
        p.credit_scale = req->overlap_score_credit;
    if (req->has_prefill_load_scale)
        p.load_scale = req->prefill_load_scale;
    if (req->has_temperature)
        p.temperature = req->temperature;
    p.edge_cost = r->cfg.lru_edge == KVR_EDGE_COST;
    p.edge_tie = r->cfg.lru_edge == KVR_EDGE_TIE;
    /* the share of prompts that came back before aging out (one of each
     * counted in advance, so it starts at 1/2) */
    const route_edge_counts *ec = &r->bk.edges;
    p.return_share = ((double)ec->returned + 1) / ((double)ec->returned + (double)ec->aged_out + 2);
    p.report = req->debug;
    p.decode_ahead = r->cfg.decode_ahead;
    return p;
}

/* Books the request on the chosen candidate c (entry pick of q); caller
 * holds r->mu. */
static kvr_route_status book(kvr_router *r, kvr_index *idx, const cost_params *p,
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
    uint64_t prefill = p->model == KVR_COST_TTFT ? (uint64_t)llround(uncached_tokens(p, c, isl, bs))
                       : isl > cached               ? isl - cached
                                                    : 0;
    uint32_t k = s->entry_profile[pick];
    const route_profile *pr = &s->profiles[k];
    uint64_t added = 0;
    route_booking *bk = NULL;
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
    bk->decode_factor = decode_factor(p, l);
    bk->decoding_at_route = l->decode_context;
    bk->context = isl + req->osl / 2;
    bk->osl = req->osl;
    /* The worker will hold what it is sent: its approximate cache. */
    if (q->entries[pick].approximate)
        route_approx_note(&r->approx, (uintptr_t)idx, c->worker_id, c->dp_rank, pr->hashes,
                          (uint32_t)pr->n_blocks, now);
    route_rate_add_work(&r->bk, (uintptr_t)idx, c->worker_id, c->dp_rank, (double)prefill, now);
    if (p->model == KVR_COST_TTFT && (p->edge_cost || p->edge_tie)) {
        /* what the worker's GPU cache takes in: the prompt past its hit
         * (kept only while a rule reads it: it is memory per worker) */
        uint64_t intake = isl > cached ? isl - cached : 0;
        route_rate_note_edge(&r->bk, (uintptr_t)idx, c->worker_id, c->dp_rank, pr->hashes,
                             (uint32_t)pr->n_blocks, c->gpu_blocks, (double)cached, (double)isl,
                             (double)intake, (double)q->entries[pick].kv_capacity_tokens, now);
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
        unique[k] = unique_blocks_of(&s->profiles[k], isl, req->osl, bs);

    pthread_mutex_lock(&r->mu);
    cost_params p = params_of(r, req); /* r->cfg changes under mu (kvr_router_set_config) */
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
        fill_rates(r, &q, s->states, sp.at, c, n, now);
        if (r->cfg.learn_prefill_rate)
            p.decode_share = route_fit_share(&r->bk, (uintptr_t)idx, p.decode_share);
    }
    for (size_t j = 0; j < n; j++) {
        uint32_t i = sp.at[j], k = s->entry_profile[i];
        fill_cost(&p, &q.entries[i], s->states[i], &s->profiles[k], unique[k], isl, bs, now,
                  &c[j]);
    }
    if (p.model == KVR_COST_TTFT)
        add_duplicate_cost(&p, c, sp.mult, n, n_all, bs);
    size_t pick_at, pick = SIZE_MAX, ties = 1; /* compact position, candidate */
    kvr_route_reason reason;
    if (sampled) {
        pick_at = sample_softmax(r, c, n, p.temperature);
        reason = KVR_REASON_SAMPLED;
    } else {
        if (p.model == KVR_COST_TTFT) {
            size_t draw;
            pick_at = pick_balanced(r, c, &sp, n, r->cfg.tie_tolerance, isl, &reason, s->tied,
                                    &draw, p.edge_tie);
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
