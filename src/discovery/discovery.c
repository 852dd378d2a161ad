/* The discovery API (include/kvrouter/discovery.h): the engine list, its
 * limits and snapshots. The poll thread (poll.c) does the polling, apply.c
 * the registrations. */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery_internal.h"
#include "kvrouter/hash.h"
#include "kvrouter/log.h"
#include "util/clock.h"
#include "util/grow.h"

/* ---- names -------------------------------------------------------------- */

static const char *const kind_names[] = {"auto", "sglang", "vllm"};

const char *kvr_engine_kind_name(kvr_engine_kind k)
{
    return (unsigned)k < KVR_ENGINE_KIND_COUNT ? kind_names[k] : "unknown";
}

int kvr_engine_kind_from_name(const char *name)
{
    for (int k = 0; name && k < KVR_ENGINE_KIND_COUNT; k++)
        if (strcmp(name, kind_names[k]) == 0)
            return k;
    return -1;
}

#define KVR_STATE_NAME_(e, name, help) name,
#define KVR_STATE_HELP_(e, name, help) help,
static const char *const state_names[] = {KVR_ENGINE_STATES(KVR_STATE_NAME_)};
static const char *const state_helps[] = {KVR_ENGINE_STATES(KVR_STATE_HELP_)};

const char *kvr_engine_state_name(kvr_engine_state s)
{
    return (unsigned)s < KVR_ENGINE_STATE_COUNT ? state_names[s] : "unknown";
}

const char *kvr_engine_state_help(kvr_engine_state s)
{
    return (unsigned)s < KVR_ENGINE_STATE_COUNT ? state_helps[s] : "";
}

const char *kvr_discovery_result_name(kvr_discovery_result r)
{
    static const char *const names[] = {"added",     "unchanged", "updated", "invalid",
                                        "limit",     "not_found", "removed", "no_memory"};
    return (unsigned)r < KVR_DISCOVERY_RESULT_COUNT ? names[r] : "unknown";
}

#define KVR_DISC_DESC_(name, kind, help) {#name, kind, help, offsetof(kvr_discovery_counters, name)},
const kvr_counter_desc kvr_discovery_counter_descs[] = {KVR_DISCOVERY_COUNTERS(KVR_DISC_DESC_)};
const size_t kvr_discovery_counter_count =
    sizeof kvr_discovery_counter_descs / sizeof kvr_discovery_counter_descs[0];

/* ---- URLs ---------------------------------------------------------------- */

/* The URL's host (IPv6 in brackets) into host; false with err. */
static bool url_host(const char *url, char *host, size_t cap, char *err, size_t err_cap)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *h = NULL;
    bool ok = false;
    if (!u)
        snprintf(err, err_cap, "out of memory");
    else if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK)
        snprintf(err, err_cap, "field 'url': '%.200s' is not a URL", url);
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
        snprintf(err, err_cap, "field 'url': '%.200s' must be http:// or https://", url);
    else if (curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK || !h[0] ||
             strlen(h) >= cap || !kvr_edge_host_ok(h))
        snprintf(err, err_cap, "field 'url': '%.200s' has no usable host", url);
    else
        ok = true;
    if (ok)
        snprintf(host, cap, "%s", h);
    curl_free(scheme);
    curl_free(h);
    curl_url_cleanup(u);
    return ok;
}

bool kvr_engine_url_normalize(const char *url, char *out, size_t cap, char *err, size_t err_cap)
{
    char host[256];
    size_t n = url ? strlen(url) : 0;
    while (n && url[n - 1] == '/')
        n--;
    if (!n) {
        snprintf(err, err_cap, "field 'url' is required");
        return false;
    }
    if (n >= cap || n >= KVR_ENGINE_URL_MAX) {
        snprintf(err, err_cap, "field 'url' is longer than %d bytes", KVR_ENGINE_URL_MAX - 1);
        return false;
    }
    memcpy(out, url, n);
    out[n] = 0;
    if (strpbrk(out, "?# \t\r\n")) {
        snprintf(err, err_cap, "field 'url': '%.200s' must not have a query, fragment or space",
                 out);
        return false;
    }
    return url_host(out, host, sizeof host, err, err_cap);
}

uint64_t kvr_engine_worker_id(const char *normalized_url)
{
    return kvr_hash_bytes(normalized_url, strlen(normalized_url), 0);
}

/* ---- lifecycle ------------------------------------------------------------ */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void config_defaults(kvr_discovery_config *c)
{
    if (!(c->poll_s > 0))
        c->poll_s = 5;
    if (!(c->grace_s > 0))
        c->grace_s = 30;
    if (!(c->timeout_s > 0))
        c->timeout_s = 2;
    if (!c->max_engines)
        c->max_engines = 1024;
    if (!c->max_response_bytes)
        c->max_response_bytes = 4u << 20;
    if (!c->resync_polls)
        c->resync_polls = 12;
}

kvr_discovery *kvr_discovery_create(kvr_registry *reg, const kvr_discovery_config *cfg)
{
    pthread_once(&curl_once, curl_init);
    kvr_discovery *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->reg = reg;
    if (cfg)
        d->cfg = *cfg;
    config_defaults(&d->cfg);
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->wake, &ca);
    pthread_cond_init(&d->polled, &ca);
    pthread_condattr_destroy(&ca);
    d->fetcher = kvr_fetcher_create(d->cfg.timeout_s, d->cfg.max_response_bytes);
    if (d->fetcher && pthread_create(&d->thread, NULL, kvr_discovery_main, d) == 0)
        d->thread_started = true;
    if (!d->thread_started) {
        kvr_discovery_destroy(d);
        return NULL;
    }
    return d;
}

static void engine_free(kvr_disc_engine *e)
{
    if (!e)
        return;
    kvr_reading_free(&e->good);
    free(e->applied);
    free(e);
}

void kvr_discovery_destroy(kvr_discovery *d)
{
    if (!d)
        return;
    atomic_store(&d->stop, true);
    pthread_mutex_lock(&d->mu);
    pthread_cond_broadcast(&d->wake);
    pthread_cond_broadcast(&d->polled);
    pthread_mutex_unlock(&d->mu);
    kvr_fetcher_wakeup(d->fetcher);
    if (d->thread_started)
        pthread_join(d->thread, NULL);
    kvr_fetcher_destroy(d->fetcher);
    for (size_t i = 0; i < d->n_engines; i++)
        engine_free(d->engines[i]);
    free(d->engines);
    pthread_cond_destroy(&d->wake);
    pthread_cond_destroy(&d->polled);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* ---- the engine list -------------------------------------------------------- */

kvr_disc_engine *kvr_discovery_find_uid(kvr_discovery *d, uint64_t uid)
{
    for (size_t i = 0; i < d->n_engines; i++)
        if (d->engines[i]->uid == uid)
            return d->engines[i];
    return NULL;
}

static size_t find_url(kvr_discovery *d, const char *url)
{
    for (size_t i = 0; i < d->n_engines; i++)
        if (strcmp(d->engines[i]->url, url) == 0)
            return i;
    return SIZE_MAX;
}

static bool copy_name(char *dst, size_t cap, const char *src, const char *field, char *err,
                      size_t err_cap)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) {
        snprintf(err, err_cap, "field '%s' is longer than %zu bytes", field, cap - 1);
        return false;
    }
    memcpy(dst, src ? src : "", n + 1);
    return true;
}

/* The engine a spec describes (e->spec's strings point into e). */
static bool spec_to_engine(const kvr_engine_spec *s, kvr_disc_engine *e, char *err, size_t cap)
{
    if ((unsigned)s->kind >= KVR_ENGINE_KIND_COUNT) {
        snprintf(err, cap, "field 'kind' must be \"auto\", \"sglang\" or \"vllm\"");
        return false;
    }
    if (s->has_image_token_id && s->image_token_id >= KVR_WIDE_SENTINEL) {
        snprintf(err, cap, "field 'image_token_id' must be below %u", KVR_WIDE_SENTINEL);
        return false;
    }
    if (s->block_size > KVR_MAX_BLOCK_SIZE || s->mm_identity < -1 ||
        s->mm_identity > KVR_MM_AUTO || s->accepts_mm_hashes < -1 || s->accepts_mm_hashes > 1 ||
        (unsigned)s->origin >= KVR_ORIGIN_COUNT) {
        snprintf(err, cap, "field '%s' is out of range",
                 s->block_size > KVR_MAX_BLOCK_SIZE ? "block_size"
                 : (s->mm_identity < -1 || s->mm_identity > KVR_MM_AUTO) ? "mm_identity"
                 : (s->accepts_mm_hashes < -1 || s->accepts_mm_hashes > 1) ? "accepts_mm_hashes"
                                                                            : "origin");
        return false;
    }
    if (!kvr_engine_url_normalize(s->url, e->url, sizeof e->url, err, cap) ||
        !url_host(e->url, e->host, sizeof e->host, err, cap) ||
        !copy_name(e->model_override, sizeof e->model_override, s->model_name, "model_name", err,
                   cap) ||
        !copy_name(e->group, sizeof e->group,
                   s->routing_group && s->routing_group[0] ? s->routing_group
                                                           : KVR_DEFAULT_ROUTING_GROUP,
                   "routing_group", err, cap))
        return false;
    e->spec = *s;
    e->spec.url = e->url;
    e->spec.model_name = e->model_override;
    e->spec.routing_group = e->group;
    e->worker_id = s->has_instance_id ? s->instance_id : kvr_engine_worker_id(e->url);
    return true;
}

static bool same_spec(const kvr_disc_engine *a, const kvr_disc_engine *b)
{
    const kvr_engine_spec *x = &a->spec, *y = &b->spec;
    return x->kind == y->kind && a->worker_id == b->worker_id &&
           strcmp(a->model_override, b->model_override) == 0 &&
           strcmp(a->group, b->group) == 0 && x->block_size == y->block_size &&
           x->mm_identity == y->mm_identity && x->accepts_mm_hashes == y->accepts_mm_hashes &&
           x->has_image_token_id == y->has_image_token_id &&
           (!x->has_image_token_id || x->image_token_id == y->image_token_id) &&
           x->origin == y->origin;
}

static void poll_soon(kvr_discovery *d, kvr_disc_engine *e)
{
    if (e->in_flight)
        e->repoll = true;
    else
        e->next_poll_at = kvr_clock_mono();
    pthread_cond_signal(&d->wake);
}

static kvr_discovery_result update_engine(kvr_discovery *d, kvr_disc_engine *cur,
                                          const kvr_disc_engine *next)
{
    if (same_spec(cur, next))
        return KVR_DISCOVERY_UNCHANGED;
    bool kind_changed = cur->spec.kind != next->spec.kind;
    memcpy(cur->url, next->url, sizeof cur->url);
    memcpy(cur->host, next->host, sizeof cur->host);
    memcpy(cur->model_override, next->model_override, sizeof cur->model_override);
    memcpy(cur->group, next->group, sizeof cur->group);
    cur->spec = next->spec;
    cur->spec.url = cur->url;
    cur->spec.model_name = cur->model_override;
    cur->spec.routing_group = cur->group;
    cur->worker_id = next->worker_id;
    if (kind_changed)
        cur->detected = KVR_ENGINE_KIND_AUTO;
    cur->force_write = true;
    poll_soon(d, cur);
    return KVR_DISCOVERY_UPDATED;
}

kvr_discovery_result kvr_discovery_add(kvr_discovery *d, const kvr_engine_spec *spec, char *err,
                                       size_t err_cap)
{
    char scratch[8];
    if (!err) {
        err = scratch;
        err_cap = sizeof scratch;
    }
    err[0] = 0;
    kvr_disc_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_cap, "out of memory");
        return KVR_DISCOVERY_NO_MEMORY;
    }
    if (!spec || !spec_to_engine(spec, e, err, err_cap)) {
        free(e);
        return KVR_DISCOVERY_INVALID;
    }
    pthread_mutex_lock(&d->mu);
    kvr_discovery_result res;
    size_t at = find_url(d, e->url);
    const kvr_disc_engine *twin = NULL;
    for (size_t i = 0; i < d->n_engines && !twin; i++)
        if (i != at && d->engines[i]->worker_id == e->worker_id)
            twin = d->engines[i];
    if (twin) {
        snprintf(err, err_cap, "field 'instance_id': %" PRIu64 " is already engine %s's",
                 e->worker_id, twin->url);
        res = KVR_DISCOVERY_INVALID;
        free(e);
    } else if (at != SIZE_MAX) {
        res = update_engine(d, d->engines[at], e);
        free(e);
    } else if (d->n_engines >= d->cfg.max_engines) {
        snprintf(err, err_cap, "engine limit reached: max_engines = %zu engines are listed",
                 d->cfg.max_engines);
        res = KVR_DISCOVERY_LIMIT;
        free(e);
    } else if (KVR_GROW(d->engines, d->cap_engines, d->n_engines + 1) != 0) {
        snprintf(err, err_cap, "out of memory");
        res = KVR_DISCOVERY_NO_MEMORY;
        free(e);
    } else {
        e->uid = ++d->next_uid;
        e->state = KVR_ENGINE_PENDING;
        e->added_at = kvr_clock_mono();
        e->next_poll_at = e->added_at;
        snprintf(e->reason, sizeof e->reason, "%s", kvr_engine_state_help(KVR_ENGINE_PENDING));
        d->engines[d->n_engines++] = e;
        pthread_cond_signal(&d->wake);
        kvr_log(KVR_LOG_INFO, "discovery: engine %s added (%s, worker id %" PRIu64 ")", e->url,
                kvr_engine_kind_name(e->spec.kind), e->worker_id);
        res = KVR_DISCOVERY_ADDED;
    }
    pthread_mutex_unlock(&d->mu);
    return res;
}

static size_t remove_at(kvr_discovery *d, size_t at)
{
    kvr_disc_engine *e = d->engines[at];
    size_t n = kvr_discovery_unapply(d, e);
    memmove(&d->engines[at], &d->engines[at + 1], (d->n_engines - at - 1) * sizeof *d->engines);
    d->n_engines--;
    kvr_log(KVR_LOG_INFO, "discovery: engine %s removed (%zu ranks unregistered)", e->url, n);
    engine_free(e);
    pthread_cond_broadcast(&d->polled);
    return n;
}

kvr_discovery_result kvr_discovery_remove(kvr_discovery *d, const char *url,
                                          size_t *ranks_removed)
{
    char norm[KVR_ENGINE_URL_MAX], err[64];
    if (ranks_removed)
        *ranks_removed = 0;
    if (!kvr_engine_url_normalize(url, norm, sizeof norm, err, sizeof err))
        return KVR_DISCOVERY_NOT_FOUND;
    pthread_mutex_lock(&d->mu);
    size_t at = find_url(d, norm);
    size_t n = at == SIZE_MAX ? 0 : remove_at(d, at);
    pthread_mutex_unlock(&d->mu);
    if (ranks_removed)
        *ranks_removed = n;
    return at == SIZE_MAX ? KVR_DISCOVERY_NOT_FOUND : KVR_DISCOVERY_REMOVED;
}

size_t kvr_discovery_sync(kvr_discovery *d, kvr_origin origin, const kvr_engine_spec *specs,
                          size_t n)
{
    char norm[KVR_ENGINE_URL_MAX], err[400];
    pthread_mutex_lock(&d->mu);
    for (size_t i = d->n_engines; i-- > 0;) {
        if (d->engines[i]->spec.origin != origin)
            continue;
        bool listed = false;
        for (size_t k = 0; k < n && !listed; k++)
            listed = kvr_engine_url_normalize(specs[k].url, norm, sizeof norm, err, sizeof err) &&
                     strcmp(norm, d->engines[i]->url) == 0;
        if (!listed)
            remove_at(d, i);
    }
    pthread_mutex_unlock(&d->mu);
    size_t failed = 0;
    for (size_t k = 0; k < n; k++) {
        kvr_engine_spec s = specs[k];
        s.origin = origin;
        kvr_discovery_result r = kvr_discovery_add(d, &s, err, sizeof err);
        if (r != KVR_DISCOVERY_ADDED && r != KVR_DISCOVERY_UPDATED &&
            r != KVR_DISCOVERY_UNCHANGED) {
            kvr_log(KVR_LOG_WARN, "discovery: engine %s: %s", specs[k].url ? specs[k].url : "",
                    err);
            failed++;
        }
    }
    return failed;
}

bool kvr_discovery_wait_poll(kvr_discovery *d, const char *url, double timeout_s)
{
    char norm[KVR_ENGINE_URL_MAX], err[64];
    if (!kvr_engine_url_normalize(url, norm, sizeof norm, err, sizeof err))
        return false;
    double end = kvr_clock_mono() + timeout_s;
    struct timespec ts;
    kvr_discovery_deadline(&ts, timeout_s);
    pthread_mutex_lock(&d->mu);
    size_t at = find_url(d, norm);
    bool done = false;
    if (at != SIZE_MAX) {
        kvr_disc_engine *e = d->engines[at];
        uint64_t uid = e->uid, want = e->polls_started + 1;
        poll_soon(d, e);
        while (!atomic_load(&d->stop) && kvr_clock_mono() < end) {
            e = kvr_discovery_find_uid(d, uid);
            if (!e || e->polls_done >= want) {
                done = e != NULL;
                break;
            }
            pthread_cond_timedwait(&d->polled, &d->mu, &ts);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return done;
}

/* ---- snapshots ------------------------------------------------------------- */

static double since(double now, double t) { return t > 0 ? now - t : -1; }

static bool engine_info(const kvr_disc_engine *e, double now, kvr_engine_info *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->url, e->url, sizeof out->url);
    out->kind = e->spec.kind;
    out->origin = e->spec.origin;
    out->worker_id = e->worker_id;
    snprintf(out->model_name, sizeof out->model_name, "%s",
             e->model_override[0] ? e->model_override : e->good.info.model_name);
    memcpy(out->routing_group, e->group, sizeof out->routing_group);
    out->state = e->state;
    memcpy(out->reason, e->reason, sizeof out->reason);
    memcpy(out->last_error, e->last_error, sizeof out->last_error);
    out->seconds_since_added = now - e->added_at;
    out->seconds_since_poll = since(now, e->last_poll_at);
    out->seconds_since_valid = since(now, e->last_valid_at);
    out->polls = e->polls;
    out->poll_failures = e->poll_failures;
    out->consecutive_failures = e->consecutive_failures;
    out->read = e->good.info;
    if (!e->good.n_ranks)
        return true;
    out->ranks = malloc(e->good.n_ranks * sizeof *out->ranks);
    if (!out->ranks)
        return false;
    memcpy(out->ranks, e->good.ranks, e->good.n_ranks * sizeof *out->ranks);
    out->n_ranks = e->good.n_ranks;
    for (size_t i = 0; i < out->n_ranks; i++)
        out->ranks_registered += out->ranks[i].registered;
    return true;
}

int kvr_discovery_list(kvr_discovery *d, kvr_engine_infos *out)
{
    memset(out, 0, sizeof *out);
    if (!d)
        return 0;
    pthread_mutex_lock(&d->mu);
    double now = kvr_clock_mono();
    int rc = 0;
    out->counters = d->c;
    out->items = calloc(d->n_engines ? d->n_engines : 1, sizeof *out->items);
    if (!out->items)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < d->n_engines; i++) {
        if (!engine_info(d->engines[i], now, &out->items[i]))
            rc = -1;
        out->n = i + 1;
        out->by_state[d->engines[i]->state]++;
    }
    pthread_mutex_unlock(&d->mu);
    if (rc != 0)
        kvr_engine_infos_free(out);
    return rc;
}

void kvr_engine_infos_free(kvr_engine_infos *l)
{
    for (size_t i = 0; l->items && i < l->n; i++)
        free(l->items[i].ranks);
    free(l->items);
    memset(l, 0, sizeof *l);
}

const kvr_engine_info *kvr_engine_infos_find(const kvr_engine_infos *l, const char *model,
                                             const char *group, uint64_t worker_id)
{
    for (size_t i = 0; i < l->n; i++) {
        const kvr_engine_info *e = &l->items[i];
        if (e->worker_id == worker_id && e->ranks_registered && strcmp(e->model_name, model) == 0 &&
            strcmp(e->routing_group, group) == 0)
            return e;
    }
    return NULL;
}
