/* The approximate index (route.h, kv_events): for a worker whose cache the
 * router cannot read from KV events, the blocks kvrouter routed there,
 * each forgotten approx_ttl_s after the last request that carried it, and
 * at most approx_max_blocks per (worker, rank), oldest first (an engine
 * evicts too). SGLang's router (approximate radix tree per worker) and
 * Dynamo's --no-kv-events mode (TTL-expiring routed blocks, pruned when
 * the tree grows) do the same.
 *
 * Every request refreshes its whole prefix, so a block never expires
 * before its descendants: what a store holds of a chain is a prefix of it,
 * found by a galloping search. Entries: chain hash -> expiry (the double's
 * bits) in a map, and a FIFO of (hash, expiry) in insertion order, which
 * is expiry order (one TTL); a FIFO entry whose expiry no longer matches
 * the map's was refreshed since and is skipped. Guarded by approx_mu. */
#include <stdlib.h>
#include <string.h>

#include "route/internal.h"
#include "util/grow.h"

typedef struct {
    uint64_t hash;
    double expires_at;
} fifo_entry;

struct route_approx {
    uintptr_t index;
    uint64_t worker_id;
    uint32_t dp_rank;
    kvr_u64map blocks;
    fifo_entry *fifo;
    size_t head, len, cap;
    double since; /* first block noted (the store is dropped when it empties) */
    struct route_approx *hnext;
};

static uint64_t bits_of(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double double_of(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

void route_approx_init(route_approxes *a, double ttl_s, uint64_t max_blocks)
{
    memset(a, 0, sizeof *a);
    kvr_u64map_init(&a->stores);
    pthread_mutex_init(&a->mu, NULL);
    a->ttl_s = ttl_s;
    a->max_blocks = max_blocks ? max_blocks : 1;
}

static void store_free(route_approx *st)
{
    kvr_u64map_free(&st->blocks);
    free(st->fifo);
    free(st);
}

void route_approx_free(route_approxes *a)
{
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&a->stores, &it, &k, &v))
        for (route_approx *st = (route_approx *)(uintptr_t)v, *next; st; st = next) {
            next = st->hnext;
            store_free(st);
        }
    kvr_u64map_free(&a->stores);
    pthread_mutex_destroy(&a->mu);
}

static route_approx *store_find(route_approxes *a, uintptr_t index, uint64_t worker_id,
                                uint32_t dp_rank)
{
    uint64_t head = 0;
    if (!kvr_u64map_get(&a->stores, route_wr_key(index, worker_id, dp_rank), &head))
        return NULL;
    for (route_approx *st = (route_approx *)(uintptr_t)head; st; st = st->hnext)
        if (st->index == index && st->worker_id == worker_id && st->dp_rank == dp_rank)
            return st;
    return NULL;
}

static route_approx *store_create(route_approxes *a, uintptr_t index, uint64_t worker_id,
                                  uint32_t dp_rank)
{
    route_approx *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->index = index;
    st->worker_id = worker_id;
    st->dp_rank = dp_rank;
    kvr_u64map_init(&st->blocks);
    uint64_t key = route_wr_key(index, worker_id, dp_rank), head = 0;
    kvr_u64map_get(&a->stores, key, &head);
    st->hnext = (route_approx *)(uintptr_t)head;
    if (kvr_u64map_put(&a->stores, key, (uint64_t)(uintptr_t)st) < 0) {
        free(st);
        return NULL;
    }
    a->n_stores++;
    return st;
}

/* An emptied store goes, so workers that left cost nothing. */
static void store_drop(route_approxes *a, route_approx *st)
{
    uint64_t key = route_wr_key(st->index, st->worker_id, st->dp_rank), head = 0;
    kvr_u64map_get(&a->stores, key, &head);
    route_approx *first = (route_approx *)(uintptr_t)head;
    if (first == st) {
        if (st->hnext)
            kvr_u64map_put(&a->stores, key, (uint64_t)(uintptr_t)st->hnext);
        else
            kvr_u64map_del(&a->stores, key, NULL);
    } else {
        for (route_approx *p = first; p; p = p->hnext)
            if (p->hnext == st) {
                p->hnext = st->hnext;
                break;
            }
    }
    a->n_stores--;
    store_free(st);
}

/* Pops the oldest FIFO entry, forgetting its block unless refreshed since. */
static void pop_oldest(route_approxes *a, route_approx *st)
{
    fifo_entry e = st->fifo[st->head++];
    st->len--;
    uint64_t *v = kvr_u64map_find(&st->blocks, e.hash);
    if (v && double_of(*v) == e.expires_at) {
        kvr_u64map_del(&st->blocks, e.hash, NULL);
        a->n_blocks--;
    }
}

static void expire(route_approxes *a, route_approx *st, double now)
{
    while (st->len && st->fifo[st->head].expires_at <= now)
        pop_oldest(a, st);
}

static bool held(const route_approx *st, uint64_t hash, double now)
{
    uint64_t *v = kvr_u64map_find(&st->blocks, hash);
    return v && double_of(*v) > now;
}

/* How many leading blocks of chain the store holds at now. */
static uint32_t held_prefix(const route_approx *st, const uint64_t *chain, uint32_t n, double now)
{
    if (n == 0 || !held(st, chain[0], now))
        return 0;
    uint32_t lo = 1, hi = n; /* chain[0..lo) held, chain[hi..n) not */
    for (uint32_t i = 1; i < n; i *= 2) {
        if (!held(st, chain[i], now)) {
            hi = i;
            break;
        }
        lo = i + 1;
    }
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (held(st, chain[mid], now))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void route_approx_held(route_approxes *a, uintptr_t index, const route_approx_entry *e, size_t n,
                       double now, kvr_query_entry *out)
{
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n; i++) {
        const route_approx *st = store_find(a, index, e[i].worker_id, e[i].dp_rank);
        uint32_t lo = st && now - st->since >= e[i].grace_s
                          ? held_prefix(st, e[i].chain, e[i].n, now)
                          : 0;
        kvr_query_entry *q = &out[e[i].at];
        q->gpu_blocks = q->cpu_blocks = q->disk_blocks = lo;
    }
    pthread_mutex_unlock(&a->mu);
}

/* Room for n more entries at the FIFO's tail, made before any block is
 * noted: compacted when more than half of it was popped, else grown.
 * 0, or -1 out of memory (the FIFO unchanged). */
static int fifo_room(route_approx *st, size_t n)
{
    if (st->head + st->len + n <= st->cap)
        return 0;
    if (st->head > st->cap / 2 && st->len + n <= st->cap) {
        memmove(st->fifo, st->fifo + st->head, st->len * sizeof *st->fifo);
        st->head = 0;
        return 0;
    }
    return kvr_grow((void **)&st->fifo, &st->cap, st->head + st->len + n, sizeof *st->fifo, 64);
}

void route_approx_note(route_approxes *a, uintptr_t index, uint64_t worker_id, uint32_t dp_rank,
                       const uint64_t *chain, uint32_t n, double now)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&a->mu);
    route_approx *st = store_find(a, index, worker_id, dp_rank);
    if (!st && (st = store_create(a, index, worker_id, dp_rank)))
        st->since = now;
    if (!st || fifo_room(st, n) < 0) {
        a->n_lost++; /* out of memory: nothing noted, the store as it was */
    } else {
        expire(a, st, now);
        double exp_at = now + a->ttl_s;
        /* Out of memory part-way (the map cannot grow for a new block)
         * notes a shorter prefix: chain[0..i) refreshed, the rest as it
         * was, so what the store holds of any chain is still a prefix of
         * it, and that prefix is no shorter than before the request, which
         * the worker now holds in full. Better than nothing noted; counted. */
        for (uint32_t i = 0; i < n; i++) {
            int added = kvr_u64map_put(&st->blocks, chain[i], bits_of(exp_at));
            if (added < 0) {
                a->n_lost++;
                break;
            }
            st->fifo[st->head + st->len++] = (fifo_entry){chain[i], exp_at};
            if (added == 0)
                a->n_blocks++;
        }
        /* Oldest first, as LRU would: a tenth below the bound, so pruning
         * runs once per many requests. */
        if (kvr_u64map_len(&st->blocks) > a->max_blocks) {
            uint64_t before = a->n_blocks;
            while (st->len && kvr_u64map_len(&st->blocks) > a->max_blocks - a->max_blocks / 10)
                pop_oldest(a, st);
            a->n_pruned += before - a->n_blocks;
        }
    }
    if (st && kvr_u64map_len(&st->blocks) == 0)
        store_drop(a, st);
    pthread_mutex_unlock(&a->mu);
}

void route_approx_sweep(route_approxes *a, double now)
{
    pthread_mutex_lock(&a->mu);
    /* Collect first: dropping a store changes the map being walked. */
    route_approx **empty = malloc((a->n_stores ? a->n_stores : 1) * sizeof *empty);
    size_t n_empty = 0, it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&a->stores, &it, &k, &v))
        for (route_approx *st = (route_approx *)(uintptr_t)v; st; st = st->hnext) {
            expire(a, st, now);
            if (empty && kvr_u64map_len(&st->blocks) == 0)
                empty[n_empty++] = st;
        }
    for (size_t i = 0; i < n_empty; i++)
        store_drop(a, empty[i]);
    free(empty);
    pthread_mutex_unlock(&a->mu);
}

void route_approx_stats(route_approxes *a, kvr_router_stats *out)
{
    pthread_mutex_lock(&a->mu);
    out->approx_workers = a->n_stores;
    out->approx_blocks = a->n_blocks;
    out->approx_pruned = a->n_pruned;
    out->approx_lost = a->n_lost;
    pthread_mutex_unlock(&a->mu);
}
