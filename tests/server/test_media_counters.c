/* SPEC §5 rule 10 ("count everything ... per worker in /workers and in
 * /metrics") and SPEC §3's drops counted by reason, end to end: real
 * events over ZeroMQ into a running server make every counter of
 * KVR_NORMALIZER_COUNTERS move on one of two workers, and each one is read
 * back from /workers (the worker's counters and its rank's normalizer
 * block), from the fleet family kvr_<name>[_total] and from the per-worker
 * family kvr_worker_<name>[_total]{model,group,worker}. The expected table
 * names every counter of the list: a counter added to the list without a
 * test that moves it fails here. Also SPEC §3's malformed batch and §2's
 * wrong-shape message, counted per worker in the same three places.
 *
 * Worker 1 is engine_wide with an exclusion capacity of 4 ids (a setting
 * /register does not take, so it registers through kvr_server_registry);
 * worker 2 is a vLLM worker without image_token_id. */
#include "test_support.h"

#include <msgpuck.h>
#include <zmq.h>

#include "kvrouter/registry.h"
#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT 10000
#define P 151655u /* a media placeholder; worker 2 does not know it */
#define WIDE_ID (1ull << 40)

/* What the events below leave, per worker; gauges as they stand before the
 * final clear. */
static const struct {
    const char *name;
    long long w1, w2;
} WANT[] = {
    {"mm_blocks_excluded", 6, 1},    /* w1: 2 truncated + 1 descendant + 3 in fallback */
    {"mm_stores_truncated", 2, 1},   /* w1: the first store and the fallback one */
    {"mm_descendant_stores_excluded", 1, 0},
    {"mm_removals_filtered", 1, 0},
    {"mm_excluded_ids", 2, 0},       /* 12, 13, 21 recorded; 12 removed */
    {"mm_fallback", 1, 0},
    {"mm_fallback_entries", 1, 0},
    {"wide_tokens_seen", 2, 0},
    {"mm_unmapped_blocks", 0, 1},
    {"groups_over_limit", 0, 0},
    {"group_kinds_lost", 0, 0},
};
#define N_WANT (sizeof WANT / sizeof WANT[0])

typedef struct {
    kvr_server *srv;
    char base[64];
    th_engine e1, e2;
} fixture;

static void start(fixture *f)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.metrics_per_worker = true;
    f->srv = th_server_start(&cfg, f->base, sizeof f->base);
    assert_non_null(f->srv);
    th_engine_start(&f->e1);
    th_engine_start(&f->e2);

    kvr_registration r;
    memset(&r, 0, sizeof r);
    r.settings.model_name = "m";
    r.settings.worker_id = 1;
    r.settings.block_size = BS;
    r.settings.mm_identity = KVR_MM_ENGINE_WIDE;
    r.settings.accepts_mm_hashes = -1;
    r.settings.mm_capacity = 4;
    r.endpoint = f->e1.endpoint;
    r.origin = KVR_ORIGIN_HTTP;
    kvr_registry_reply reply;
    assert_int_equal(kvr_registry_register(kvr_server_registry(f->srv), &r, &reply),
                     KVR_REGISTRY_CREATED);

    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\": 2, \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": %d, \"engine\": \"vllm\"}",
             f->e2.endpoint, BS);
    assert_int_equal(th_register(f->base, body, NULL), 201);
    assert_true(th_engine_wait_sub(&f->e1, WAIT));
    assert_true(th_engine_wait_sub(&f->e2, WAIT));
}

static void stop(fixture *f)
{
    th_engine_stop(&f->e1);
    th_engine_stop(&f->e2);
    kvr_server_stop(f->srv);
}

/* Worker 1, one batch per rule: truncation, a descendant, a filtered
 * removal, and the store that finds the set full (fallback). */
static void feed_engine_wide(fixture *f)
{
    uint64_t tok[3 * BS], child_tok[BS];
    for (int i = 0; i < 3 * BS; i++)
        tok[i] = 100 + (uint64_t)i;
    for (int i = 0; i < BS; i++)
        child_tok[i] = 500 + (uint64_t)i;
    tok[BS + 1] = WIDE_ID; /* block 1 of 3: 12 and 13 excluded */
    const uint64_t h[3] = {11, 12, 13}, child = 21, rm[2] = {12, 11}, h2[3] = {31, 32, 33};
    kvr_raw_event ev = th_store(h, 3, 0, tok, BS);
    th_send_events(&f->e1, 0, &ev, 1, true);
    ev = th_store(&child, 1, 13, child_tok, BS);
    th_send_events(&f->e1, 1, &ev, 1, true);
    ev = th_remove(rm, 2);
    th_send_events(&f->e1, 2, &ev, 1, true);
    tok[BS + 1] = 100 + BS + 1;
    tok[0] = WIDE_ID; /* 3 more ids do not fit next to 2 in 4 */
    ev = th_store(h2, 3, 0, tok, BS);
    th_send_events(&f->e1, 3, &ev, 1, true);
}

/* Worker 2, one vLLM batch: a store whose second block lists an image the
 * worker cannot map (no image_token_id), a store of another block size,
 * and a removal of a block never stored. */
static void feed_vllm(fixture *f)
{
    static uint64_t tok[2 * BS] = {1, 2, 3, 4, P, P, P, P}, big[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const uint64_t h[2] = {41, 42}, h8 = 43, unknown = 99;
    static char extra[64];
    mp_format(extra, sizeof extra, "[NIL [[%s %d]]]", "img-a", 0);
    kvr_raw_event evs[3] = {th_store(h, 2, 0, tok, BS), th_store(&h8, 1, 0, big, 8),
                            th_remove(&unknown, 1)};
    const char *p = extra;
    evs[0].n_extra_keys = mp_decode_array(&p);
    evs[0].extra_keys = p;
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_wire_encode_batch(&w, KVR_WIRE_VLLM, 1.0, evs, 3, true, 0);
    th_engine_send(&f->e2, 0, w.data, w.len, true);
    kvr_wbuf_free(&w);
}

/* The worker object of /workers with instance_id id. */
static json_t *worker_of(json_t *workers, uint64_t id)
{
    size_t i;
    json_t *w;
    json_array_foreach(workers, i, w) {
        if ((uint64_t)json_integer_value(json_object_get(w, "instance_id")) == id)
            return w;
    }
    fail_msg("worker %llu not in /workers", (unsigned long long)id);
    return NULL;
}

static long long int_at(json_t *o, const char *key, const char *what)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("%s: no integer %s", what, key);
    return (long long)json_integer_value(v);
}

/* Every counter of the list: the table's value in /workers (worker total
 * and rank 0) and /metrics (fleet and per worker). gauges_cleared: worker
 * 1's gauges after its AllBlocksCleared (0), other values as before. */
static void check_everywhere(fixture *f, bool gauges_cleared)
{
    json_t *ws = th_json("GET", f->base, "/workers", NULL, NULL);
    assert_non_null(ws);
    char url[128], *m = NULL;
    snprintf(url, sizeof url, "%s/metrics", f->base);
    assert_int_equal(th_http("GET", url, NULL, 0, &m), 200);
    for (size_t k = 0; k < kvr_normalizer_counter_count; k++) {
        const kvr_counter_desc *d = &kvr_normalizer_counter_descs[k];
        size_t t = 0;
        while (t < N_WANT && strcmp(WANT[t].name, d->name) != 0)
            t++;
        if (t == N_WANT)
            fail_msg("counter %s has no expected value here: make a test move it", d->name);
        bool gauge = d->kind == KVR_METRIC_GAUGE;
        long long want[2] = {gauge && gauges_cleared ? 0 : WANT[t].w1, WANT[t].w2};
        for (uint64_t id = 1; id <= 2; id++) {
            json_t *w = worker_of(ws, id);
            char what[96];
            snprintf(what, sizeof what, "/workers %llu counters", (unsigned long long)id);
            assert_int_equal(int_at(json_object_get(w, "counters"), d->name, what), want[id - 1]);
            json_t *rank0 = json_object_get(json_object_get(json_object_get(w, "ranks"), "0"),
                                            "normalizer");
            assert_int_equal(int_at(rank0, d->name, "/workers rank 0 normalizer"),
                             want[id - 1]);
            char series[256];
            snprintf(series, sizeof series,
                     "kvr_worker_%s%s{model=\"m\",group=\"default\",worker=\"%llu\"}", d->name,
                     gauge ? "" : "_total", (unsigned long long)id);
            if (th_metric_in(m, series) != (double)want[id - 1])
                fail_msg("%s is %g, want %lld", series, th_metric_in(m, series), want[id - 1]);
        }
        char fleet[128];
        snprintf(fleet, sizeof fleet, "kvr_%s%s", d->name, gauge ? "" : "_total");
        if (th_metric_in(m, fleet) != (double)(want[0] + want[1]))
            fail_msg("%s is %g, want %lld", fleet, th_metric_in(m, fleet), want[0] + want[1]);
    }
    /* SPEC §3: drops by reason, the same way (worker 2 dropped two) */
    for (int r = 1; r < KVR_DROP_COUNT; r++) {
        const char *name = kvr_drop_reason_name((kvr_drop_reason)r);
        long long want2 = r == KVR_DROP_BLOCK_SIZE_MISMATCH || r == KVR_DROP_BLOCK_NOT_FOUND;
        long long want[2] = {0, want2};
        for (uint64_t id = 1; id <= 2; id++) {
            json_t *drops = json_object_get(json_object_get(worker_of(ws, id), "counters"),
                                            "drops");
            assert_int_equal(int_at(drops, name, "/workers drops"), want[id - 1]);
            char series[256];
            snprintf(series, sizeof series,
                     "kvr_worker_drops_total{model=\"m\",group=\"default\",worker=\"%llu\","
                     "reason=\"%s\"}",
                     (unsigned long long)id, name);
            if (th_metric_in(m, series) != (double)want[id - 1])
                fail_msg("%s is %g, want %lld", series, th_metric_in(m, series), want[id - 1]);
        }
        char fleet[128];
        snprintf(fleet, sizeof fleet, "kvr_drops_total{reason=\"%s\"}", name);
        assert_true(th_metric_in(m, fleet) == (double)want2);
    }
    free(m);
    json_decref(ws);
}

static void test_every_media_counter_per_worker_in_workers_and_metrics(void **state)
{
    (void)state;
    /* every row of the table is a counter of the list */
    for (size_t t = 0; t < N_WANT; t++) {
        size_t k = 0;
        while (k < kvr_normalizer_counter_count &&
               strcmp(kvr_normalizer_counter_descs[k].name, WANT[t].name) != 0)
            k++;
        if (k == kvr_normalizer_counter_count)
            fail_msg("%s is not in KVR_NORMALIZER_COUNTERS", WANT[t].name);
    }
    fixture f;
    start(&f);
    feed_engine_wide(&f);
    feed_vllm(&f);
    /* each worker's last event moved these; its earlier ones came first */
    assert_int_equal(th_wait_counter(f.base, 1, "m", "mm_fallback_entries", 1, WAIT), 1);
    assert_int_equal(th_wait_counter(f.base, 2, "m", "block_not_found", 1, WAIT), 1);
    check_everywhere(&f, false);

    /* AllBlocksCleared ends fallback (rule 6) and empties the sets (rule
     * 5): the gauges drop to 0, the counters keep their counts */
    kvr_raw_event cl = th_clear();
    th_send_events(&f.e1, 4, &cl, 1, true);
    assert_int_equal(th_wait_counter(f.base, 1, "m", "mm_fallback", 0, WAIT), 0);
    check_everywhere(&f, true);
    stop(&f);
}

/* A source counter's value for worker id in /workers and /metrics (fleet
 * kvr_source_<name>_total, per worker kvr_worker_source_<name>_total), all
 * three equal to want (worker 1 stays at 0 for the fleet sum). */
static void check_source_counter(fixture *f, uint64_t id, const char *name, long long want)
{
    assert_int_equal(th_counter(f->base, id, "m", name), want);
    char url[128], *m = NULL, series[256];
    snprintf(url, sizeof url, "%s/metrics", f->base);
    assert_int_equal(th_http("GET", url, NULL, 0, &m), 200);
    snprintf(series, sizeof series, "kvr_source_%s_total", name);
    if (th_metric_in(m, series) != (double)want)
        fail_msg("%s is %g, want %lld", series, th_metric_in(m, series), want);
    snprintf(series, sizeof series,
             "kvr_worker_source_%s_total{model=\"m\",group=\"default\",worker=\"%llu\"}", name,
             (unsigned long long)id);
    if (th_metric_in(m, series) != (double)want)
        fail_msg("%s is %g, want %lld", series, th_metric_in(m, series), want);
    free(m);
}

/* SPEC §3 "a malformed batch is dropped and counted; the listener keeps
 * running" and §2 "other shapes are counted and dropped": one of each on
 * worker 2, then a good batch still applies; both counted for worker 2 in
 * /workers and /metrics, nothing for worker 1. */
static void test_malformed_batch_and_frame_counted_per_worker(void **state)
{
    (void)state;
    fixture f;
    start(&f);
    th_engine_send(&f.e2, 0, "\xc1\x93garbage", 9, true); /* 0xc1 is never valid */
    zmq_send(f.e2.pub, "", 0, ZMQ_SNDMORE); /* two frames: the wrong shape */
    zmq_send(f.e2.pub, "x", 1, 0);
    const uint64_t unknown = 98;
    kvr_raw_event rm = th_remove(&unknown, 1);
    th_send_events(&f.e2, 1, &rm, 1, true);
    assert_int_equal(th_wait_counter(f.base, 2, "m", "block_not_found", 1, WAIT), 1);
    check_source_counter(&f, 2, "malformed_batches", 1);
    check_source_counter(&f, 2, "bad_frames", 1);
    assert_int_equal(th_counter(f.base, 2, "m", "seq_gaps"), 0);
    assert_int_equal(th_counter(f.base, 1, "m", "malformed_batches"), 0);
    assert_int_equal(th_counter(f.base, 1, "m", "bad_frames"), 0);
    stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_media_counter_per_worker_in_workers_and_metrics),
        cmocka_unit_test(test_malformed_batch_and_frame_counted_per_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
