/* Reading a peer's dump (either form api_dump.c writes, Dynamo's own, and
 * kvrouter's older JSON array) into the indexer: store records are applied
 * on the ingest thread in chunks, registrations and cursors are kept for the
 * caller (peer_sync.c). JSON lines are read as they arrive, so a streamed
 * ndjson dump costs one line of memory; the one-object forms are held whole
 * (bounded by KVR_DUMP_MAX_BYTES) and walked one event at a time, never as
 * one jansson tree. */
#ifndef KVR_SERVER_DUMP_LOAD_H
#define KVR_SERVER_DUMP_LOAD_H

#include "server/server_internal.h"

#define KVR_DUMP_MAX_BYTES (4ull << 30)
/* One record (a line, one RouterEvent) at most: 65536 blocks as Dynamo
 * writes them fit. */
#define KVR_DUMP_MAX_RECORD (16u << 20)

typedef struct {
    char *model, *group;
    uint64_t worker_id, seq, digest;
    uint32_t dp_rank;
    bool has_digest;
} kvr_dump_cursor_rec;

typedef struct kvr_dump_pending kvr_dump_pending;

typedef struct {
    kvr_server *srv;
    bool apply_events; /* false: registrations and cursors only */
    /* results */
    json_t *regs; /* array of /register objects */
    kvr_dump_cursor_rec *cursors;
    size_t n_cursors, cap_cursors;
    long applied, skipped, events; /* store records applied / refused; events seen */
    char err[256];                 /* the first error */
    bool failed;                   /* the input is not a dump */
    /* input */
    bool ndjson;  /* lines, read as they come */
    bool decided; /* the form is known */
    char *buf;
    size_t len, cap;
    kvr_dump_pending *pending;
} kvr_dump_loader;

void kvr_dump_loader_init(kvr_dump_loader *l, kvr_server *srv, bool apply_events);
/* ndjson: true when the bytes are known to be JSON lines (a content type
 * said so); otherwise the form is decided at finish. false on failure. */
bool kvr_dump_loader_feed(kvr_dump_loader *l, const char *data, size_t len, bool ndjson);
/* Parses what is held and applies what is pending. false when the input
 * was not a dump (l->err says why). */
bool kvr_dump_loader_finish(kvr_dump_loader *l);
void kvr_dump_loader_free(kvr_dump_loader *l);

/* GET base_url + path_and_args into the loader (libcurl). false with
 * l->err set on a transport error or a status other than 200. */
bool kvr_dump_fetch(kvr_dump_loader *l, const char *base_url, const char *path_and_args);

/* Shared by the two halves of the loader (dump_load.c, dump_load_dynamo.c). */
void kvr_dump_fail(kvr_dump_loader *l, const char *fmt, const char *what);
const char *kvr_dump_ws(const char *p, const char *e);
/* Where the JSON value starting at p ends; NULL when not before e. */
const char *kvr_dump_value_end(const char *p, const char *e);
/* The value at [p, q) (u64 hashes kept exact), NULL when it is not one,
 * or out of memory (then l's first error says so). */
json_t *kvr_dump_parse(kvr_dump_loader *l, const char *p, const char *q);
typedef void (*kvr_dump_element_fn)(kvr_dump_loader *l, const char *p, const char *q, void *ctx);
bool kvr_dump_each(kvr_dump_loader *l, const char *p, const char *q, kvr_dump_element_fn fn,
                   void *ctx);
/* One store record whose i-th (engine, router) hashes get() reads. */
typedef bool (*kvr_dump_hash_fn)(json_t *blocks, size_t i, uint64_t *engine, uint64_t *local);
void kvr_dump_add_store(kvr_dump_loader *l, const char *model, const char *group,
                        const kvr_dump_store *ev, json_t *blocks, kvr_dump_hash_fn get);
void kvr_dump_add_registration(kvr_dump_loader *l, json_t *reg, const char *model,
                               const char *group);
void kvr_dump_add_cursor(kvr_dump_loader *l, const char *model, const char *group,
                         uint64_t worker, uint32_t rank, uint64_t seq, const char *digest);
/* dump_load_dynamo.c: the object at [p, e). */
void kvr_dump_load_dynamo(kvr_dump_loader *l, const char *p, const char *e);

#endif
