/* Per-(worker, rank) state slots of a routing group (internal.h
 * route_slots): a /route reads every candidate's load and rate from an
 * array in the rank cache's order instead of two hash lookups each. The
 * maps (bookings.c loads, rates.c rates) stay the truth; a slot points at
 * its key's entries, is checked against its key and refreshed whenever one
 * of them is created or freed (route_slot_changed), so it can be stale
 * only in position, which costs the lookups it saves. Caller holds kvr_router.mu throughout. */
#include <stdlib.h>
#include <string.h>

#include "route/internal.h"

static route_slots *slots_find(route_bookings *b, uintptr_t index)
{
    for (route_slots *t = b->slots; t; t = t->next)
        if (t->index == index)
            return t;
    return NULL;
}

route_slots *route_slots_for(route_bookings *b, uintptr_t index, uint64_t gen, size_t n)
{
    route_slots *t = slots_find(b, index);
    if (!t) {
        if (!(t = calloc(1, sizeof *t)))
            return NULL;
        t->index = index;
        kvr_u64map_init(&t->pos);
        t->next = b->slots;
        b->slots = t;
    }
    if (gen < t->gen)
        return NULL; /* a request with an older rank snapshot: positions differ */
    if (gen > t->gen || t->n != n) {
        route_slot *slot = n ? calloc(n, sizeof *slot) : NULL;
        if (n && !slot)
            return NULL;
        free(t->slot);
        t->slot = slot; /* every slot unbound */
        t->n = n;
        t->gen = gen;
        kvr_u64map_reset(&t->pos);
    }
    return t;
}

static void slot_read(route_bookings *b, route_slot *sl, uintptr_t index)
{
    sl->load = route_load_find(b, index, sl->worker_id, sl->dp_rank, false);
    sl->rate = route_rate_find(b, index, sl->worker_id, sl->dp_rank);
}

const route_slot *route_slot_miss(route_bookings *b, route_slots *t, uint32_t pos,
                                  uintptr_t index, uint64_t worker_id, uint32_t dp_rank,
                                  route_slot *tmp)
{
    route_slot *sl = t && pos < t->n ? &t->slot[pos] : NULL;
    *tmp = (route_slot){.worker_id = worker_id, .dp_rank = dp_rank};
    slot_read(b, tmp, index);
    if (!sl || sl->bound)
        return tmp; /* no position, or it names another key: a stale snapshot */
    /* Bound only if changes to this key can find it: a key whose map
     * entry names another slot (a hash collision) stays unbound. */
    uint64_t key = route_wr_key(index, worker_id, dp_rank);
    if (kvr_u64map_find(&t->pos, key) || kvr_u64map_put(&t->pos, key, pos) < 0)
        return tmp;
    *sl = *tmp;
    sl->bound = true;
    return sl;
}

void route_slot_changed(route_bookings *b, uintptr_t index, uint64_t worker_id, uint32_t dp_rank)
{
    route_slots *t = slots_find(b, index);
    uint64_t pos;
    if (!t || !kvr_u64map_get(&t->pos, route_wr_key(index, worker_id, dp_rank), &pos) ||
        pos >= t->n)
        return;
    route_slot *sl = &t->slot[pos];
    if (sl->bound && sl->worker_id == worker_id && sl->dp_rank == dp_rank)
        slot_read(b, sl, index);
}

void route_slots_free(route_bookings *b)
{
    while (b->slots) {
        route_slots *t = b->slots;
        b->slots = t->next;
        free(t->slot);
        kvr_u64map_free(&t->pos);
        free(t);
    }
}
