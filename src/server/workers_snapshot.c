/* The workers snapshot /workers and /metrics render (see workers_snapshot.h)
 * and the listener status mapping they share. */
#include "server/workers_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/u64map.h"

/* Orders s->listeners by worker (the order of s->workers) and fills
 * s->first: one pass over the listeners (a pass per worker, and a find per
 * worker, were 12 M instructions of a 1000-worker /metrics). Listeners of a
 * worker that is not in the list (unregistered meanwhile: none, on the
 * ingest thread) are left out. */
static bool group_listeners(kvr_workers_snapshot *s, kvr_listener_info *all, size_t n)
{
    kvr_u64map at;
    kvr_u64map_init(&at);
    size_t *of = malloc((n ? n : 1) * sizeof *of); /* listener -> worker index */
    bool ok = of != NULL;
    for (size_t i = 0; ok && i < s->n_workers; i++)
        ok = kvr_u64map_put(&at, (uint64_t)(uintptr_t)s->workers[i].worker, i) >= 0;
    for (size_t j = 0; ok && j < n; j++) {
        uint64_t i;
        of[j] = kvr_u64map_get(&at, (uint64_t)(uintptr_t)all[j].worker, &i) ? i : SIZE_MAX;
        if (of[j] != SIZE_MAX)
            s->first[i + 1]++;
    }
    kvr_u64map_free(&at);
    if (ok) {
        for (size_t i = 0; i < s->n_workers; i++)
            s->first[i + 1] += s->first[i];
        size_t *next = malloc((s->n_workers ? s->n_workers : 1) * sizeof *next);
        ok = next != NULL;
        if (ok) {
            memcpy(next, s->first, s->n_workers * sizeof *next);
            for (size_t j = 0; j < n; j++)
                if (of[j] != SIZE_MAX)
                    s->listeners[next[of[j]]++] = all[j];
        }
        free(next);
        s->n_listeners = s->first[s->n_workers];
    }
    free(of);
    return ok;
}

static void do_snapshot(kvr_source *src, void *arg)
{
    kvr_workers_snapshot *s = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    size_t n = kvr_indexer_list(ix, NULL, NULL, NULL, 0);
    /* kvr_indexer_list fills what it returns (not the rank slots past
     * n_ranks): no calloc */
    s->workers = malloc((n ? n : 1) * sizeof *s->workers);
    s->first = calloc(n + 1, sizeof *s->first);
    size_t total = kvr_source_count(src, NULL);
    s->listeners = malloc((total ? total : 1) * sizeof *s->listeners);
    kvr_listener_info *all = malloc((total ? total : 1) * sizeof *all);
    if (s->workers && s->first && s->listeners && all) {
        s->n_workers = kvr_indexer_list(ix, NULL, NULL, s->workers, n);
        if (s->n_workers > n)
            s->n_workers = n;
        size_t nl = kvr_source_listeners(src, NULL, all, total);
        s->ok = group_listeners(s, all, nl < total ? nl : total);
    }
    free(all);
}

kvr_snapshot_result kvr_workers_snapshot_take(kvr_server *srv, kvr_workers_snapshot *s)
{
    memset(s, 0, sizeof *s);
    kvr_snapshot_result r = kvr_source_run(srv->src, do_snapshot, s) != 0 ? KVR_SNAPSHOT_STOPPED
                            : s->ok ? KVR_SNAPSHOT_OK
                                    : KVR_SNAPSHOT_NO_MEMORY; /* do_snapshot's allocations */
    if (r != KVR_SNAPSHOT_OK)
        kvr_workers_snapshot_free(s);
    return r;
}

void kvr_workers_snapshot_error(kvr_snapshot_result r, kvr_api_reply *reply)
{
    if (r == KVR_SNAPSHOT_NO_MEMORY)
        kvr_api_error(reply, 500, "out of memory");
    else
        kvr_api_error(reply, 503, "ingest thread is not running");
}

void kvr_workers_snapshot_free(kvr_workers_snapshot *s)
{
    free(s->workers);
    free(s->listeners);
    free(s->first);
    memset(s, 0, sizeof *s);
}

const char *kvr_lstatus_name(kvr_lstatus s)
{
    static const char *const names[KVR_LSTATUS_COUNT] = {"paused", "active", "pending",
                                                          "failed"};
    return (unsigned)s < KVR_LSTATUS_COUNT ? names[s] : "failed";
}

/* The whole mapping from what the source layer knows about a listener to
 * Dynamo's words (Dynamo: pending until its SUB is connected, active from
 * then on, failed when its listener gave up, paused on request):
 * - held for peer recovery: pending (nothing applies until the dump is in);
 * - connected (the SUB's monitor saw the handshake): active, whether or not
 *   the engine published yet, so a gateway that waits for active can send
 *   an idle engine its first request; also while it replays a gap;
 * - not connected and never heard from: pending (the engine is not up yet);
 * - not connected after it published: failed, its engine gone or
 *   unreachable. ZeroMQ keeps reconnecting, so unlike Dynamo's a failed
 *   listener becomes active again by itself when the engine is back.
 * A replay endpoint that fails does not stop the live feed: the status
 * stays as above and last_error names the endpoint and its error (a lost
 * connection takes precedence). kvrouter never pauses a listener. */
kvr_lstatus kvr_listener_status(const kvr_listener_info *l, char *last_error, size_t cap)
{
    if (cap)
        last_error[0] = 0;
    if (l->state == KVR_LISTENER_HELD)
        return KVR_LSTATUS_PENDING;
    if (cap && l->replay_state >= KVR_REPLAY_BACKOFF)
        snprintf(last_error, cap, "replay endpoint %s: %s", l->replay_endpoint,
                 l->replay_error);
    if (l->connected)
        return KVR_LSTATUS_ACTIVE;
    if (!l->has_seq)
        return KVR_LSTATUS_PENDING;
    if (cap)
        snprintf(last_error, cap, "connection to %s lost; reconnecting", l->endpoint);
    return KVR_LSTATUS_FAILED;
}

kvr_lstatus kvr_worker_status(const kvr_listener_info *ls, size_t n)
{
    if (n == 0)
        return KVR_LSTATUS_PENDING;
    kvr_lstatus worst = KVR_LSTATUS_PAUSED;
    for (size_t i = 0; i < n; i++) {
        kvr_lstatus s = kvr_listener_status(&ls[i], NULL, 0);
        if (s > worst)
            worst = s;
    }
    return worst;
}
