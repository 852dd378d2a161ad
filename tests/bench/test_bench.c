/* The benchmark stream and its checksum: the in-memory replay through the
 * index must agree with an independent naive model replaying the emitted
 * JSON lines, so the checksum means something. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../index/tree_model.h"
#include "bench/bench.h"

#define WORKERS 8

static void build_gran(kvr_bench_stream *s, size_t limit, size_t capacity,
                       kvr_bench_granularity gran, bool keep_tokens)
{
    kvr_trace t;
    char err[256];
    assert_int_equal(
        kvr_trace_load(kvr_test_path("data/conversation_trace.jsonl"), limit, &t, err, sizeof err),
        0);
    kvr_bench_config cfg = {WORKERS, capacity, 16, 42, gran, keep_tokens};
    assert_int_equal(kvr_bench_build(&t, &cfg, s), 0);
    kvr_trace_free(&t);
}

static void build(kvr_bench_stream *s, size_t limit, size_t capacity)
{
    build_gran(s, limit, capacity, KVR_BENCH_SGLANG, false);
}

/* Checksum of the stream replayed through the naive model. */
static uint64_t model_checksum(const kvr_bench_stream *s)
{
    tm_model m;
    tm_init(&m);
    uint64_t sum = 0;
    uint32_t g[TM_OWNERS], c[TM_OWNERS], d[TM_OWNERS];
    for (size_t i = 0; i < s->n; i++) {
        const kvr_bench_op *op = &s->ops[i];
        const uint64_t *p = s->pool + op->off;
        assert_true(op->kind == KVR_BOP_MATCH || (op->worker < WORKERS && op->rank == 0));
        switch (op->kind) {
        case KVR_BOP_STORE:
            tm_store(&m, (int)op->worker, op->tier, op->has_parent, op->parent, p, p + op->n,
                     op->n);
            break;
        case KVR_BOP_REMOVE:
            tm_remove(&m, (int)op->worker, op->tier, p, op->n);
            break;
        case KVR_BOP_CLEAR:
            tm_clear(&m, (int)op->worker);
            break;
        default:
            tm_match(&m, p, op->n, g, c, d);
            for (int o = 0; o < TM_OWNERS; o++)
                sum += g[o];
        }
    }
    tm_free(&m);
    return sum;
}

static void test_checksum_matches_reference_through_file(void **state)
{
    (void)state;
    kvr_bench_stream s;
    build(&s, 200, 300); /* small caches: plenty of evictions */
    size_t stores = 0, removes = 0, matches = 0, with_parent = 0;
    for (size_t i = 0; i < s.n; i++) {
        stores += s.ops[i].kind == KVR_BOP_STORE;
        removes += s.ops[i].kind == KVR_BOP_REMOVE;
        matches += s.ops[i].kind == KVR_BOP_MATCH;
        with_parent += s.ops[i].kind == KVR_BOP_STORE && s.ops[i].has_parent;
    }
    assert_int_equal(matches, 200);
    assert_true(stores > 0 && removes > 0 && with_parent > 0);
    /* every request's match comes before its own store */
    assert_int_equal(s.ops[0].kind, KVR_BOP_MATCH);

    kvr_bench_result r = {0};
    assert_int_equal(kvr_bench_replay(&s, &r), 0);
    assert_int_equal(r.matches, 200);
    assert_int_equal(r.events, stores + removes);
    assert_int_equal(r.parent_not_found, 0);
    assert_true(r.checksum > 0);
    /* thousands of stores and evictions, then every owner cleared: the
     * index is back to its size before the first event */
    assert_true(r.event_blocks > 10000);
    assert_int_equal(r.bytes_after_clear, r.bytes_baseline);

    char path[] = "/tmp/kvr_bench_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_int_equal(kvr_bench_write_events(&s, f), 0);
    fclose(f);

    /* each line is valid JSON of the documented shape */
    FILE *in = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, lines = 0;
    while (getline(&line, &cap, in) > 0) {
        json_error_t jerr;
        json_t *o = json_loads(line, JSON_DECODE_INT_AS_REAL, &jerr);
        assert_non_null(o);
        const char *op = json_string_value(json_object_get(o, "op"));
        assert_non_null(op);
        if (strcmp(op, "match") == 0) {
            assert_true(json_is_array(json_object_get(o, "hashes")));
        } else {
            assert_true(json_is_number(json_object_get(o, "worker")));
            assert_string_equal(json_string_value(json_object_get(o, "tier")), "gpu");
            if (strcmp(op, "store") == 0) {
                json_t *b = json_object_get(o, "blocks");
                assert_int_equal(json_array_size(json_array_get(b, 0)), 2);
                assert_non_null(json_object_get(o, "parent"));
            } else {
                assert_string_equal(op, "remove");
            }
        }
        json_decref(o);
        lines++;
    }
    free(line);
    fclose(in);
    assert_int_equal(lines, s.n);

    kvr_bench_stream back;
    char err[256];
    assert_int_equal(kvr_bench_read_events(path, &back, err, sizeof err), 0);
    unlink(path);
    assert_int_equal(back.n, s.n);
    for (size_t i = 0; i < s.n; i++) {
        const kvr_bench_op *a = &s.ops[i], *b = &back.ops[i];
        assert_int_equal(a->kind, b->kind);
        assert_int_equal(a->n, b->n);
        assert_int_equal(a->worker, b->worker);
        assert_int_equal(a->has_parent, b->has_parent);
        assert_int_equal(a->parent, b->parent);
        size_t len = a->kind == KVR_BOP_STORE ? 2 * (size_t)a->n : a->n;
        assert_memory_equal(s.pool + a->off, back.pool + b->off, len * sizeof(uint64_t));
    }
    assert_int_equal(model_checksum(&back), r.checksum);

    kvr_bench_result r2 = {0};
    assert_int_equal(kvr_bench_replay(&back, &r2), 0);
    assert_int_equal(r2.checksum, r.checksum);
    kvr_bench_stream_free(&back);
    kvr_bench_stream_free(&s);
}

/* One block per event (SGLang) and multi-block events (vLLM) describe the
 * same cache changes: same blocks, same matches, same checksum, and both
 * agree with the naive model. */
static void test_granularities_share_the_checksum(void **state)
{
    (void)state;
    kvr_bench_stream sg, vl;
    build_gran(&sg, 150, 300, KVR_BENCH_SGLANG, false);
    build_gran(&vl, 150, 300, KVR_BENCH_VLLM, false);
    size_t sg_blocks = 0, vl_blocks = 0, vl_multi = 0, vl_removes = 0, sg_removes = 0,
           sg_linked = 0;
    for (size_t i = 0; i < sg.n; i++) {
        const kvr_bench_op *op = &sg.ops[i];
        if (op->kind == KVR_BOP_MATCH)
            continue;
        assert_int_equal(op->n, 1);
        sg_blocks += op->n;
        sg_removes += op->kind == KVR_BOP_REMOVE;
        /* a page after the first of its store links to the page before it */
        sg_linked += op->kind == KVR_BOP_STORE && sg.ops[i - 1].kind == KVR_BOP_STORE &&
                     op->has_parent && op->parent == sg.pool[sg.ops[i - 1].off];
    }
    assert_true(sg_linked > sg_blocks / 2);
    for (size_t i = 0; i < vl.n; i++) {
        const kvr_bench_op *op = &vl.ops[i];
        if (op->kind == KVR_BOP_MATCH)
            continue;
        vl_blocks += op->n;
        vl_multi += op->n > 1;
        vl_removes += op->kind == KVR_BOP_REMOVE;
    }
    assert_int_equal(sg_blocks, vl_blocks);
    assert_true(vl_multi > 0);
    assert_true(sg_removes > vl_removes && vl_removes > 0);
    assert_true(sg.n > vl.n);

    kvr_bench_result a = {0}, b = {0};
    assert_int_equal(kvr_bench_replay(&sg, &a), 0);
    assert_int_equal(kvr_bench_replay(&vl, &b), 0);
    assert_int_equal(a.matches, 150);
    assert_int_equal(a.parent_not_found, 0);
    assert_int_equal(b.parent_not_found, 0);
    assert_int_equal(a.event_blocks, b.event_blocks);
    assert_true(a.checksum > 0);
    assert_int_equal(a.checksum, b.checksum);
    assert_int_equal(model_checksum(&sg), a.checksum);
    assert_int_equal(model_checksum(&vl), b.checksum);
    assert_int_equal(a.stats.ownerships, b.stats.ownerships);
    /* per-page stores handed to the index in runs: same events, same result */
    kvr_bench_result c = {0};
    assert_int_equal(kvr_bench_replay_coalesced(&sg, 64, &c), 0);
    assert_int_equal(c.events, a.events);
    assert_int_equal(c.event_blocks, a.event_blocks);
    assert_int_equal(c.parent_not_found, 0);
    assert_int_equal(c.checksum, a.checksum);
    assert_int_equal(c.stats.ownerships, a.stats.ownerships);
    assert_int_equal(c.bytes_after_clear, c.bytes_baseline);
    kvr_bench_stream_free(&sg);
    kvr_bench_stream_free(&vl);
}

/* The same stream as real msgpack batches through the facade (decode ->
 * normalize -> hash the tokens -> index) must index exactly what the direct
 * replay indexes: equal checksums, nothing dropped, every block applied. */
static void check_pipeline(kvr_bench_granularity gran)
{
    kvr_bench_stream s;
    build_gran(&s, 120, 300, gran, true);
    assert_non_null(s.tok);
    kvr_bench_result r = {0};
    assert_int_equal(kvr_bench_replay(&s, &r), 0);
    kvr_bench_pipeline_result p;
    assert_int_equal(kvr_bench_pipeline(&s, &p), 0);
    assert_int_equal(p.bad_batches, 0);
    assert_int_equal(p.events_dropped, 0);
    assert_int_equal(p.events, r.events);
    assert_int_equal(p.blocks, r.event_blocks);
    assert_int_equal(p.blocks_applied, r.event_blocks);
    assert_true(p.batches > 0 && p.batches <= p.events);
    assert_int_equal(p.matches, 120);
    assert_true(r.checksum > 0);
    assert_int_equal(p.checksum, r.checksum);
    kvr_bench_stream_free(&s);
}

static void test_pipeline_through_facade_matches_replay(void **state)
{
    (void)state;
    check_pipeline(KVR_BENCH_SGLANG);
    check_pipeline(KVR_BENCH_VLLM);
    /* a stream without tokens cannot be hashed again */
    kvr_bench_stream s;
    build(&s, 10, 300);
    kvr_bench_pipeline_result p;
    assert_int_equal(kvr_bench_pipeline(&s, &p), -1);
    kvr_bench_stream_free(&s);
}

static void test_concurrent_replay_reports_both_rates(void **state)
{
    (void)state;
    kvr_bench_stream s;
    build(&s, 60, 200);
    kvr_bench_result r = {0};
    assert_int_equal(kvr_bench_replay_concurrent(&s, 3, &r), 0);
    assert_int_equal(r.threads, 3);
    assert_true(r.conc_events_per_s > 0);
    assert_true(r.conc_matches_per_s > 0);
    /* the longest event in CPU time names an event of the stream */
    assert_true(r.event_cpu_max.us > 0);
    assert_true(r.event_cpu_max.op < s.n);
    assert_int_not_equal(s.ops[r.event_cpu_max.op].kind, KVR_BOP_MATCH);
    assert_int_equal(r.event_cpu_max.n, s.ops[r.event_cpu_max.op].n);
    /* the longest wait, if any, is lined up with the scheduler logs: the
     * span sampled around it holds it, and what fell within it fits */
    if (r.reader_waits) {
        assert_true(r.wait_why.known);
        assert_true(r.wait_why.span_us + 0.001 >= r.reader_wait_max_us);
        assert_true(r.wait_why.writer_queued_min_us <= r.reader_wait_max_us + 0.001);
        assert_true(r.wait_why.writer_queued_min_us <= r.wait_why.writer_queued_us);
    }
    kvr_bench_stream_free(&s);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_events_reader_rejects_bad_lines(void **state)
{
    (void)state;
    char path[] = "/tmp/kvr_bench_bad_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    kvr_bench_stream s;
    char err[256];
    static const struct {
        const char *text, *field;
    } cases[] = {
        {"{\"op\":\"store\",\"worker\":1,\"rank\":0,\"tier\":\"gpu\",\"parent\":null,"
         "\"blocks\":[[1]]}\n", "blocks"},
        {"{\"op\":\"remove\",\"worker\":-1,\"hashes\":[1]}\n", "worker"},
        {"{\"op\":\"match\",\"hashes\":[18446744073709551616]}\n", "hashes"},
        {"{\"op\":\"evict\",\"worker\":1}\n", "op"},
        {"{\"op\":\"remove\",\"worker\":1,\"tier\":\"ssd\",\"hashes\":[]}\n", "tier"},
        {"{\"op\":\"match\"}\n", "hashes"},
        {"[1,2]\n", "JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(path, cases[i].text);
        assert_int_equal(kvr_bench_read_events(path, &s, err, sizeof err), -1);
        assert_non_null(strstr(err, cases[i].field));
        assert_non_null(strstr(err, ":1:"));
    }
    /* the largest u64, unknown keys and blank lines are fine */
    write_file(path, "\n{\"op\":\"match\",\"x\":{\"y\":[1,\"z\"]},\"hashes\":[18446744073709551615]}\n"
                     "{\"op\":\"clear\",\"worker\":3,\"rank\":2}\n");
    assert_int_equal(kvr_bench_read_events(path, &s, err, sizeof err), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.pool[s.ops[0].off], UINT64_MAX);
    assert_int_equal(s.ops[1].kind, KVR_BOP_CLEAR);
    assert_int_equal(s.ops[1].rank, 2);
    kvr_bench_stream_free(&s);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checksum_matches_reference_through_file),
        cmocka_unit_test(test_granularities_share_the_checksum),
        cmocka_unit_test(test_pipeline_through_facade_matches_replay),
        cmocka_unit_test(test_concurrent_replay_reports_both_rates),
        cmocka_unit_test(test_events_reader_rejects_bad_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
