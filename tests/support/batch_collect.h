/* Every event of a batch at once, for tests that look at them by index:
 * kvr_batch_next hands out one event at a time (its arrays live until the
 * next call), so the collector copies each event's hashes and tokens into
 * its own arena. Strings still borrow from the payload. Header-only: the
 * wire, normalize and index tests include it. */
#ifndef KVR_TEST_BATCH_COLLECT_H
#define KVR_TEST_BATCH_COLLECT_H

#include <stdlib.h>
#include <string.h>

#include "kvrouter/wire.h"

typedef struct {
    kvr_raw_event *ev; /* n events, in batch order */
    uint32_t n;
    uint64_t *u64; /* their hashes and tokens */
} kvr_test_events;

static inline void kvr_test_events_free(kvr_test_events *t)
{
    free(t->ev);
    free(t->u64);
    memset(t, 0, sizeof *t);
}

/* Reads b to its end into t (freed first). */
static inline void kvr_test_collect(kvr_batch *b, kvr_test_events *t)
{
    kvr_test_events_free(t);
    size_t cap_ev = 16, cap_u64 = 256, used = 0;
    t->ev = malloc(cap_ev * sizeof *t->ev);
    t->u64 = malloc(cap_u64 * sizeof *t->u64);
    size_t (*off)[2] = malloc(cap_ev * sizeof *off); /* where each event's arrays went */
    const kvr_raw_event *e;
    while ((e = kvr_batch_next(b))) {
        if (t->n == cap_ev) {
            cap_ev *= 2;
            t->ev = realloc(t->ev, cap_ev * sizeof *t->ev);
            off = realloc(off, cap_ev * sizeof *off);
        }
        size_t need = used + e->n_block_hashes + e->n_token_ids;
        if (need > cap_u64) {
            while (cap_u64 < need)
                cap_u64 *= 2;
            t->u64 = realloc(t->u64, cap_u64 * sizeof *t->u64);
        }
        t->ev[t->n] = *e;
        off[t->n][0] = used;
        if (e->n_block_hashes)
            memcpy(t->u64 + used, e->block_hashes, e->n_block_hashes * sizeof *t->u64);
        used += e->n_block_hashes;
        off[t->n][1] = used;
        if (e->n_token_ids)
            memcpy(t->u64 + used, e->token_ids, e->n_token_ids * sizeof *t->u64);
        used += e->n_token_ids;
        t->n++;
    }
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->ev[i].block_hashes)
            t->ev[i].block_hashes = t->u64 + off[i][0];
        if (t->ev[i].token_ids)
            t->ev[i].token_ids = t->u64 + off[i][1];
    }
    free(off);
}

#endif
