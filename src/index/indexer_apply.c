/* Library facade, ingestion part: per-(worker, rank) state and the
 * normalize -> convert -> index pipeline for decoded batches. */
#include "index/indexer_internal.h"

#include "kvrouter/log.h"
#include "util/grow.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kvr_rank_state *kvr_ix_rank_create(kvr_worker *w, uint32_t rank)
{
    kvr_rank_state *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    kvr_normalizer_config cfg = {
        .block_size = w->conf.block_size,
        .eagle = w->conf.is_eagle,
        .mm_identity = w->conf.mm_identity,
        .mm_capacity = w->conf.mm_capacity,
        .worker_id = w->worker_id,
        .dp_rank = rank,
        .has_image_token_id = w->conf.has_image_token_id,
        .image_token_id = w->conf.image_token_id,
    };
    pthread_mutex_init(&r->mu, NULL);
    r->rank = rank;
    r->norm = kvr_normalizer_create(&cfg);
    r->conv = kvr_converter_create(w->conf.block_size, w->conf.is_eagle,
                                   w->conf.lora[0] ? w->conf.lora : NULL);
    r->owner = kvr_index_owner(w->grp->idx, w->worker_id, rank);
    if (!r->norm || !r->conv || r->owner == KVR_OWNER_NONE) {
        kvr_ix_rank_destroy(r);
        return NULL;
    }
    return r;
}

void kvr_ix_rank_destroy(kvr_rank_state *r)
{
    if (!r)
        return;
    if (r->norm)
        kvr_normalizer_destroy(r->norm);
    if (r->conv)
        kvr_converter_destroy(r->conv);
    pthread_mutex_destroy(&r->mu);
    free(r->local);
    free(r);
}

/* The ranks with state as kvr_worker_caps reads them, without w->mu;
 * after every change to w->ranks. */
static void publish_ranks(kvr_worker *w)
{
    uint64_t bits = 0;
    bool wide = false;
    for (size_t i = 0; i < w->n_ranks; i++) {
        uint32_t r = w->ranks[i]->rank;
        if (r < KVR_CAPS_RANKS)
            bits |= 1ull << r;
        else
            wide = true;
    }
    if (atomic_load_explicit(&w->rank_bits, memory_order_relaxed) == bits &&
        atomic_load_explicit(&w->wide_ranks, memory_order_relaxed) == wide)
        return;
    atomic_store_explicit(&w->rank_bits, bits, memory_order_relaxed);
    atomic_store_explicit(&w->wide_ranks, wide, memory_order_relaxed);
    kvr_ix_caps_changed(w->grp);
}

kvr_rank_state *kvr_ix_rank_get(kvr_worker *w, uint32_t rank, bool create)
{
    kvr_rank_state *found = NULL;
    pthread_mutex_lock(&w->mu);
    size_t at = 0; /* where rank is, or would be inserted in order */
    while (at < w->n_ranks && w->ranks[at]->rank < rank)
        at++;
    if (at < w->n_ranks && w->ranks[at]->rank == rank)
        found = w->ranks[at];
    if (!found && create && w->n_ranks < KVR_MAX_DP_RANKS) {
        kvr_grow((void **)&w->ranks, &w->cap_ranks, w->n_ranks + 1, sizeof *w->ranks, 4);
        if (w->n_ranks < w->cap_ranks) {
            found = kvr_ix_rank_create(w, rank);
            if (found) {
                memmove(&w->ranks[at + 1], &w->ranks[at], (w->n_ranks - at) * sizeof(*w->ranks));
                w->ranks[at] = found;
                w->n_ranks++;
                publish_ranks(w);
            }
        }
    }
    pthread_mutex_unlock(&w->mu);
    return found;
}

void kvr_ix_rank_clear(kvr_worker *w, kvr_rank_state *r)
{
    kvr_index_clear_owner(w->grp->idx, r->owner);
    r->gpu_held = 0; /* as an AllBlocksCleared: the restarted engine holds nothing */
    kvr_normalizer_reset(r->norm);
    kvr_converter_reset(r->conv);
}

void kvr_ix_worker_drop_state(kvr_worker *w)
{
    kvr_group *g = w->grp;
    for (size_t i = 0; i < w->n_ranks; i++) {
        kvr_index_clear_owner(g->idx, w->ranks[i]->owner);
        kvr_ix_rank_destroy(w->ranks[i]);
    }
    w->n_ranks = 0;
    publish_ranks(w);

    /* Ownerships loaded from a peer's dump for this worker id. Collected
     * first: the map must not change while iterated. */
    pthread_mutex_lock(&g->loaded_mu);
    size_t n = kvr_u64map_len(&g->loaded) + (g->loaded.has_zero ? 1 : 0);
    uint64_t *owners = n ? malloc(n * sizeof(*owners)) : NULL;
    size_t k = 0, it = 0;
    uint64_t key, val;
    while (owners && kvr_u64map_next(&g->loaded, &it, &key, &val))
        if (val == w->worker_id && k < n)
            owners[k++] = key;
    for (size_t i = 0; i < k; i++) {
        kvr_index_clear_owner(g->idx, (kvr_owner)owners[i]);
        kvr_u64map_del(&g->loaded, owners[i], NULL);
    }
    pthread_mutex_unlock(&g->loaded_mu);
    free(owners);
}

static bool ensure_local(kvr_rank_state *r, size_t n)
{
    if (n <= r->local_cap) /* the common case stays inline */
        return true;
    return kvr_grow((void **)&r->local, &r->local_cap, n, sizeof *r->local, 64) == 0;
}

static void count_drop(kvr_rank_state *r, kvr_drop_reason reason)
{
    kvr_normalizer_count_drop(r->norm, reason);
    r->events_dropped++;
}

/* Converts a store into r->local; warns about duplicate ids. */
static kvr_drop_reason convert_store(kvr_worker *w, kvr_rank_state *r, const kvr_norm_event *ne)
{
    kvr_drop_reason why = kvr_convert_store(r->conv, ne, r->local);
    if (why == KVR_DROP_DUPLICATE_IDS) {
        /* An engine bug, not a reset: applying it as a clear would wipe the
         * worker's whole prefix set (SPEC §5 rule 1). Warn at powers of two
         * so a flood stays visible without filling the log. */
        r->dup_warnings++;
        if ((r->dup_warnings & (r->dup_warnings - 1)) == 0)
            kvr_log_at(KVR_LOG_WARN, KVR_LOG_WORKER_RANK(w->worker_id, r->rank),
                       "store with repeated block ids ignored (%" PRIu64 " so far)",
                       r->dup_warnings);
    }
    return why;
}

/* The occupancy that estimates the capacity (kvr_rank_state.gpu_held): n is
 * the ownerships a store gained (kvr_index_store_locked's net count), not
 * its length: an engine re-storing blocks it holds fills nothing more. */
static void gpu_stored(kvr_worker *w, kvr_rank_state *r, kvr_tier tier, int64_t n)
{
    if (tier != KVR_TIER_GPU)
        return;
    if (n < 0) {
        uint64_t left = (uint64_t)-n;
        r->gpu_held -= left < r->gpu_held ? left : r->gpu_held;
        return;
    }
    r->gpu_held += (uint64_t)n;
    if (r->gpu_evicted &&
        r->gpu_held > atomic_load_explicit(&w->peak_gpu_blocks, memory_order_relaxed)) {
        atomic_store_explicit(&w->peak_gpu_blocks, r->gpu_held, memory_order_relaxed);
        kvr_ix_caps_changed(w->grp); /* kvr_worker_caps reads the estimate */
    }
}

/* Returns false when the event was dropped (already counted). */
static bool apply_store(kvr_worker *w, kvr_rank_state *r, const kvr_norm_event *ne)
{
    size_t n = ne->n_block_hashes;
    if (n == 0)
        return true;
    if (!ensure_local(r, n)) {
        count_drop(r, KVR_DROP_OVERSIZED_EVENT);
        return false;
    }
    kvr_drop_reason why = convert_store(w, r, ne);
    int64_t added = 0;
    if (why == KVR_DROP_NONE)
        why = kvr_index_store_locked(w->grp->idx, r->owner, ne->tier, ne->has_parent,
                                     ne->parent, ne->block_hashes, r->local, n, &added);
    gpu_stored(w, r, ne->tier, added); /* a store that stopped part way kept those */
    if (why != KVR_DROP_NONE) {
        count_drop(r, why);
        return false;
    }
    r->blocks_stored += n;
    return true;
}

static void apply_remove(kvr_worker *w, kvr_rank_state *r, const kvr_norm_event *ne)
{
    size_t n = ne->n_block_hashes;
    if (n == 0)
        return; /* SPEC §5 rule 4: succeeds without looking anything up */
    size_t unknown =
        kvr_index_remove_locked(w->grp->idx, r->owner, ne->tier, ne->block_hashes, n);
    /* Counted per handle: the gauge an operator needs is how many removals
     * referenced blocks we never indexed. */
    for (size_t i = 0; i < unknown; i++)
        kvr_normalizer_count_drop(r->norm, KVR_DROP_BLOCK_NOT_FOUND);
    size_t removed = n - (unknown < n ? unknown : n);
    r->blocks_removed += removed;
    if (ne->tier == KVR_TIER_GPU && removed) {
        if (!r->gpu_evicted) {
            r->gpu_evicted = true;
            gpu_stored(w, r, KVR_TIER_GPU, 0); /* the occupancy it was full at */
        }
        r->gpu_held -= removed < r->gpu_held ? removed : r->gpu_held;
    }
    kvr_convert_removed_tier(r->conv, ne->tier, ne->block_hashes, n);
}

/* Pending run of converted one-block stores, each the child of the one
 * before (SGLang sends one BlockStored per page). Applied as one
 * kvr_index_store: a chain the index can prefetch ahead in, instead of one
 * cold child-table probe per block. Only
 * one-block stores join, so every block is an event boundary and a failed
 * call can be replayed event by event (see run_flush). */
#define RUN_MAX 64
typedef struct {
    size_t n; /* blocks = events */
    kvr_tier tier;
    bool has_parent;
    uint64_t parent;
    uint64_t seen[4]; /* Bloom bits of the engine hashes in the run */
    uint64_t engine[RUN_MAX], local[RUN_MAX];
} store_run;

/* One of 256 bits per engine hash: with at most 64 hashes in a run, the
 * scan of run_continues runs for about one event in ten instead of all. */
static unsigned seen_bit(uint64_t e) { return (unsigned)(kvr_mix64(e) >> 56); }

static bool run_continues(const store_run *run, const kvr_norm_event *ne)
{
    if (run->n == 0 || run->n == RUN_MAX || ne->tier != run->tier || !ne->has_parent ||
        ne->parent != run->engine[run->n - 1])
        return false;
    /* A hash seen earlier in the run (or its parent) makes the index detach
     * that block mid-chain; keep such an event in a call of its own. */
    uint64_t e = ne->block_hashes[0];
    if (run->has_parent && e == run->parent)
        return false;
    unsigned bit = seen_bit(e);
    if (!(run->seen[bit / 64] >> (bit % 64) & 1))
        return true;
    for (size_t i = 0; i < run->n; i++)
        if (run->engine[i] == e)
            return false;
    return true;
}

static void run_push(store_run *run, const kvr_norm_event *ne, uint64_t local)
{
    if (run->n == 0) {
        run->tier = ne->tier;
        run->has_parent = ne->has_parent;
        run->parent = ne->parent;
        memset(run->seen, 0, sizeof run->seen);
    }
    unsigned bit = seen_bit(ne->block_hashes[0]);
    run->seen[bit / 64] |= 1ull << (bit % 64);
    run->engine[run->n] = ne->block_hashes[0];
    run->local[run->n] = local;
    run->n++;
}

/* Counters per original event, as if each had been applied alone. */
static void run_flush(kvr_worker *w, kvr_rank_state *r, store_run *run)
{
    size_t n = run->n;
    if (n == 0)
        return;
    run->n = 0;
    kvr_index *idx = w->grp->idx;
    int64_t added;
    kvr_drop_reason why = kvr_index_store_locked(idx, r->owner, run->tier, run->has_parent,
                                                 run->parent, run->engine, run->local, n, &added);
    gpu_stored(w, r, run->tier, added);
    if (why == KVR_DROP_NONE) {
        r->blocks_stored += n;
        r->events_stored += n;
        return;
    }
    /* The call stopped at some block (first parent unknown, out of memory,
     * or a hash an ancestor above the run held): replaying event by event
     * gives each event the outcome it has alone. Blocks the call stored are
     * stored again without change; a later event can still succeed when its
     * parent was known before the batch. */
    for (size_t i = 0; i < n; i++) {
        bool hp = i ? true : run->has_parent;
        uint64_t parent = i ? run->engine[i - 1] : run->parent;
        why = kvr_index_store_locked(idx, r->owner, run->tier, hp, parent, &run->engine[i],
                                     &run->local[i], 1, &added);
        gpu_stored(w, r, run->tier, added); /* 0 for the blocks the run's call stored */
        if (why != KVR_DROP_NONE) {
            count_drop(r, why);
            continue;
        }
        r->blocks_stored++;
        r->events_stored++;
    }
}

/* Joins a one-block store to the run; false when the event is not one
 * (then nothing was done to it). */
static bool run_take(kvr_worker *w, kvr_rank_state *r, store_run *run, const kvr_norm_event *ne)
{
    if (ne->kind != KVR_NORM_STORE || ne->n_block_hashes != 1 || !ensure_local(r, 1))
        return false;
    kvr_drop_reason why = convert_store(w, r, ne);
    if (why != KVR_DROP_NONE) {
        run_flush(w, r, run);
        count_drop(r, why);
        return true;
    }
    if (!run_continues(run, ne))
        run_flush(w, r, run);
    run_push(run, ne, r->local[0]);
    return true;
}

/* events_* count what the engine sent (a store the normalizer turned into
 * an empty removal is still a store; its blocks show in the mm_ counters). */
static void apply_event(kvr_worker *w, kvr_rank_state *r, store_run *run,
                        const kvr_raw_event *ev)
{
    kvr_norm_event ne;
    kvr_normalize(r->norm, ev, &ne);
    if (run_take(w, r, run, &ne))
        return;
    run_flush(w, r, run);
    switch (ne.kind) {
    case KVR_NORM_STORE:
        if (apply_store(w, r, &ne))
            r->events_stored++;
        break;
    case KVR_NORM_REMOVE:
        apply_remove(w, r, &ne);
        if (ev->type == KVR_EV_STORED)
            r->events_stored++;
        else
            r->events_removed++;
        break;
    case KVR_NORM_CLEAR:
        /* the normalizer already forgot its exclusion sets */
        kvr_index_clear_owner_locked(w->grp->idx, r->owner);
        kvr_converter_reset(r->conv);
        r->events_cleared++;
        r->gpu_held = 0;
        break;
    case KVR_NORM_DROP:
    default:
        r->events_dropped++; /* reason counted by the normalizer */
        break;
    }
}

/* Bound on how long a batch keeps the rank lock when no match waits: a
 * snapshot or clear of the rank then waits at most about 1 ms, while the
 * writer still amortizes the handoff over thousands of events. */
#define RANK_SLICE_NS 1000000u
#define RANK_CHECK 64u /* power of two */

void kvr_indexer_apply(kvr_indexer *ix, kvr_worker *w, uint32_t rank, kvr_batch *b)
{
    if (!ix || !w || !b)
        return;
    if (b->has_dp_rank)
        rank = b->dp_rank;
    pthread_rwlock_rdlock(&ix->lock);
    kvr_rank_state *r = kvr_ix_rank_get(w, rank, true);
    if (!r) {
        atomic_fetch_add(&w->batches_rejected, 1);
        pthread_rwlock_unlock(&ix->lock);
        return;
    }
    /* The rank lock and the index write lock are held together across
     * slices of whole events (lock order: rank mutex, then index), so the
     * writer pays one lock handoff per slice instead of one per event. A
     * slice ends between events, never inside one nor inside a pending run
     * (converted but not yet indexed), when matches wait for the index or
     * the slice is long enough that /workers snapshots and clears waiting
     * on the rank lock should get a turn. */
    kvr_index *idx = w->grp->idx;
    pthread_mutex_lock(&r->mu);
    r->batches++;
    kvr_index_write_begin(idx);
    uint64_t slice = kvr_index_now_ns();
    store_run run;
    run.n = 0;
    bool wide = atomic_load(&w->wide_seen);
    const kvr_raw_event *ev;
    for (uint32_t i = 0; (ev = kvr_batch_next(b)); i++) {
        apply_event(w, r, &run, ev);
        if (kvr_normalizer_wide_seen(r->norm) && !wide) {
            /* callers stop sending image hashes from the next request on */
            atomic_store(&w->wide_seen, true);
            kvr_ix_caps_changed(w->grp);
            wide = true;
        }
        if (run.n > 0 || i + 1 == b->n_events)
            continue;
        /* the clock is read only every RANK_CHECK events when no match waits */
        if (kvr_index_write_yield_due(idx, slice) ||
            ((i & (RANK_CHECK - 1)) == RANK_CHECK - 1 &&
             kvr_index_now_ns() - slice >= RANK_SLICE_NS)) {
            kvr_index_write_end(idx);
            pthread_mutex_unlock(&r->mu);
            pthread_mutex_lock(&r->mu);
            kvr_index_write_begin(idx);
            slice = kvr_index_now_ns();
        }
    }
    run_flush(w, r, &run);
    kvr_index_write_end(idx);
    kvr_normalizer_trim(r->norm); /* a huge store's scratch goes back (SPEC §12) */
    pthread_mutex_unlock(&r->mu);
    pthread_rwlock_unlock(&ix->lock);
}

void kvr_indexer_clear_rank(kvr_indexer *ix, kvr_worker *w, uint32_t rank)
{
    if (!ix || !w)
        return;
    pthread_rwlock_rdlock(&ix->lock);
    kvr_rank_state *r = kvr_ix_rank_get(w, rank, false);
    if (r) {
        pthread_mutex_lock(&r->mu);
        kvr_ix_rank_clear(w, r);
        pthread_mutex_unlock(&r->mu);
    } else {
        /* no live state, but a peer dump may have given it ownerships */
        kvr_owner o = kvr_index_find_owner(w->grp->idx, w->worker_id, rank);
        if (o != KVR_OWNER_NONE)
            kvr_index_clear_owner(w->grp->idx, o);
    }
    pthread_rwlock_unlock(&ix->lock);
}

bool kvr_indexer_unregister_rank(kvr_indexer *ix, kvr_worker *w, uint32_t rank)
{
    if (!ix || !w)
        return false;
    pthread_rwlock_wrlock(&ix->lock);
    bool found = false;
    for (size_t i = 0; i < w->n_ranks; i++) {
        kvr_rank_state *r = w->ranks[i];
        if (r->rank != rank)
            continue;
        kvr_ix_rank_destroy(r); /* its owner (r->owner) is cleared below */
        w->n_ranks--;
        memmove(&w->ranks[i], &w->ranks[i + 1], (w->n_ranks - i) * sizeof(*w->ranks));
        publish_ranks(w);
        found = true;
        break;
    }
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->n_declared; i++)
        if (w->declared[i] == rank) {
            w->n_declared--;
            memmove(&w->declared[i], &w->declared[i + 1],
                    (w->n_declared - i) * sizeof *w->declared);
            found = true;
            break;
        }
    pthread_mutex_unlock(&w->mu);
    /* One clear for the rank's owner, whether live state made it or a
     * peer dump did (owners outlive rank state: this is r->owner) */
    kvr_owner o = kvr_index_find_owner(w->grp->idx, w->worker_id, rank);
    if (o != KVR_OWNER_NONE)
        kvr_index_clear_owner(w->grp->idx, o);
    pthread_rwlock_unlock(&ix->lock);
    return found;
}

int kvr_indexer_declare_rank(kvr_indexer *ix, kvr_worker *w, uint32_t rank)
{
    if (!ix || !w || rank >= KVR_MAX_DP_RANKS)
        return -1;
    int rc = 0;
    pthread_rwlock_rdlock(&ix->lock);
    pthread_mutex_lock(&w->mu);
    size_t at = 0; /* where rank is, or goes in order */
    while (at < w->n_declared && w->declared[at] < rank)
        at++;
    if (at == w->n_declared || w->declared[at] != rank) {
        if (kvr_grow((void **)&w->declared, &w->cap_declared, w->n_declared + 1,
                     sizeof *w->declared, 4) < 0) {
            rc = -1;
        } else {
            memmove(&w->declared[at + 1], &w->declared[at],
                    (w->n_declared - at) * sizeof *w->declared);
            w->declared[at] = rank;
            w->n_declared++;
        }
    }
    pthread_mutex_unlock(&w->mu);
    pthread_rwlock_unlock(&ix->lock);
    return rc;
}
