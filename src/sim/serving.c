/* The serving model of sim/serving.h: a binary heap of virtual-time events
 * (a worker's head-of-queue prefill end, a request's decode end), and per
 * worker a FIFO whose head's progress is brought up to date whenever the
 * worker's prefill rate is about to change. */
#include "sim/serving.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/grow.h"

enum { EV_PREFILL_END = 0, EV_DECODE_END = 1 };

struct kvr_sim_ev {
    double t;
    uint64_t order; /* ties resolve in scheduling order: deterministic */
    int kind;
    uint32_t req, slot;
    uint64_t version; /* EV_PREFILL_END: the worker's version when scheduled */
};

typedef struct kvr_sim_ev sim_ev;

static bool ev_less(const sim_ev *a, const sim_ev *b)
{
    return a->t < b->t || (a->t == b->t && a->order < b->order);
}

static int ev_push(kvr_sim_serving *s, sim_ev e)
{
    if (kvr_grow((void **)&s->ev, &s->ev_cap, s->n_ev + 1, sizeof *s->ev, 256) != 0)
        return -1;
    e.order = s->next_order++;
    size_t i = s->n_ev++;
    while (i > 0 && ev_less(&e, &s->ev[(i - 1) / 2])) {
        s->ev[i] = s->ev[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->ev[i] = e;
    return 0;
}

static sim_ev ev_pop(kvr_sim_serving *s)
{
    sim_ev top = s->ev[0], last = s->ev[--s->n_ev];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const sim_ev *cur = &last;
        if (l < s->n_ev && ev_less(&s->ev[l], cur)) {
            m = l;
            cur = &s->ev[l];
        }
        if (l + 1 < s->n_ev && ev_less(&s->ev[l + 1], cur))
            m = l + 1;
        if (m == i)
            break;
        s->ev[i] = s->ev[m];
        i = m;
    }
    if (s->n_ev)
        s->ev[i] = last;
    return top;
}

int kvr_sim_serving_init(kvr_sim_serving *s, const kvr_sim_serving_params *p, size_t n_slots,
                         size_t n_requests)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->n_slots = n_slots;
    s->n_jobs = n_requests;
    s->w = calloc(n_slots ? n_slots : 1, sizeof *s->w);
    s->jobs = calloc(n_requests ? n_requests : 1, sizeof *s->jobs);
    s->ttft_s = calloc(n_requests ? n_requests : 1, sizeof *s->ttft_s);
    if (!s->w || !s->jobs || !s->ttft_s) {
        kvr_sim_serving_free(s);
        return -1;
    }
    return 0;
}

void kvr_sim_serving_free(kvr_sim_serving *s)
{
    for (size_t i = 0; s->w && i < s->n_slots; i++)
        free(s->w[i].fifo);
    free(s->w);
    free(s->jobs);
    free(s->ev);
    free(s->ttft_s);
    memset(s, 0, sizeof *s);
}

double kvr_sim_serving_rate(const kvr_sim_serving *s, size_t slot)
{
    const kvr_sim_worker *w = &s->w[slot];
    double busy = s->p.kv_read_tps > 0
                      ? w->decode_context * s->p.decode_tps / s->p.kv_read_tps
                      : 0;
    return s->p.prefill_tps / (1.0 + busy);
}

/* Brings the head's remaining work up to t at the current rate. */
static void advance(kvr_sim_serving *s, kvr_sim_worker *w, size_t slot, double t)
{
    if (w->prefilling && t > w->since) {
        w->left -= (t - w->since) * kvr_sim_serving_rate(s, slot);
        if (w->left < 0)
            w->left = 0;
    }
    w->since = t;
}

static bool head_fits(const kvr_sim_serving *s, const kvr_sim_worker *w, const kvr_sim_job *j)
{
    return s->p.kv_capacity == 0 || w->kv_used == 0 ||
           w->kv_used + j->kv_blocks <= s->p.kv_capacity;
}

/* Starts the head if it may, and (re)schedules the head's prefill end at the
 * current rate; the previous schedule goes stale. Caller advanced to t. */
static int reschedule(kvr_sim_serving *s, size_t slot, double t)
{
    kvr_sim_worker *w = &s->w[slot];
    if (!w->prefilling && w->len > 0) {
        kvr_sim_job *j = &s->jobs[w->fifo[w->head]];
        if (!head_fits(s, w, j))
            return 0; /* waits for KV memory: a decode end retries */
        w->prefilling = true;
        w->left = j->work;
        w->since = t;
        w->kv_used += j->kv_blocks;
    }
    w->version++;
    if (!w->prefilling)
        return 0;
    double end = t + w->left / kvr_sim_serving_rate(s, slot);
    return ev_push(s, (sim_ev){.t = end, .kind = EV_PREFILL_END, .req = w->fifo[w->head],
                               .slot = (uint32_t)slot, .version = w->version});
}

int kvr_sim_serving_submit(kvr_sim_serving *s, uint32_t req, const kvr_sim_job *job)
{
    kvr_sim_worker *w = &s->w[job->slot];
    if (w->len == w->cap || w->head + w->len == w->cap) {
        /* compact, then grow */
        if (w->head) {
            memmove(w->fifo, w->fifo + w->head, w->len * sizeof *w->fifo);
            w->head = 0;
        }
        if (w->len == w->cap &&
            kvr_grow((void **)&w->fifo, &w->cap, w->cap + 1, sizeof *w->fifo, 16) != 0)
            return -1;
    }
    s->jobs[req] = *job;
    w->fifo[w->head + w->len++] = req;
    w->running++;
    w->queued += job->uncached;
    if (w->len > 1)
        return 0; /* behind the head: nothing about the worker's timing changes */
    advance(s, w, job->slot, job->arrival);
    return reschedule(s, job->slot, job->arrival);
}

static int prefill_end(kvr_sim_serving *s, const sim_ev *e)
{
    kvr_sim_worker *w = &s->w[e->slot];
    if (e->version != w->version || !w->prefilling)
        return 0; /* the rate changed after this was scheduled */
    kvr_sim_job *j = &s->jobs[e->req];
    advance(s, w, e->slot, e->t);
    s->ttft_s[e->req] = e->t - j->arrival;
    w->head++;
    w->len--;
    w->prefilling = false;
    w->queued -= j->uncached;
    w->decoding++;
    w->decode_context += j->context;
    if (s->prefill_done)
        s->prefill_done(s->ud, e->req, e->slot, e->t);
    if (ev_push(s, (sim_ev){.t = e->t + j->decode_s, .kind = EV_DECODE_END, .req = e->req,
                            .slot = e->slot}) != 0)
        return -1;
    return reschedule(s, e->slot, e->t);
}

static int decode_end(kvr_sim_serving *s, const sim_ev *e)
{
    kvr_sim_worker *w = &s->w[e->slot];
    kvr_sim_job *j = &s->jobs[e->req];
    advance(s, w, e->slot, e->t);
    w->decoding--;
    w->decode_context -= j->context;
    if (w->decoding == 0)
        w->decode_context = 0; /* no float residue on an idle worker */
    w->kv_used -= j->kv_blocks;
    w->running--;
    if (s->finished)
        s->finished(s->ud, e->req, e->slot, e->t);
    return reschedule(s, e->slot, e->t);
}

int kvr_sim_serving_run_until(kvr_sim_serving *s, double t)
{
    while (s->n_ev && s->ev[0].t <= t) {
        sim_ev e = ev_pop(s);
        int rc = e.kind == EV_PREFILL_END ? prefill_end(s, &e) : decode_end(s, &e);
        if (rc != 0)
            return rc;
    }
    return 0;
}
