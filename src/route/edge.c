/* Each worker's LRU edge, as the router sees it (internal.h route_edge):
 * the tokens the worker took in (the prefill the router booked there) and,
 * in the order they were taken in, the prompts routed there that a later
 * turn may come back to. A prompt's age is its depth in the worker's LRU:
 * the tokens touched there since it was, which are the intake plus the
 * prompts older than it that a returning turn moved ahead of it (a hit
 * refreshes its path, as SGLang's radix cache does). An engine whose cache
 * holds C tokens evicts by least recent use,
 * so a prompt older than about C is gone and one just under C goes with the
 * next tokens the worker takes in. Placing u new tokens on a worker thus
 * pushes past its edge the prompts whose age lies in [C - u, C): the reuse
 * this placement costs the conversations that would come back there (the
 * ttft model charges it, cost.c). A later turn that matches a prompt
 * touches it again: that prompt's entry is superseded by the new one
 * (which holds the whole conversation so far). Caller holds kvr_router.mu. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "route/internal.h"
#include "util/grow.h"

struct route_edge {
    double clock; /* tokens moved to the LRU's recent end, in all: taken in or hit again */
    route_edge_entry *e;
    size_t head, n, cap; /* live entries: e[head..n), oldest first */
    uint64_t base;       /* sequence number of e[0] */
    kvr_u64map at;       /* last block hash -> sequence number of its entry */
};

void route_edge_free(route_edge *g)
{
    if (!g)
        return;
    free(g->e);
    kvr_u64map_free(&g->at);
    free(g);
}

bool route_edge_live(const route_edge *g) { return g && g->n > g->head; }

/* The entry a prompt of n_blocks (matched: the blocks the worker's cache
 * already holds) comes back to: the deepest matched block that ends a
 * prompt routed here. Probes at most KVR_ROUTE_EDGE_PROBES blocks (a turn's
 * prompt extends the previous one by its answer and the new question). */
static route_edge_entry *own_entry(const route_edge *g, const uint64_t *hashes, uint32_t matched,
                                   uint64_t *seq)
{
    for (uint32_t k = matched, probes = 0; k-- > 0 && probes < KVR_ROUTE_EDGE_PROBES; probes++) {
        uint64_t s;
        if (kvr_u64map_get(&g->at, hashes[k], &s) && s >= g->base + g->head &&
            s < g->base + g->n) {
            *seq = s;
            return &g->e[s - g->base];
        }
    }
    return NULL;
}

double route_edge_age(const route_edge *g, const uint64_t *hashes, uint32_t matched)
{
    uint64_t seq;
    const route_edge_entry *o = g ? own_entry(g, hashes, matched, &seq) : NULL;
    return o ? g->clock - o->stamp : -1;
}

double route_edge_loss(const route_edge *g, double capacity, double u, const uint64_t *hashes,
                       uint32_t matched)
{
    if (!route_edge_live(g) || !(capacity > 0) || !(u > 0))
        return 0;
    /* Ages in [C - u, C): stamps in (clock - C, clock - C + u]. The
     * stamps rise with the entries: the first one past the low end by
     * bisection, then the band. */
    double lo = g->clock - capacity, hi = lo + u;
    size_t a = g->head, b = g->n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (g->e[m].stamp > lo)
            b = m;
        else
            a = m + 1;
    }
    double loss = 0;
    size_t end = a;
    for (; end < g->n && g->e[end].stamp <= hi; end++)
        loss += g->e[end].value;
    /* The request's own previous turn is touched again, not pushed out
     * (looked up only when the band holds anything). */
    uint64_t own;
    if (loss > 0 && own_entry(g, hashes, matched, &own) && own >= g->base + a &&
        own < g->base + end)
        loss -= g->e[own - g->base].value;
    return loss;
}

static void drop_front(route_edge *g, double capacity, route_edge_counts *c)
{
    size_t max = KVR_ROUTE_EDGE_MAX;
    while (g->head < g->n) {
        bool aged = capacity > 0 && g->e[g->head].stamp <= g->clock - capacity;
        bool over = g->n - g->head > max;
        if (!aged && !over)
            break;
        route_edge_entry *o = &g->e[g->head];
        if (o->value > 0) {
            c->aged_out++;
            c->at_limit += !aged;
            uint64_t s;
            if (kvr_u64map_get(&g->at, o->last_hash, &s) && s == g->base + g->head)
                kvr_u64map_del(&g->at, o->last_hash, NULL);
        }
        g->head++;
    }
    if (g->head > 64 && g->head * 2 > g->n) {
        memmove(g->e, g->e + g->head, (g->n - g->head) * sizeof *g->e);
        g->base += g->head;
        g->n -= g->head;
        g->head = 0;
    }
}

int route_edge_note(route_edge **gp, const uint64_t *hashes, uint32_t n_blocks, uint32_t matched,
                    double matched_tokens, double prompt_tokens, double intake_tokens,
                    double capacity, route_edge_counts *c)
{
    route_edge *g = *gp;
    if (!g) {
        if (!(g = calloc(1, sizeof *g)))
            return -1;
        kvr_u64map_init(&g->at);
        *gp = g;
    }
    uint64_t seq;
    route_edge_entry *o = own_entry(g, hashes, matched, &seq);
    /* A prompt that matched no entry here shares at most a prefix other
     * prompts keep in use (a system prompt): its own part is the rest. */
    double value = o ? prompt_tokens : prompt_tokens - matched_tokens;
    double moved = 0;
    if (o) {
        /* The conversation came back: its new entry holds all of it. Its
         * old tokens move to the recent end, ahead of every prompt newer
         * than them; the prompts older than them were behind them already,
         * so their depth does not change (their stamps move with the
         * clock). */
        c->returned++;
        moved = o->value;
        for (size_t i = g->head; i < seq - g->base; i++)
            g->e[i].stamp = fmin(g->e[i].stamp + moved, o->stamp); /* still older than o was */
        o->value = 0;
        kvr_u64map_del(&g->at, o->last_hash, NULL);
    }
    g->clock += (intake_tokens > 0 ? intake_tokens : 0) + moved;
    drop_front(g, capacity, c);
    if (!n_blocks || !(value > 0))
        return 0;
    if (KVR_GROW(g->e, g->cap, g->n + 1) != 0)
        return -1;
    uint64_t last = hashes[n_blocks - 1];
    if (kvr_u64map_put(&g->at, last, g->base + g->n) < 0)
        return -1;
    g->e[g->n++] = (route_edge_entry){last, g->clock, value};
    return 0;
}
