/* The workers snapshot /workers and /metrics render (see workers_snapshot.h)
 * and the listener status mapping they share. */
#include "server/workers_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void do_snapshot(kvr_source *src, void *arg)
{
    kvr_workers_snapshot *s = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    size_t n = kvr_indexer_list(ix, NULL, NULL, NULL, 0);
    /* kvr_indexer_list fills every entry it returns (15 KB each): no calloc */
    s->workers = malloc((n ? n : 1) * sizeof *s->workers);
    s->first = calloc(n + 1, sizeof *s->first);
    size_t total = kvr_source_count(src, NULL);
    s->listeners = malloc((total ? total : 1) * sizeof *s->listeners);
    if (!s->workers || !s->first || !s->listeners)
        return;
    s->n_workers = kvr_indexer_list(ix, NULL, NULL, s->workers, n);
    if (s->n_workers > n)
        s->n_workers = n;
    size_t at = 0;
    for (size_t i = 0; i < s->n_workers; i++) {
        s->first[i] = at;
        kvr_worker_info *wi = &s->workers[i];
        kvr_worker *w = kvr_indexer_find(ix, wi->model_name, wi->routing_group, wi->worker_id);
        if (w && at < total)
            at += kvr_source_listeners(src, w, s->listeners + at, total - at);
        if (at > total)
            at = total;
    }
    s->first[s->n_workers] = at;
    s->n_listeners = at;
    s->ok = true;
}

int kvr_workers_snapshot_take(kvr_server *srv, kvr_workers_snapshot *s)
{
    memset(s, 0, sizeof *s);
    if (kvr_source_run(srv->src, do_snapshot, s) != 0 || !s->ok) {
        kvr_workers_snapshot_free(s);
        return -1;
    }
    return 0;
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
 * Dynamo's words. Before the first message, or while held for peer recovery,
 * a listener is pending (its engine may be down, or up and idle); after it,
 * active, also while it replays a gap (it keeps receiving; the gap is being
 * refilled), unless the connection is down now (pending again, with the
 * reason). A replay endpoint that fails does not stop the live feed: the
 * listener stays active and shows the endpoint's last error. kvrouter never
 * pauses a listener and ZeroMQ reconnects forever, so nothing maps to paused
 * or failed yet. */
kvr_lstatus kvr_listener_status(const kvr_listener_info *l, char *last_error, size_t cap)
{
    if (cap)
        last_error[0] = 0;
    if (cap && l->replay_state >= KVR_REPLAY_BACKOFF)
        snprintf(last_error, cap, "replay endpoint %s: %s", l->replay_endpoint,
                 l->replay_error);
    switch (l->state) {
    case KVR_LISTENER_LIVE:
    case KVR_LISTENER_REPLAYING:
        if (l->connected)
            return KVR_LSTATUS_ACTIVE;
        if (cap)
            snprintf(last_error, cap, "not connected to %s", l->endpoint);
        return KVR_LSTATUS_PENDING;
    case KVR_LISTENER_CONNECTING:
    case KVR_LISTENER_HELD:
    default:
        return KVR_LSTATUS_PENDING;
    }
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
