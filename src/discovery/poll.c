/* The poll thread: every engine due is polled at once (probe.c over one
 * fetcher), each result stored in its engine, and its registrations made
 * what the result implies (apply.c). An engine is due poll_s after its last
 * poll finished, at once when added or changed. Results are stored by the
 * engine's uid, so an engine removed (or removed and added again) while its
 * poll ran is not touched by it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery_internal.h"
#include "kvrouter/log.h"
#include "util/clock.h"

/* What the engine's entry makes of a valid reading: a publishing engine
 * needs a model and a block size from it or from the entry. */
static bool complete(const kvr_disc_engine *e, const kvr_reading *r, char *err, size_t cap)
{
    if (!r->info.publishes)
        return true;
    if (!e->model_override[0] && !r->info.model_name[0]) {
        snprintf(err, cap, "%s",
                 r->info.kind == KVR_ENGINE_KIND_VLLM
                     ? "/v1/models names no base model (set model_name in the engine entry)"
                     : "/server_info: neither served_model_name nor model_path is set");
        return false;
    }
    if (!e->spec.block_size && !r->info.block_size) {
        snprintf(err, cap, "/metrics: no vllm:cache_config_info block_size (set block_size in "
                           "the engine entry)");
        return false;
    }
    return true;
}

static void store(kvr_discovery *d, kvr_disc_engine *e, kvr_probe *p, double now)
{
    e->polls++;
    e->last_poll_at = now;
    d->c.polls++;
    d->c.http_requests += p->requests;
    d->c.invalid_responses += p->invalid_responses;
    kvr_reading *r = kvr_probe_reading(p);
    kvr_poll_outcome outcome = p->done ? p->outcome : KVR_POLL_UNREACHABLE;
    char err[KVR_DISC_ERR];
    snprintf(err, sizeof err, "%s", p->done ? p->err : "poll abandoned");
    if (r && r->capacity_ignored)
        d->c.capacities_ignored++;
    if (r && !complete(e, r, err, sizeof err)) {
        r = NULL;
        outcome = KVR_POLL_INVALID;
    }
    if (r) {
        e->detected = r->info.kind;
        kvr_reading_free(&e->good);
        e->good = *r;
        memset(r, 0, sizeof *r); /* moved */
        e->last_valid_at = now;
        e->consecutive_failures = 0;
        e->last_error[0] = 0;
        e->poll_ok = true;
        e->last_outcome = KVR_POLL_OK;
    } else {
        d->c.poll_failures++;
        e->poll_failures++;
        e->consecutive_failures++;
        e->poll_ok = false;
        e->last_outcome = outcome;
        snprintf(e->last_error, sizeof e->last_error, "%s", err);
        if (outcome == KVR_POLL_INVALID)
            e->detected = KVR_ENGINE_KIND_AUTO; /* ask both kinds again */
    }
    if (d->cfg.resync_polls && (e->polls + e->uid) % d->cfg.resync_polls == 0)
        e->force_write = true;
}

/* Probes for every engine due now; *next gets when the next one is due. */
static kvr_probe *due_probes(kvr_discovery *d, double now, size_t *n, double *next)
{
    *n = 0;
    *next = now + d->cfg.poll_s;
    size_t due = 0;
    for (size_t i = 0; i < d->n_engines; i++) {
        kvr_disc_engine *e = d->engines[i];
        if (e->next_poll_at <= now && !e->in_flight)
            due++;
        else if (!e->in_flight && e->next_poll_at < *next)
            *next = e->next_poll_at;
    }
    if (!due)
        return NULL;
    kvr_probe *ps = calloc(due, sizeof *ps);
    if (!ps) {
        *next = now + 1; /* out of memory: try again in a second */
        return NULL;
    }
    for (size_t i = 0; i < d->n_engines; i++) {
        kvr_disc_engine *e = d->engines[i];
        if (e->next_poll_at > now || e->in_flight)
            continue;
        kvr_engine_kind want = e->spec.kind != KVR_ENGINE_KIND_AUTO ? e->spec.kind : e->detected;
        kvr_probe_init(&ps[(*n)++], e->uid, e->url, e->host, want);
        e->in_flight = true;
        e->polls_started++;
    }
    return ps;
}

static void finish_probes(kvr_discovery *d, kvr_probe *ps, size_t n)
{
    double now = kvr_clock_mono();
    for (size_t i = 0; i < n; i++) {
        kvr_disc_engine *e = kvr_discovery_find_uid(d, ps[i].uid);
        if (e) {
            e->in_flight = false;
            store(d, e, &ps[i], now);
            kvr_discovery_apply(d, e, now);
            e->next_poll_at = e->repoll ? now : now + d->cfg.poll_s;
            e->repoll = false;
            e->polls_done++;
        }
        kvr_probe_free(&ps[i]);
    }
    pthread_cond_broadcast(&d->polled);
}

void *kvr_discovery_main(void *arg)
{
    kvr_discovery *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!atomic_load(&d->stop)) {
        double now = kvr_clock_mono(), next;
        size_t n;
        kvr_probe *ps = due_probes(d, now, &n, &next);
        if (!ps) {
            struct timespec ts;
            kvr_discovery_deadline(&ts, next - now > 0 ? next - now : 0.001);
            pthread_cond_timedwait(&d->wake, &d->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&d->mu);
        for (size_t i = 0; i < n; i++)
            kvr_probe_start(&ps[i], d->fetcher);
        kvr_fetcher_run(d->fetcher, &d->stop);
        pthread_mutex_lock(&d->mu);
        if (atomic_load(&d->stop)) { /* abandoned: change nothing */
            for (size_t i = 0; i < n; i++)
                kvr_probe_free(&ps[i]);
            free(ps);
            break;
        }
        finish_probes(d, ps, n);
        free(ps);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}
