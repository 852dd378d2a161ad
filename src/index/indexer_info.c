/* Library facade, read side: worker snapshots for /workers and /metrics,
 * and index dump/load for peer recovery. */
#include "index/indexer_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static void rank_info(kvr_rank_state *r, kvr_rank_info *out)
{
    pthread_mutex_lock(&r->mu);
    out->dp_rank = r->rank;
    out->effective_mode = kvr_normalizer_effective_mode(r->norm);
    out->wide_seen = kvr_normalizer_wide_seen(r->norm);
    out->batches = r->batches;
    out->events_stored = r->events_stored;
    out->events_removed = r->events_removed;
    out->events_cleared = r->events_cleared;
    out->events_dropped = r->events_dropped;
    out->blocks_stored = r->blocks_stored;
    out->blocks_removed = r->blocks_removed;
    kvr_normalizer_counters_get(r->norm, &out->norm);
    pthread_mutex_unlock(&r->mu);
}

/* Caller holds the registry lock (shared). */
static void worker_info(kvr_worker *w, kvr_worker_info *out)
{
    /* Only what is written: the whole struct is 15 KB for 64 rank slots,
     * and zeroing it was 16 M instructions of a 1000-worker /metrics. */
    memset(out, 0, offsetof(kvr_worker_info, ranks));
    out->worker = w;
    kvr_group *g = w->grp;
    memcpy(out->model_name, g->model, KVR_NAME_MAX);
    memcpy(out->routing_group, g->group, KVR_NAME_MAX);
    memcpy(out->lora_name, w->conf.lora, KVR_NAME_MAX);
    out->worker_id = w->worker_id;
    out->block_size = w->conf.block_size;
    out->mm_identity = w->conf.mm_identity;
    out->accepts_mm_hashes = kvr_ix_accepts_effective(w);
    out->accepts_mm_hashes_explicit = w->conf.accepts_raw >= 0;
    out->is_eagle = w->conf.is_eagle;
    out->engine = w->conf.engine;
    out->kv_events = w->conf.kv_events;
    out->has_image_token_id = w->conf.has_image_token_id;
    out->image_token_id = w->conf.image_token_id;
    out->max_total_num_tokens = w->conf.max_total_num_tokens;
    out->kv_capacity_tokens = kvr_ix_kv_capacity(w);
    out->lora_seed = w->lora_seed;
    out->wide_seen = atomic_load(&w->wide_seen);
    out->resets = w->resets;
    out->batches_rejected = atomic_load(&w->batches_rejected);

    /* Copy the table under the worker mutex, read each rank under its own
     * mutex afterwards: rank states live until the exclusive registry lock,
     * which we exclude by holding it shared. */
    pthread_mutex_lock(&w->mu);
    size_t n = w->n_ranks;
    kvr_rank_state **ranks = n ? malloc(n * sizeof(*ranks)) : NULL;
    if (ranks)
        memcpy(ranks, w->ranks, n * sizeof(*ranks));
    out->n_declared_ranks = (uint32_t)(w->n_declared < KVR_MAX_RANKS_INFO ? w->n_declared
                                                                         : KVR_MAX_RANKS_INFO);
    if (out->n_declared_ranks)
        memcpy(out->declared_ranks, w->declared, out->n_declared_ranks * sizeof *w->declared);
    pthread_mutex_unlock(&w->mu);
    if (!ranks)
        return;
    out->n_ranks_total = (uint32_t)n;
    for (size_t i = 0; i < n && i < KVR_MAX_RANKS_INFO; i++) {
        kvr_rank_info *ri = &out->ranks[out->n_ranks++];
        memset(ri, 0, sizeof *ri);
        rank_info(ranks[i], ri);
    }
    free(ranks);
}

void kvr_worker_info_get(kvr_indexer *ix, kvr_worker *w, kvr_worker_info *out)
{
    pthread_rwlock_rdlock(&ix->lock);
    worker_info(w, out);
    pthread_rwlock_unlock(&ix->lock);
}

size_t kvr_indexer_list(kvr_indexer *ix, const char *model, const char *group,
                        kvr_worker_info *out, size_t cap)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&ix->lock);
    /* Groups are listed newest first on the lock-free list; the order within
     * a group is registration order. */
    for (kvr_group *g = atomic_load_explicit(&ix->groups, memory_order_acquire); g; g = g->next) {
        if (model && strcmp(g->model, model) != 0)
            continue;
        if (model && group && strcmp(g->group, kvr_ix_group_name(group)) != 0)
            continue;
        for (size_t i = 0; i < g->n_workers; i++, n++)
            if (out && n < cap)
                worker_info(g->workers[i], &out[n]);
    }
    pthread_rwlock_unlock(&ix->lock);
    return n;
}

typedef struct {
    kvr_indexer_dump_fn fn;
    void *user;
    const kvr_group *g;
} dump_ctx;

static void dump_one(void *user, const kvr_dump_store *ev)
{
    dump_ctx *c = user;
    c->fn(c->user, c->g->model, c->g->group, ev);
}

void kvr_indexer_dump(kvr_indexer *ix, kvr_indexer_dump_fn fn, void *user)
{
    if (!ix || !fn)
        return;
    /* No registry lock: indexes outlive every registration and take their
     * own read lock, so the callback may call back into the indexer. */
    for (kvr_group *g = atomic_load_explicit(&ix->groups, memory_order_acquire); g; g = g->next) {
        dump_ctx c = {fn, user, g};
        kvr_index_dump(g->idx, dump_one, &c);
    }
}

kvr_drop_reason kvr_indexer_load_store(kvr_indexer *ix, const char *model, const char *group,
                                       const kvr_dump_store *ev)
{
    if (!ix || !ev || ev->n == 0 || ev->n > KVR_WIRE_MAX_HASHES || !ev->engine_hashes ||
        !ev->local_hashes)
        return KVR_DROP_MALFORMED_EVENT;
    if ((unsigned)ev->tier >= KVR_TIER_COUNT)
        return KVR_DROP_UNKNOWN_TIER;
    kvr_group *g = kvr_ix_group_get(ix, model, group);
    if (!g)
        return KVR_DROP_MALFORMED_EVENT;
    /* shared: a concurrent reset of this worker either sees the ownership
     * recorded or runs after the store */
    pthread_rwlock_rdlock(&ix->lock);
    kvr_drop_reason why = KVR_DROP_MALFORMED_EVENT;
    kvr_owner o = kvr_index_owner(g->idx, ev->worker_id, ev->dp_rank);
    if (o != KVR_OWNER_NONE) {
        pthread_mutex_lock(&g->loaded_mu);
        int put = kvr_u64map_put(&g->loaded, o, ev->worker_id);
        pthread_mutex_unlock(&g->loaded_mu);
        if (put >= 0)
            why = kvr_index_store(g->idx, o, ev->tier, ev->has_parent, ev->parent,
                                  ev->engine_hashes, ev->local_hashes, ev->n);
    }
    pthread_rwlock_unlock(&ix->lock);
    return why;
}

uint64_t kvr_indexer_heap_bytes(kvr_indexer *ix)
{
    uint64_t total = 0;
    for (kvr_group *g = atomic_load_explicit(&ix->groups, memory_order_acquire); g; g = g->next) {
        kvr_index_stats st;
        kvr_index_stats_get(g->idx, &st);
        total += st.bytes;
    }
    return total;
}
