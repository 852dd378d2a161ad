/* A consistent copy of every worker's info and listeners, taken on the
 * ingest thread; /workers and /metrics render it. Also the one mapping from
 * kvrouter's listener state to the status vocabulary Dynamo's standalone
 * indexer uses (SPEC §7.1), so both endpoints say the same thing. */
#ifndef KVR_SERVER_WORKERS_SNAPSHOT_H
#define KVR_SERVER_WORKERS_SNAPSHOT_H

#include "server/server_internal.h"

typedef struct {
    kvr_worker_info *workers;
    size_t n_workers;
    kvr_listener_info *listeners;
    size_t n_listeners;
    size_t *first; /* listeners of worker i: [first[i], first[i+1]) */
    bool ok;
} kvr_workers_snapshot;

/* How a snapshot ended: taken, the ingest thread not running, or no memory
 * for its copies (nothing held in either failure). */
typedef enum {
    KVR_SNAPSHOT_OK = 0,
    KVR_SNAPSHOT_STOPPED,
    KVR_SNAPSHOT_NO_MEMORY
} kvr_snapshot_result;

kvr_snapshot_result kvr_workers_snapshot_take(kvr_server *srv, kvr_workers_snapshot *s);
void kvr_workers_snapshot_free(kvr_workers_snapshot *s);
/* The reply of a failed snapshot: 503 "ingest thread is not running", or
 * 500 "out of memory". */
void kvr_workers_snapshot_error(kvr_snapshot_result r, kvr_api_reply *reply);

/* Listener status as Dynamo names it, in increasing order of badness: a
 * worker's status is its worst listener's (failed > pending > active >
 * paused). */
typedef enum {
    KVR_LSTATUS_PAUSED = 0, /* stopped on purpose (kvrouter never pauses) */
    KVR_LSTATUS_ACTIVE,     /* receiving the engine's events */
    KVR_LSTATUS_PENDING,    /* not receiving yet */
    KVR_LSTATUS_FAILED,     /* cannot receive; last_error says why */
    KVR_LSTATUS_COUNT
} kvr_lstatus;

const char *kvr_lstatus_name(kvr_lstatus s);
/* Status of one listener. last_error (cap bytes) gets the reason when there
 * is one, "" otherwise. */
kvr_lstatus kvr_listener_status(const kvr_listener_info *l, char *last_error, size_t cap);
/* The worst status of n listeners; pending for a worker with none. */
kvr_lstatus kvr_worker_status(const kvr_listener_info *ls, size_t n);

#endif
