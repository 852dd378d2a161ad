/* Internals shared by the ingest loop (source.c) and the per-rank sequence
 * state machine (listener.c). Everything here is touched by the ingest
 * thread only. */
#ifndef KVR_SOURCE_INTERNAL_H
#define KVR_SOURCE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "kvrouter/source.h"

typedef struct {
    uint64_t seq;
    void *data;
    size_t len;
} kvr_pending_msg;

#define KVR_LISTENER_MAX_SEEN_RANKS 8

typedef struct kvr_listener {
    kvr_worker *w;
    uint64_t worker_id;
    uint32_t rank;
    char endpoint[KVR_ENDPOINT_MAX];
    char replay_endpoint[KVR_ENDPOINT_MAX];
    char topic[KVR_NAME_MAX];
    void *sub;
    void *dealer; /* only while replaying */

    kvr_listener_state state;
    bool has_next;  /* a cursor exists: next is the sequence number expected */
    uint64_t next;
    bool has_seq;
    uint64_t last_seq;
    double last_event_time; /* monotonic seconds, 0 = never */

    /* replay in progress */
    uint64_t replay_from;
    bool replay_got_first;
    bool replay_incomplete;
    double replay_deadline;
    kvr_pending_msg *buf;
    size_t n_buf, cap_buf;
    uint64_t buf_bytes;

    /* ranks named by batches (their dp_rank overrides the socket's rank):
     * a restart or failed replay clears them too */
    uint32_t seen_ranks[KVR_LISTENER_MAX_SEEN_RANKS];
    uint32_t n_seen_ranks;

    kvr_source_counters c;
} kvr_listener;

struct kvr_source_cmd;

struct kvr_source {
    kvr_indexer *ix;
    kvr_source_config cfg;
    void *zctx;
    int wake_fd;
    pthread_t thread;
    bool thread_started;
    _Atomic int stop;

    pthread_mutex_t mu; /* guards cmd queue */
    pthread_cond_t cond;
    struct kvr_source_cmd *cmds;

    /* ingest thread only */
    kvr_listener **ls;
    size_t n_ls, cap_ls;
    bool items_dirty;
    kvr_batch batch;
};

/* listener.c: the SPEC §2 sequence machine. */
void kvr_listener_on_live(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                          size_t len);
/* frames: after the "" delimiter, 2 ([seq, payload]) or 3 ([topic, seq,
 * payload]) frames. */
void kvr_listener_on_replay(kvr_source *src, kvr_listener *l, size_t n_frames,
                            const void *seq_frame, size_t seq_len, const void *payload,
                            size_t len);
void kvr_listener_check_timeout(kvr_source *src, kvr_listener *l, double now);
/* Drops any replay and buffered messages; resets the cursor. */
void kvr_listener_reset(kvr_source *src, kvr_listener *l);
void kvr_listener_free_buffer(kvr_listener *l);

#endif
