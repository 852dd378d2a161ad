/* Per-(worker, rank) sequence machine (SPEC §2, the rule at the top of
 * include/kvrouter/source.h): cursor, gaps, replays, engine restarts,
 * reconnections, peer-recovery holds, and applying decoded batches to the
 * indexer. Whatever it cannot recover it counts (lost_batches); it clears a
 * rank only for a restart or for history provably gone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvrouter/log.h"
#include "source/source_internal.h"
#include "util/grow.h"

static uint64_t digest(const void *payload, size_t len) { return XXH3_64bits(payload, len); }

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
    l->has_digest = true;
    l->last_digest = digest(payload, len);
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

/* ---------------------------------------------------------------- buffer */

static void drop_buffered(kvr_source *src, kvr_listener *l, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        l->buf_bytes -= l->buf[i].len;
        src->buffered_bytes -= l->buf[i].len;
        free(l->buf[i].data);
    }
    if (n < l->n_buf)
        memmove(l->buf, l->buf + n, (l->n_buf - n) * sizeof *l->buf);
    l->n_buf -= n;
    l->c.buffered = l->n_buf;
}

void kvr_listener_free_buffer(kvr_source *src, kvr_listener *l)
{
    drop_buffered(src, l, l->n_buf);
    free(l->buf);
    l->buf = NULL;
    l->cap_buf = 0;
}

/* Returns false (counted) when a bound is hit or memory ran out. */
static bool buffer_msg(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                       size_t len)
{
    const kvr_source_config *cfg = &src->cfg;
    if (l->n_buf >= cfg->max_buffered || l->buf_bytes + len > cfg->max_buffered_bytes ||
        src->buffered_bytes + len > cfg->max_buffered_total_bytes) {
        l->c.buffer_overflows++;
        return false;
    }
    if (KVR_GROW(l->buf, l->cap_buf, l->n_buf + 1) != 0) {
        l->c.buffer_overflows++;
        return false;
    }
    void *copy = malloc(len ? len : 1);
    if (!copy) {
        l->c.buffer_overflows++;
        return false;
    }
    if (len)
        memcpy(copy, payload, len);
    if (l->n_buf > 0 && seq > l->buf[l->n_buf - 1].seq + 1)
        l->c.seq_gaps++; /* a hole among the held messages */
    l->buf[l->n_buf++] = (kvr_pending_msg){seq, copy, len};
    l->buf_bytes += len;
    src->buffered_bytes += len;
    l->c.buffered = l->n_buf;
    return true;
}

/* ---------------------------------------------------------------- replay */

static void begin_replay(kvr_source *src, kvr_listener *l, uint64_t from, bool verify);

static void end_replay(kvr_source *src, kvr_listener *l)
{
    kvr_replay_close(src, l);
    kvr_timer_cancel(src, &l->replay_timer);
    l->replay_verify = false;
    l->state = KVR_LISTENER_LIVE;
}

/* A fresh stream whose first message is first_seq: replay 0.. first when it
 * may, else count what came before it as lost. True when a replay began. */
static bool start_fresh(kvr_source *src, kvr_listener *l, uint64_t first_seq, bool may_replay)
{
    if (first_seq > 0 && may_replay && kvr_replay_usable(src, l, kvr_source_now())) {
        l->has_next = true;
        l->next = 0;
        begin_replay(src, l, 0, false);
        return true;
    }
    l->c.lost_batches += first_seq;
    return false;
}

/* Applies the held messages in order, skipping what is already applied. A
 * hole between the cursor and the next held message is a new gap: replayed
 * when allowed and the endpoint is usable (the rest stays held), else
 * counted. A failed replay drains with may_replay false: the same gap is not
 * asked for again at once. */
static void drain_buffer(kvr_source *src, kvr_listener *l, bool may_replay)
{
    if (!l->has_next && l->n_buf > 0 && start_fresh(src, l, l->buf[0].seq, may_replay))
        return;
    for (size_t i = 0; i < l->n_buf; i++) {
        kvr_pending_msg *m = &l->buf[i];
        if (l->has_next && m->seq < l->next) {
            l->c.duplicates_skipped++;
            continue;
        }
        if (l->has_next && m->seq > l->next) {
            if (i == 0 && may_replay)
                l->c.seq_gaps++; /* new: between a replay's end and what was held */
            if (may_replay && kvr_replay_usable(src, l, kvr_source_now())) {
                drop_buffered(src, l, i);
                begin_replay(src, l, l->next, false);
                return;
            }
            l->c.lost_batches += m->seq - l->next;
        }
        apply(src, l, m->seq, m->data, m->len);
    }
    drop_buffered(src, l, l->n_buf);
}

static void replay_failed(kvr_source *src, kvr_listener *l, const char *why, bool blame_endpoint)
{
    bool verify = l->replay_verify;
    end_replay(src, l);
    l->c.replays_failed++;
    double now = kvr_source_now();
    if (blame_endpoint)
        kvr_replay_mark_failed(src, l, why, now);
    KVR_LOG_LIMITED(KVR_LOG_WARN, KVR_LOG_WORKER_RANK(l->worker_id, l->rank),
                    "replay from %llu failed (%s); continuing without it",
                    (unsigned long long)l->replay_from, why);
    if (verify && l->n_buf > 0 && l->buf[0].seq != l->next) {
        /* A reconnection nobody could check and a number that does not
         * continue the stream: take it for a restart. */
        l->c.restarts++;
        clear_rank(src, l);
        l->has_next = false;
        l->has_digest = false;
    }
    drain_buffer(src, l, false);
}

static void begin_replay(kvr_source *src, kvr_listener *l, uint64_t from, bool verify)
{
    l->state = KVR_LISTENER_REPLAYING;
    l->replay_from = from;
    l->replay_verify = verify;
    l->replay_got_first = false;
    l->replay_incomplete = false;
    if (!kvr_replay_request(src, l, from)) {
        char why[KVR_REPLAY_ERROR_MAX];
        snprintf(why, sizeof why, "%s", l->replay_error);
        replay_failed(src, l, why, true);
        return;
    }
    kvr_timer_arm(src, &l->replay_timer,
                  kvr_source_now() + src->cfg.replay_timeout_ms / 1000.0);
}

/* The engine's stream is not the one the index holds: start over from 0. */
static void restart_from_zero(kvr_source *src, kvr_listener *l)
{
    end_replay(src, l);
    drop_buffered(src, l, l->n_buf);
    l->c.restarts++;
    clear_rank(src, l);
    l->has_digest = false;
    l->has_next = true;
    l->next = 0;
    /* Everything published so far is in the answer; later messages are
     * held while it runs. */
    if (kvr_replay_usable(src, l, kvr_source_now()))
        begin_replay(src, l, 0, false);
    else
        l->has_next = false;
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

static void finish_replay(kvr_source *src, kvr_listener *l)
{
    bool unconfirmed = l->replay_verify && !l->replay_got_first;
    kvr_replay_mark_ok(l);
    if (unconfirmed) {
        /* Nothing at or after our last number: the engine's stream is
         * behind ours, so it is not ours. */
        restart_from_zero(src, l);
        return;
    }
    end_replay(src, l);
    if (!l->replay_got_first && l->n_buf > 0 && l->buf[0].seq > l->replay_from) {
        /* Empty history that should not be: what came before the held
         * messages is gone. */
        l->replay_incomplete = true;
        if (l->has_next && l->buf[0].seq > l->next) {
            l->c.lost_batches += l->buf[0].seq - l->next;
            if (l->next > 0)
                clear_rank(src, l);
            l->next = l->buf[0].seq;
        }
    }
    if (l->replay_incomplete)
        l->c.replays_failed++;
    else
        l->c.replays_ok++;
    drain_buffer(src, l, true);
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
    kvr_timer_arm(src, &l->replay_timer,
                  kvr_source_now() + src->cfg.replay_timeout_ms / 1000.0);
    if (is_end_marker(seq_frame, seq_len, len)) {
        finish_replay(src, l);
        return;
    }
    const unsigned char *s = seq_frame;
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++)
        seq = (seq << 8) | s[i];
    if (!l->replay_got_first) {
        l->replay_got_first = true;
        if (l->replay_verify) {
            l->replay_verify = false;
            if (seq == l->replay_from) {
                if (digest(payload, len) != l->last_digest) {
                    restart_from_zero(src, l); /* same number, other bytes */
                    return;
                }
                l->c.duplicates_skipped++; /* our last batch: the same stream */
                return;
            }
        }
        if (seq > l->replay_from && seq > l->next) {
            /* History no longer reaches back to what we asked for. */
            l->replay_incomplete = true;
            l->c.lost_batches += seq - l->next;
            if (l->next > 0)
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

void kvr_listener_on_timeout(kvr_source *src, kvr_listener *l)
{
    if (l->state == KVR_LISTENER_REPLAYING)
        replay_failed(src, l, "timeout", true);
}

void kvr_listener_on_replay_refused(kvr_source *src, kvr_listener *l)
{
    if (l->state == KVR_LISTENER_REPLAYING && !l->replay_got_first)
        replay_failed(src, l, "connection refused", true);
}

/* ---------------------------------------------------------------- live */

static void on_live(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                    size_t len, bool went_back);

/* A restart seen on the live socket: the number went back. */
static void new_stream(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                       size_t len)
{
    end_replay(src, l);
    drop_buffered(src, l, l->n_buf);
    l->c.restarts++;
    clear_rank(src, l);
    l->has_next = false;
    l->has_digest = false;
    on_live(src, l, seq, payload, len, false);
}

/* Starts a replay from `from` with m held; false when m cannot be held. */
static bool replay_with(kvr_source *src, kvr_listener *l, uint64_t from, bool verify,
                        uint64_t seq, const void *payload, size_t len)
{
    if (!buffer_msg(src, l, seq, payload, len))
        return false;
    begin_replay(src, l, from, verify);
    return true;
}

/* The first message after a reconnection: it may belong to a new stream. */
static void after_reconnect(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                            size_t len)
{
    if (seq < l->next) {
        new_stream(src, l, seq, payload, len);
        return;
    }
    if (l->has_digest && kvr_replay_usable(src, l, kvr_source_now()) &&
        replay_with(src, l, l->next - 1, true, seq, payload, len))
        return;
    if (seq != l->next) {
        /* Nothing to check it against: a jump after a reconnection is taken
         * for a new stream, not for continuity. */
        l->c.restarts++;
        clear_rank(src, l);
        l->has_next = false;
        l->has_digest = false;
    }
    on_live(src, l, seq, payload, len, false);
}

/* A reconnection while a replay runs: what is held and what comes may be two
 * streams. Ask again from our last batch and let its bytes decide. */
static void reconnect_in_replay(kvr_source *src, kvr_listener *l, uint64_t seq,
                                const void *payload, size_t len)
{
    end_replay(src, l);
    bool kept = buffer_msg(src, l, seq, payload, len);
    if (kept && l->has_next && l->next > 0 && l->has_digest) {
        begin_replay(src, l, l->next - 1, true);
        return;
    }
    drop_buffered(src, l, l->n_buf);
    if (l->has_next && l->next > 0) {
        l->c.restarts++;
        clear_rank(src, l);
    }
    l->has_next = false;
    l->has_digest = false;
    on_live(src, l, seq, payload, len, false);
}

static void on_held(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                    size_t len)
{
    if (l->n_buf > 0 && seq <= l->buf[l->n_buf - 1].seq) {
        /* the engine restarted while held: the older part is moot */
        drop_buffered(src, l, l->n_buf);
        l->c.restarts++;
        l->held_restart = true;
    }
    buffer_msg(src, l, seq, payload, len); /* a miss shows as a gap at release */
}

void kvr_listener_on_live(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                          size_t len)
{
    bool went_back = l->has_live_seq && seq <= l->live_seq;
    l->has_live_seq = true;
    l->live_seq = seq;
    on_live(src, l, seq, payload, len, went_back);
}

/* went_back: seq is not above the last number this connection delivered. */
static void on_live(kvr_source *src, kvr_listener *l, uint64_t seq, const void *payload,
                    size_t len, bool went_back)
{
    l->last_event_time = kvr_source_now();
    if (l->held) {
        l->has_seq = true;
        l->last_seq = seq;
        on_held(src, l, seq, payload, len);
        return;
    }
    bool reconnected = l->reconnected && l->has_next;
    l->reconnected = false;
    if (l->state == KVR_LISTENER_REPLAYING) {
        if (reconnected) {
            reconnect_in_replay(src, l, seq, payload, len);
        } else if (l->n_buf > 0 && seq <= l->buf[l->n_buf - 1].seq) {
            new_stream(src, l, seq, payload, len); /* restarted under the replay */
        } else if (!buffer_msg(src, l, seq, payload, len)) {
            replay_failed(src, l, "live buffer full", false);
            on_live(src, l, seq, payload, len, went_back);
        }
        return;
    }
    l->state = KVR_LISTENER_LIVE;
    if (reconnected) {
        after_reconnect(src, l, seq, payload, len);
        return;
    }
    if (!l->has_next) {
        if (seq > 0 && kvr_replay_usable(src, l, l->last_event_time)) {
            l->has_next = true;
            l->next = 0;
            if (replay_with(src, l, 0, false, seq, payload, len))
                return;
            l->has_next = false;
        }
        l->c.lost_batches += seq;
        apply(src, l, seq, payload, len);
        return;
    }
    if (seq == l->next) {
        apply(src, l, seq, payload, len);
    } else if (seq < l->next && !went_back) {
        l->c.duplicates_skipped++; /* a replay ran ahead of the live socket */
    } else if (seq < l->next) {
        new_stream(src, l, seq, payload, len);
    } else {
        l->c.seq_gaps++;
        if (kvr_replay_usable(src, l, l->last_event_time) &&
            replay_with(src, l, l->next, false, seq, payload, len))
            return;
        l->c.lost_batches += seq - l->next;
        apply(src, l, seq, payload, len);
    }
}

/* ---------------------------------------------------------------- monitor */

void kvr_listener_on_monitor(kvr_source *src, kvr_listener *l, uint16_t event)
{
    (void)src;
    switch (event) {
    case ZMQ_EVENT_CONNECTED:
        if (l->disconnected) {
            /* Messages from here on came over a new connection. */
            l->disconnected = false;
            l->reconnected = true;
            l->c.reconnects++;
        }
        break;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        l->connected = true;
        break;
    case ZMQ_EVENT_DISCONNECTED:
        l->connected = false;
        l->disconnected = true;
        l->has_live_seq = false; /* the next connection numbers as it will */
        break;
    default:
        break;
    }
}

/* ---------------------------------------------------------------- control */

void kvr_listener_reset(kvr_source *src, kvr_listener *l)
{
    end_replay(src, l);
    drop_buffered(src, l, l->n_buf);
    l->has_next = false;
    l->has_digest = false;
    l->reconnected = false;
    l->held_restart = false;
    l->state = l->held ? KVR_LISTENER_HELD
               : l->has_seq ? KVR_LISTENER_LIVE
                            : KVR_LISTENER_CONNECTING;
}

void kvr_listener_hold(kvr_source *src, kvr_listener *l)
{
    if (l->held)
        return;
    end_replay(src, l);
    if (l->has_next && l->next > 0) {
        /* What this listener applied and the dump about to be loaded are two
         * states at two sequence numbers; merged they would keep blocks one
         * of them had removed. The dump (and its cursor) replace it. */
        drop_buffered(src, l, l->n_buf);
        clear_rank(src, l);
        l->has_next = false;
        l->has_digest = false;
    }
    l->held = true;
    l->state = KVR_LISTENER_HELD;
}

void kvr_listener_release(kvr_source *src, kvr_listener *l, bool has_cursor, uint64_t cursor,
                          const uint64_t *cursor_digest)
{
    if (!l->held)
        return;
    l->held = false;
    l->state = l->has_seq ? KVR_LISTENER_LIVE : KVR_LISTENER_CONNECTING;
    if (l->held_restart) {
        /* the stream the index holds ended while we were held */
        l->held_restart = false;
        clear_rank(src, l);
        has_cursor = false;
        l->has_next = false;
        l->has_digest = false;
    }
    if (has_cursor) {
        l->has_next = true;
        l->next = cursor + 1;
        l->has_digest = cursor_digest != NULL;
        l->last_digest = cursor_digest ? *cursor_digest : 0;
    }
    if (has_cursor && l->has_digest) {
        for (size_t i = 0; i < l->n_buf; i++) {
            if (l->buf[i].seq != cursor)
                continue;
            if (digest(l->buf[i].data, l->buf[i].len) != l->last_digest) {
                /* the batch the dump ends with is not the engine's: a
                 * restart between the peer's snapshot and our subscription */
                l->c.restarts++;
                clear_rank(src, l);
                l->has_next = false;
                l->has_digest = false;
            }
            drain_buffer(src, l, true);
            return;
        }
        if (l->n_buf > 0 && l->buf[0].seq > l->next &&
            kvr_replay_usable(src, l, kvr_source_now())) {
            l->c.seq_gaps++;
            begin_replay(src, l, cursor, true); /* fills the gap, checks the stream */
            return;
        }
    }
    drain_buffer(src, l, true);
}
