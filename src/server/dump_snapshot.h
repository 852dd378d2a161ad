/* A consistent snapshot of what a peer needs to recover (SPEC §10): every
 * index as parent-linked store chains, and per (model, group) the
 * registrations and each listener's cursor — the sequence number the
 * content reflects — all taken in one step on the ingest thread, so no batch
 * falls between the content and its cursor. Compact (about 16 bytes per
 * block plus a small header per chain) so GET /dump can stream text from it
 * without ever holding the text. */
#ifndef KVR_SERVER_DUMP_SNAPSHOT_H
#define KVR_SERVER_DUMP_SNAPSHOT_H

#include "server/server_internal.h"

typedef struct {
    uint64_t worker_id, parent;
    uint32_t dp_rank, n;
    kvr_tier tier;
    bool has_parent;
    size_t first; /* engine hashes at hashes[first ..+n), router hashes at [first+n ..+n) */
} kvr_dump_chain;

typedef struct {
    uint64_t worker_id, seq, digest;
    uint32_t dp_rank;
    bool has_digest;
} kvr_dump_cursor;

typedef struct {
    char *model, *group; /* owned */
    uint32_t block_size; /* 0: no registration has set it */
    size_t first_chain, n_chains;
    size_t first_cursor, n_cursors;
    size_t *regs, n_regs, cap_regs; /* indexes into the snapshot's registrations */
} kvr_dump_group;

typedef struct {
    kvr_dump_group *groups;
    size_t n_groups, cap_groups;
    kvr_dump_chain *chains;
    size_t n_chains, cap_chains;
    uint64_t *hashes;
    size_t n_hashes, cap_hashes;
    kvr_dump_cursor *cursors;
    size_t n_cursors, cap_cursors;
    kvr_registrations regs;
    size_t blocks; /* ownerships in the chains */
    bool failed;   /* out of memory: the snapshot is incomplete */
} kvr_dump_snapshot;

/* Takes the snapshot (with_events false: registrations and cursors only).
 * 0, or -1 (out of memory, or the ingest thread is gone) with *out empty. */
int kvr_dump_snapshot_take(kvr_server *srv, bool with_events, kvr_dump_snapshot *out);
void kvr_dump_snapshot_free(kvr_dump_snapshot *s);

/* "device", "host_pinned", "disk", "external": Dynamo's StorageTier in serde
 * snake_case; -1 from the parser for anything else. */
const char *kvr_dump_tier_name(kvr_tier t);
int kvr_dump_tier_from_name(const char *name);

#endif
