/* Library facade, registry part: indexer lifecycle, (model, group) indexes,
 * worker registration with its reset rules, and the match helpers. */
#include "index/indexer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/hash.h"
#include "util/grow.h"

static const char *const reg_names[] = {
    [KVR_REG_CREATED] = "created",
    [KVR_REG_UNCHANGED] = "unchanged",
    [KVR_REG_RESET] = "reset",
    [KVR_REG_BLOCK_SIZE_CONFLICT] = "block_size_conflict",
    [KVR_REG_INVALID] = "invalid",
    [KVR_REG_UPDATED] = "updated",
};

const char *kvr_reg_result_name(kvr_reg_result r)
{
    return (unsigned)r <= KVR_REG_UPDATED ? reg_names[r] : "unknown";
}

const char *kvr_ix_group_name(const char *group)
{
    return (group && group[0]) ? group : KVR_DEFAULT_ROUTING_GROUP;
}

bool kvr_ix_name_ok(const char *name, bool allow_empty)
{
    if (!name)
        return allow_empty;
    size_t n = strnlen(name, KVR_NAME_MAX);
    return n < KVR_NAME_MAX && (allow_empty || n > 0);
}

kvr_indexer *kvr_indexer_create(void)
{
    kvr_indexer *ix = calloc(1, sizeof(*ix));
    if (!ix)
        return NULL;
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    /* Registrations must not starve behind a steady stream of batches;
     * matches do not take this lock, so writer preference costs them
     * nothing. */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&ix->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    pthread_mutex_init(&ix->groups_mu, NULL);
    atomic_init(&ix->groups, NULL);
    return ix;
}

static void worker_free(kvr_worker *w)
{
    for (size_t i = 0; i < w->n_ranks; i++)
        kvr_ix_rank_destroy(w->ranks[i]);
    free(w->ranks);
    free(w->declared);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void kvr_indexer_destroy(kvr_indexer *ix)
{
    if (!ix)
        return;
    kvr_group *g = atomic_load(&ix->groups);
    while (g) {
        kvr_group *next = g->next;
        for (size_t i = 0; i < g->n_workers; i++)
            worker_free(g->workers[i]);
        free(g->workers);
        kvr_index_destroy(g->idx);
        kvr_u64map_free(&g->loaded);
        pthread_mutex_destroy(&g->loaded_mu);
        free(g);
        g = next;
    }
    pthread_mutex_destroy(&ix->groups_mu);
    pthread_rwlock_destroy(&ix->lock);
    free(ix);
}

kvr_group *kvr_ix_group_find(kvr_indexer *ix, const char *model, const char *group)
{
    if (!ix || !model)
        return NULL;
    group = kvr_ix_group_name(group);
    for (kvr_group *g = atomic_load_explicit(&ix->groups, memory_order_acquire); g; g = g->next)
        if (strcmp(g->model, model) == 0 && strcmp(g->group, group) == 0)
            return g;
    return NULL;
}

kvr_group *kvr_ix_group_get(kvr_indexer *ix, const char *model, const char *group)
{
    group = kvr_ix_group_name(group);
    if (!kvr_ix_name_ok(model, false) || !kvr_ix_name_ok(group, false))
        return NULL;
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    if (g)
        return g;
    pthread_mutex_lock(&ix->groups_mu);
    g = kvr_ix_group_find(ix, model, group);
    if (!g) {
        g = calloc(1, sizeof(*g));
        if (g)
            g->idx = kvr_index_create();
        if (g && g->idx) {
            strcpy(g->model, model);
            strcpy(g->group, group);
            atomic_init(&g->block_size, 0);
            atomic_init(&g->caps_gen, 1); /* 0 names no snapshot */
            pthread_mutex_init(&g->loaded_mu, NULL);
            kvr_u64map_init(&g->loaded);
            g->next = atomic_load_explicit(&ix->groups, memory_order_relaxed);
            /* release: a reader that sees g sees it fully built */
            atomic_store_explicit(&ix->groups, g, memory_order_release);
        } else {
            free(g);
            g = NULL;
        }
    }
    pthread_mutex_unlock(&ix->groups_mu);
    return g;
}

static bool settings_valid(const kvr_worker_settings *s)
{
    return s && kvr_ix_name_ok(s->model_name, false) && kvr_ix_name_ok(s->routing_group, true) &&
           kvr_ix_name_ok(s->lora_name, true) && s->block_size > 0 &&
           s->block_size <= KVR_MAX_BLOCK_SIZE && (unsigned)s->mm_identity <= KVR_MM_AUTO &&
           s->accepts_mm_hashes >= -1 && s->accepts_mm_hashes <= 1 &&
           (unsigned)s->engine < KVR_ENGINE_COUNT &&
           !(s->has_image_token_id && s->image_token_id == KVR_WIDE_SENTINEL) &&
           (unsigned)s->kv_events <= KVR_KV_EVENTS_OFF && isfinite(s->prefill_tps) &&
           s->prefill_tps >= 0 && s->max_total_num_tokens <= KVR_MAX_KV_CAPACITY_TOKENS;
}

const char *kvr_kv_events_name(kvr_kv_events k)
{
    switch (k) {
    case KVR_KV_EVENTS_AUTO: return "auto";
    case KVR_KV_EVENTS_ON: return "on";
    case KVR_KV_EVENTS_OFF: return "off";
    }
    return NULL;
}

static void conf_from_settings(const kvr_worker_settings *s, kvr_worker_conf *c)
{
    memset(c, 0, sizeof(*c));
    c->block_size = s->block_size;
    if (s->lora_name)
        strcpy(c->lora, s->lora_name);
    c->mm_identity = s->mm_identity;
    c->accepts_raw = s->accepts_mm_hashes;
    /* SPEC §5 defaults: only auto keeps an unset value dynamic. */
    c->accepts_norm = s->accepts_mm_hashes;
    if (c->accepts_norm < 0 && s->mm_identity == KVR_MM_LEGACY)
        c->accepts_norm = 1;
    else if (c->accepts_norm < 0 && s->mm_identity == KVR_MM_ENGINE_WIDE)
        c->accepts_norm = 0;
    c->is_eagle = s->is_eagle;
    c->mm_capacity = s->mm_capacity ? s->mm_capacity : KVR_MM_DEFAULT_CAPACITY;
    c->engine = s->engine;
    c->has_image_token_id = s->has_image_token_id;
    c->image_token_id = s->has_image_token_id ? s->image_token_id : 0;
    c->kv_events = s->kv_events;
    c->prefill_tps = s->prefill_tps;
    c->max_total_num_tokens = s->max_total_num_tokens;
}

/* The settings whose change invalidates indexed state (SPEC §5 rule 9). */
static bool conf_needs_reset(const kvr_worker_conf *a, const kvr_worker_conf *b)
{
    return a->block_size != b->block_size || a->mm_identity != b->mm_identity ||
           a->is_eagle != b->is_eagle || strcmp(a->lora, b->lora) != 0 ||
           a->mm_capacity != b->mm_capacity || a->engine != b->engine ||
           a->has_image_token_id != b->has_image_token_id ||
           a->image_token_id != b->image_token_id;
}

static void conf_apply(kvr_worker *w, const kvr_worker_conf *c)
{
    w->conf = *c;
    kvr_str lora = {c->lora, (uint32_t)strlen(c->lora)};
    kvr_str none = {NULL, 0};
    w->lora_seed = kvr_hash_seed(lora, none);
}

static kvr_worker *group_worker(kvr_group *g, uint64_t worker_id)
{
    for (size_t i = 0; i < g->n_workers; i++)
        if (g->workers[i]->worker_id == worker_id)
            return g->workers[i];
    return NULL;
}

static kvr_worker *worker_new(kvr_group *g, uint64_t worker_id, const kvr_worker_conf *c)
{
    if (KVR_GROW(g->workers, g->cap_workers, g->n_workers + 1) != 0)
        return NULL;
    kvr_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->grp = g;
    w->worker_id = worker_id;
    conf_apply(w, c);
    pthread_mutex_init(&w->mu, NULL);
    atomic_init(&w->wide_seen, false);
    atomic_init(&w->rank_bits, 0);
    atomic_init(&w->wide_ranks, false);
    atomic_init(&w->batches_rejected, 0);
    g->workers[g->n_workers++] = w;
    return w;
}

kvr_reg_result kvr_indexer_register(kvr_indexer *ix, const kvr_worker_settings *s,
                                    kvr_worker **out)
{
    if (out)
        *out = NULL;
    if (!ix || !settings_valid(s))
        return KVR_REG_INVALID;
    kvr_worker_conf conf;
    conf_from_settings(s, &conf);

    pthread_rwlock_wrlock(&ix->lock);
    kvr_reg_result res;
    kvr_group *g = kvr_ix_group_get(ix, s->model_name, s->routing_group);
    kvr_worker *w = g ? group_worker(g, s->worker_id) : NULL;
    if (!g) {
        res = KVR_REG_INVALID; /* out of memory */
        goto done;
    }
    /* Every registered worker of a group shares its block size, so one
     * other worker is enough to tell. */
    for (size_t i = 0; i < g->n_workers; i++) {
        if (g->workers[i] != w && g->workers[i]->conf.block_size != conf.block_size) {
            res = KVR_REG_BLOCK_SIZE_CONFLICT;
            goto done;
        }
    }
    if (!w) {
        w = worker_new(g, s->worker_id, &conf);
        res = w ? KVR_REG_CREATED : KVR_REG_INVALID;
    } else if (conf_needs_reset(&w->conf, &conf)) {
        kvr_ix_worker_drop_state(w);
        conf_apply(w, &conf);
        atomic_store(&w->wide_seen, false);
        atomic_store(&w->batches_rejected, 0);
        w->resets++;
        res = KVR_REG_RESET;
    } else {
        res = w->conf.accepts_norm != conf.accepts_norm || w->conf.kv_events != conf.kv_events ||
                      w->conf.prefill_tps != conf.prefill_tps ||
                      w->conf.max_total_num_tokens != conf.max_total_num_tokens
                  ? KVR_REG_UPDATED
                  : KVR_REG_UNCHANGED;
        /* These are read at request time only, so they change in place; the
         * raw accepts value is kept so /workers shows what was sent. */
        w->conf.accepts_norm = conf.accepts_norm;
        w->conf.accepts_raw = conf.accepts_raw;
        w->conf.kv_events = conf.kv_events;
        w->conf.prefill_tps = conf.prefill_tps;
        w->conf.max_total_num_tokens = conf.max_total_num_tokens;
    }
    if (w)
        atomic_store(&g->block_size, conf.block_size);
    if (w && res != KVR_REG_UNCHANGED)
        kvr_ix_caps_changed(g);
done:
    if (out && (res == KVR_REG_CREATED || res == KVR_REG_UNCHANGED || res == KVR_REG_RESET ||
                res == KVR_REG_UPDATED))
        *out = w;
    pthread_rwlock_unlock(&ix->lock);
    return res;
}

kvr_worker *kvr_indexer_find(kvr_indexer *ix, const char *model, const char *group,
                             uint64_t worker_id)
{
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    if (!g)
        return NULL;
    pthread_rwlock_rdlock(&ix->lock);
    kvr_worker *w = group_worker(g, worker_id);
    pthread_rwlock_unlock(&ix->lock);
    return w;
}

void kvr_indexer_unregister(kvr_indexer *ix, kvr_worker *w)
{
    if (!ix || !w)
        return;
    pthread_rwlock_wrlock(&ix->lock);
    kvr_group *g = w->grp;
    for (size_t i = 0; i < g->n_workers; i++) {
        if (g->workers[i] == w) {
            /* keep registration order for listings */
            memmove(&g->workers[i], &g->workers[i + 1],
                    (g->n_workers - i - 1) * sizeof(*g->workers));
            g->n_workers--;
            break;
        }
    }
    kvr_ix_worker_drop_state(w);
    worker_free(w);
    kvr_ix_caps_changed(g);
    pthread_rwlock_unlock(&ix->lock);
}

kvr_index *kvr_indexer_index(kvr_indexer *ix, const char *model, const char *group)
{
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    return g ? g->idx : NULL;
}

uint32_t kvr_indexer_block_size(kvr_indexer *ix, const char *model, const char *group)
{
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    return g ? atomic_load(&g->block_size) : 0;
}

size_t kvr_indexer_match_hashes(kvr_indexer *ix, const char *model, const char *group,
                                kvr_match_ctx *ctx, const uint64_t *local_hashes, size_t n,
                                const kvr_match_entry **out)
{
    *out = NULL;
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    if (!g || !ctx)
        return 0;
    return kvr_index_match(g->idx, ctx, local_hashes, n, out);
}

size_t kvr_indexer_match_tokens(kvr_indexer *ix, const char *model, const char *group,
                                kvr_match_ctx *ctx, const uint32_t *tokens, size_t n_tokens,
                                bool eagle, uint64_t seed, const kvr_match_entry **out)
{
    *out = NULL;
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    uint32_t bs = g ? atomic_load(&g->block_size) : 0;
    if (!g || !ctx || bs == 0)
        return 0;
    uint64_t stack[512];
    size_t n = kvr_hash_block_count(n_tokens, bs, eagle);
    uint64_t *hashes = n <= 512 ? stack : malloc(n * sizeof(*hashes));
    if (!hashes)
        return 0;
    kvr_hash_blocks(tokens, n_tokens, bs, eagle, seed, hashes, n);
    size_t res = kvr_index_match(g->idx, ctx, hashes, n, out);
    if (hashes != stack)
        free(hashes);
    return res;
}

bool kvr_ix_accepts_effective(const kvr_worker *w)
{
    if (w->conf.accepts_norm >= 0)
        return w->conf.accepts_norm == 1;
    /* auto + unset: callers may send identities until the engine shows it
     * owns them (SPEC §5) */
    return !atomic_load(&w->wide_seen);
}

uint64_t kvr_ix_kv_capacity(kvr_worker *w)
{
    if (w->conf.max_total_num_tokens)
        return w->conf.max_total_num_tokens;
    return atomic_load_explicit(&w->peak_gpu_blocks, memory_order_relaxed) * w->conf.block_size;
}

/* Caller holds the registry lock (shared). */
static void caps_fill(kvr_worker *w, kvr_worker_caps *c)
{
    c->worker_id = w->worker_id;
    c->block_size = w->conf.block_size;
    c->is_eagle = w->conf.is_eagle;
    c->accepts_mm_hashes = kvr_ix_accepts_effective(w);
    c->mm_identity = w->conf.mm_identity;
    c->engine = w->conf.engine;
    c->lora_seed = w->lora_seed;
    /* the name's bytes only: the whole array per worker per /route was
     * 256 KB of copying with 1000 workers */
    size_t n = w->conf.lora[0] ? strnlen(w->conf.lora, sizeof(c->lora_name) - 1) : 0;
    if (n)
        memcpy(c->lora_name, w->conf.lora, n);
    c->lora_name[n] = 0;
    c->kv_events = w->conf.kv_events;
    c->prefill_tps = w->conf.prefill_tps;
    c->kv_capacity_tokens = kvr_ix_kv_capacity(w);
    c->rank_bits = atomic_load_explicit(&w->rank_bits, memory_order_relaxed);
    c->wide_ranks = atomic_load_explicit(&w->wide_ranks, memory_order_relaxed);
}

void kvr_worker_caps_get(kvr_indexer *ix, kvr_worker *w, kvr_worker_caps *out)
{
    pthread_rwlock_rdlock(&ix->lock);
    caps_fill(w, out);
    pthread_rwlock_unlock(&ix->lock);
}

size_t kvr_indexer_caps_list(kvr_indexer *ix, const char *model, const char *group,
                             kvr_worker_caps *out, size_t cap)
{
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    if (!g)
        return 0;
    pthread_rwlock_rdlock(&ix->lock);
    size_t n = g->n_workers;
    for (size_t i = 0; i < n && i < cap; i++)
        caps_fill(g->workers[i], &out[i]);
    pthread_rwlock_unlock(&ix->lock);
    return n;
}

size_t kvr_indexer_caps_list_since(kvr_indexer *ix, const char *model, const char *group,
                                   kvr_worker_caps *out, size_t cap, uint64_t *gen)
{
    kvr_group *g = kvr_ix_group_find(ix, model, group);
    if (!g)
        return 0;
    pthread_rwlock_rdlock(&ix->lock);
    /* registrations change it under the write lock, so it goes with
     * n_workers; rank publications bump it after their stores (acquire:
     * a copy taken at this generation sees them) */
    uint64_t now = atomic_load_explicit(&g->caps_gen, memory_order_acquire);
    size_t n = g->n_workers;
    if (*gen != now || n > cap) {
        for (size_t i = 0; i < n && i < cap; i++)
            caps_fill(g->workers[i], &out[i]);
        *gen = n <= cap ? now : 0;
    }
    pthread_rwlock_unlock(&ix->lock);
    return n;
}
