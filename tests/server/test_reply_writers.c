/* The reply writers that skip jansson (sbuf.h, scores_json.h, route_json.h)
 * write what jansson would: strings escaped the same way (and refused when
 * jansson refuses them), reals in jansson's form, and /query bodies equal
 * to a tree built from the same results by a naive model of SPEC §7.1. */
#include "test_support.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_body.h"
#include "server/route_json.h"
#include "server/sbuf.h"
#include "server/scores_json.h"

static char *dumped(json_t *j)
{
    char *t = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(j);
    return t;
}

static void expect_str_as_jansson(const char *s)
{
    kvr_sbuf b = {0};
    kvr_sbuf_json_str(&b, s);
    json_t *j = json_string(s);
    if (!j) {
        assert_true(b.failed); /* jansson refuses it (not UTF-8): so do we */
        free(b.data);
        return;
    }
    char *want = dumped(j);
    size_t n;
    char *got = kvr_sbuf_take(&b, &n);
    assert_non_null(got);
    assert_string_equal(got, want);
    assert_int_equal(n, strlen(want));
    free(got);
    free(want);
}

static void test_strings_escaped_as_jansson(void **state)
{
    (void)state;
    expect_str_as_jansson("");
    expect_str_as_jansson("plain-request-id-17");
    expect_str_as_jansson("quote \" backslash \\ slash / del \x7f");
    expect_str_as_jansson("\b\f\n\r\t\x01\x1f end");
    expect_str_as_jansson("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"); /* 2, 3, 4 bytes */
    /* not UTF-8: stray continuation, overlong, surrogate, past U+10FFFF,
     * truncated sequences */
    static const char *const bad[] = {"\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                      "\xe2\x82", "a\xf0\x9f\x98", "\xff"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_str_as_jansson(bad[i]);
    /* every byte value after a valid prefix, alone and before text */
    char s[8];
    for (int c = 1; c < 256; c++) {
        snprintf(s, sizeof s, "x%cy", c);
        expect_str_as_jansson(s);
        snprintf(s, sizeof s, "%c\xa9", c);
        expect_str_as_jansson(s);
    }
}

static void test_reals_and_ids_as_jansson(void **state)
{
    (void)state;
    static const double v[] = {0.0, -0.0, 1.0, 0.1, -2.5, 1e300, 1e-300, 1e-5, 123456789.0,
                               1e17, 1e21, 3.0e-7, 0.75, 1.0 / 3.0};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        kvr_sbuf b = {0};
        kvr_sbuf_json_real(&b, v[i]);
        char *want = dumped(json_real(v[i]));
        char *got = kvr_sbuf_take(&b, NULL);
        assert_string_equal(got, want);
        free(got);
        free(want);
    }
    kvr_sbuf b = {0};
    kvr_sbuf_json_real(&b, INFINITY);
    KVR_SBUF_LIT(&b, ",");
    kvr_sbuf_json_real(&b, NAN);
    KVR_SBUF_LIT(&b, ",");
    kvr_sbuf_u64(&b, 0);
    KVR_SBUF_LIT(&b, ",");
    kvr_sbuf_u64(&b, 9223372036854775807ull);
    KVR_SBUF_LIT(&b, ",");
    kvr_sbuf_u64(&b, 9223372036854775808ull);
    KVR_SBUF_LIT(&b, ",");
    kvr_sbuf_u64(&b, 18446744073709551615ull);
    char *got = kvr_sbuf_take(&b, NULL);
    assert_string_equal(got, "null,null,0,9223372036854775807,9223372036854775808,"
                             "18446744073709551615");
    free(got);
}

typedef struct {
    uint64_t w;
    uint32_t r, g, c, d;
} res;

static json_t *obj(json_t *parent, const char *key)
{
    json_t *o = json_object_get(parent, key);
    if (!o) {
        o = json_object();
        json_object_set_new(parent, key, o);
    }
    return o;
}

static void set_max(json_t *o, const char *key, json_int_t v)
{
    json_t *cur = json_object_get(o, key);
    if (!cur || json_integer_value(cur) < v)
        json_object_set_new(o, key, json_integer(v));
}

/* SPEC §7.1's body from the results, the plain way. */
static json_t *model(const res *e, size_t n, uint32_t bs)
{
    json_t *root = json_object(), *scores = obj(root, "scores"), *inst = obj(root, "instances");
    json_t *freq = json_array();
    json_object_set_new(root, "frequencies", freq);
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].d == 0)
            continue;
        char id[24], rank[12];
        snprintf(id, sizeof id, "%llu", (unsigned long long)e[i].w);
        snprintf(rank, sizeof rank, "%u", e[i].r);
        json_int_t g = (json_int_t)e[i].g * bs, c = (json_int_t)e[i].c * bs,
                   d = (json_int_t)e[i].d * bs;
        json_object_set_new(obj(scores, id), rank, json_integer(g));
        json_t *in = obj(inst, id), *t = obj(obj(in, "dp_tiers"), rank);
        json_object_set_new(obj(in, "dp"), rank, json_integer(g));
        json_object_set_new(t, "gpu", json_integer(g));
        json_object_set_new(t, "cpu", json_integer(c));
        json_object_set_new(t, "disk", json_integer(d));
        set_max(in, "longest_matched", d);
        set_max(in, "gpu", g);
        set_max(in, "cpu", c);
        set_max(in, "disk", d);
        top = e[i].g > top ? e[i].g : top;
    }
    for (uint32_t b = 0; b < top; b++) {
        json_int_t owners = 0;
        for (size_t i = 0; i < n; i++)
            owners += e[i].d > 0 && e[i].g > b;
        json_array_append_new(freq, json_integer(owners));
    }
    return root;
}

static void expect_scores(const res *e, size_t n, uint32_t bs)
{
    kvr_scores_json b;
    assert_true(kvr_scores_json_init(&b, bs));
    for (size_t i = 0; i < n; i++)
        kvr_scores_json_add(&b, e[i].w, e[i].r, e[i].g, e[i].c, e[i].d);
    size_t len;
    char *text = kvr_scores_json_finish(&b, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    json_error_t err;
    json_t *got = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!got)
        fail_msg("not JSON (%s): %.300s", err.text, text);
    json_t *want = model(e, n, bs);
    if (!json_equal(got, want)) {
        char *w = json_dumps(want, JSON_COMPACT);
        fail_msg("got  %.400s\nwant %.400s", text, w);
    }
    json_decref(got);
    json_decref(want);
    free(text);
}

/* Appends of every length from 0 to 40, in place and across growth (the
 * buffer starts empty and grows by 4 KB steps): the text is the same bytes
 * as one model string, NUL-terminated, whichever path each append took. */
static void test_sbuf_appends_across_growth(void **state)
{
    (void)state;
    static char model[64 * 1024];
    char piece[41];
    for (size_t i = 0; i < sizeof piece; i++)
        piece[i] = (char)('a' + i % 26);
    kvr_sbuf b = {0};
    size_t len = 0;
    for (size_t round = 0; len + 40 < sizeof model - 1; round++) {
        size_t n = round % 41;
        kvr_sbuf_append(&b, piece, n);
        memcpy(model + len, piece, n);
        len += n;
        assert_int_equal(b.len, len);
        assert_true(b.cap > b.len);
        assert_int_equal(b.data[b.len], 0);
    }
    model[len] = 0;
    assert_true(b.cap >= 8192); /* it grew past its first block */
    size_t got_len = 0;
    char *got = kvr_sbuf_take(&b, &got_len);
    assert_int_equal(got_len, len);
    assert_memory_equal(got, model, len + 1);
    assert_int_equal(b.len, 0);
    free(got);
}

static void test_scores_body_equals_model(void **state)
{
    (void)state;
    expect_scores(NULL, 0, 16);
    res one[] = {{7, 0, 3, 3, 3}};
    expect_scores(one, 1, 16);
    /* ranks of a worker apart and out of order, a worker matching only on
     * disk, a zero-overlap candidate, ids past INT64_MAX */
    res mixed[] = {{5, 2, 1, 2, 4},   {9, 0, 0, 0, 0}, {18446744073709551615ull, 0, 6, 6, 6},
                   {5, 0, 4, 4, 5},   {3, 1, 0, 0, 2}, {9223372036854775808ull, 3, 2, 9, 9},
                   {5, 1, 4, 8, 8}};
    expect_scores(mixed, sizeof mixed / sizeof *mixed, 32);
    uint64_t x = 88172645463325252ull;
    for (int round = 0; round < 50; round++) {
        res r[64];
        size_t n = 0;
        for (uint64_t w = 0; w < 24 && n < 64; w++)
            for (uint32_t k = 0; k < 1 + w % 3 && n < 64; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                uint32_t g = (uint32_t)(x % 9), c = g + (uint32_t)(x >> 8) % 3,
                         d = c + (uint32_t)(x >> 16) % 3;
                r[n++] = (res){(x >> 24) % 2 ? w * 1000003 : w, (k * 7 + (uint32_t)w) % 5, g, c,
                               d};
            }
        for (size_t i = n; i > 1; i--) { /* shuffle */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t j = x % i;
            res t = r[i - 1];
            r[i - 1] = r[j];
            r[j] = t;
        }
        /* one (worker, rank) at most once */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            bool dup = false;
            for (size_t j = 0; j < m; j++)
                dup |= r[j].w == r[i].w && r[j].r == r[i].r;
            if (!dup)
                r[m++] = r[i];
        }
        expect_scores(r, m, 16);
    }
}

static void test_route_body_fields(void **state)
{
    (void)state;
    kvr_mm_item items[2] = {{.start = 0, .end = 4, .has_mm_hash = true, .mm_hash = 0xab},
                            {.start = 4, .end = 8, .has_mm_hash = true, .mm_hash = 1,
                             .has_mm_hash_vllm = true, .mm_hash_vllm = 0xfedcba9876543210ull}};
    kvr_route_request rq = {.request_id = "id \"1\"\n", .debug = true};
    rq.q.mm_items = items;
    rq.q.n_mm_items = 2;
    kvr_route_cost costs[2] = {{.worker_id = 9223372036854775809ull, .dp_rank = 1, .gpu_blocks = 2,
                                .cost = 1.5, .credit = 0.1, .probability = 1.0},
                               {.worker_id = 4, .new_blocks = 7, .cost = INFINITY}};
    kvr_route_decision d = {.worker_id = 4, .dp_rank = 2, .overlap_tokens = 32,
                            .forward_mm_hashes = true, .routing_tokens = 100,
                            .reason = KVR_REASON_PINNED, .engine = KVR_ENGINE_VLLM, .cost = 2.0,
                            .costs = costs, .n_costs = 2};
    size_t len;
    char *text = kvr_route_json(&rq, &d, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    /* a worker id above INT64_MAX is a bare number, as Dynamo writes it */
    assert_non_null(strstr(text, "{\"worker_id\":9223372036854775809,"));
    json_t *j = kvr_json_load_body(text, len, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(j);
    json_t *want = json_pack(
        "{s:I,s:I,s:I,s:b,s:I,s:s,s:s,s:s,s:[s,s],s:[{s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,"
        "s:f,s:f},{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:n,s:f}],s:f}",
        "worker_id", (json_int_t)4, "dp_rank", (json_int_t)2, "overlap_tokens", (json_int_t)32,
        "forward_mm_hashes", 1, "routing_tokens", (json_int_t)100, "reason", "pinned",
        "request_id", "id \"1\"\n", "engine", "vllm", "multi_modal_uuids",
        "00000000000000ab000000000000000000000000000000000000000000000000",
        "fedcba9876543210000000000000000000000000000000000000000000000000", "costs",
        "worker_id", kvr_json_u64_marker(9223372036854775809ull), "dp_rank", (json_int_t)1, "gpu_blocks",
        (json_int_t)2, "cpu_blocks", (json_int_t)0, "disk_blocks", (json_int_t)0,
        "routing_tokens", (json_int_t)0, "active_prefill_tokens", (json_int_t)0,
        "active_decode_blocks", (json_int_t)0, "new_blocks", (json_int_t)0, "credit", 0.1,
        "cost", 1.5, "probability", 1.0, "worker_id", (json_int_t)4, "dp_rank", (json_int_t)0,
        "gpu_blocks", (json_int_t)0, "cpu_blocks", (json_int_t)0, "disk_blocks", (json_int_t)0,
        "routing_tokens", (json_int_t)0, "active_prefill_tokens", (json_int_t)0,
        "active_decode_blocks", (json_int_t)0, "new_blocks", (json_int_t)7, "credit", 0.0,
        "cost", "probability", 0.0, "cost", 2.0);
    assert_non_null(want);
    if (!json_equal(j, want))
        fail_msg("got %s", text);
    json_decref(want);
    json_decref(j);
    free(text);
    /* SGLang, no media, no debug: the plain shape */
    d.engine = KVR_ENGINE_SGLANG;
    d.forward_mm_hashes = false;
    rq.debug = false;
    text = kvr_route_json(&rq, &d, NULL);
    assert_string_equal(text, "{\"worker_id\":4,\"dp_rank\":2,\"overlap_tokens\":32,"
                              "\"forward_mm_hashes\":false,\"routing_tokens\":100,\"reason\":"
                              "\"pinned\",\"request_id\":\"id \\\"1\\\"\\n\",\"engine\":\"sglang\"}");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strings_escaped_as_jansson),
        cmocka_unit_test(test_reals_and_ids_as_jansson),
        cmocka_unit_test(test_sbuf_appends_across_growth),
        cmocka_unit_test(test_scores_body_equals_model),
        cmocka_unit_test(test_route_body_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
