/* GET /ready (SPEC §10): whether this replica can take traffic, unlike
 * /health (the process is alive). 200 once the start is over — the
 * registrations are in (the cluster's bucket read, or NATS unreachable and
 * the replica on its own), the peer dump loaded when there was one — and
 * every registered (worker, rank) has a live or replaying listener (or one
 * connected to an engine that has published nothing yet); 503
 * before, with the first thing missing as the reason. A NATS outage later
 * does not make a replica unready: it routes on its own state then, and
 * the body says so. The same verdict goes into the replica's membership
 * record, so a starting replica never recovers from one still starting. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

typedef struct {
    size_t total, ready;
    char first[192]; /* the first listener not ready */
    bool failed;
} listener_scan;

static void scan_listeners(kvr_source *src, void *arg)
{
    listener_scan *ls = arg;
    size_t n = kvr_source_count(src, NULL);
    kvr_listener_info *info = n ? malloc(n * sizeof *info) : NULL;
    if (n && !info) {
        ls->failed = true;
        return;
    }
    n = kvr_source_listeners(src, NULL, info, n);
    ls->total = n;
    for (size_t i = 0; i < n; i++) {
        kvr_listener_state st = info[i].state;
        /* An engine with nothing to say yet is in place once its socket is
         * connected: an idle fleet must not keep a replica unready. */
        if (st == KVR_LISTENER_LIVE || st == KVR_LISTENER_REPLAYING ||
            (st == KVR_LISTENER_CONNECTING && info[i].connected))
            ls->ready++;
        else if (!ls->first[0])
            snprintf(ls->first, sizeof ls->first,
                     "listener of worker %" PRIu64 " rank %" PRIu32 " (%.100s) is %s%s",
                     info[i].worker_id, info[i].dp_rank, info[i].endpoint,
                     kvr_listener_state_name(st),
                     st == KVR_LISTENER_CONNECTING ? " (no connection to the engine)" : "");
    }
    free(info);
}

static bool check(kvr_server *srv, listener_scan *ls, char *reason, size_t cap)
{
    memset(ls, 0, sizeof *ls);
    if (!atomic_load(&srv->started)) {
        snprintf(reason, cap, "starting: registrations, peer dump or listeners not in place yet");
        return false;
    }
    if (!kvr_server_serving_all(srv)) {
        snprintf(reason, cap, "waiting for %zu initial workers (%zu registered)",
                 srv->min_initial_workers, kvr_registry_workers(srv->registry));
        return false;
    }
    if (kvr_source_run(srv->src, scan_listeners, ls) != 0 || ls->failed) {
        snprintf(reason, cap, "cannot read the listeners (ingest thread stopped or out of memory)");
        return false;
    }
    if (ls->ready < ls->total) {
        snprintf(reason, cap, "%zu of %zu listeners not live yet; first: %s",
                 ls->total - ls->ready, ls->total, ls->first);
        return false;
    }
    reason[0] = 0;
    return true;
}

bool kvr_server_ready(kvr_server *srv, char *reason, size_t cap)
{
    listener_scan ls;
    return check(srv, &ls, reason, cap);
}

static json_t *cluster_json(kvr_server *srv)
{
    if (!srv->cluster)
        return json_null();
    kvr_cluster_status st;
    kvr_cluster_status_get(srv->cluster, &st);
    return json_pack("{s:s,s:b,s:b,s:b,s:I,s:I}", "nats", kvr_cluster_conn_name(st.conn),
                     "registrations_loaded", st.registrations_loaded, "bookings_replayed",
                     st.bookings_replayed, "started_without_nats", st.started_without_nats,
                     "registrations_pending", (json_int_t)st.c.registrations_pending,
                     "replicas", (json_int_t)st.c.replicas);
}

void kvr_api_ready(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    (void)body;
    char reason[320];
    listener_scan ls;
    bool ok = check(srv, &ls, reason, sizeof reason);
    reply->status = ok ? 200 : 503;
    reply->body = json_pack("{s:b,s:{s:I,s:I},s:o}", "ready", ok, "listeners", "total",
                            (json_int_t)ls.total, "live", (json_int_t)ls.ready, "cluster",
                            cluster_json(srv));
    if (!reply->body)
        return;
    if (!ok)
        json_object_set_new(reply->body, "reason", json_string(reason));
    if (srv->peer_url[0])
        json_object_set_new(reply->body, "peer",
                            json_pack("{s:s,s:I}", "url", srv->peer_url, "records",
                                      (json_int_t)srv->peer_records));
}
