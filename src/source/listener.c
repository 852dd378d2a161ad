/* Per-(worker, rank) sequence machine (SPEC §2): cursor, gaps, replay,
 * engine restarts, and applying decoded batches to the indexer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>
#include "kvrouter/log.h"

#include "source/source_internal.h"

static void note_rank(kvr_listener *l, uint32_t rank)
{
    if (rank == l->rank)
        return;
    for (uint32_t i = 0; i < l->n_seen_ranks; i++)
        if (l->seen_ranks[i] == rank)
            return;
    if (l->n_seen_ranks < KVR_LISTENER_MAX_SEEN_RANKS)
        l->seen_ranks[l->n_seen_ranks++] = rank;
}

/* The socket's rank and every rank its batches named: the state a lost
 * stretch of the stream may have left stale. */
static void clear_rank(kvr_source *src, kvr_listener *l)
{
    kvr_indexer_clear_rank(src->ix, l->w, l->rank);
    for (uint32_t i = 0; i < l->n_seen_ranks; i++)
        kvr_indexer_clear_rank(src->ix, l->w, l->seen_ranks[i]);
    l->c.rank_clears++;
}

static void apply(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload, size_t len)
{
    l->has_next = true;
    l->next = seq + 1;
    l->has_seq = true;
    l->last_seq = seq;
    kvr_batch *b = &src->batch;
    kvr_batch_error err = kvr_batch_decode(b, payload, len);
    if (err != KVR_BATCH_OK) {
        if (err == KVR_BATCH_OVER_LIMIT)
            l->c.messages_over_limit++;
        else
            l->c.malformed_batches++;
        KVR_LOG_LIMITED(KVR_LOG_WARN, KVR_LOG_WORKER_RANK(l->worker_id, l->rank),
                        "malformed batch seq %llu (%s, %zu bytes)", (unsigned long long)seq,
                        kvr_batch_error_name(err), len);
        return;
    }
    if (b->has_dp_rank)
        note_rank(l, b->dp_rank);
    kvr_indexer_apply(src->ix, l->w, l->rank, b);
    /* Events the indexer did not take (a rank it rejected) were received
     * all the same. */
    while (kvr_batch_next(b))
        ;
    l->c.events_stored += b->tally.stored;
    l->c.events_removed += b->tally.removed;
    l->c.events_cleared += b->tally.cleared;
    l->c.events_dropped += b->tally.dropped;
    l->c.blocks_stored += b->tally.blocks_stored;
    l->c.blocks_removed += b->tally.blocks_removed;
    l->c.batches++;
}

void kvr_listener_free_buffer(kvr_listener *l)
{
    for (size_t i = 0; i < l->n_buf; i++)
        free(l->buf[i].data);
    free(l->buf);
    l->buf = NULL;
    l->n_buf = l->cap_buf = 0;
    l->buf_bytes = 0;
}

static void close_dealer(kvr_listener *l)
{
    if (l->dealer) {
        zmq_close(l->dealer);
        l->dealer = NULL;
    }
}

/* Returns false when the buffer is full or memory ran out. */
static bool buffer_msg(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                       size_t len)
{
    if (l->n_buf >= src->cfg.max_buffered || l->buf_bytes + len > src->cfg.max_buffered_bytes)
        return false;
    if (l->n_buf == l->cap_buf) {
        size_t cap = l->cap_buf ? l->cap_buf * 2 : 16;
        kvr_pending_msg *nb = realloc(l->buf, cap * sizeof *nb);
        if (!nb)
            return false;
        l->buf = nb;
        l->cap_buf = cap;
    }
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return false;
    if (len)
        memcpy(copy, payload, len);
    l->buf[l->n_buf++] = (kvr_pending_msg){seq, copy, len};
    l->buf_bytes += len;
    return true;
}

/* Applies the messages held during a replay, in order, skipping what the
 * replay covered. A hole between the replay and the buffer is history nobody
 * can give back: clear the rank (stale removals are worse than a cold
 * cache), then continue from the buffer. */
static void drain_buffer(kvr_source *src, kvr_listener *l)
{
    for (size_t i = 0; i < l->n_buf; i++) {
        kvr_pending_msg *m = &l->buf[i];
        if (l->has_next && m->seq < l->next) {
            l->c.duplicates_skipped++;
            continue;
        }
        if (l->has_next && m->seq > l->next) {
            l->c.seq_gaps++;
            l->c.lost_batches += m->seq - l->next;
            clear_rank(src, l);
        }
        apply(src, l, m->seq, m->data, m->len);
    }
    kvr_listener_free_buffer(l);
}

static void replay_failed(kvr_source *src, kvr_listener *l, const char *why)
{
    KVR_LOG_LIMITED(KVR_LOG_WARN, KVR_LOG_WORKER_RANK(l->worker_id, l->rank),
                    "replay from %llu failed (%s); rank cleared",
                    (unsigned long long)l->replay_from, why);
    close_dealer(l);
    l->c.replays_failed++;
    clear_rank(src, l);
    l->state = KVR_LISTENER_LIVE;
    /* Start fresh at the first held message. */
    l->has_next = false;
    drain_buffer(src, l);
}

static void start_replay(kvr_source *src, kvr_listener *l, uint64_t from, uint64_t seq,
                         const void *payload, size_t len)
{
    l->state = KVR_LISTENER_REPLAYING;
    l->replay_from = from;
    l->replay_got_first = false;
    l->replay_incomplete = false;
    l->replay_deadline = kvr_source_now() + src->cfg.replay_timeout_ms / 1000.0;
    if (!buffer_msg(src, l, seq, payload, len)) {
        l->state = KVR_LISTENER_LIVE;
        l->c.replays_failed++;
        clear_rank(src, l);
        apply(src, l, seq, payload, len);
        return;
    }
    void *d = zmq_socket(src->zctx, ZMQ_DEALER);
    int zero = 0;
    if (d)
        zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    if (!d || zmq_connect(d, l->replay_endpoint) != 0) {
        if (d)
            zmq_close(d);
        replay_failed(src, l, "cannot connect");
        return;
    }
    l->dealer = d;
    unsigned char seqbuf[8];
    for (int i = 0; i < 8; i++)
        seqbuf[i] = (unsigned char)(from >> (56 - 8 * i));
    /* The DEALER queues until connected; a dead endpoint ends in the timeout. */
    if (zmq_send(d, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(d, seqbuf, 8, ZMQ_DONTWAIT) < 0)
        replay_failed(src, l, "cannot send request");
}

static void restart(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                    size_t len)
{
    l->c.restarts++;
    clear_rank(src, l);
    apply(src, l, seq, payload, len);
}

void kvr_listener_on_live(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                          size_t len)
{
    l->last_event_time = kvr_source_now();
    if (l->state == KVR_LISTENER_REPLAYING) {
        if (l->n_buf > 0 && seq <= l->buf[l->n_buf - 1].seq) {
            /* The engine restarted under the replay: its history is moot. */
            close_dealer(l);
            kvr_listener_free_buffer(l);
            l->state = KVR_LISTENER_LIVE;
            restart(src, l, seq, payload, len);
            return;
        }
        if (!buffer_msg(src, l, seq, payload, len)) {
            replay_failed(src, l, "live buffer full");
            apply(src, l, seq, payload, len);
        }
        return;
    }
    l->state = KVR_LISTENER_LIVE;
    if (!l->has_next) {
        if (seq > 0 && l->replay_endpoint[0]) {
            l->has_next = true;
            l->next = 0;
            start_replay(src, l, 0, seq, payload, len);
            return;
        }
        apply(src, l, seq, payload, len);
        return;
    }
    if (seq == l->next) {
        apply(src, l, seq, payload, len);
    } else if (seq < l->next) {
        restart(src, l, seq, payload, len);
    } else {
        l->c.seq_gaps++;
        if (l->replay_endpoint[0]) {
            start_replay(src, l, l->next, seq, payload, len);
        } else {
            l->c.lost_batches += seq - l->next;
            apply(src, l, seq, payload, len);
        }
    }
}

static bool is_end_marker(const unsigned char *s, size_t n, size_t payload_len)
{
    if (n != 8 || payload_len != 0)
        return false;
    for (int i = 0; i < 8; i++)
        if (s[i] != 0xFF)
            return false;
    return true;
}

void kvr_listener_on_replay(kvr_source *src, kvr_listener *l, size_t n_frames,
                            const void *seq_frame, size_t seq_len, const void *payload,
                            size_t len)
{
    if (l->state != KVR_LISTENER_REPLAYING)
        return;
    if ((n_frames != 2 && n_frames != 3) || seq_len != 8) {
        l->c.bad_frames++;
        return;
    }
    l->replay_deadline = kvr_source_now() + src->cfg.replay_timeout_ms / 1000.0;
    if (is_end_marker(seq_frame, seq_len, len)) {
        close_dealer(l);
        l->state = KVR_LISTENER_LIVE;
        if (!l->replay_got_first && l->n_buf > 0 && l->buf[0].seq > l->replay_from)
            l->replay_incomplete = true; /* empty history that should not be */
        if (l->replay_incomplete)
            l->c.replays_failed++;
        else
            l->c.replays_ok++;
        drain_buffer(src, l);
        return;
    }
    const unsigned char *s = seq_frame;
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++)
        seq = (seq << 8) | s[i];
    if (!l->replay_got_first) {
        l->replay_got_first = true;
        if (seq > l->replay_from) {
            /* History no longer reaches back to what we asked for. */
            l->replay_incomplete = true;
            l->c.lost_batches += seq - l->replay_from;
            clear_rank(src, l);
            l->next = seq;
        }
    }
    if (seq < l->next) {
        l->c.duplicates_skipped++;
        return;
    }
    if (seq > l->next) {
        l->replay_incomplete = true;
        l->c.seq_gaps++;
        l->c.lost_batches += seq - l->next;
        clear_rank(src, l);
    }
    l->c.replayed_batches++;
    apply(src, l, seq, payload, len);
}

void kvr_listener_check_timeout(kvr_source *src, kvr_listener *l, double now)
{
    if (l->state == KVR_LISTENER_REPLAYING && now > l->replay_deadline)
        replay_failed(src, l, "timeout");
}

void kvr_listener_reset(kvr_source *src, kvr_listener *l)
{
    (void)src;
    close_dealer(l);
    kvr_listener_free_buffer(l);
    l->has_next = false;
    l->state = l->has_seq ? KVR_LISTENER_LIVE : KVR_LISTENER_CONNECTING;
}
