/* Mock engines publish real bytes: a real SUB on 127.0.0.1 receives
 * [topic, seq, payload] and the wire decoder reads the events back. */
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "test_support.h"

#include "kvrouter/hash.h"
#include "kvrouter/wire.h"
#include "mock/engine.h"
#include "mock/workload.h"

typedef struct {
    void *zctx;
    kvr_sim_engine *eng;
    void *sub;
    kvr_batch batch;
    unsigned char *payload; /* 1 MiB */
    size_t payload_len;
    uint64_t seq;
    /* The batch's events with SGLang's per-block events joined back into
     * runs (a store whose parent is the previous store's last hash, removals
     * of one tier), so both wire styles check the same cache changes. */
    bool per_block;
    uint32_t block_size;
    kvr_raw_event runs[64];
    uint32_t n_runs;
    uint64_t *run_hashes, *run_tokens; /* RUN_CAP each */
} fixture;

#define RUN_CAP 4096
/* Generous: under ASan on two loaded cores a batch or the subscription can
 * take seconds; a deadline only bounds a hung test, it asserts no timing. */
#define WAIT_MS 30000

static void setup_engine(fixture *f, kvr_sim_engine_config *ec)
{
    memset(f, 0, sizeof *f);
    f->payload = malloc(1 << 20);
    f->run_hashes = malloc(RUN_CAP * sizeof *f->run_hashes);
    f->run_tokens = malloc(RUN_CAP * sizeof *f->run_tokens);
    assert_true(f->payload && f->run_hashes && f->run_tokens);
    f->per_block = ec->wire == KVR_WIRE_SGLANG;
    f->block_size = ec->block_size;
    f->zctx = zmq_ctx_new();
    assert_non_null(f->zctx);
    ec->zctx = f->zctx;
    ec->pub_bind = "tcp://127.0.0.1:*";
    ec->replay_bind = "tcp://127.0.0.1:*";
    char err[256];
    f->eng = kvr_sim_engine_create(ec, err, sizeof err);
    assert_non_null(f->eng);
    f->sub = zmq_socket(f->zctx, ZMQ_SUB);
    int linger = 0;
    zmq_setsockopt(f->sub, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_setsockopt(f->sub, ZMQ_SUBSCRIBE, "", 0), 0);
    assert_int_equal(zmq_connect(f->sub, kvr_sim_engine_endpoint(f->eng)), 0);
    assert_true(kvr_sim_engine_wait_subscriber(f->eng, WAIT_MS));
    kvr_batch_init(&f->batch);
}

static void teardown_engine(fixture *f)
{
    kvr_batch_free(&f->batch);
    free(f->payload);
    free(f->run_hashes);
    free(f->run_tokens);
    zmq_close(f->sub);
    kvr_sim_engine_destroy(f->eng);
    zmq_ctx_term(f->zctx);
}

static bool joins(const kvr_raw_event *run, const kvr_raw_event *ev)
{
    if (run->type != ev->type || run->tier != ev->tier)
        return false;
    if (ev->type == KVR_EV_REMOVED)
        return true;
    return ev->type == KVR_EV_STORED && ev->has_parent &&
           ev->parent == run->block_hashes[run->n_block_hashes - 1];
}

static void build_runs(fixture *f)
{
    size_t nh = 0, nt = 0;
    f->n_runs = 0;
    for (const kvr_raw_event *ev; (ev = kvr_batch_next(&f->batch));) {
        if (f->per_block && ev->type != KVR_EV_CLEARED) {
            /* SGLang: one page per event, its own token window */
            assert_int_equal(ev->n_block_hashes, 1);
            if (ev->type == KVR_EV_STORED)
                assert_int_equal(ev->n_token_ids, f->block_size + (ev->eagle ? 1 : 0));
        }
        assert_true(nh + ev->n_block_hashes <= RUN_CAP && nt + ev->n_token_ids <= RUN_CAP);
        kvr_raw_event *run = f->n_runs ? &f->runs[f->n_runs - 1] : NULL;
        if (f->per_block && run && joins(run, ev)) {
            /* Eagle windows overlap by one token: keep it once */
            if (ev->type == KVR_EV_STORED && ev->eagle)
                nt--, run->n_token_ids--;
        } else {
            assert_true(f->n_runs < 64);
            run = &f->runs[f->n_runs++];
            *run = *ev;
            run->block_hashes = f->run_hashes + nh;
            run->token_ids = f->run_tokens + nt;
            run->n_block_hashes = run->n_token_ids = 0;
        }
        if (ev->n_block_hashes)
            memcpy(f->run_hashes + nh, ev->block_hashes, ev->n_block_hashes * sizeof(uint64_t));
        if (ev->n_token_ids) /* removals carry no tokens (NULL) */
            memcpy(f->run_tokens + nt, ev->token_ids, ev->n_token_ids * sizeof(uint64_t));
        nh += ev->n_block_hashes;
        nt += ev->n_token_ids;
        run->n_block_hashes += ev->n_block_hashes;
        run->n_token_ids += ev->n_token_ids;
    }
}

/* Receives one 3-frame message, decodes its batch and joins its runs. */
static void recv_batch(fixture *f)
{
    zmq_pollitem_t it = {.socket = f->sub, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, WAIT_MS), 1);
    unsigned char topic[64], seqb[16];
    int more;
    size_t ml = sizeof more;
    int n = zmq_recv(f->sub, topic, sizeof topic, 0);
    assert_int_equal(n, 0);
    zmq_getsockopt(f->sub, ZMQ_RCVMORE, &more, &ml);
    assert_true(more);
    n = zmq_recv(f->sub, seqb, sizeof seqb, 0);
    assert_int_equal(n, 8);
    zmq_getsockopt(f->sub, ZMQ_RCVMORE, &more, &ml);
    assert_true(more);
    n = zmq_recv(f->sub, f->payload, 1 << 20, 0);
    assert_true(n > 0 && n <= (1 << 20));
    zmq_getsockopt(f->sub, ZMQ_RCVMORE, &more, &ml);
    assert_false(more);
    f->payload_len = (size_t)n;
    assert_int_equal(kvr_frame_parse(3, seqb, 8, &f->seq), KVR_FRAME_OK);
    assert_int_equal(kvr_batch_decode(&f->batch, f->payload, f->payload_len), KVR_BATCH_OK);
    build_runs(f);
    assert_int_equal(f->batch.tally.dropped, 0);
}

static void assert_hashes(const kvr_raw_event *ev, const uint64_t *want, size_t n)
{
    assert_int_equal(ev->n_block_hashes, n);
    for (size_t i = 0; i < n; i++)
        assert_true(ev->block_hashes[i] == want[i]);
}

static void seq_tokens(uint64_t *t, size_t n, uint64_t base)
{
    for (size_t i = 0; i < n; i++)
        t[i] = base + i;
}

static void check_store_evict(kvr_wire_style style)
{
    fixture f;
    kvr_sim_engine_config ec = {.dp_rank = 3, .block_size = 4, .gpu_capacity = 8, .wire = style};
    setup_engine(&f, &ec);

    uint64_t a[16], h[8];
    seq_tokens(a, 16, 100);
    kvr_sim_hit hit;
    assert_int_equal(kvr_sim_engine_serve(f.eng, a, 16, &hit), 0);
    assert_int_equal(hit.n_blocks, 4);
    assert_int_equal(hit.gpu_blocks, 0);
    recv_batch(&f);
    assert_true(f.seq == 0);
    assert_true(f.batch.has_dp_rank);
    assert_int_equal(f.batch.dp_rank, 3);
    /* SGLang: one BlockStored per block, each under the one before */
    bool sglang = style == KVR_WIRE_SGLANG;
    assert_int_equal(f.batch.n_events, sglang ? 4 : 1);
    assert_int_equal(f.n_runs, 1);
    const kvr_raw_event *ev = &f.runs[0];
    assert_int_equal(ev->type, KVR_EV_STORED);
    assert_int_equal(ev->tier, KVR_TIER_GPU);
    assert_false(ev->has_parent);
    assert_int_equal(kvr_sim_engine_hashes(f.eng, a, 16, h, 8), 4);
    assert_hashes(ev, h, 4);
    assert_int_equal(ev->n_token_ids, 16);
    for (size_t i = 0; i < 16; i++)
        assert_true(ev->token_ids[i] == a[i]);
    assert_int_equal(ev->block_size, 4);
    uint64_t a_hash[4];
    memcpy(a_hash, h, sizeof a_hash);

    /* Shares two blocks, adds six: 4 + 6 > 8, so the two LRU leaves of the
     * first prompt go first (deepest first), then the suffix is stored under
     * the shared prefix. */
    uint64_t b[32];
    memcpy(b, a, 8 * sizeof *b);
    seq_tokens(b + 8, 24, 5000);
    assert_int_equal(kvr_sim_engine_serve(f.eng, b, 32, &hit), 0);
    assert_int_equal(hit.gpu_blocks, 2);
    recv_batch(&f);
    assert_true(f.seq == 1);
    assert_int_equal(f.batch.n_events, sglang ? 2 + 6 : 2);
    assert_int_equal(f.n_runs, 2);
    ev = &f.runs[0];
    assert_int_equal(ev->type, KVR_EV_REMOVED);
    assert_int_equal(ev->tier, KVR_TIER_GPU);
    uint64_t want_removed[2] = {a_hash[3], a_hash[2]};
    assert_hashes(ev, want_removed, 2);
    ev = &f.runs[1];
    assert_int_equal(ev->type, KVR_EV_STORED);
    assert_true(ev->has_parent);
    assert_true(ev->parent == a_hash[1]);
    uint64_t hb[8];
    assert_int_equal(kvr_sim_engine_hashes(f.eng, b, 32, hb, 8), 8);
    assert_hashes(ev, hb + 2, 6);
    assert_int_equal(ev->n_token_ids, 24);
    assert_true(ev->token_ids[0] == b[8]);
    assert_true(hb[0] == a_hash[0] && hb[1] == a_hash[1]);
    assert_int_equal(kvr_sim_engine_gpu_size(f.eng), 8);

    /* AllBlocksCleared empties the cache. */
    assert_int_equal(kvr_sim_engine_clear(f.eng), 0);
    recv_batch(&f);
    assert_true(f.seq == 2);
    assert_int_equal(f.n_runs, 1);
    assert_int_equal(f.runs[0].type, KVR_EV_CLEARED);
    assert_int_equal(kvr_sim_engine_gpu_size(f.eng), 0);
    assert_int_equal(kvr_sim_engine_last_seq(f.eng), 2);
    /* the engine's own counters agree with the events received above */
    kvr_sim_engine_stats st = kvr_sim_engine_get_stats(f.eng);
    assert_int_equal(st.batches, 3);
    assert_int_equal(st.gpu_stored, 4 + 6);
    assert_int_equal(st.gpu_removed, 2);
    assert_int_equal(st.clears, 1);
    assert_int_equal(st.cpu_stored + st.cpu_removed, 0);
    teardown_engine(&f);
}

static void test_sglang_store_evict(void **state)
{
    (void)state;
    check_store_evict(KVR_WIRE_SGLANG);
}

static void test_vllm_store_evict(void **state)
{
    (void)state;
    check_store_evict(KVR_WIRE_VLLM);
}

static void expect_event(const kvr_raw_event *ev, kvr_event_type type, kvr_tier tier,
                         const uint64_t *hashes, size_t n)
{
    assert_int_equal(ev->type, type);
    assert_int_equal(ev->tier, tier);
    assert_hashes(ev, hashes, n);
}

static void test_hicache_moves_evicted_to_cpu(void **state)
{
    (void)state;
    fixture f;
    kvr_sim_engine_config ec = {.block_size = 4, .gpu_capacity = 6, .cpu_capacity = 8};
    setup_engine(&f, &ec);
    /* p = x0 x1 x2 x3; q = x0 x1 y2 y3 (a branch); r = four new blocks. */
    uint64_t p[16], q[16], r[16], hp[4], hq[4], hr[4];
    seq_tokens(p, 16, 1);
    memcpy(q, p, 8 * sizeof *q);
    seq_tokens(q + 8, 8, 500);
    seq_tokens(r, 16, 900);
    kvr_sim_engine_hashes(f.eng, p, 16, hp, 4);
    kvr_sim_engine_hashes(f.eng, q, 16, hq, 4);
    kvr_sim_engine_hashes(f.eng, r, 16, hr, 4);
    kvr_sim_hit hit;
    assert_int_equal(kvr_sim_engine_serve(f.eng, p, 16, &hit), 0);
    recv_batch(&f);
    assert_int_equal(kvr_sim_engine_serve(f.eng, q, 16, &hit), 0);
    assert_int_equal(hit.gpu_blocks, 2);
    recv_batch(&f);
    assert_int_equal(kvr_sim_engine_gpu_size(f.eng), 6);

    /* r needs 4 blocks: the GPU evicts leaves x3, x2 (older), then y3, y2.
     * They move to the host as two parent-linked runs; the host takes the
     * shared x0 x1 with the first run, so the second links under x1. */
    assert_int_equal(kvr_sim_engine_serve(f.eng, r, 16, &hit), 0);
    recv_batch(&f);
    assert_int_equal(f.n_runs, 4);
    const kvr_raw_event *ev = &f.runs[0];
    uint64_t run1[4] = {hq[0], hq[1], hq[2], hq[3]};
    expect_event(ev, KVR_EV_STORED, KVR_TIER_CPU, run1, 4);
    assert_false(ev->has_parent);
    assert_int_equal(ev->n_token_ids, 16);
    for (int i = 0; i < 16; i++)
        assert_true(ev->token_ids[i] == q[i]);
    ev = &f.runs[1];
    uint64_t run2[2] = {hp[2], hp[3]};
    expect_event(ev, KVR_EV_STORED, KVR_TIER_CPU, run2, 2);
    assert_true(ev->has_parent && ev->parent == hp[1]);
    assert_true(ev->token_ids[0] == p[8]);
    uint64_t gone[4] = {hp[3], hp[2], hq[3], hq[2]};
    expect_event(&f.runs[2], KVR_EV_REMOVED, KVR_TIER_GPU, gone, 4);
    expect_event(&f.runs[3], KVR_EV_STORED, KVR_TIER_GPU, hr, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(kvr_sim_engine_cpu_contains(f.eng, hp[i]));
        assert_true(kvr_sim_engine_cpu_contains(f.eng, hq[i]));
        assert_true(kvr_sim_engine_gpu_contains(f.eng, hr[i]));
    }
    assert_false(kvr_sim_engine_gpu_contains(f.eng, hp[2]));
    assert_true(kvr_sim_engine_gpu_contains(f.eng, hp[1]));

    /* p again: x0 x1 on the GPU, x2 x3 loaded back from the host. */
    kvr_sim_hit peek;
    kvr_sim_engine_peek(f.eng, p, 16, &peek);
    assert_int_equal(peek.gpu_blocks, 2);
    assert_int_equal(peek.cpu_blocks, 2);
    assert_int_equal(kvr_sim_engine_serve(f.eng, p, 16, &hit), 0);
    assert_int_equal(hit.gpu_blocks, 2);
    assert_int_equal(hit.cpu_blocks, 2);
    recv_batch(&f);
    size_t cpu_removed = 0, cpu_stored = 0, gpu_stored = 0;
    for (uint32_t i = 0; i < f.n_runs; i++) {
        ev = &f.runs[i];
        if (ev->type == KVR_EV_REMOVED && ev->tier == KVR_TIER_CPU)
            cpu_removed += ev->n_block_hashes;
        if (ev->type == KVR_EV_STORED && ev->tier == KVR_TIER_CPU)
            cpu_stored += ev->n_block_hashes;
        if (ev->type == KVR_EV_STORED && ev->tier == KVR_TIER_GPU)
            gpu_stored += ev->n_block_hashes;
    }
    assert_int_equal(gpu_stored, 2); /* x2 x3 back on the GPU */
    /* Two r leaves go down with their root path (4 host blocks); 6 + 4 > 8,
     * so the host evicts two of its leaves, never a block whose descendants
     * it still holds. */
    assert_int_equal(cpu_stored, 2 + 2);
    assert_int_equal(cpu_removed, 2);
    assert_int_equal(kvr_sim_engine_cpu_size(f.eng), 8);
    kvr_sim_engine_stats st = kvr_sim_engine_get_stats(f.eng);
    assert_int_equal(st.cpu_stored, 4 + 2 + cpu_stored);
    assert_int_equal(st.cpu_removed, cpu_removed);
    teardown_engine(&f);
}

static void test_kimi_wide_tokens(void **state)
{
    (void)state;
    fixture f;
    kvr_sim_engine_config ec = {.block_size = 16, .gpu_capacity = 64};
    setup_engine(&f, &ec);
    uint64_t mm = 0x123456789abcdefULL;
    uint64_t t[64];
    seq_tokens(t, 64, 10);
    for (size_t p = 20; p < 40; p++)
        t[p] = kvr_sim_wide_pad(mm, (unsigned)((p - 20) % 4));
    kvr_sim_hit hit;
    assert_int_equal(kvr_sim_engine_serve(f.eng, t, 64, &hit), 0);
    recv_batch(&f);
    const kvr_raw_event *ev = &f.runs[0];
    assert_int_equal(ev->n_token_ids, 64);
    size_t wide = 0;
    for (size_t p = 0; p < 64; p++) {
        bool in_image = p >= 20 && p < 40;
        assert_int_equal(ev->token_ids[p] >= (1ULL << 32), in_image);
        wide += ev->token_ids[p] >= (1ULL << 32);
    }
    assert_int_equal(wide, 20);
    /* Four distinct values cycled. */
    assert_true(ev->token_ids[20] == ev->token_ids[24]);
    assert_true(ev->token_ids[20] != ev->token_ids[21]);
    assert_true(ev->token_ids[21] != ev->token_ids[22] && ev->token_ids[22] != ev->token_ids[23]);
    /* A different image hashes differently on the engine. */
    uint64_t t2[64], h1[4], h2[4];
    memcpy(t2, t, sizeof t2);
    for (size_t p = 20; p < 40; p++)
        t2[p] = kvr_sim_wide_pad(mm + 1, (unsigned)((p - 20) % 4));
    kvr_sim_engine_hashes(f.eng, t, 64, h1, 4);
    kvr_sim_engine_hashes(f.eng, t2, 64, h2, 4);
    assert_true(h1[0] == h2[0]);
    assert_true(h1[1] != h2[1]);
    teardown_engine(&f);
}

static void test_eagle_bigrams(void **state)
{
    (void)state;
    fixture f;
    kvr_sim_engine_config ec = {.block_size = 4, .gpu_capacity = 16, .eagle = true};
    setup_engine(&f, &ec);
    uint64_t t[13];
    seq_tokens(t, 13, 7);
    kvr_sim_hit hit;
    assert_int_equal(kvr_sim_engine_serve(f.eng, t, 13, &hit), 0);
    assert_int_equal(hit.n_blocks, 3); /* (13-1)/4 */
    recv_batch(&f);
    const kvr_raw_event *ev = &f.runs[0];
    assert_true(ev->eagle);
    assert_int_equal(ev->n_block_hashes, 3);
    assert_int_equal(ev->n_token_ids, 13); /* 12 bigrams flattened */
    assert_true(ev->token_ids[12] == t[12]);
    teardown_engine(&f);
}

static void test_replay_answers(void **state)
{
    (void)state;
    fixture f;
    kvr_sim_engine_config ec = {.block_size = 4, .gpu_capacity = 16};
    setup_engine(&f, &ec);
    uint64_t a[8], b[8];
    seq_tokens(a, 8, 1);
    seq_tokens(b, 8, 77);
    kvr_sim_hit hit;
    assert_int_equal(kvr_sim_engine_serve(f.eng, a, 8, &hit), 0);
    recv_batch(&f);
    unsigned char first[4096];
    size_t first_len = f.payload_len;
    memcpy(first, f.payload, first_len);
    assert_int_equal(kvr_sim_engine_serve(f.eng, b, 8, &hit), 0);
    recv_batch(&f);

    void *d = zmq_socket(f.zctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(d, kvr_sim_engine_replay_endpoint(f.eng)), 0);
    unsigned char start[8] = {0};
    assert_int_equal(zmq_send(d, "", 0, ZMQ_SNDMORE), 0);
    assert_int_equal(zmq_send(d, start, 8, 0), 8);
    uint64_t expect = 0;
    for (;;) {
        zmq_pollitem_t it = {.socket = d, .events = ZMQ_POLLIN};
        assert_int_equal(zmq_poll(&it, 1, WAIT_MS), 1);
        unsigned char delim[8], seqb[8];
        static unsigned char payload[1 << 16];
        assert_int_equal(zmq_recv(d, delim, sizeof delim, 0), 0);
        assert_int_equal(zmq_recv(d, seqb, sizeof seqb, 0), 8);
        int n = zmq_recv(d, payload, sizeof payload, 0);
        assert_true(n >= 0);
        uint64_t seq;
        assert_int_equal(kvr_frame_parse(3, seqb, 8, &seq), KVR_FRAME_OK);
        if (seq == UINT64_MAX) {
            assert_int_equal(n, 0);
            break;
        }
        assert_true(seq == expect);
        if (seq == 0) {
            assert_int_equal((size_t)n, first_len);
            assert_memory_equal(payload, first, first_len);
        }
        assert_int_equal(kvr_batch_decode(&f.batch, payload, (size_t)n), KVR_BATCH_OK);
        expect++;
    }
    assert_true(expect == 2);
    assert_true(kvr_sim_engine_replays_served(f.eng) == 1);
    zmq_close(d);
    teardown_engine(&f);
}

static void test_workload_multimodal_forms(void **state)
{
    (void)state;
    /* Request 1 continues request 0's conversation and adds id 9. */
    uint64_t ids0[3] = {5, 6, 7}, ids1[4] = {5, 6, 7, 9};
    kvr_trace_request tr[2] = {
        {.timestamp_ms = 0, .input_length = 1200, .output_length = 1, .n_hash_ids = 3,
         .hash_ids = ids0},
        {.timestamp_ms = 1, .input_length = 1570, .output_length = 1, .n_hash_ids = 4,
         .hash_ids = ids1},
    };
    kvr_trace t = {.reqs = tr, .n = 2};
    kvr_sim_workload wl;
    assert_int_equal(kvr_sim_workload_init(&wl, &t, 1.0, 3), 0);
    kvr_sim_request r = {0};
    assert_int_equal(kvr_sim_workload_build(&wl, 0, &r), 0);
    assert_int_equal(r.n, 1200);
    /* The last full block the request adds (id 6) carries the image. */
    assert_int_equal(r.n_items, 1);
    kvr_sim_mm_item first = r.items[0];
    assert_int_equal(first.start, 512 + KVR_SIM_IMAGE_OFFSET);
    assert_int_equal(first.end, 512 + KVR_SIM_IMAGE_OFFSET + KVR_SIM_IMAGE_TOKENS);
    assert_true(first.mm_hash <= (uint64_t)INT64_MAX);
    for (size_t p = 0; p < r.n; p++) {
        bool img = p >= first.start && p < first.end;
        if (img) {
            assert_int_equal(r.route[p], KVR_SIM_IMAGE_PLACEHOLDER);
            assert_true(r.legacy[p] == kvr_pad_value(first.mm_hash));
            assert_true(r.wide[p] ==
                        kvr_sim_wide_pad(first.mm_hash, (unsigned)((p - first.start) % 4)));
            assert_true(r.wide[p] >= (1ULL << 32));
        } else {
            assert_true(r.route[p] < KVR_TEXT_TOKEN_LIMIT);
            assert_true(r.legacy[p] == r.route[p] && r.wide[p] == r.route[p]);
        }
    }
    uint64_t legacy0[1200];
    memcpy(legacy0, r.legacy, sizeof legacy0);
    /* The next turn shares the image in its prefix (same tokens); the only
     * block it adds (id 9) is partial, so it brings no image of its own. */
    assert_int_equal(kvr_sim_workload_build(&wl, 1, &r), 0);
    assert_int_equal(r.n, 1570);
    assert_int_equal(r.n_items, 1);
    assert_true(r.items[0].start == first.start && r.items[0].mm_hash == first.mm_hash);
    assert_memory_equal(r.legacy, legacy0, sizeof legacy0);
    kvr_sim_request_free(&r);
    kvr_sim_workload_free(&wl);
    /* mm_share 0: text only. */
    assert_int_equal(kvr_sim_workload_init(&wl, &t, 0.0, 3), 0);
    assert_int_equal(kvr_sim_workload_build(&wl, 1, &r), 0);
    assert_int_equal(r.n_items, 0);
    kvr_sim_request_free(&r);
    kvr_sim_workload_free(&wl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sglang_store_evict),
        cmocka_unit_test(test_vllm_store_evict),
        cmocka_unit_test(test_hicache_moves_evicted_to_cpu),
        cmocka_unit_test(test_kimi_wide_tokens),
        cmocka_unit_test(test_eagle_bigrams),
        cmocka_unit_test(test_replay_answers),
        cmocka_unit_test(test_workload_multimodal_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
