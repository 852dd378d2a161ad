#include "mock/engine_events.h"

#include <stdlib.h>
#include <string.h>

void kvr_sim_events_init(kvr_sim_events *ev)
{
    memset(ev, 0, sizeof *ev);
    kvr_wbuf_init(&ev->wbuf);
}

void kvr_sim_events_free(kvr_sim_events *ev)
{
    free(ev->recs);
    free(ev->pool);
    free(ev->raw);
    kvr_wbuf_free(&ev->wbuf);
    memset(ev, 0, sizeof *ev);
}

void kvr_sim_events_reset(kvr_sim_events *ev)
{
    ev->n = 0;
    ev->pool_len = 0;
}

size_t kvr_sim_events_count(const kvr_sim_events *ev) { return ev->n; }

static int pool_append(kvr_sim_events *ev, const uint64_t *v, size_t n, size_t *off)
{
    if (ev->pool_len + n > ev->pool_cap) {
        size_t ncap = ev->pool_cap ? ev->pool_cap : 1024;
        while (ncap < ev->pool_len + n)
            ncap *= 2;
        uint64_t *np = realloc(ev->pool, ncap * sizeof *np);
        if (!np)
            return -1;
        ev->pool = np;
        ev->pool_cap = ncap;
    }
    if (n)
        memcpy(ev->pool + ev->pool_len, v, n * sizeof *v);
    *off = ev->pool_len;
    ev->pool_len += n;
    return 0;
}

static kvr_sim_event_rec *new_rec(kvr_sim_events *ev)
{
    if (ev->n == ev->cap) {
        size_t ncap = ev->cap ? ev->cap * 2 : 16;
        kvr_sim_event_rec *nr = realloc(ev->recs, ncap * sizeof *nr);
        if (!nr)
            return NULL;
        ev->recs = nr;
        ev->cap = ncap;
    }
    kvr_sim_event_rec *r = &ev->recs[ev->n];
    memset(r, 0, sizeof *r);
    return r;
}

static int store_one(kvr_sim_events *ev, kvr_tier tier, bool has_parent, uint64_t parent,
                     const uint64_t *hashes, size_t nh, const uint64_t *tokens, size_t nt)
{
    kvr_sim_event_rec *r = new_rec(ev);
    if (!r || pool_append(ev, hashes, nh, &r->h_off) != 0 ||
        pool_append(ev, tokens, nt, &r->t_off) != 0)
        return -1;
    r->type = KVR_EV_STORED;
    r->tier = tier;
    r->has_parent = has_parent;
    r->parent = parent;
    r->nh = nh;
    r->nt = nt;
    ev->n++;
    return 0;
}

int kvr_sim_events_store(kvr_sim_events *ev, kvr_tier tier, bool has_parent, uint64_t parent,
                         const uint64_t *hashes, size_t nh, const uint64_t *tokens, size_t nt)
{
    if (!ev->per_block || nh < 2)
        return store_one(ev, tier, has_parent, parent, hashes, nh, tokens, nt);
    /* nt is nh*B (+1 for Eagle's overlap token), so B and the overlap follow */
    size_t B = nt / nh, window = B + (nt - nh * B);
    for (size_t i = 0; i < nh; i++)
        if (store_one(ev, tier, i ? true : has_parent, i ? hashes[i - 1] : parent, hashes + i, 1,
                      tokens + i * B, window) != 0)
            return -1;
    return 0;
}

static int push_removal(kvr_sim_events *ev, kvr_tier tier, const uint64_t *hashes, size_t nh)
{
    kvr_sim_event_rec *r = new_rec(ev);
    if (!r || pool_append(ev, hashes, nh, &r->h_off) != 0)
        return -1;
    r->type = KVR_EV_REMOVED;
    r->tier = tier;
    r->nh = nh;
    ev->n++;
    return 0;
}

int kvr_sim_events_remove(kvr_sim_events *ev, kvr_tier tier, const uint64_t *hashes, size_t nh)
{
    if (ev->per_block) {
        for (size_t i = 0; i < nh; i++)
            if (push_removal(ev, tier, hashes + i, 1) != 0)
                return -1;
        return 0;
    }
    if (ev->n > 0) {
        kvr_sim_event_rec *last = &ev->recs[ev->n - 1];
        if (last->type == KVR_EV_REMOVED && last->tier == tier &&
            last->h_off + last->nh == ev->pool_len) {
            size_t off;
            if (pool_append(ev, hashes, nh, &off) != 0)
                return -1;
            last->nh += nh;
            return 0;
        }
    }
    return push_removal(ev, tier, hashes, nh);
}

int kvr_sim_events_clear(kvr_sim_events *ev)
{
    kvr_sim_event_rec *r = new_rec(ev);
    if (!r)
        return -1;
    r->type = KVR_EV_CLEARED;
    ev->n++;
    return 0;
}

int kvr_sim_events_encode(kvr_sim_events *ev, kvr_wire_style style, double ts, uint32_t dp_rank,
                          uint32_t block_size, bool eagle, const void **payload, size_t *len)
{
    if (ev->n > ev->raw_cap) {
        kvr_raw_event *nr = realloc(ev->raw, ev->n * sizeof *nr);
        if (!nr)
            return -1;
        ev->raw = nr;
        ev->raw_cap = ev->n;
    }
    for (size_t i = 0; i < ev->n; i++) {
        const kvr_sim_event_rec *r = &ev->recs[i];
        kvr_raw_event *x = &ev->raw[i];
        memset(x, 0, sizeof *x);
        x->type = r->type;
        x->tier = r->tier;
        x->has_parent = r->has_parent;
        x->parent = r->parent;
        x->block_hashes = ev->pool + r->h_off;
        x->n_block_hashes = (uint32_t)r->nh;
        if (r->type == KVR_EV_STORED) {
            x->token_ids = ev->pool + r->t_off;
            x->n_token_ids = (uint32_t)r->nt;
            x->eagle = eagle;
            x->block_size = block_size;
        }
    }
    kvr_wbuf_reset(&ev->wbuf);
    kvr_wire_encode_batch(&ev->wbuf, style, ts, ev->raw, ev->n, true, dp_rank);
    if (!ev->wbuf.data && ev->wbuf.len == 0)
        return -1;
    *payload = ev->wbuf.data;
    *len = ev->wbuf.len;
    return 0;
}
