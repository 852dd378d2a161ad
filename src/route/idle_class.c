/* The idle class of a ttft /route (internal.h route_idle_class): at 1000
 * workers most candidates hold none of the prompt and have no prefill
 * queued, no decodes and no measured rate, so the model gives every one of
 * them the same cost, credit and slowdown; only their recent work (the
 * tie-break) tells them apart. Scoring each of them cost ~1,000
 * instructions a candidate across the loops of select.c; here they become
 * one representative, the member with the least recent work (the only one
 * the balanced rule can take alone), with a multiplicity, and the
 * selection's random tie-break among the members within its tie margin is
 * resolved back to the member the full loop would have taken (same random
 * draw, same candidate order), so the choice is the same bit for bit.
 * Recent work decays but never reaches 0: a class that required none was
 * empty in a fleet where every worker had been booked. Caller holds
 * kvr_router.mu. */
#include "route/internal.h"

/* Whether the model costs candidate e (state st) as a worker with nothing:
 * the cost reads the overlaps, the queued prefill, the decodes and (with
 * decode_ahead) the bookings pending on the load (one whose prefill is
 * all cached queues nothing, yet its context slows the request's own
 * prefill: only a load with none of them is costed as none), the rate (measured,
 * registered), the LRU edge (edge.c: kept only while lru_edge is on, and
 * charged where it holds a prompt) and, for the tie-break only, the recent
 * work; the profile decides the blocks a booking adds. */
static bool idle(const kvr_query_entry *e, const route_slot *st)
{
    const route_load *l = st->load;
    return !e->gpu_blocks && !e->cpu_blocks && !e->disk_blocks &&
           (!l || (l->prefill_tokens == 0 && l->decode_context == 0 && !l->pending_head)) &&
           (!st->rate ||
            (!(route_rate_measured(st->rate) > 0) && !route_edge_live(st->rate->edge)));
}

size_t route_idle_class(const kvr_query_result *q, const route_slot *const *st,
                        const uint32_t *entry_profile, double now, route_idle_split *out)
{
    size_t n = 0;
    out->rep = SIZE_MAX;
    out->n_members = 0;
    double tps = 0, least = 0;
    uint32_t profile = 0;
    for (size_t i = 0; i < q->n_entries; i++) {
        const kvr_query_entry *e = &q->entries[i];
        if (idle(e, st[i])) {
            bool first = out->rep == SIZE_MAX;
            if (first) {
                out->rep = n;
                tps = e->prefill_tps;
                profile = entry_profile[i];
                out->mult[n++] = 0; /* counted below */
            }
            if (first || (e->prefill_tps == tps && entry_profile[i] == profile)) {
                const route_rate *rt = st[i]->rate;
                double w = rt && rt->work > 0 ? route_rate_recent_work(rt, now) : 0;
                /* the representative: the least work, the first of equals
                 * (the full loop's argmin keeps the first) */
                if (first || w < least) {
                    least = w;
                    out->at[out->rep] = (uint32_t)i;
                }
                out->work[out->n_members] = w;
                out->members[out->n_members++] = (uint32_t)i;
                continue;
            }
        }
        out->at[n] = (uint32_t)i;
        out->mult[n++] = 1;
    }
    if (out->rep != SIZE_MAX)
        out->mult[out->rep] = (uint32_t)out->n_members;
    out->tie_work = -1; /* no member tied until route_idle_tie */
    return n;
}

size_t route_idle_tie(route_idle_split *sp, double max_work)
{
    sp->tie_work = max_work;
    size_t k = 0;
    for (size_t m = 0; m < sp->n_members; m++)
        k += sp->work[m] <= max_work;
    return k;
}

size_t route_idle_kth(const route_idle_split *sp, size_t n, const bool *tied, size_t k,
                      size_t *compact)
{
    bool class_tied = sp->rep != SIZE_MAX && tied[sp->rep];
    size_t m = 0; /* next member not yet passed */
    for (size_t j = 0; j < n; j++) {
        if (j == sp->rep)
            continue;
        /* the members before this candidate, in candidate order */
        for (; m < sp->n_members && sp->members[m] < sp->at[j]; m++)
            if (class_tied && sp->work[m] <= sp->tie_work && k-- == 0) {
                *compact = sp->rep;
                return sp->members[m];
            }
        if (tied[j] && k-- == 0) {
            *compact = j;
            return sp->at[j];
        }
    }
    for (; class_tied && m < sp->n_members; m++)
        if (sp->work[m] <= sp->tie_work && k-- == 0) {
            *compact = sp->rep;
            return sp->members[m];
        }
    *compact = SIZE_MAX;
    return SIZE_MAX; /* k past the tied candidates: the caller's count was wrong */
}
