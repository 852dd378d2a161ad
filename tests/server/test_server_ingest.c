/* The service end to end: engine doubles publish real msgpack batches over
 * ZeroMQ on 127.0.0.1, kvrouter ingests them, and every assertion goes
 * through HTTP (/query_by_hash, /workers). */
#include "test_support.h"

#include <msgpuck.h>

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT 20000 /* ms: every wait ends as soon as its condition holds */

typedef struct {
    kvr_server *srv;
    char base[64];
} fixture;

static int setup_with(void **state, uint32_t replay_timeout_ms)
{
    fixture *f = calloc(1, sizeof *f);
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.source.replay_timeout_ms = replay_timeout_ms;
    f->srv = th_server_start(&cfg, f->base, sizeof f->base);
    if (!f->srv)
        return -1;
    *state = f;
    return 0;
}

/* Long enough for a replay on a loaded 2-core box; the timeout test waits it out. */
static int setup(void **state) { return setup_with(state, 1000); }
/* A replay that outlives any test step. */
static int setup_long_replay(void **state) { return setup_with(state, 60000); }

static int teardown(void **state)
{
    fixture *f = *state;
    kvr_server_stop(f->srv);
    free(f);
    return 0;
}

static void reg(fixture *f, uint64_t id, uint32_t rank, const th_engine *e, bool replay,
                const char *extra)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": %llu, \"dp_rank\": %u, \"endpoint\": \"%s\", \"model_name\": "
             "\"m\", \"block_size\": %d%s%s%s %s}",
             (unsigned long long)id, rank, e->endpoint, BS, replay ? ", \"replay_endpoint\": \"" : "",
             replay ? e->replay_endpoint : "", replay ? "\"" : "", extra ? extra : "");
    json_t *r = NULL;
    long st = th_register(f->base, body, &r);
    assert_int_equal(st, 201);
    json_decref(r);
}

/* tokens base..base+n*BS-1, engine hashes hbase+1.. */
typedef struct {
    uint64_t tokens[64];
    uint64_t hashes[16];
    uint64_t local[16];
    uint32_t n;
} chain;

static void make_chain(chain *c, uint64_t tbase, uint64_t hbase, uint32_t n)
{
    c->n = n;
    for (uint32_t i = 0; i < n * BS; i++)
        c->tokens[i] = tbase + i;
    for (uint32_t i = 0; i < n; i++)
        c->hashes[i] = hbase + i + 1;
    th_local_hashes(c->tokens, n * BS, BS, c->local, 16);
}

static void send_store(th_engine *e, uint64_t seq, const chain *c, uint32_t from, uint32_t n,
                       bool live)
{
    kvr_raw_event ev = th_store(c->hashes + from, n, from ? c->hashes[from - 1] : 0,
                                c->tokens + from * BS, BS);
    th_send_events(e, seq, &ev, 1, live);
}

/* capabilities.kv_capacity_tokens / kv_capacity_source of the only worker
 * (source NULL: both null, unknown) */
static void capacity_is(fixture *f, json_int_t tokens, const char *source)
{
    json_t *root = th_json("GET", f->base, "/workers", NULL, NULL);
    json_t *caps = json_object_get(json_array_get(root, 0), "capabilities");
    json_t *t = json_object_get(caps, "kv_capacity_tokens");
    json_t *s = json_object_get(caps, "kv_capacity_source");
    if (source) {
        assert_int_equal(json_integer_value(t), tokens);
        assert_string_equal(json_string_value(s), source);
    } else {
        assert_true(json_is_null(t) && json_is_null(s));
    }
    json_decref(root);
}

static void test_text_prefix_remove_clear(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 1, 0, &e, false, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain c;
    make_chain(&c, 100, 1000, 3);
    send_store(&e, 0, &c, 0, 3, true);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 3, 1, 0, 3 * BS, WAIT), 3 * BS);
    /* A request that diverges after two blocks matches two. */
    uint64_t q[3] = {c.local[0], c.local[1], 12345};
    assert_int_equal(th_score(f->base, "m", q, 3, 1, 0), 2 * BS);
    capacity_is(f, 0, NULL); /* nothing registered, nothing evicted yet */
    /* Remove the last block: prefix 2. */
    kvr_raw_event rm = th_remove(&c.hashes[2], 1);
    th_send_events(&e, 1, &rm, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 3, 1, 0, 2 * BS, WAIT), 2 * BS);
    /* an engine that evicts was full: at 3 blocks, what the router uses */
    capacity_is(f, 3 * BS, "estimated");
    kvr_raw_event cl = th_clear();
    th_send_events(&e, 2, &cl, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 3, 1, 0, -1, WAIT), -1);
    assert_int_equal(th_counter(f->base, 1, "m", "batches"), 3);
    assert_int_equal(th_counter(f->base, 1, "m", "seq_gaps"), 0);
    th_engine_stop(&e);
}

static void test_kimi_wide_exclusion(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 7, 0, &e, false, ", \"mm_identity\": \"engine_wide\"");
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain c;
    make_chain(&c, 200, 2000, 4);
    /* Block 2 (index 1) carries a Kimi wide pad: blocks 1..3 are media. */
    c.tokens[BS + 1] = 1ull << 40;
    send_store(&e, 0, &c, 0, 4, true);
    assert_int_equal(th_wait_counter(f->base, 7, "m", "mm_blocks_excluded", 3, WAIT), 3);
    assert_int_equal(th_score(f->base, "m", c.local, 4, 7, 0), BS); /* text prefix kept */
    assert_true(th_counter(f->base, 7, "m", "wide_tokens_seen") >= 1);
    /* A child of an excluded block is excluded whole. */
    chain d;
    make_chain(&d, 300, 3000, 1);
    kvr_raw_event child = th_store(d.hashes, 1, c.hashes[3], d.tokens, BS);
    th_send_events(&e, 1, &child, 1, true);
    assert_int_equal(
        th_wait_counter(f->base, 7, "m", "mm_descendant_stores_excluded", 1, WAIT), 1);
    /* Removing an excluded block is filtered, not a lookup miss. */
    kvr_raw_event rm = th_remove(&c.hashes[2], 1);
    th_send_events(&e, 2, &rm, 1, true);
    assert_int_equal(th_wait_counter(f->base, 7, "m", "mm_removals_filtered", 1, WAIT), 1);
    assert_int_equal(th_counter(f->base, 7, "m", "block_not_found"), 0);
    assert_int_equal(th_counter(f->base, 7, "m", "malformed_batches"), 0);
    assert_int_equal(th_score(f->base, "m", c.local, 4, 7, 0), BS);
    /* Capabilities: engine_wide does not accept caller mm hashes. */
    json_t *w = th_json("GET", f->base, "/workers", NULL, NULL);
    json_t *caps = json_object_get(json_array_get(w, 0),
                                   "capabilities");
    assert_string_equal(json_string_value(json_object_get(caps, "mm_identity")), "engine_wide");
    assert_true(json_is_false(json_object_get(caps, "accepts_mm_hashes")));
    json_decref(w);
    th_engine_stop(&e);
}

static json_t *caps_of(fixture *f, json_t **root)
{
    *root = th_json("GET", f->base, "/workers", NULL, NULL);
    return json_object_get(json_array_get(*root, 0), "capabilities");
}

/* auto: legacy (accepting mm hashes) until the first wide id, then
 * engine_wide, and /workers says so. */
static void test_auto_mode_detection(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 8, 0, &e, false, ", \"mm_identity\": \"auto\"");
    assert_true(th_engine_wait_sub(&e, WAIT));
    json_t *root;
    json_t *caps = caps_of(f, &root);
    assert_string_equal(json_string_value(json_object_get(caps, "detected_mm_identity")), "legacy");
    assert_true(json_is_true(json_object_get(caps, "accepts_mm_hashes")));
    json_decref(root);
    chain c;
    make_chain(&c, 250, 2500, 2);
    c.tokens[BS] = 1ull << 33;
    send_store(&e, 0, &c, 0, 2, true);
    assert_true(th_wait_counter(f->base, 8, "m", "wide_tokens_seen", 1, WAIT) >= 1);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 2, 8, 0, BS, WAIT), BS);
    caps = caps_of(f, &root);
    assert_string_equal(json_string_value(json_object_get(caps, "mm_identity")), "auto");
    assert_string_equal(json_string_value(json_object_get(caps, "detected_mm_identity")),
                        "engine_wide");
    assert_true(json_is_false(json_object_get(caps, "accepts_mm_hashes")));
    json_decref(root);
    th_engine_stop(&e);
}

static void test_two_workers_two_ranks_isolated(void **state)
{
    fixture *f = *state;
    th_engine e0, e1, e2;
    th_engine_start(&e0);
    th_engine_start(&e1);
    th_engine_start(&e2);
    reg(f, 10, 0, &e0, false, NULL);
    reg(f, 10, 1, &e1, false, NULL);
    reg(f, 11, 0, &e2, false, NULL);
    assert_true(th_engine_wait_sub(&e0, WAIT));
    assert_true(th_engine_wait_sub(&e1, WAIT));
    assert_true(th_engine_wait_sub(&e2, WAIT));
    chain a, b;
    make_chain(&a, 500, 5000, 2);
    make_chain(&b, 600, 5000, 3); /* same engine hashes, other tokens */
    send_store(&e0, 0, &a, 0, 2, true);
    send_store(&e1, 0, &b, 0, 3, true);
    send_store(&e2, 0, &a, 0, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", a.local, 2, 10, 0, 2 * BS, WAIT), 2 * BS);
    assert_int_equal(th_wait_score(f->base, "m", b.local, 3, 10, 1, 3 * BS, WAIT), 3 * BS);
    assert_int_equal(th_wait_score(f->base, "m", a.local, 2, 11, 0, BS, WAIT), BS);
    assert_int_equal(th_score(f->base, "m", a.local, 2, 10, 1), -1);
    assert_int_equal(th_score(f->base, "m", b.local, 3, 10, 0), -1);
    assert_int_equal(th_score(f->base, "m", b.local, 3, 11, 0), -1);
    /* Clearing rank 1 leaves rank 0 and the other worker alone. */
    kvr_raw_event cl = th_clear();
    th_send_events(&e1, 1, &cl, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", b.local, 3, 10, 1, -1, WAIT), -1);
    assert_int_equal(th_score(f->base, "m", a.local, 2, 10, 0), 2 * BS);
    assert_int_equal(th_score(f->base, "m", a.local, 2, 11, 0), BS);
    th_engine_stop(&e0);
    th_engine_stop(&e1);
    th_engine_stop(&e2);
}

/* [ts, [store(bad medium), store(ok)], nil] built by hand: the encoder only
 * writes valid mediums. */
static size_t bad_event_batch(char *buf, const chain *bad, const chain *ok)
{
    char *p = buf;
    p = mp_encode_array(p, 3);
    p = mp_encode_double(p, 1.0);
    p = mp_encode_array(p, 2);
    const chain *cs[2] = {bad, ok};
    for (int k = 0; k < 2; k++) {
        p = mp_encode_array(p, 7);
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, cs[k]->hashes[0]);
        p = mp_encode_nil(p);
        p = mp_encode_array(p, BS);
        for (int i = 0; i < BS; i++)
            p = mp_encode_uint(p, cs[k]->tokens[i]);
        p = mp_encode_uint(p, BS);
        p = mp_encode_nil(p);
        p = k == 0 ? mp_encode_str(p, "FLOPPY", 6) : mp_encode_str(p, "GPU", 3);
    }
    p = mp_encode_nil(p);
    return (size_t)(p - buf);
}

static void test_bad_event_malformed_batch_bad_frames(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 20, 0, &e, false, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain bad, ok;
    make_chain(&bad, 700, 7000, 1);
    make_chain(&ok, 800, 8000, 1);
    char buf[512];
    size_t n = bad_event_batch(buf, &bad, &ok);
    th_engine_send(&e, 0, buf, n, true);
    assert_int_equal(th_wait_score(f->base, "m", ok.local, 1, 20, 0, BS, WAIT), BS);
    assert_int_equal(th_score(f->base, "m", bad.local, 1, 20, 0), -1);
    assert_int_equal(th_counter(f->base, 20, "m", "unknown_tier"), 1);
    /* A malformed batch is counted; the listener keeps going. */
    th_engine_send(&e, 1, "\xc1\x93garbage", 9, true);
    /* A two-frame message is the wrong shape. */
    zmq_send(e.pub, "", 0, ZMQ_SNDMORE);
    zmq_send(e.pub, "x", 1, 0);
    chain next;
    make_chain(&next, 900, 9000, 2);
    send_store(&e, 2, &next, 0, 2, true);
    assert_int_equal(th_wait_score(f->base, "m", next.local, 2, 20, 0, 2 * BS, WAIT), 2 * BS);
    assert_int_equal(th_counter(f->base, 20, "m", "malformed_batches"), 1);
    assert_int_equal(th_counter(f->base, 20, "m", "bad_frames"), 1);
    assert_int_equal(th_counter(f->base, 20, "m", "seq_gaps"), 0);
    th_engine_stop(&e);
}

static void test_gap_recovered_by_replay(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    e.topic_frame = true; /* newer engines: [topic, seq, payload] replies */
    reg(f, 30, 0, &e, true, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain c;
    make_chain(&c, 1000, 10000, 3);
    send_store(&e, 0, &c, 0, 1, true);
    send_store(&e, 1, &c, 1, 1, false); /* lost on the live socket */
    send_store(&e, 2, &c, 2, 1, true);
    assert_int_equal(th_wait_counter(f->base, 30, "m", "replays_ok", 1, WAIT), 1);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 3, 30, 0, 3 * BS, WAIT), 3 * BS);
    assert_int_equal(th_counter(f->base, 30, "m", "seq_gaps"), 1);
    assert_int_equal(th_counter(f->base, 30, "m", "replays_failed"), 0);
    assert_int_equal(th_counter(f->base, 30, "m", "rank_clears"), 0);
    /* seq 2 came both live (buffered) and in the replay: applied once. */
    assert_int_equal(th_counter(f->base, 30, "m", "duplicates_skipped"), 1);
    assert_int_equal(th_engine_last_replay_start(&e), 1);
    /* Live flow continues after the replay. */
    chain d;
    make_chain(&d, 1100, 11000, 1);
    send_store(&e, 3, &d, 0, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", d.local, 1, 30, 0, BS, WAIT), BS);
    th_engine_stop(&e);
}

/* The replay answers more than the live socket delivered yet (the engine
 * published on while the router asked): the live copies of what the replay
 * applied arrive after it, below the cursor, over the same connection. They
 * are duplicates (SPEC 2), not a restart: nothing is cleared. */
static void test_replay_ahead_of_live_is_not_a_restart(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 36, 0, &e, true, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain c;
    make_chain(&c, 3000, 30000, 7);
    send_store(&e, 0, &c, 0, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 1, 36, 0, BS, WAIT), BS);
    /* 1 lost live; 1..5 in the engine's history before any is delivered */
    for (uint32_t seq = 1; seq <= 5; seq++)
        send_store(&e, seq, &c, seq, 1, false);
    kvr_wbuf w[5];
    for (uint32_t seq = 1; seq <= 5; seq++) {
        kvr_raw_event ev = th_store(c.hashes + seq, 1, c.hashes[seq - 1], c.tokens + seq * BS, BS);
        kvr_wbuf_init(&w[seq - 1]);
        kvr_wire_encode_batch(&w[seq - 1], KVR_WIRE_SGLANG, 1.0, &ev, 1, false, 0);
    }
    th_engine_publish(&e, 2, w[1].data, w[1].len); /* the gap: replay from 1 gives 1..5 */
    assert_int_equal(th_wait_counter(f->base, 36, "m", "replays_ok", 1, WAIT), 1);
    for (uint32_t seq = 3; seq <= 5; seq++) /* the live copies, late */
        th_engine_publish(&e, seq, w[seq - 1].data, w[seq - 1].len);
    send_store(&e, 6, &c, 6, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 7, 36, 0, 7 * BS, WAIT), 7 * BS);
    assert_int_equal(th_counter(f->base, 36, "m", "restarts"), 0);
    assert_int_equal(th_counter(f->base, 36, "m", "rank_clears"), 0);
    assert_int_equal(th_counter(f->base, 36, "m", "lost_batches"), 0);
    assert_int_equal(th_counter(f->base, 36, "m", "duplicates_skipped"), 4);
    assert_int_equal(th_counter(f->base, 36, "m", "replays_ok"), 1);
    for (int i = 0; i < 5; i++)
        kvr_wbuf_free(&w[i]);
    th_engine_stop(&e);
}

static void test_replay_starting_later_clears(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 31, 0, &e, true, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain old, c;
    make_chain(&old, 1200, 12000, 1);
    make_chain(&c, 1300, 13000, 2);
    send_store(&e, 0, &old, 0, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", old.local, 1, 31, 0, BS, WAIT), BS);
    send_store(&e, 1, &c, 0, 1, false);
    send_store(&e, 2, &c, 1, 1, false);
    th_engine_set_history_floor(&e, 2); /* seq 1 fell out of the engine's ring */
    chain d;
    make_chain(&d, 1400, 14000, 1);
    send_store(&e, 3, &d, 0, 1, true);
    assert_int_equal(th_wait_counter(f->base, 31, "m", "replays_failed", 1, WAIT), 1);
    assert_int_equal(th_wait_score(f->base, "m", d.local, 1, 31, 0, BS, WAIT), BS);
    /* Cleared: seq 0's block is gone; seq 2's parent is lost so its store
     * cannot apply either. */
    assert_int_equal(th_score(f->base, "m", old.local, 1, 31, 0), -1);
    assert_int_equal(th_counter(f->base, 31, "m", "rank_clears"), 1);
    assert_int_equal(th_counter(f->base, 31, "m", "replays_ok"), 0);
    th_engine_stop(&e);
}

/* An endpoint that never answers costs a timeout, not the rank (SPEC §2's
 * no-replay rule): the gap is counted and what was indexed stays. */
static void test_replay_timeout_counts_loss(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    th_engine_set_mute(&e, true);
    reg(f, 32, 0, &e, true, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain old, d;
    make_chain(&old, 1500, 15000, 1);
    make_chain(&d, 1600, 16000, 1);
    send_store(&e, 0, &old, 0, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", old.local, 1, 32, 0, BS, WAIT), BS);
    send_store(&e, 5, &d, 0, 1, true);
    assert_int_equal(th_wait_counter(f->base, 32, "m", "replays_failed", 1, WAIT), 1);
    /* The buffered live batch applies; seq 1..4 are counted lost. */
    assert_int_equal(th_wait_score(f->base, "m", d.local, 1, 32, 0, BS, WAIT), BS);
    assert_int_equal(th_score(f->base, "m", old.local, 1, 32, 0), BS);
    assert_int_equal(th_counter(f->base, 32, "m", "lost_batches"), 4);
    assert_int_equal(th_counter(f->base, 32, "m", "rank_clears"), 0);
    th_engine_stop(&e);
}

static void test_first_message_replays_from_zero(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    chain c;
    make_chain(&c, 1700, 17000, 3);
    /* History the router never saw live (it registers later). */
    send_store(&e, 0, &c, 0, 1, false);
    send_store(&e, 1, &c, 1, 1, false);
    reg(f, 33, 0, &e, true, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    send_store(&e, 2, &c, 2, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", c.local, 3, 33, 0, 3 * BS, WAIT), 3 * BS);
    assert_int_equal(th_engine_last_replay_start(&e), 0);
    assert_int_equal(th_counter(f->base, 33, "m", "replays_ok"), 1);
    th_engine_stop(&e);
}

static void test_gap_without_replay_counts_loss(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 34, 0, &e, false, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain a, b;
    make_chain(&a, 1800, 18000, 1);
    make_chain(&b, 1900, 19000, 1);
    send_store(&e, 0, &a, 0, 1, true);
    send_store(&e, 4, &b, 0, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", b.local, 1, 34, 0, BS, WAIT), BS);
    assert_int_equal(th_score(f->base, "m", a.local, 1, 34, 0), BS);
    assert_int_equal(th_counter(f->base, 34, "m", "lost_batches"), 3);
    assert_int_equal(th_counter(f->base, 34, "m", "seq_gaps"), 1);
    th_engine_stop(&e);
}

static void test_engine_restart_clears(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 35, 0, &e, false, NULL);
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain a, b;
    make_chain(&a, 2000, 20000, 2);
    make_chain(&b, 2100, 21000, 1);
    send_store(&e, 0, &a, 0, 1, true);
    send_store(&e, 1, &a, 1, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", a.local, 2, 35, 0, 2 * BS, WAIT), 2 * BS);
    /* New engine process: numbering starts over at 0. */
    send_store(&e, 0, &b, 0, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", b.local, 1, 35, 0, BS, WAIT), BS);
    assert_int_equal(th_score(f->base, "m", a.local, 2, 35, 0), -1);
    assert_int_equal(th_counter(f->base, 35, "m", "restarts"), 1);
    th_engine_stop(&e);
}

/* Topic prefix filter, and a batch's own dp_rank overriding the socket's. */
static void test_topic_filter_and_batch_rank(void **state)
{
    fixture *f = *state;
    th_engine e;
    th_engine_start(&e);
    reg(f, 50, 0, &e, false, ", \"topic\": \"kv@w50\"");
    assert_true(th_engine_wait_sub(&e, WAIT));
    chain a, b;
    make_chain(&a, 2400, 24000, 1);
    make_chain(&b, 2500, 25000, 2);
    e.topic = "other";
    send_store(&e, 0, &a, 0, 1, true); /* filtered by the SUB socket */
    e.topic = "kv@w50/rank0";
    kvr_raw_event ev = th_store(b.hashes, 2, 0, b.tokens, BS);
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_wire_encode_batch(&w, KVR_WIRE_VLLM, 2.0, &ev, 1, true, 3);
    th_engine_send(&e, 1, w.data, w.len, true);
    kvr_wbuf_free(&w);
    assert_int_equal(th_wait_score(f->base, "m", b.local, 2, 50, 3, 2 * BS, WAIT), 2 * BS);
    assert_int_equal(th_score(f->base, "m", b.local, 2, 50, 0), -1);
    assert_int_equal(th_score(f->base, "m", a.local, 1, 50, 0), -1);
    assert_int_equal(th_counter(f->base, 50, "m", "messages"), 1);
    th_engine_stop(&e);
}

/* A dead endpoint and an engine stuck in a replay that never answers do not
 * hold up a healthy engine. */
/* Listeners of 40 "connecting" and 41 "replaying" in /workers (0-2),
 * polled until both or WAIT. */
static int wait_silent_states(const char *base)
{
    int seen = 0;
    for (double end = th_now() + WAIT / 1000.0; seen < 2 && th_now() < end; th_sleep_ms(20)) {
        json_t *w = th_json("GET", base, "/workers", NULL, NULL);
        size_t i;
        json_t *x;
        seen = 0;
        json_array_foreach(w, i, x)
        {
            json_int_t id = json_integer_value(json_object_get(x, "instance_id"));
            const char *st = json_string_value(json_object_get(
                json_object_get(json_object_get(x, "ranks"), "0"), "listener_state"));
            if (id == 40 && st)
                seen += strcmp(st, "connecting") == 0;
            if (id == 41 && st)
                seen += strcmp(st, "replaying") == 0;
        }
        json_decref(w);
    }
    return seen;
}

static void test_silent_engines_do_not_block(void **state)
{
    fixture *f = *state;
    long st = th_register(f->base, "{\"instance_id\": 40, \"endpoint\": \"tcp://127.0.0.1:1\", "
                                   "\"model_name\": \"m\", \"block_size\": 4}", NULL);
    assert_int_equal(st, 201);
    th_engine stuck, ok;
    th_engine_start(&stuck);
    th_engine_start(&ok);
    th_engine_set_mute(&stuck, true);
    reg(f, 41, 0, &stuck, true, NULL);
    reg(f, 42, 0, &ok, false, NULL);
    assert_true(th_engine_wait_sub(&stuck, WAIT));
    assert_true(th_engine_wait_sub(&ok, WAIT));
    chain a, b;
    make_chain(&a, 2200, 22000, 1);
    make_chain(&b, 2300, 23000, 2);
    send_store(&stuck, 3, &a, 0, 1, true); /* first message > 0: replay from 0, no answer */
    send_store(&ok, 0, &b, 0, 1, true);
    send_store(&ok, 1, &b, 1, 1, true);
    assert_int_equal(th_wait_score(f->base, "m", b.local, 2, 42, 0, 2 * BS, WAIT), 2 * BS);
    /* still replaying (and 40 still connecting) while the healthy engine
     * applied: polled, since the stuck engine's first message may reach its
     * listener after the healthy engine's were applied */
    assert_int_equal(wait_silent_states(f->base), 2);
    assert_int_equal(th_score(f->base, "m", a.local, 1, 41, 0), -1); /* held, not applied */
    th_engine_stop(&stuck);
    th_engine_stop(&ok);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_prefix_remove_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kimi_wide_exclusion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_mode_detection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_workers_two_ranks_isolated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_event_malformed_batch_bad_frames, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gap_recovered_by_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_ahead_of_live_is_not_a_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_replay_starting_later_clears, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_timeout_counts_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_message_replays_from_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gap_without_replay_counts_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_restart_clears, setup, teardown),
        cmocka_unit_test_setup_teardown(test_topic_filter_and_batch_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_engines_do_not_block, setup_long_replay,
                                        teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
