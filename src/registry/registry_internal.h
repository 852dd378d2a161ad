/* Records of the registry, shared by its lifecycle/list part (registry.c)
 * and its change operations (register.c).
 *
 * Threads and locks: records change only on the source's ingest thread
 * (inside kvr_source_run), under `mu`; other threads read them under `mu`
 * (kvr_registry_list). The ingest thread reads them without the lock, and
 * calls observers with `mu` released, so an observer may list. The
 * observer table is touched on the ingest thread only. */
#ifndef KVR_REGISTRY_INTERNAL_H
#define KVR_REGISTRY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "kvrouter/registry.h"

/* One rank's record: what its last registration said. */
typedef struct {
    uint32_t rank;
    char *endpoint, *replay_endpoint, *topic; /* owned; "" when none */
    kvr_origin origin;
} reg_rank;

/* One worker (model, group, worker_id): settings shared by its ranks. */
typedef struct {
    kvr_worker *w;
    kvr_worker_settings s; /* owned strings; routing_group never NULL */
    reg_rank *ranks;       /* in registration order */
    size_t n_ranks, cap_ranks;
} reg_worker;

typedef struct {
    kvr_registry_observer_fn fn;
    void *user;
} reg_observer;

struct kvr_registry {
    kvr_source *src;
    pthread_mutex_t mu;
    reg_worker **ws; /* in creation order */
    size_t n_ws, cap_ws;
    size_t n_rank_recs;
    _Atomic size_t max_workers;
    _Atomic uint64_t refused_worker_limit, refused_descriptors;
    reg_observer obs[KVR_REGISTRY_MAX_OBSERVERS];
    size_t n_obs;
};

/* registry.c */
bool reg_settings_dup(kvr_worker_settings *dst, const kvr_worker_settings *src);
void reg_settings_free(kvr_worker_settings *s);
void reg_rank_free(reg_rank *rk);
void reg_worker_free(reg_worker *rw);
/* The registration a record stands for (strings borrowed from it). */
void reg_view(const reg_worker *rw, const reg_rank *rk, kvr_registration *out);
/* Ingest thread: tells every observer. */
void reg_notify(kvr_registry *r, kvr_reg_event_kind kind, kvr_registry_result res,
                const kvr_registration *reg);

#endif
