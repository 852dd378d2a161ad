/* The worker registry: a registration (worker settings + one dp rank's
 * ZeroMQ endpoints) becomes an indexer worker and a running listener, and
 * back. POST /register and /unregister, --workers, --config, SIGHUP reload,
 * discovery, peers and the cluster layer are all thin callers of this API,
 * so SPEC §5 rule 9 and the listener rules are written once.
 *
 * Threading: every change runs on the source's ingest thread (through
 * kvr_source_run), so it is atomic with respect to batches and to other
 * changes: a batch never sees a half-registered worker. Every function may
 * be called from any thread, including from inside kvr_source_run.
 * Observers are called on the ingest thread (see kvr_registry_observe).
 *
 * Ownership: the registry owns the workers it registers; do not register or
 * unregister them on the same indexer behind its back (kvr_indexer_register
 * directly), or its records and the indexer disagree. */
#ifndef KVROUTER_REGISTRY_H
#define KVROUTER_REGISTRY_H

#include "kvrouter/source.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_registry kvr_registry;

/* Who made a registration. A SIGHUP reload removes only what the config file
 * made; discovery only what it discovered; and so on. */
typedef enum {
    KVR_ORIGIN_HTTP = 0,   /* POST /register */
    KVR_ORIGIN_CONFIG,     /* --config file (and its reloads) */
    KVR_ORIGIN_CLI,        /* --workers */
    KVR_ORIGIN_PEER,       /* learned from a peer replica */
    KVR_ORIGIN_DISCOVERY,  /* engine discovery (SPEC §11) */
    KVR_ORIGIN_CLUSTER,    /* the cluster's registration bucket (SPEC §10) */
    KVR_ORIGIN_COUNT
} kvr_origin;

/* "http", "config", "cli", "peer", "discovery", "cluster"; "unknown". */
const char *kvr_origin_name(kvr_origin o);
/* -1 for an unknown name. */
int kvr_origin_from_name(const char *name);
#define KVR_ORIGIN_BIT(o) (1u << (unsigned)(o))

/* One registration: the worker's settings and one of its dp ranks. Strings
 * are borrowed for the duration of the call. */
typedef struct {
    kvr_worker_settings settings; /* model, group, worker_id, block size, capabilities */
    uint32_t dp_rank;
    const char *endpoint;        /* tcp://, ipc:// or inproc://; NULL or "" only with
                                    settings.kv_events OFF: no listener */
    const char *replay_endpoint; /* NULL or "": no replay (gaps clear the rank) */
    const char *topic;           /* NULL or "": every topic */
    kvr_origin origin;
} kvr_registration;

typedef struct {
    /* Distinct workers (model, group, worker_id) at once; 0 = unlimited. A
     * new rank of a registered worker does not count. */
    size_t max_workers;
} kvr_registry_config;

typedef enum {
    KVR_REGISTRY_CREATED = 0,
    KVR_REGISTRY_UNCHANGED,
    KVR_REGISTRY_UPDATED,
    KVR_REGISTRY_RESET,
    KVR_REGISTRY_LISTENER_RESTARTED,
    KVR_REGISTRY_INVALID,
    KVR_REGISTRY_BLOCK_SIZE_CONFLICT,
    KVR_REGISTRY_WORKER_LIMIT,
    KVR_REGISTRY_NO_MEMORY,
    KVR_REGISTRY_STOPPED,
    KVR_REGISTRY_NO_DESCRIPTORS,
    KVR_REGISTRY_RESULT_COUNT
} kvr_registry_result;

/* "created", "unchanged", "updated", "reset", "listener_restarted",
 * "invalid", "block_size_conflict", "worker_limit", "no_memory", "stopped",
 * "no_descriptors". */
const char *kvr_registry_result_name(kvr_registry_result r);
/* True for the results that leave the registration in place (CREATED ..
 * LISTENER_RESTARTED). */
bool kvr_registry_result_ok(kvr_registry_result r);

/* What a registration did, for the caller's reply. */
typedef struct {
    kvr_registry_result result;
    bool reset;              /* the worker's indexed state was cleared (RESET, or
                                CREATED for a new rank with changed settings) */
    bool listener_restarted; /* the rank's listener moved to new endpoints */
    const char *field;       /* INVALID: the offending field's /register name */
    char error[320];         /* every failure: one line naming the field or limit */
    uint32_t group_block_size; /* BLOCK_SIZE_CONFLICT: the size that binds */
    size_t limit;            /* WORKER_LIMIT: max_workers */
    /* Effective capabilities after a successful registration (SPEC §5). */
    kvr_mm_identity mm_identity;
    bool accepts_mm_hashes;
    bool is_eagle;
} kvr_registry_reply;

kvr_registry *kvr_registry_create(kvr_source *src, const kvr_registry_config *cfg);
/* Frees the records. Stop the source first (kvr_source_destroy): the
 * listeners and workers themselves belong to the source and indexer. */
void kvr_registry_destroy(kvr_registry *r);
/* Changes the limit; registered workers above a lowered limit stay. */
void kvr_registry_set_max_workers(kvr_registry *r, size_t max_workers);

/* Registers reg (key: model, group — NULL or "" means "default" —,
 * worker_id, dp_rank) and returns reply->result, which is exactly:
 * - INVALID when a field is out of bounds, before anything is touched:
 *   model_name NULL/empty or >= KVR_NAME_MAX bytes; routing_group, lora_name
 *   or topic >= KVR_NAME_MAX; block_size 0 or > KVR_MAX_BLOCK_SIZE; dp_rank
 *   >= KVR_MAX_DP_RANKS; mm_identity or accepts_mm_hashes (-1, 0, 1) or
 *   origin out of range; endpoint NULL/empty while kv_events is not OFF
 *   (or replay_endpoint/topic set without it), >= KVR_ENDPOINT_MAX, not
 *   tcp:// ipc:// inproc://, or one no ZeroMQ socket can connect to (syntax);
 *   replay_endpoint likewise when set. reply->field names the field. Also
 *   INVALID, field "endpoint", when the listener cannot be opened after the
 *   checks passed (out of sockets): a new worker is then removed again; an
 *   existing one keeps what kvr_indexer_register did to it.
 * - WORKER_LIMIT: (model, group, worker_id) is not registered and
 *   max_workers workers already are. Nothing changed.
 * - NO_DESCRIPTORS: the rank has no listener yet and the process cannot
 *   open one without taking descriptors kept for the HTTP server
 *   (kvr_source_descriptors_left; RLIMIT_NOFILE). Nothing changed. Checked
 *   before the endpoints are tried, so it is never taken for a bad one.
 * - BLOCK_SIZE_CONFLICT: kvr_indexer_register's rule (another worker of the
 *   group binds another block size). Nothing changed.
 * - NO_MEMORY: an allocation failed before the change. Nothing changed.
 * - STOPPED: the ingest thread is not running. Nothing changed.
 * - CREATED: a new worker, or a new rank of a registered worker: a listener
 *   was started (none without an endpoint). reply->reset says whether the worker's settings changed
 *   with it (kvr_indexer_register returned RESET: every rank's state
 *   cleared, cursors restarted).
 * - RESET: an existing rank, and the worker's effective settings changed
 *   (kvr_indexer_register's RESET): indexed state and normalizers of every
 *   rank cleared, cursors restarted; the listeners keep running (SPEC §5
 *   rule 9). reply->listener_restarted when the rank's endpoints changed too.
 * - UPDATED: an existing rank, only the effective accepts_mm_hashes changed;
 *   state kept. listener_restarted as above.
 * - LISTENER_RESTARTED: an existing rank, same effective settings, new
 *   endpoint, replay_endpoint or topic: the listener reconnects (the new
 *   publisher's numbering starts over), or stops when the endpoint is gone;
 *   the index is kept.
 * - UNCHANGED: an existing rank with the same effective settings and
 *   endpoints; the listener and the state are untouched.
 * On every success the rank's record takes reg's text (settings, endpoints,
 * origin: the last registrant owns it), every other rank record of the
 * worker takes reg's settings, and observers hear of each record whose
 * effective content or origin changed. reply may be NULL. */
kvr_registry_result kvr_registry_register(kvr_registry *r, const kvr_registration *reg,
                                          kvr_registry_reply *reply);

/* Which registrations an unregistration removes (SPEC §7.1):
 * - routing_group NULL: the worker in every group of the model; dp_rank is
 *   ignored.
 * - routing_group set (""= "default"), has_rank false: every rank of the
 *   worker in that group.
 * - both: that rank. A rank that has indexed state but no listener (a batch
 *   named it) counts too: its state is cleared.
 * origins: a mask of KVR_ORIGIN_BIT()s; 0 = any. Records of other origins
 * are left alone (a reload removes only its own). A worker left with no
 * listener is removed from the indexer with all its state. */
typedef struct {
    const char *model_name;
    const char *routing_group;
    uint64_t worker_id;
    bool has_rank;
    uint32_t dp_rank;
    unsigned origins;
} kvr_unregistration;

typedef enum {
    KVR_UNREG_REMOVED = 0, /* at least one rank or worker was removed */
    KVR_UNREG_NOT_FOUND,   /* nothing matched; nothing changed */
    KVR_UNREG_INVALID,     /* model_name NULL/empty */
    KVR_UNREG_NO_MEMORY,   /* out of memory before the change; nothing changed */
    KVR_UNREG_STOPPED,     /* ingest thread not running; nothing changed */
    KVR_UNREG_RESULT_COUNT
} kvr_unregister_result;

const char *kvr_unregister_result_name(kvr_unregister_result r);

typedef struct {
    kvr_unregister_result result;
    size_t ranks_removed;     /* rank records removed (and state-only ranks cleared) */
    size_t listeners_stopped;
    size_t workers_removed;   /* workers gone from the indexer */
} kvr_unregister_reply;

kvr_unregister_result kvr_registry_unregister(kvr_registry *r, const kvr_unregistration *u,
                                              kvr_unregister_reply *reply);

/* Makes the records of `origin` exactly regs (a config reload, a discovery
 * poll): first every record of that origin whose key (model, group,
 * worker_id, dp_rank) no entry names is unregistered (that rank only, as
 * kvr_registry_unregister with the origin's mask); then each entry is
 * registered, in order, as kvr_registry_register with its origin set to
 * `origin` (so an entry takes over a record another origin made, and an
 * unchanged entry changes nothing). All of it runs as one step on the
 * ingest thread. A failing entry does not stop the others: replies[i]
 * (replies may be NULL) gets entry i's reply. Returns the number of
 * entries that failed; STOPPED counts every entry. */
typedef struct {
    size_t created, changed, unchanged; /* entries by result (changed: updated,
                                           reset, listener_restarted) */
    size_t removed;                     /* rank records unregistered */
    size_t failed;
} kvr_registry_sync_report;

size_t kvr_registry_sync(kvr_registry *r, kvr_origin origin, const kvr_registration *regs,
                         size_t n, kvr_registry_reply *replies, kvr_registry_sync_report *report);

/* A snapshot of every registration record, in registration order (workers
 * in the order they were created, each worker's ranks in theirs). The
 * strings belong to the snapshot. */
typedef struct {
    kvr_registration *items;
    size_t n;
} kvr_registrations;

/* 0, or -1 (out of memory; *out is empty). Callable from observers. */
int kvr_registry_list(kvr_registry *r, kvr_registrations *out);
void kvr_registrations_free(kvr_registrations *l);
/* Registrations refused so far with a limit result (WORKER_LIMIT or
 * NO_DESCRIPTORS); 0 for any other result. */
uint64_t kvr_registry_refused(kvr_registry *r, kvr_registry_result limit);

/* Registered workers (model, group, worker_id) and rank records now. */
size_t kvr_registry_workers(kvr_registry *r);
size_t kvr_registry_ranks(kvr_registry *r);

/* Observers: called after every successful change, once per rank record
 * added, changed (settings, endpoints or origin) or removed, in the order
 * the changes were applied. reg is valid during the call only. Called on the
 * ingest thread with no registry lock held: keep it short (no I/O), it may
 * call kvr_registry_list/_workers but not register or unregister. */
typedef enum {
    KVR_REG_EVENT_ADDED = 0,
    KVR_REG_EVENT_CHANGED,
    KVR_REG_EVENT_REMOVED
} kvr_reg_event_kind;

typedef struct {
    kvr_reg_event_kind kind;
    kvr_registry_result result; /* ADDED/CHANGED: the registration's result */
    const kvr_registration *reg; /* after the change; REMOVED: as it was */
} kvr_reg_event;

typedef void (*kvr_registry_observer_fn)(void *user, const kvr_reg_event *ev);

#define KVR_REGISTRY_MAX_OBSERVERS 8
/* 0, or -1 when KVR_REGISTRY_MAX_OBSERVERS are set or the ingest thread is
 * gone. Once kvr_registry_unobserve returns, fn is not running and will not
 * be called again. */
int kvr_registry_observe(kvr_registry *r, kvr_registry_observer_fn fn, void *user);
void kvr_registry_unobserve(kvr_registry *r, kvr_registry_observer_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
