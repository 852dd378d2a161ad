/* Registry lifecycle, record memory, the list snapshot and observers. The
 * change operations are in register.c; start reading there. */
#include <stdlib.h>
#include <string.h>

#include "registry/registry_internal.h"
#include "util/grow.h"

static const char *const origin_names[KVR_ORIGIN_COUNT] = {
    [KVR_ORIGIN_HTTP] = "http",         [KVR_ORIGIN_CONFIG] = "config",
    [KVR_ORIGIN_CLI] = "cli",           [KVR_ORIGIN_PEER] = "peer",
    [KVR_ORIGIN_DISCOVERY] = "discovery", [KVR_ORIGIN_CLUSTER] = "cluster",
};

const char *kvr_origin_name(kvr_origin o)
{
    return (unsigned)o < KVR_ORIGIN_COUNT ? origin_names[o] : "unknown";
}

int kvr_origin_from_name(const char *name)
{
    for (int i = 0; name && i < KVR_ORIGIN_COUNT; i++)
        if (strcmp(name, origin_names[i]) == 0)
            return i;
    return -1;
}

static const char *const result_names[KVR_REGISTRY_RESULT_COUNT] = {
    [KVR_REGISTRY_CREATED] = "created",
    [KVR_REGISTRY_UNCHANGED] = "unchanged",
    [KVR_REGISTRY_UPDATED] = "updated",
    [KVR_REGISTRY_RESET] = "reset",
    [KVR_REGISTRY_LISTENER_RESTARTED] = "listener_restarted",
    [KVR_REGISTRY_INVALID] = "invalid",
    [KVR_REGISTRY_BLOCK_SIZE_CONFLICT] = "block_size_conflict",
    [KVR_REGISTRY_WORKER_LIMIT] = "worker_limit",
    [KVR_REGISTRY_NO_MEMORY] = "no_memory",
    [KVR_REGISTRY_STOPPED] = "stopped",
    [KVR_REGISTRY_NO_DESCRIPTORS] = "no_descriptors",
};

uint64_t kvr_registry_refused(kvr_registry *r, kvr_registry_result limit)
{
    if (limit == KVR_REGISTRY_WORKER_LIMIT)
        return atomic_load(&r->refused_worker_limit);
    if (limit == KVR_REGISTRY_NO_DESCRIPTORS)
        return atomic_load(&r->refused_descriptors);
    return 0;
}

const char *kvr_registry_result_name(kvr_registry_result r)
{
    return (unsigned)r < KVR_REGISTRY_RESULT_COUNT ? result_names[r] : "unknown";
}

bool kvr_registry_result_ok(kvr_registry_result r)
{
    return r <= KVR_REGISTRY_LISTENER_RESTARTED;
}

static const char *const unreg_names[KVR_UNREG_RESULT_COUNT] = {
    [KVR_UNREG_REMOVED] = "removed",
    [KVR_UNREG_NOT_FOUND] = "not_found",
    [KVR_UNREG_INVALID] = "invalid",
    [KVR_UNREG_NO_MEMORY] = "no_memory",
    [KVR_UNREG_STOPPED] = "stopped",
};

const char *kvr_unregister_result_name(kvr_unregister_result r)
{
    return (unsigned)r < KVR_UNREG_RESULT_COUNT ? unreg_names[r] : "unknown";
}

kvr_registry *kvr_registry_create(kvr_source *src, const kvr_registry_config *cfg)
{
    if (!src)
        return NULL;
    kvr_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->src = src;
    pthread_mutex_init(&r->mu, NULL);
    atomic_init(&r->max_workers, cfg ? cfg->max_workers : 0);
    return r;
}

void kvr_registry_destroy(kvr_registry *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_ws; i++)
        reg_worker_free(r->ws[i]);
    free(r->ws);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void kvr_registry_set_max_workers(kvr_registry *r, size_t max_workers)
{
    atomic_store(&r->max_workers, max_workers);
}

/* ---- record memory ----------------------------------------------------- */

static char *dup_or_null(const char *s, bool *ok)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *ok = false;
    return d;
}

/* Every string field of kvr_worker_settings is copied here; a new string
 * field there needs a line here and in reg_settings_free. */
bool reg_settings_dup(kvr_worker_settings *dst, const kvr_worker_settings *src)
{
    bool ok = true;
    *dst = *src;
    const char *group = src->routing_group && src->routing_group[0] ? src->routing_group
                                                                    : KVR_DEFAULT_ROUTING_GROUP;
    dst->model_name = dup_or_null(src->model_name, &ok);
    dst->routing_group = dup_or_null(group, &ok);
    dst->lora_name = src->lora_name && src->lora_name[0] ? dup_or_null(src->lora_name, &ok) : NULL;
    if (!ok)
        reg_settings_free(dst);
    return ok;
}

void reg_settings_free(kvr_worker_settings *s)
{
    free((char *)s->model_name);
    free((char *)s->routing_group);
    free((char *)s->lora_name);
    s->model_name = s->routing_group = s->lora_name = NULL;
}

void reg_rank_free(reg_rank *rk)
{
    free(rk->endpoint);
    free(rk->replay_endpoint);
    free(rk->topic);
    rk->endpoint = rk->replay_endpoint = rk->topic = NULL;
}

void reg_worker_free(reg_worker *rw)
{
    if (!rw)
        return;
    for (size_t i = 0; i < rw->n_ranks; i++)
        reg_rank_free(&rw->ranks[i]);
    free(rw->ranks);
    reg_settings_free(&rw->s);
    free(rw);
}

void reg_view(const reg_worker *rw, const reg_rank *rk, kvr_registration *out)
{
    memset(out, 0, sizeof *out);
    out->settings = rw->s;
    out->dp_rank = rk->rank;
    out->endpoint = rk->endpoint;
    out->replay_endpoint = rk->replay_endpoint;
    out->topic = rk->topic;
    out->origin = rk->origin;
}

/* ---- list ---------------------------------------------------------------- */

static bool registration_dup(kvr_registration *dst, const kvr_registration *src)
{
    bool ok = reg_settings_dup(&dst->settings, &src->settings);
    dst->dp_rank = src->dp_rank;
    dst->origin = src->origin;
    dst->endpoint = dup_or_null(src->endpoint, &ok);
    dst->replay_endpoint = dup_or_null(src->replay_endpoint, &ok);
    dst->topic = dup_or_null(src->topic, &ok);
    return ok;
}

static void registration_free(kvr_registration *g)
{
    reg_settings_free(&g->settings);
    free((char *)g->endpoint);
    free((char *)g->replay_endpoint);
    free((char *)g->topic);
}

int kvr_registry_list(kvr_registry *r, kvr_registrations *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_rank_recs;
    kvr_registration *items = n ? calloc(n, sizeof *items) : NULL;
    bool ok = items || n == 0;
    size_t k = 0;
    for (size_t i = 0; ok && i < r->n_ws; i++)
        for (size_t j = 0; ok && j < r->ws[i]->n_ranks; j++) {
            kvr_registration v;
            reg_view(r->ws[i], &r->ws[i]->ranks[j], &v);
            ok = registration_dup(&items[k++], &v);
        }
    pthread_mutex_unlock(&r->mu);
    out->items = items;
    out->n = k;
    if (!ok) {
        kvr_registrations_free(out);
        return -1;
    }
    return 0;
}

void kvr_registrations_free(kvr_registrations *l)
{
    for (size_t i = 0; i < l->n; i++)
        registration_free(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

size_t kvr_registry_workers(kvr_registry *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_ws;
    pthread_mutex_unlock(&r->mu);
    return n;
}

size_t kvr_registry_ranks(kvr_registry *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_rank_recs;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ---- observers ----------------------------------------------------------- */

void reg_notify(kvr_registry *r, kvr_reg_event_kind kind, kvr_registry_result res,
                const kvr_registration *reg)
{
    kvr_reg_event ev = {kind, res, reg};
    for (size_t i = 0; i < r->n_obs; i++)
        r->obs[i].fn(r->obs[i].user, &ev);
}

typedef struct {
    kvr_registry *r;
    reg_observer o;
    bool add;
    int rc;
} observe_op;

static void do_observe(kvr_source *src, void *arg)
{
    (void)src;
    observe_op *op = arg;
    kvr_registry *r = op->r;
    if (op->add) {
        if (r->n_obs == KVR_REGISTRY_MAX_OBSERVERS)
            return;
        r->obs[r->n_obs++] = op->o;
        op->rc = 0;
        return;
    }
    for (size_t i = 0; i < r->n_obs; i++)
        if (r->obs[i].fn == op->o.fn && r->obs[i].user == op->o.user) {
            memmove(&r->obs[i], &r->obs[i + 1], (r->n_obs - i - 1) * sizeof r->obs[0]);
            r->n_obs--;
            break;
        }
}

int kvr_registry_observe(kvr_registry *r, kvr_registry_observer_fn fn, void *user)
{
    observe_op op = {r, {fn, user}, true, -1};
    if (!fn || kvr_source_run(r->src, do_observe, &op) != 0)
        return -1;
    return op.rc;
}

void kvr_registry_unobserve(kvr_registry *r, kvr_registry_observer_fn fn, void *user)
{
    observe_op op = {r, {fn, user}, false, 0};
    if (kvr_source_run(r->src, do_observe, &op) != 0) {
        /* The ingest thread is gone: nothing can call fn any more. */
        do_observe(r->src, &op);
    }
}
