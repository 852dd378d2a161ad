/* The source layer without HTTP: registry changes racing a flooding engine
 * (the handle lifetime rule), and the bounded replay buffer. */
#include "test_support.h"

#include <stdatomic.h>
#include <sys/resource.h>

#include "kvrouter/source.h"
#include "../server/net_helpers.h"

#define BS 4

typedef struct {
    uint64_t id;
    const char *endpoint;
    const char *replay;
    kvr_worker *w;
    bool unregister;
} reg_arg;

static void do_reg(kvr_source *src, void *arg)
{
    reg_arg *a = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    if (a->unregister) {
        kvr_worker *w = kvr_indexer_find(ix, "m", NULL, a->id);
        if (w) {
            kvr_source_unlisten(src, w, UINT32_MAX);
            kvr_indexer_unregister(ix, w);
        }
        return;
    }
    kvr_worker_settings s = {.model_name = "m", .worker_id = a->id, .block_size = BS,
                             .accepts_mm_hashes = -1};
    assert_int_not_equal(kvr_indexer_register(ix, &s, &a->w), KVR_REG_INVALID);
    assert_true(kvr_source_listen(src, a->w, a->id, 0, a->endpoint, a->replay, "") !=
                KVR_LISTEN_FAILED);
}

typedef struct {
    th_engine *e;
    atomic_int stop; /* the main thread ends the flood */
    uint64_t sent;
} flood_arg;

static void *flood_main(void *arg)
{
    flood_arg *f = arg;
    uint64_t tokens[BS] = {1, 2, 3, 4};
    uint64_t h[1];
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    while (!f->stop) {
        h[0] = f->sent + 1;
        kvr_raw_event evs[2] = {th_store(h, 1, 0, tokens, BS), th_remove(h, 1)};
        kvr_wbuf_reset(&w);
        kvr_wire_encode_batch(&w, KVR_WIRE_SGLANG, 1.0, evs, 2, false, 0);
        unsigned char seq[8];
        kvr_wire_encode_seq(f->sent++, seq);
        zmq_send(f->e->pub, "", 0, ZMQ_SNDMORE);
        zmq_send(f->e->pub, seq, 8, ZMQ_SNDMORE);
        zmq_send(f->e->pub, w.data, w.len, 0);
        if (f->sent % 64 == 0)
            th_sleep_ms(1);
    }
    kvr_wbuf_free(&w);
    return NULL;
}

/* Messages received by every listener now (they go with their worker). */
static void do_count(kvr_source *src, void *arg)
{
    kvr_listener_info info[4];
    size_t n = kvr_source_listeners(src, NULL, info, 4);
    for (size_t i = 0; i < n && i < 4; i++)
        *(uint64_t *)arg += info[i].c.messages;
}

static void test_registry_changes_under_flood(void **state)
{
    (void)state;
#if defined(__SANITIZE_THREAD__)
    /* Under TSan (everything ~10x slower) libzmq 4.3.4 aborts here about
     * once in eight runs: "Resource temporarily unavailable
     * (src/session_base.cpp:260)" when a connection is torn down in the
     * middle of a multipart message (zeromq/libzmq#3442, in the library,
     * not in kvrouter). The normal and ASan builds run this churn; TSan
     * still covers the source threads through test_source_faults and
     * test_server_ingest. */
    skip();
#endif
    kvr_indexer *ix = kvr_indexer_create();
    kvr_source_config cfg;
    kvr_source_config_default(&cfg);
    kvr_source *src = kvr_source_create(ix, &cfg);
    assert_non_null(src);
    th_engine e;
    th_engine_start(&e);
    flood_arg fa = {&e, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, flood_main, &fa);
    uint64_t received = 0;
    reg_arg r = {.id = 1, .endpoint = e.endpoint, .replay = ""};
    reg_arg u = {.id = 1, .unregister = true};
    for (int i = 0; i < 40; i++) {
        assert_int_equal(kvr_source_run(src, do_reg, &r), 0);
        th_sleep_ms(3);
        assert_int_equal(kvr_source_run(src, do_count, &received), 0);
        assert_int_equal(kvr_source_run(src, do_reg, &u), 0);
    }
    /* The flood reaches a listener registered while it runs. (Within 3 ms
     * it may not: a loaded machine, or ASan, can take longer to connect and
     * subscribe, so the churn above asserts nothing about messages.) */
    assert_int_equal(kvr_source_run(src, do_reg, &r), 0);
    double end = th_now() + 10;
    while (received == 0 && th_now() < end) {
        th_sleep_ms(5);
        assert_int_equal(kvr_source_run(src, do_count, &received), 0);
    }
    assert_int_equal(kvr_source_run(src, do_reg, &u), 0);
    fa.stop = 1;
    pthread_join(t, NULL);
    assert_true(fa.sent > 0);
    assert_true(received > 0);
    assert_int_equal(kvr_indexer_list(ix, NULL, NULL, NULL, 0), 0);
    kvr_source_destroy(src);
    th_engine_stop(&e);
    kvr_indexer_destroy(ix);
}

typedef struct {
    kvr_listener_info info;
    size_t n;
} snap_arg;

static void do_snap(kvr_source *src, void *arg)
{
    snap_arg *s = arg;
    s->n = kvr_source_listeners(src, NULL, &s->info, 1);
}

static void test_replay_buffer_bound(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_source_config cfg;
    kvr_source_config_default(&cfg);
    cfg.max_buffered = 4;
    cfg.replay_timeout_ms = 60000; /* only the bound can end this replay */
    kvr_source *src = kvr_source_create(ix, &cfg);
    th_engine e;
    th_engine_start(&e);
    th_engine_set_mute(&e, true);
    reg_arg r = {.id = 2, .endpoint = e.endpoint, .replay = e.replay_endpoint};
    assert_int_equal(kvr_source_run(src, do_reg, &r), 0);
    assert_true(th_engine_wait_sub(&e, 10000));
    uint64_t tokens[10 * BS], h[10];
    for (int i = 0; i < 10 * BS; i++)
        tokens[i] = 100 + (uint64_t)i;
    for (int i = 0; i < 10; i++)
        h[i] = 500 + (uint64_t)i;
    kvr_raw_event ev0 = th_store(h, 1, 0, tokens, BS);
    th_send_events(&e, 0, &ev0, 1, true);
    /* seq 2..9 after a gap at 1: replay (mute) holds 4, then gives up. */
    for (int i = 2; i < 10; i++) {
        kvr_raw_event ev = th_store(h + i, 1, h[i - 1], tokens + i * BS, BS);
        th_send_events(&e, (uint64_t)i, &ev, 1, true);
    }
    snap_arg s = {0};
    double end = th_now() + 10;
    do {
        th_sleep_ms(5);
        assert_int_equal(kvr_source_run(src, do_snap, &s), 0);
    } while (s.info.last_seq != 9 && th_now() < end);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.info.last_seq, 9);
    assert_int_equal(s.info.state, KVR_LISTENER_LIVE);
    assert_int_equal(s.info.c.replays_failed, 1);
    /* a full buffer gives up the replay, not the rank: seq 1 counts as lost */
    assert_int_equal(s.info.c.rank_clears, 0);
    assert_int_equal(s.info.c.lost_batches, 1);
    assert_int_equal(s.info.c.buffer_overflows, 1);
    assert_int_equal(s.info.c.buffered, 0);
    /* not the endpoint's fault: no backoff */
    assert_int_equal(s.info.replay_state, KVR_REPLAY_OK);
    assert_int_equal(s.info.c.seq_gaps, 1);
    /* Every live batch from 2 on was applied, none twice. */
    assert_int_equal(s.info.c.batches, 9);
    kvr_source_destroy(src);
    th_engine_stop(&e);
    kvr_indexer_destroy(ix);
}

/* The X-macro list is the whole struct: a field added outside the list would
 * be neither summed nor shown in /workers and /metrics. */
static void test_counter_list_covers_struct_and_sums(void **state)
{
    (void)state;
    assert_int_equal(sizeof(kvr_source_counters), kvr_source_counter_count * sizeof(uint64_t));
    kvr_source_counters a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    for (size_t k = 0; k < kvr_source_counter_count; k++) {
        const kvr_counter_desc *d = &kvr_source_counter_descs[k];
        assert_non_null(d->help);
        assert_true(d->kind == KVR_METRIC_COUNTER || d->kind == KVR_METRIC_GAUGE);
        *(uint64_t *)((char *)&b + d->offset) = 10 + k;
        for (size_t j = 0; j < k; j++)
            assert_true(strcmp(kvr_source_counter_descs[j].name, d->name) != 0);
    }
    kvr_source_counters_add(&a, &b);
    kvr_source_counters_add(&a, &b);
    for (size_t k = 0; k < kvr_source_counter_count; k++)
        assert_int_equal(kvr_counter_value(&a, &kvr_source_counter_descs[k]), 2 * (10 + k));
    assert_int_equal(a.lost_batches, 2 * b.lost_batches);
}

/* Three descriptors a listener: a process at the common soft limit would
 * stop registering engines near a third of it; the source takes the hard
 * limit instead. */
static void test_listeners_beyond_the_soft_descriptor_limit(void **state)
{
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 1024)
        skip(); /* nothing to raise to */
    struct rlimit low = {256, rl.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    kvr_indexer *ix = kvr_indexer_create();
    kvr_source *src = kvr_source_create(ix, NULL);
    assert_non_null(src);
    struct rlimit now;
    getrlimit(RLIMIT_NOFILE, &now);
    assert_true(now.rlim_cur == rl.rlim_max);
    for (uint64_t id = 1; id <= 150; id++) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%u", (unsigned)(20000 + id));
        reg_arg r = {.id = id, .endpoint = ep, .replay = ""};
        assert_int_equal(kvr_source_run(src, do_reg, &r), 0);
    }
    snap_arg s = {0};
    assert_int_equal(kvr_source_run(src, do_snap, &s), 0);
    assert_int_equal(s.n, 150);
    kvr_source_destroy(src);
    kvr_indexer_destroy(ix);
    setrlimit(RLIMIT_NOFILE, &rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_list_covers_struct_and_sums),
        cmocka_unit_test(test_listeners_beyond_the_soft_descriptor_limit),
        cmocka_unit_test(test_registry_changes_under_flood),
        cmocka_unit_test(test_replay_buffer_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
