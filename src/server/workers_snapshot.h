/* A consistent copy of every worker's info and listeners, taken on the
 * ingest thread; /workers and /metrics render it. */
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

int kvr_workers_snapshot_take(kvr_server *srv, kvr_workers_snapshot *s);
void kvr_workers_snapshot_free(kvr_workers_snapshot *s);

#endif
