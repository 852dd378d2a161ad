/* Deadlines of the ingest thread (replay inactivity timeouts) in a binary
 * min-heap, so the loop sleeps until the earliest one instead of scanning
 * every listener on a timer. Each timer knows its heap slot: arming again or
 * cancelling is O(log n). */
#include <stdint.h>
#include <stdlib.h>

#include "source/source_internal.h"
#include "util/grow.h"

void kvr_timer_init(kvr_timer *t)
{
    t->when = 0;
    t->slot = SIZE_MAX;
}

static void put(kvr_source *src, size_t i, kvr_timer *t)
{
    src->heap[i] = t;
    t->slot = i;
}

static void sift_up(kvr_source *src, size_t i)
{
    kvr_timer *t = src->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (src->heap[p]->when <= t->when)
            break;
        put(src, i, src->heap[p]);
        i = p;
    }
    put(src, i, t);
}

static void sift_down(kvr_source *src, size_t i)
{
    kvr_timer *t = src->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= src->n_heap)
            break;
        if (c + 1 < src->n_heap && src->heap[c + 1]->when < src->heap[c]->when)
            c++;
        if (t->when <= src->heap[c]->when)
            break;
        put(src, i, src->heap[c]);
        i = c;
    }
    put(src, i, t);
}

void kvr_timer_cancel(kvr_source *src, kvr_timer *t)
{
    size_t i = t->slot;
    if (i == SIZE_MAX)
        return;
    t->slot = SIZE_MAX;
    kvr_timer *last = src->heap[--src->n_heap];
    if (i == src->n_heap)
        return;
    put(src, i, last);
    sift_up(src, i);
    sift_down(src, last->slot);
}

bool kvr_timer_reserve(kvr_source *src, size_t n)
{
    return KVR_GROW(src->heap, src->cap_heap, n) == 0;
}

void kvr_timer_arm(kvr_source *src, kvr_timer *t, double when)
{
    kvr_timer_cancel(src, t);
    t->when = when;
    put(src, src->n_heap++, t); /* room: kvr_timer_reserve per listener */
    sift_up(src, t->slot);
}

kvr_timer *kvr_timer_first(kvr_source *src) { return src->n_heap ? src->heap[0] : NULL; }
