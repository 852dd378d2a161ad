/* The cost models of a /route (SPEC §8, route.h): each candidate's
 * predicted time to first token (cost_model ttft: its queue, uncached
 * tokens, prefill rate, decode slowdown and the copies it would make) or
 * Dynamo's formula (dynamo). select.c picks among the costs and books the
 * request; caller holds kvr_router.mu. */
#include <math.h>
#include <stdlib.h>

#include "route/internal.h"

/* SPEC §8 / Dynamo: credit and cost of a candidate whose overlaps and load
 * are set. */
static void cost_dynamo(const route_cost_params *p, kvr_route_cost *c, uint64_t isl, uint32_t bs,
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
double route_uncached_tokens(const route_cost_params *p, const kvr_route_cost *c, uint64_t isl,
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
static double slowdown_of(const route_cost_params *p, double context)
{
    double slow = p->decode_share * context;
    return 1.0 + (slow < p->max_slowdown ? slow : p->max_slowdown);
}

/* How much the worker's decodes slow its prefill now. */
double route_decode_factor(const route_cost_params *p, const route_load *l)
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
static void cost_ttft(const route_cost_params *p, kvr_route_cost *c, const route_load *l,
                      double now, uint64_t isl, uint32_t bs)
{
    double u = route_uncached_tokens(p, c, isl, bs);
    c->credit = (double)isl - u;
    c->decode_factor = route_decode_factor(p, l);
    double rate = c->prefill_tps / c->decode_factor;
    c->queued_tokens = l ? route_load_pending_tokens(l, rate, now) : 0;
    if (p->decode_ahead && l && l->pending_head) {
        double own = slowdown_of(p, (double)l->decode_context + pending_context(l));
        c->cost = c->queued_tokens / rate + u * own / c->prefill_tps;
    } else {
        c->cost = (c->queued_tokens + u) / rate;
    }
    c->ttft_s = c->cost;
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
int route_add_duplicate_cost(const route_cost_params *p, kvr_route_cost *c, const uint32_t *mult,
                             size_t n, size_t n_all, uint32_t bs)
{
    if (!(p->recompute_weight > 0) || n_all < 2)
        return 0;
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
        return -1; /* the costs stay plain TTFT (the caller counts it) */
    }
    for (size_t i = 0; i < n; i++)
        count[c[i].disk_blocks] += mult[i];
    copies_by_reach(count, max_reach, below);
    for (size_t i = 0; i < n; i++)
        c[i].cost += p->recompute_weight * below[c[i].disk_blocks] * bs / c[i].prefill_tps;
    free(count);
    free(below);
    return 0;
}

/* What the request would hold on a worker scored with profile pr: its
 * routing blocks (identified by chain hash) and, per request, the rest of
 * the prompt past them plus the expected output. Those share the last
 * partial block, as the engine's allocator does, so a lone request holds
 * ceil((isl + osl) / B) blocks. */
uint64_t route_unique_blocks_of(const route_profile *pr, uint64_t isl, uint32_t osl, uint32_t bs)
{
    uint64_t rest = isl - (uint64_t)pr->n_blocks * bs + osl;
    return (rest + bs - 1) / bs;
}

/* ttft: the reuse this request's new tokens would push past the worker's
 * LRU edge (edge.c), at the share of such prompts that come back, costs
 * its prefill again then: in seconds of the worker's prefill (lru_edge
 * cost), or orders the candidates within the tie window (tie). */
static void add_edge_cost(const route_cost_params *p, const kvr_query_entry *e,
                          const route_slot *st, const route_profile *pr, uint64_t isl, uint32_t bs,
                          kvr_route_cost *c)
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
void route_fill_cost(const route_cost_params *p, const kvr_query_entry *e, const route_slot *st,
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
void route_fill_rates(kvr_router *r, const kvr_query_result *q, const route_slot *const *st,
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

/* The cost parameters of one /route: the router's settings and the
 * request's overrides; caller holds r->mu (kvr_router_set_config). */
route_cost_params route_cost_params_of(const kvr_router *r, const kvr_route_request *req)
{
    route_cost_params p = {r->cfg.cost_model, r->cfg.overlap_score_credit,
                           r->cfg.prefill_load_scale, r->cfg.cpu_hit_weight,
                           r->cfg.disk_hit_weight, r->cfg.temperature,
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
