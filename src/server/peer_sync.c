/* Recovery from a peer replica (SPEC §10), the one mechanism for --peers at
 * start and for the cluster layer's peer from its membership bucket:
 * 1. GET /dump?format=ndjson&events=false: the peer's registrations;
 * 2. hold every listener (kvr_source_hold) and register them (origin
 *    peer): the listeners subscribe and buffer their engines' batches;
 * 3. wait until they are connected (or 3 s), and 100 ms more for the
 *    subscriptions to reach the publishers;
 * 4. GET /dump?format=ndjson: content and, per (worker, rank), the sequence
 *    number it reflects (and that batch's digest);
 * 5. release each listener with its cursor: the buffered batches above it
 *    apply, a gap is replayed (or counted), a restart since the snapshot is
 *    seen by the digest.
 * A Dynamo indexer answers both requests with its whole JSON dump (no
 * registrations, no cursors): its content loads and the listeners then take
 * the first-message rule. */
#include <string.h>
#include <unistd.h>

#include "kvrouter/log.h"
#include "server/dump_load.h"

#define KVR_PEER_CONNECT_WAIT_S 3.0
#define KVR_PEER_SUBSCRIBE_SETTLE_MS 100

static void hold(kvr_source *src, void *arg)
{
    (void)arg;
    kvr_source_hold(src);
}

typedef struct {
    size_t held, connected;
    bool unknown; /* no memory to list the listeners: neither count is known */
} conn_count;

static void count_connected(kvr_source *src, void *arg)
{
    conn_count *c = arg;
    size_t n = kvr_source_count(src, NULL);
    if (n == 0)
        return;
    kvr_listener_info *info = malloc(n * sizeof *info);
    if (!info) {
        c->unknown = true;
        return;
    }
    n = kvr_source_listeners(src, NULL, info, n);
    for (size_t i = 0; i < n; i++) {
        c->held += info[i].state == KVR_LISTENER_HELD;
        c->connected += info[i].state == KVR_LISTENER_HELD && info[i].connected;
    }
    free(info);
}

/* How the wait for the held listeners' connections ended. */
typedef enum {
    WAIT_CONNECTED = 0, /* every held listener is connected */
    WAIT_TIMED_OUT,     /* some were not at the deadline */
    WAIT_UNKNOWN,       /* the last check had no memory to list them */
    WAIT_NO_INGEST      /* the ingest thread is not running */
} wait_result;

/* A check that cannot list the listeners is an error, logged and counted
 * (kvr_peer_recovery_listener_checks_failed_total), never "all connected":
 * the wait goes on, to its deadline at the most. */
static wait_result wait_connected(kvr_server *srv)
{
    double end = kvr_source_now() + KVR_PEER_CONNECT_WAIT_S;
    conn_count c;
    do {
        c = (conn_count){0, 0, false};
        if (kvr_source_run(srv->src, count_connected, &c) != 0)
            return WAIT_NO_INGEST;
        if (c.unknown) {
            atomic_fetch_add(&srv->peer_checks_failed, 1);
            KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "peer recovery: no memory to list the "
                                                "listeners; waiting for their connections on");
        } else if (c.connected == c.held) {
            break;
        }
        usleep(20 * 1000);
    } while (kvr_source_now() < end);
    wait_result r = c.unknown ? WAIT_UNKNOWN : c.connected < c.held ? WAIT_TIMED_OUT
                                                                     : WAIT_CONNECTED;
    if (r == WAIT_TIMED_OUT)
        kvr_log(KVR_LOG_INFO, "peer recovery: %zu of %zu listeners connected; the others take "
                              "their engines' streams as they come",
                c.connected, c.held);
    else if (r == WAIT_UNKNOWN)
        kvr_log(KVR_LOG_WARN, "peer recovery: no memory to tell which listeners connected in "
                              "%.0f s; going on, they take their engines' streams as they come",
                KVR_PEER_CONNECT_WAIT_S);
    usleep(KVR_PEER_SUBSCRIBE_SETTLE_MS * 1000);
    return r;
}

static size_t register_peer_workers(kvr_server *srv, json_t *regs)
{
    size_t i, ok = 0;
    json_t *r;
    json_array_foreach(regs, i, r)
    {
        kvr_registration reg, peer = {.origin = KVR_ORIGIN_PEER};
        peer.settings.accepts_mm_hashes = -1;
        kvr_json_err e = {{0}};
        kvr_registry_reply out;
        if (!kvr_api_parse_registration(r, &peer, &reg, &e)) {
            kvr_log(KVR_LOG_WARN, "peer recovery: workers[%zu]: %s", i, e.msg);
            continue;
        }
        reg.origin = KVR_ORIGIN_PEER;
        if (kvr_registry_result_ok(kvr_registry_register(srv->registry, &reg, &out)))
            ok++;
        else
            kvr_log(KVR_LOG_WARN, "peer recovery: workers[%zu]: %s", i, out.error);
    }
    return ok;
}

typedef struct {
    const kvr_dump_loader *l; /* NULL: release without cursors */
    size_t matched;
} release_arg;

static void release(kvr_source *src, void *arg)
{
    release_arg *a = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    for (size_t i = 0; a->l && i < a->l->n_cursors; i++) {
        const kvr_dump_cursor_rec *c = &a->l->cursors[i];
        kvr_worker *w = kvr_indexer_find(ix, c->model, c->group, c->worker_id);
        if (w && kvr_source_release_one(src, w, c->dp_rank, c->seq,
                                        c->has_digest ? &c->digest : NULL))
            a->matched++;
    }
    kvr_source_release(src);
}

int kvr_server_recover_from_peer(kvr_server *srv, const char *url, char *err, size_t err_len)
{
    kvr_dump_loader regs, dump;
    kvr_dump_loader_init(&regs, srv, false);
    if (!kvr_dump_fetch(&regs, url, "/dump?format=ndjson&events=false") ||
        !kvr_dump_loader_finish(&regs)) {
        snprintf(err, err_len, "%s", regs.err);
        kvr_dump_loader_free(&regs);
        return -1;
    }
    if (kvr_source_run(srv->src, hold, NULL) != 0) {
        snprintf(err, err_len, "ingest thread is not running");
        kvr_dump_loader_free(&regs);
        return -1;
    }
    size_t n_regs = register_peer_workers(srv, regs.regs);
    kvr_dump_loader_free(&regs);
    wait_result waited = wait_connected(srv);
    kvr_dump_loader_init(&dump, srv, true);
    bool ok = kvr_dump_fetch(&dump, url, "/dump?format=ndjson") && kvr_dump_loader_finish(&dump);
    release_arg ra = {ok ? &dump : NULL, 0};
    kvr_source_run(srv->src, release, &ra);
    if (ok) {
        /* a worker the peer registered between the two requests: not held,
         * so it starts on its first message */
        register_peer_workers(srv, dump.regs);
        atomic_fetch_add(&srv->dump_records_loaded, (uint64_t)dump.applied);
        snprintf(srv->peer_url, sizeof srv->peer_url, "%s", url); /* for /ready */
        srv->peer_records = dump.applied;
        kvr_log(KVR_LOG_INFO,
                "peer %s: %zu registrations, %ld store records (%ld skipped), %zu of %zu "
                "cursors matched a listener%s",
                url, n_regs, dump.applied, dump.skipped, ra.matched, dump.n_cursors,
                waited == WAIT_UNKNOWN ? " (listener connections unknown: out of memory)" : "");
    } else {
        snprintf(err, err_len, "%s", dump.err);
    }
    kvr_dump_loader_free(&dump);
    return ok ? 0 : -1;
}
