/* Prefix index (SPEC §6), the start of reading: lifecycle, owners, the
 * write lock and its slices, table sizing before events, stats. The
 * layout is in tree_internal.h; events in tree_events.c, matches in
 * tree_match.c. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "index/tree_internal.h"
#include "util/clock.h"

#define STACK_MIN 64u

static uint64_t mono_ns(void) { return (uint64_t)(kvr_clock_mono() * 1e9); }

/* Exclusive lock for one event or one slice of whole events. If matches
 * are queued behind the previous holder, give them the lock first (bounded,
 * so a descheduled reader cannot stall ingestion). */
void kvr_tree_write_lock(kvr_index *idx)
{
    if (atomic_load_explicit(&idx->readers_waiting, memory_order_relaxed)) {
        uint64_t start = mono_ns();
        while (atomic_load(&idx->readers_waiting) && mono_ns() - start < 200000)
            sched_yield();
    }
    pthread_rwlock_wrlock(&idx->lock);
    idx->write_epoch++;
}

/* Only the writer touches the retired list, so it is read after the lock
 * is released: the frees then cost the writer, not the waiting matches. */
static void free_retired(void **retired, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(retired[i]);
}

void kvr_tree_write_unlock(kvr_index *idx)
{
    void *retired[4];
    uint32_t n = idx->n_retired;
    memcpy(retired, idx->retired, n * sizeof *retired);
    idx->n_retired = 0;
    pthread_rwlock_unlock(&idx->lock);
    free_retired(retired, n);
}

static void retire(kvr_index *idx, void *old)
{
    if (!old)
        return;
    if (idx->n_retired == sizeof idx->retired / sizeof idx->retired[0])
        free(old);
    else
        idx->retired[idx->n_retired++] = old;
}

void kvr_index_write_begin(kvr_index *idx) { kvr_tree_write_lock(idx); }

void kvr_index_write_end(kvr_index *idx) { kvr_tree_write_unlock(idx); }

/* Each handoff costs the writer a wakeup, the readers' turn and a cold
 * cache; handing over after every event (~0.3 us each alone) made the
 * writer ~30x slower than alone. A 20 us slice amortizes a handoff over
 * tens of events while a waiting match still gets in after 20 us plus the
 * event in progress. */
#define WRITE_SLICE_NS 20000u

bool kvr_index_write_yield_due(kvr_index *idx, uint64_t slice_start_ns)
{
    return atomic_load_explicit(&idx->readers_waiting, memory_order_relaxed) &&
           mono_ns() - slice_start_ns >= WRITE_SLICE_NS;
}

uint64_t kvr_index_now_ns(void) { return mono_ns(); }

bool kvr_index_write_yield(kvr_index *idx, uint64_t *slice_start_ns)
{
    if (!kvr_index_write_yield_due(idx, *slice_start_ns))
        return false;
    kvr_tree_write_unlock(idx);
    kvr_tree_write_lock(idx);
    *slice_start_ns = mono_ns();
    return true;
}

/* ---- table sizing ---- */

/* Tables up to this size (8192 8-byte slots, 16384 of the engine table's
 * 4-byte ones; ~0.1 ms to rebuild) are resized under the write lock;
 * larger ones under a read lock, as matches would wait for the rebuild:
 * at 65536 8-byte slots the longest event of the bench streams took
 * 0.65-0.9 ms of CPU under the write lock, at 8192 0.1-0.23. */
#define INLINE_MAX_BYTES (64u << 10)

/* The new arrays of a resize: the engine table's and the child table's
 * (NULL where the capacity stays or becomes 0). */
typedef struct {
    uint32_t ecap, ccap;
    uint32_t *engine;
    uint64_t *child;
} fit_plan;

static int plan_build(const kvr_index *idx, fit_plan *p)
{
    if (p->ecap != idx->engine.cap && p->ecap &&
        !(p->engine = kvr_tree_engine_rebuild(idx, p->ecap)))
        return -1;
    if (p->ccap != idx->child.cap && p->ccap &&
        !(p->child = kvr_idtab_rehash(&idx->child, p->ccap)))
        return -1;
    return 0;
}

static void plan_drop(fit_plan *p)
{
    free(p->engine);
    free(p->child);
}

/* Installs the plan's arrays; the old ones go to `dispose` (freed at once
 * or retired until the write lock is released). */
static void plan_install(kvr_index *idx, const fit_plan *p, void (*dispose)(kvr_index *, void *))
{
    if (p->ecap != idx->engine.cap)
        dispose(idx, kvr_keytab_install(&idx->engine, p->engine, p->ecap));
    if (p->ccap != idx->child.cap)
        dispose(idx, kvr_idtab_install(&idx->child, p->child, p->ccap));
}

static void dispose_now(kvr_index *idx, void *old)
{
    (void)idx;
    free(old);
}

int kvr_tree_fit(kvr_index *idx, uint32_t blocks, uint32_t runs)
{
    if (kvr_keytab_fits(&idx->engine, (uint64_t)idx->engine.len + blocks) &&
        kvr_idtab_fits(&idx->child, (uint64_t)idx->child.len + runs))
        return 0;
    fit_plan p = {
        .ecap = kvr_keytab_fit_cap(&idx->engine, (uint64_t)idx->engine.len + blocks),
        .ccap = kvr_idtab_fit_cap(&idx->child, (uint64_t)idx->child.len + runs),
    };
    if (p.ecap == UINT32_MAX || p.ccap == UINT32_MAX)
        return -1;
    if (p.ecap == idx->engine.cap && p.ccap == idx->child.cap)
        return 0;
    size_t ebytes = (size_t)(p.ecap > idx->engine.cap ? p.ecap : idx->engine.cap) * sizeof(uint32_t);
    size_t cbytes = (size_t)(p.ccap > idx->child.cap ? p.ccap : idx->child.cap) * sizeof(uint64_t);
    bool big = (p.ecap != idx->engine.cap && ebytes > INLINE_MAX_BYTES) ||
               (p.ccap != idx->child.cap && cbytes > INLINE_MAX_BYTES);
    if (!big) {
        if (plan_build(idx, &p) < 0) {
            plan_drop(&p);
            return -1;
        }
        plan_install(idx, &p, dispose_now);
        return 0;
    }
    /* Nothing of this event is applied yet. A read lock keeps writers off
     * the old tables while matches keep using them; if another writer got
     * the lock in the handover, the copies may be stale: drop them
     * (inserts grow the tables in place if they must; the next event tries
     * again). */
    uint64_t epoch = idx->write_epoch;
    kvr_tree_write_unlock(idx);
    pthread_rwlock_rdlock(&idx->lock);
    bool oom = plan_build(idx, &p) < 0;
    pthread_rwlock_unlock(&idx->lock);
    kvr_tree_write_lock(idx);
    if (idx->write_epoch != epoch + 1 || oom) {
        plan_drop(&p);
        return oom ? -1 : 0;
    }
    plan_install(idx, &p, retire);
    idx->table_rebuilds++;
    return 0;
}

/* ---- lifecycle and owners ---- */

kvr_index *kvr_index_create(void)
{
    static atomic_uint_fast64_t next_uid = 1;
    kvr_index *idx = calloc(1, sizeof *idx);
    if (!idx)
        return NULL;
    idx->uid = atomic_fetch_add(&next_uid, 1);
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    /* matches must not starve event ingestion, and vice versa each call is short */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&idx->lock, &attr);
    atomic_init(&idx->readers_waiting, 0);
    pthread_rwlockattr_destroy(&attr);
    kvr_ids_init(&idx->block_ids);
    kvr_ids_init(&idx->run_ids);
    kvr_idtab_init(&idx->child);
    kvr_keytab_init(&idx->engine);
    kvr_u64map_init(&idx->by_worker);
    kvr_u64map_init(&idx->exc);
    idx->stack = malloc(STACK_MIN * sizeof *idx->stack);
    idx->stack_cap = STACK_MIN;
    if (!idx->stack || kvr_osets_init(&idx->sets) < 0 ||
        kvr_ids_get(&idx->block_ids) != KVR_ROOT || kvr_ids_get(&idx->run_ids) != KVR_ROOT ||
        kvr_tree_sync_chunks(idx) < 0) {
        kvr_index_destroy(idx);
        return NULL;
    }
    KVR_LOCAL(idx, KVR_ROOT) = 0;
    KVR_ENGINE(idx, KVR_ROOT) = 0;
    KVR_RUNOF(idx, KVR_ROOT) = KVR_ROOT;
    memset(&KVR_RUN(idx, KVR_ROOT), 0, sizeof(kvr_run));
    KVR_RUN(idx, KVR_ROOT).len = 1; /* the root block; its set stays empty */
    return idx;
}

void kvr_index_destroy(kvr_index *idx)
{
    if (!idx)
        return;
    for (uint32_t i = 0; i < idx->n_owners; i++)
        kvr_idtab_free(&idx->owners[i].exc);
    free(idx->owners);
    free(idx->owner_keys);
    kvr_tree_runs_free(idx);
    kvr_idtab_free(&idx->child);
    kvr_keytab_free(&idx->engine);
    free_retired(idx->retired, idx->n_retired);
    free(idx->stack);
    kvr_osets_free(&idx->sets);
    kvr_u64map_free(&idx->by_worker);
    kvr_u64map_free(&idx->exc);
    pthread_rwlock_destroy(&idx->lock);
    free(idx);
}

static kvr_owner find_owner_locked(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank)
{
    uint64_t first;
    if (!kvr_u64map_get(&idx->by_worker, worker_id, &first))
        return KVR_OWNER_NONE;
    for (uint32_t o = (uint32_t)first; o != KVR_OWNER_NONE; o = idx->owners[o].next_rank)
        if (idx->owners[o].dp_rank == dp_rank)
            return o;
    return KVR_OWNER_NONE;
}

kvr_owner kvr_index_find_owner(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank)
{
    pthread_rwlock_rdlock(&idx->lock);
    kvr_owner o = find_owner_locked(idx, worker_id, dp_rank);
    pthread_rwlock_unlock(&idx->lock);
    return o;
}

kvr_owner kvr_index_owner(kvr_index *idx, uint64_t worker_id, uint32_t dp_rank)
{
    kvr_tree_write_lock(idx);
    kvr_owner o = find_owner_locked(idx, worker_id, dp_rank);
    if (o != KVR_OWNER_NONE || idx->n_owners > KVR_OSET_MAX_OWNER)
        goto out;
    if (idx->n_owners == idx->owners_cap) {
        uint32_t ncap = idx->owners_cap ? idx->owners_cap * 2 : 16;
        kvr_owner_rec *n = realloc(idx->owners, (size_t)ncap * sizeof *n);
        if (!n)
            goto out;
        idx->owners = n;
        kvr_owner_key *k = realloc(idx->owner_keys, (size_t)ncap * sizeof *k);
        if (!k)
            goto out;
        idx->owner_keys = k;
        idx->owners_cap = ncap;
    }
    if (kvr_osets_reserve(&idx->sets, idx->n_owners + 1) < 0)
        goto out;
    uint64_t first;
    bool known = kvr_u64map_get(&idx->by_worker, worker_id, &first);
    uint32_t id = idx->n_owners;
    if (kvr_u64map_put(&idx->by_worker, worker_id, id) < 0)
        goto out;
    kvr_owner_rec *r = &idx->owners[id];
    memset(r, 0, sizeof *r);
    r->worker_id = worker_id;
    r->dp_rank = dp_rank;
    r->next_rank = known ? (uint32_t)first : KVR_OWNER_NONE;
    kvr_idtab_init(&r->exc);
    idx->owner_keys[id] = (kvr_owner_key){worker_id, dp_rank};
    idx->n_owners++;
    o = id;
out:
    kvr_tree_write_unlock(idx);
    return o;
}

void kvr_index_stats_get(kvr_index *idx, kvr_index_stats *out)
{
    pthread_rwlock_rdlock(&idx->lock);
    size_t bytes = sizeof *idx + (size_t)idx->n_bchunks * sizeof(kvr_block_chunk) +
                   (size_t)idx->n_rchunks * sizeof(kvr_run_chunk) +
                   (size_t)(idx->bchunks_cap + idx->rchunks_cap) * sizeof(void *) +
                   kvr_ids_bytes(&idx->block_ids) + kvr_ids_bytes(&idx->run_ids) +
                   kvr_idtab_bytes(&idx->child) + kvr_keytab_bytes(&idx->engine) +
                   kvr_osets_bytes(&idx->sets) +
                   (size_t)idx->owners_cap * (sizeof(kvr_owner_rec) + sizeof(kvr_owner_key)) +
                   kvr_u64map_bytes(&idx->by_worker) + kvr_u64map_bytes(&idx->exc) +
                   idx->stack_cap * sizeof(uint32_t);
    for (uint32_t i = 0; i < idx->n_owners; i++)
        bytes += kvr_idtab_bytes(&idx->owners[i].exc);
    out->nodes = idx->block_ids.count - 1;
    out->ownerships = idx->ownerships;
    out->owners = idx->n_owners;
    out->bytes = bytes;
    out->table_rebuilds = idx->table_rebuilds;
    pthread_rwlock_unlock(&idx->lock);
}
