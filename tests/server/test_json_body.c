/* Request body parsing (json_body.h): kvr_json_load_body gives exactly
 * what json_loadb gives (same tree, same failures with the same error
 * text); with vec_keys the same tree minus the kept arrays, which read back
 * as the same integers; /query and /route, served on it over real HTTP,
 * name the bad token by index whichever way token_ids was parsed. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/route.h"
#include "kvrouter/server.h"
#include "server/api.h"
#include "server/json_body.h"
#include "server/json_util.h"
#include "net_helpers.h"

static const char *const vec_keys[] = {"k", "token_ids", "a", NULL};
static const kvr_json_body_opts vec_opts = {vec_keys};

/* The kept vectors put back as arrays: must equal the jansson tree. */
static json_t *with_vecs_back(kvr_json_body *b)
{
    json_t *t = json_deep_copy(b->root);
    for (size_t i = 0; i < b->n_vecs; i++) {
        size_t n;
        const json_int_t *v = kvr_json_body_ints(b, b->vecs[i].key, &n);
        assert_non_null(v);
        assert_null(json_object_get(t, b->vecs[i].key));
        json_t *a = json_array();
        for (size_t k = 0; k < n; k++)
            json_array_append_new(a, json_integer(v[k]));
        json_object_set_new(t, b->vecs[i].key, a);
    }
    return t;
}

/* doc: n bytes in a heap block of exactly that size (no terminator), so
 * that the ASan build sees any read past the body's end. */
static void same_at(const char *doc, size_t n)
{
    json_error_t e1, e2, e3;
    json_t *a = json_loadb(doc, n, JSON_REJECT_DUPLICATES, &e1);
    json_t *b = kvr_json_load_body(doc, n, JSON_REJECT_DUPLICATES, &e2);
    kvr_json_body vb;
    int rc = kvr_json_body_parse(doc, n, JSON_REJECT_DUPLICATES, &vec_opts, &vb, &e3);
    if (!a) {
        assert_null(b);
        assert_int_equal(rc, -1);
        assert_null(vb.root);
        assert_string_equal(e1.text, e2.text);
        assert_int_equal(e1.position, e2.position);
        assert_string_equal(e1.text, e3.text);
        assert_int_equal(e1.position, e3.position);
        return;
    }
    assert_non_null(b);
    assert_int_equal(rc, 0);
    json_t *c = with_vecs_back(&vb);
    if (!json_equal(a, b) || !json_equal(a, c))
        fail_msg("differs for %.*s", (int)(n < 200 ? n : 200), doc);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    kvr_json_body_free(&vb);
}

static void same_as_jansson(const char *text)
{
    size_t n = strlen(text);
    char *doc = malloc(n ? n : 1);
    memcpy(doc, text, n);
    same_at(doc, n);
    free(doc);
}

static char *int_list(int n, long long base, const char *sep)
{
    char *s = malloc((size_t)n * 24 + 1);
    size_t o = 0;
    for (int i = 0; i < n; i++)
        o += (size_t)sprintf(s + o, "%s%lld", i ? sep : "", base + i * 7919);
    s[o] = 0;
    return s;
}

static void test_long_arrays_equal(void **state)
{
    (void)state;
    char *l = int_list(2000, 1, ",");
    char *neg = int_list(64, -1000000, " , ");
    size_t cap = 2 * strlen(l) + 2 * strlen(neg) + 1024;
    char *doc = malloc(cap);
    snprintf(doc, cap, "{\"model_name\":\"m\",\"token_ids\":[%s],\"x\":[[%s],{\"y\":[%s]}]}", l,
             neg, l);
    same_as_jansson(doc);
    json_t *j = kvr_json_load_body(doc, strlen(doc), 0, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "token_ids")), 2000);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "token_ids"), 1999)),
                     1 + 1999 * 7919);
    json_decref(j);
    /* Arrays inside strings stay strings. */
    snprintf(doc, cap, "{\"s\":\"[%s]\",\"t\":[%s]}", neg, neg);
    same_as_jansson(doc);
    /* Extremes of json_int_t, and values beyond it (jansson's error). */
    snprintf(doc, cap, "{\"a\":[9223372036854775807,-9223372036854775808,%s]}", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[9223372036854775808,%s]}", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[18446744073709551616,%s]}", neg);
    same_as_jansson(doc);
    /* Floats, leading zeros, '+', junk: jansson decides. */
    snprintf(doc, cap, "{\"a\":[%s,1.5]}", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[%s,1e3]}", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[%s,012]}", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[%s,+1]}", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[%s,]}", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[%s", neg);
    same_as_jansson(doc);
    snprintf(doc, cap, "{\"a\":[%s],\"a\":1}", neg); /* duplicate key */
    same_as_jansson(doc);
    snprintf(doc, cap, "[%s]", neg); /* top-level array */
    same_as_jansson(doc);
    json_t *any = kvr_json_load_body(doc + 1, strlen(doc) - 2, JSON_DECODE_ANY, NULL);
    assert_null(any); /* "-1000000 , ...": not one value */
    any = kvr_json_load_body(doc, strlen(doc), JSON_DECODE_ANY, NULL);
    json_t *want = json_loadb(doc, strlen(doc), JSON_DECODE_ANY, NULL);
    assert_true(json_equal(any, want));
    json_decref(any);
    json_decref(want);
    snprintf(doc, cap, "{\"a\":\"\\\"[%s]\"}", neg); /* escaped quote before */
    same_as_jansson(doc);
    free(doc);
    free(l);
    free(neg);
}

/* Non-negative integers of up to 7 digits (token ids) are read 8 bytes at
 * a time: every length 1..20, each followed by every kind of byte that can
 * end or break a number, also within 8 bytes of the end of the text, read
 * as jansson reads them. */
static void test_short_integers_read_as_jansson(void **state)
{
    (void)state;
    char *pos = int_list(40, 7, ",");
    static const char *const values[] = {
        "0", "7", "10", "99", "100", "4096", "65535", "123456", "9999999", "10000000",
        "12345678", "123456789", "4294967295", "4294967296", "9223372036854775807",
        "9223372036854775808", "18446744073709551615", "18446744073709551616", "00", "01",
        "0000001", "-0", "-5", "1234567e", "1234567.5", "1234567E2",
    };
    static const char *const after[] = {",1]}", "]}", " ]}", "\n,2]}", ".0]}", "e1]}",
                                        "x]}", "\xc3\xa9]}", "\x7f]}", "/]}", ":]}", "]"};
    char doc[1024];
    for (size_t v = 0; v < sizeof values / sizeof *values; v++)
        for (size_t a = 0; a < sizeof after / sizeof *after; a++) {
            /* the last element, then the first */
            snprintf(doc, sizeof doc, "{\"a\":[%s,%s%s", pos, values[v], after[a]);
            same_as_jansson(doc);
            snprintf(doc, sizeof doc, "{\"a\":[%s%s,%s]}", values[v],
                     after[a][0] == ',' ? "" : after[a], pos);
            same_as_jansson(doc);
        }
    /* The text ending right after a number: fewer than 8 bytes left. */
    for (size_t v = 0; v < sizeof values / sizeof *values; v++) {
        snprintf(doc, sizeof doc, "[%s,%s", pos, values[v]);
        same_as_jansson(doc);
        snprintf(doc, sizeof doc, "[%s,%s]", pos, values[v]);
        same_as_jansson(doc);
        json_t *a = json_loadb(doc, strlen(doc), JSON_DECODE_ANY, NULL);
        json_t *b = kvr_json_load_body(doc, strlen(doc), JSON_DECODE_ANY, NULL);
        assert_true((a == NULL) == (b == NULL));
        assert_true(!a || json_equal(a, b));
        json_decref(a);
        json_decref(b);
    }
    free(pos);
}

/* Runs of token ids are read 16 bytes at a time (json_scan.c int_lane):
 * random arrays of mostly 1-7 digit integers and now and then anything
 * that ends a run (8+ digits, leading zeros, signs, whitespace of each
 * kind, fractions, exponents, empty elements, other bytes, the integers
 * around 2^63 and 2^64), at every alignment, with breaks from every few
 * elements (runs shorter than a lane) to every few dozen, and bodies cut
 * short anywhere in the array, read as jansson reads them. */
static void test_token_runs_read_as_jansson(void **state)
{
    (void)state;
    static const char *const odd[] = {
        "00", "01", "0", "-3", "-0", "12345678", "123456789", " 5", "5 ", "\n7", "1.5", "",
        "1e2", "+1", "9999999", "1000000", "x", "\xc3\xa9", "\"a\"", "[1]", "\t3", "3\r", "-01",
        "1.", ".5", "-", "1E2", "1E+2", "1e-2", "0e0", "9223372036854775807",
        "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
        "18446744073709551615", "18446744073709551616", "99999999999999999999",
        "00000000000000000001"};
    unsigned seed = 777;
    char doc[4096];
    for (int it = 0; it < 4000; it++) {
        size_t o = 0;
        seed = seed * 1103515245u + 12345u;
        o += (size_t)sprintf(doc + o, "{\"%.*s\":[", (int)((seed >> 16) % 16), "aaaaaaaaaaaaaaaa");
        int n = 20 + (int)((seed >> 8) % 60);
        unsigned every = 2 + (unsigned)(it % 40); /* one element in `every` ends a run */
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = seed >> 8;
            if (i)
                doc[o++] = ',';
            if (it % 2 && r % every == 0)
                o += (size_t)sprintf(doc + o, "%s", odd[(r >> 6) % (sizeof odd / sizeof *odd)]);
            else
                o += (size_t)sprintf(doc + o, "%u", (r >> 3) % (1u << (1 + (r % 23))));
        }
        o += (size_t)sprintf(doc + o, "%s", it % 5 == 0 ? "]" : "]}");
        if (it % 7 == 3) {
            seed = seed * 1103515245u + 12345u;
            o = 1 + (seed >> 8) % o; /* cut short, likely inside a run */
        }
        doc[o] = 0;
        same_as_jansson(doc);
    }
}

/* Random mutations of a valid body: truncations and byte flips. */
static void test_mutations_equal(void **state)
{
    (void)state;
    char *neg = int_list(40, -50, ",");
    char *pos = int_list(40, 3, ",");
    char base[4096];
    snprintf(base, sizeof base, "{\"k\":[%s],\"s\":\"a[%s]\\\\\",\"n\":[[1,2],[%s]],\"p\":[%s]}",
             neg, neg, neg, pos);
    size_t n = strlen(base);
    unsigned seed = 12345;
    const char flips[] = "[]\",\\-0e.9 }";
    for (int it = 0; it < 3000; it++) {
        char doc[4096];
        memcpy(doc, base, n + 1);
        seed = seed * 1103515245u + 12345u;
        size_t pos = (seed >> 8) % n;
        if (it % 3 == 0)
            doc[pos] = 0;
        else
            doc[pos] = flips[(seed >> 20) % (sizeof flips - 1)];
        same_as_jansson(doc);
    }
    free(neg);
    free(pos);
}

/* body: "{...%s...}" with %s the token_ids array text. */
static void parse_vec(const char *fmt, const char *arr, kvr_json_body *b)
{
    char doc[8192];
    snprintf(doc, sizeof doc, fmt, arr);
    json_error_t e;
    if (kvr_json_body_parse(doc, strlen(doc), JSON_REJECT_DUPLICATES, &vec_opts, b, &e) != 0)
        fail_msg("%s: %s", doc, e.text);
}

static void test_vec_keys_only_top_level(void **state)
{
    (void)state;
    char *l = int_list(40, 3, ",");
    char fmt[1024];
    /* token_ids kept; the same key nested and a long array under another key
     * go back into the tree; the escaped spelling of the key is the key. */
    snprintf(fmt, sizeof fmt,
             "{\"model_name\":\"m\",\"x\":{\"token_ids\":[%s]},\"other\":[%s],"
             "\"token\\u005fids\":%%s}",
             l, l);
    kvr_json_body b;
    char arr[1024];
    snprintf(arr, sizeof arr, "[%s]", l);
    parse_vec(fmt, arr, &b);
    assert_int_equal(b.n_vecs, 1);
    size_t n;
    const json_int_t *v = kvr_json_body_ints(&b, "token_ids", &n);
    assert_non_null(v);
    assert_int_equal(n, 40);
    assert_int_equal(v[39], 3 + 39 * 7919);
    assert_null(json_object_get(b.root, "token_ids"));
    assert_int_equal(json_array_size(json_object_get(json_object_get(b.root, "x"), "token_ids")),
                     40);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(b.root, "other"), 39)),
                     3 + 39 * 7919);
    assert_string_equal(json_string_value(json_object_get(b.root, "model_name")), "m");
    assert_null(kvr_json_body_ints(&b, "other", &n));
    kvr_json_body_free(&b);
    free(l);
}

/* The u32 view is the same whether the scanner kept the array (long, plain
 * integers) or jansson parsed it (short, or anything unusual). */
static void expect_u32(const char *arr, kvr_json_vec_status want, size_t want_n, size_t want_bad)
{
    kvr_json_body b;
    parse_vec("{\"model_name\":\"m\",\"token_ids\":%s}", arr, &b);
    uint32_t *t;
    size_t n, bad;
    kvr_json_vec_status st = kvr_json_body_u32(&b, "token_ids", 100, &t, &n, &bad);
    if (st != want || (st == KVR_JSON_VEC_OK && n != want_n) ||
        (st == KVR_JSON_VEC_BAD_ELEM && bad != want_bad))
        fail_msg("%.80s: status %d n %zu bad %zu", arr, (int)st, n, bad);
    for (size_t i = 0; st == KVR_JSON_VEC_OK && i < n; i++)
        assert_int_equal(t[i], i == 1 ? 4294967295u : i * 3);
    free(t);
    kvr_json_body_free(&b);
}

/* An array of n elements i * 3 (element 1: 2^32 - 1) with element bad_at
 * replaced by bad. */
static void tokens(char *out, size_t cap, size_t n, size_t bad_at, const char *bad)
{
    size_t o = (size_t)snprintf(out, cap, "[");
    for (size_t i = 0; i < n; i++) {
        if (i == bad_at)
            o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? "," : "", bad);
        else if (i == 1)
            o += (size_t)snprintf(out + o, cap - o, ",4294967295");
        else
            o += (size_t)snprintf(out + o, cap - o, "%s%zu", i ? "," : "", i * 3);
    }
    snprintf(out + o, cap - o, "]");
}

static void test_u32_view_same_either_way(void **state)
{
    (void)state;
    char arr[4096];
    for (size_t n = 5; n <= 60; n += 55) { /* 5: jansson's tree, 60: kept */
        tokens(arr, sizeof arr, n, SIZE_MAX, NULL);
        expect_u32(arr, KVR_JSON_VEC_OK, n, 0);
        const char *bad[] = {"-1", "4294967296", "9223372036854775807", "-9223372036854775808",
                             "\"7\"", "null", "1.5", "2e3", "[1]"};
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            tokens(arr, sizeof arr, n, n - 2, bad[k]);
            expect_u32(arr, KVR_JSON_VEC_BAD_ELEM, 0, n - 2);
        }
    }
    tokens(arr, sizeof arr, 101, SIZE_MAX, NULL);
    expect_u32(arr, KVR_JSON_VEC_TOO_LONG, 0, 0);
    expect_u32("[]", KVR_JSON_VEC_OK, 0, 0);
    expect_u32("null", KVR_JSON_VEC_ABSENT, 0, 0);
    expect_u32("{}", KVR_JSON_VEC_NOT_ARRAY, 0, 0);
    expect_u32("\"[1,2]\"", KVR_JSON_VEC_NOT_ARRAY, 0, 0);
}

static uint64_t u64_at(json_t *v)
{
    uint64_t x = 0;
    if (!kvr_json_u64(v, false, &x))
        fail_msg("not a u64");
    return x;
}

/* jansson refuses integers above INT64_MAX; in u64 fields (a member's value
 * or its array's elements, at any depth) they read back exactly, anywhere
 * else the body fails as jansson fails it. */
static void test_u64_fields_above_int64(void **state)
{
    (void)state;
    char *l = int_list(40, 3, ",");
    char body[4096];
    snprintf(body, sizeof body,
             "{\"instance_id\" : 18446744073709551615,\"x\":{\"worker_id\":9223372036854775808},"
             "\"block_hashes\":[1,18446744073709551614,-3],"
             "\"allowed_workers\":[%s,18446744073709551613],"
             "\"mm_items\":[{\"start\":0,\"mm_hash\":18446744073709551612}],"
             "\"note\":\"mm_hash 18446744073709551615\",\"small\":5,\"id_str\":\"18446744073709551615\"}",
             l);
    json_error_t e;
    json_t *j = kvr_json_load_body(body, strlen(body), JSON_REJECT_DUPLICATES, &e);
    if (!j)
        fail_msg("%s", e.text);
    assert_true(u64_at(json_object_get(j, "instance_id")) == UINT64_MAX);
    assert_true(u64_at(json_object_get(json_object_get(j, "x"), "worker_id")) == 1ull << 63);
    json_t *bh = json_object_get(j, "block_hashes");
    assert_int_equal(json_integer_value(json_array_get(bh, 0)), 1);
    assert_true(u64_at(json_array_get(bh, 1)) == UINT64_MAX - 1);
    assert_int_equal(json_integer_value(json_array_get(bh, 2)), -3);
    json_t *aw = json_object_get(j, "allowed_workers"); /* a long array: the fast path */
    assert_int_equal(json_array_size(aw), 41);
    assert_int_equal(json_integer_value(json_array_get(aw, 39)), 3 + 39 * 7919);
    assert_true(u64_at(json_array_get(aw, 40)) == UINT64_MAX - 2);
    uint64_t mm;
    assert_true(kvr_json_body_u64(
        json_object_get(json_array_get(json_object_get(j, "mm_items"), 0), "mm_hash"), &mm));
    assert_true(mm == UINT64_MAX - 3);
    assert_string_equal(json_string_value(json_object_get(j, "note")), "mm_hash 18446744073709551615");
    assert_true(u64_at(json_object_get(j, "id_str")) == UINT64_MAX); /* decimal strings still */
    assert_false(kvr_json_body_u64(json_object_get(j, "id_str"), &mm));
    json_decref(j);
    free(l);
    /* A long u64 array mixing negatives and big values takes jansson's path. */
    char *neg = int_list(40, -100, ",");
    snprintf(body, sizeof body, "{\"block_hashes\":[%s,18446744073709551615]}", neg);
    j = kvr_json_load_body(body, strlen(body), 0, &e);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "block_hashes"), 0)),
                     -100);
    assert_true(u64_at(json_array_get(json_object_get(j, "block_hashes"), 40)) == UINT64_MAX);
    json_decref(j);
    /* Elsewhere, beyond u64, negative, a leading zero: jansson's answer. */
    snprintf(body, sizeof body, "{\"x\":[%s,18446744073709551615]}", neg);
    const char *fail[] = {"{\"model_name\":18446744073709551615}",
                          "{\"instance_id\":18446744073709551616}",
                          "{\"instance_id\":-18446744073709551615}",
                          "{\"instance_id\":018446744073709551615}",
                          "{\"token_ids\":[18446744073709551615]}",
                          "[18446744073709551615]",
                          "{\"a\":{\"b\":18446744073709551615},\"instance_id\":1}",
                          body};
    for (size_t i = 0; i < sizeof fail / sizeof *fail; i++) {
        json_error_t ej;
        assert_null(json_loadb(fail[i], strlen(fail[i]), 0, &ej));
        assert_null(kvr_json_load_body(fail[i], strlen(fail[i]), 0, &e));
        assert_string_equal(e.text, ej.text);
        kvr_json_body vb;
        assert_int_equal(kvr_json_body_parse(fail[i], strlen(fail[i]), 0, &vec_opts, &vb, &e),
                         -1);
        assert_string_equal(e.text, ej.text);
    }
    free(neg);
    /* A fraction or an exponent is a real, as in jansson. */
    const char *real = "{\"mm_hash\":18446744073709551615.5}";
    j = kvr_json_load_body(real, strlen(real), 0, &e);
    assert_true(json_real_value(json_object_get(j, "mm_hash")) > 1.8e19);
    json_decref(j);
    /* A client cannot forge a marker: any nonce it guesses reads as text. */
    const char *forged = "{\"instance_id\":\"\\u0001kvr0000000000000000u5\"}";
    j = kvr_json_load_body(forged, strlen(forged), 0, &e);
    assert_false(kvr_json_body_u64(json_object_get(j, "instance_id"), &mm));
    assert_false(kvr_json_u64(json_object_get(j, "instance_id"), false, &mm));
    json_decref(j);
}

/* A placeholder is text standing for an array or a big integer: where it
 * lands as an object key, the original body was not JSON. Before, the key
 * array passed as a string key (issue 10). */
static void test_placeholder_in_key_position_is_invalid(void **state)
{
    (void)state;
    char *l = int_list(32, 0, ",");
    char doc[2048];
    const char *shapes[] = {"{[%s]:1,\"instance_id\":77}", "{\"a\":1,[%s]:[%s]}",
                            "{\"a\":{[%s]:2}}", "[{[%s]:1}]"};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        snprintf(doc, sizeof doc, shapes[i], l, l);
        same_as_jansson(doc);
        assert_null(kvr_json_load_body(doc, strlen(doc), 0, NULL));
    }
    const char *keys[] = {"{18446744073709551615:1}", "{\"instance_id\":1,18446744073709551615:2}",
                          "{\"instance_id\":18446744073709551615 18446744073709551615}",
                          "{\"block_hashes\":[18446744073709551615 1]}"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_error_t e, ej;
        assert_null(json_loadb(keys[i], strlen(keys[i]), 0, &ej));
        assert_null(kvr_json_load_body(keys[i], strlen(keys[i]), 0, &e));
        assert_string_equal(e.text, ej.text);
    }
    free(l);
}

static kvr_server *one_worker_server(void)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    char err[256];
    kvr_server *srv = kvr_server_start(&cfg, err, sizeof err);
    assert_non_null(srv);
    assert_int_equal(kvr_server_register_json(srv,
                                              "{\"instance_id\": 1, \"endpoint\": "
                                              "\"tcp://127.0.0.1:1\", \"model_name\": \"m\", "
                                              "\"block_size\": 2}",
                                              err, sizeof err),
                     201);
    return srv;
}

/* POSTs body to path on srv; r gets the status and the JSON reply. */
static void post(kvr_server *srv, const char *path, const char *body, kvr_api_reply *r)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", kvr_server_port(srv), path);
    char *out = NULL;
    r->status = (int)th_http("POST", url, body, strlen(body), &out);
    r->body = json_loads(out, 0, NULL);
    free(out);
}

static void expect_query(kvr_server *srv, const char *body, int status, const char *needle)
{
    kvr_api_reply r = {0};
    post(srv, "/query", body, &r);
    const char *err = json_string_value(json_object_get(r.body, "error"));
    if (r.status != status || (needle && (!err || !strstr(err, needle))))
        fail_msg("%.120s: status %d error '%s' (want %d '%s')", body, r.status, err ? err : "",
                 status, needle ? needle : "");
    json_decref(r.body);
}

static void test_query_handler_names_bad_token(void **state)
{
    (void)state;
    kvr_server *srv = one_worker_server();
    char arr[4096], body[4200];
    for (size_t n = 5; n <= 60; n += 55) {
        tokens(arr, sizeof arr, n, SIZE_MAX, NULL);
        snprintf(body, sizeof body, "{\"model_name\":\"m\",\"token_ids\":%s}", arr);
        expect_query(srv, body, 200, NULL);
        const char *bad[] = {"-2", "4294967296", "3.5", "\"2\"", "1e3"};
        for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
            tokens(arr, sizeof arr, n, 3, bad[k]);
            snprintf(body, sizeof body, "{\"model_name\":\"m\",\"token_ids\":%s}", arr);
            expect_query(srv, body, 400, "token_ids[3]");
        }
    }
    /* An empty prompt: empty scores on /query (Dynamo's answer), 400 on /route. */
    expect_query(srv, "{\"model_name\":\"m\",\"token_ids\":[]}", 200, NULL);
    kvr_api_reply rr = {0};
    post(srv, "/route", "{\"model_name\":\"m\",\"request_id\":\"e\",\"token_ids\":[]}", &rr);
    assert_int_equal(rr.status, 400);
    assert_non_null(strstr(json_string_value(json_object_get(rr.body, "error")), "token_ids"));
    json_decref(rr.body);
    expect_query(srv, "{\"model_name\":\"m\",\"token_ids\":\"abc\"}", 400, "'token_ids' must be");
    expect_query(srv, "{\"model_name\":\"m\"}", 400, "'token_ids' must be");
    expect_query(srv, "{\"model_name\":7,\"token_ids\":[1]}", 400, "model_name");
    expect_query(srv, "{\"model_name\":\"nope\",\"token_ids\":[1]}", 404, "model_name");
    /* Beyond int64 jansson refuses the body (not named by index). */
    expect_query(srv, "{\"model_name\":\"m\",\"token_ids\":[99999999999999999999999]}", 400,
                 "too big integer");
    const char *malformed[] = {"{\"model_name\":\"m\",\"token_ids\":[1,2}",
                               "{\"model_name\":\"m\",\"token_ids\":[1],\"token_ids\":[2]}",
                               "{\"model_name\":\"m\",\"token_ids\":[1],}",
                               "{\"model_name\":\"m\" \"token_ids\":[1]}", ""};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++)
        expect_query(srv, malformed[i], 400, "malformed JSON body");
    tokens(arr, sizeof arr, 60, SIZE_MAX, NULL);
    snprintf(body, sizeof body, "{\"model_name\":\"m\",\"token_ids\":%s,\"token_ids\":[1]}", arr);
    expect_query(srv, body, 400, "duplicate");
    expect_query(srv, "[1,2]", 400, "JSON object");
    kvr_server_stop(srv);
}

static void test_route_handler_books_and_takes_u64_mm_hash(void **state)
{
    (void)state;
    kvr_server *srv = one_worker_server();
    kvr_api_reply r = {0};
    const char *route = "{\"model_name\":\"m\",\"request_id\":\"a\",\"token_ids\":[1,2,3,4]}";
    post(srv, "/route", route, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.body, "worker_id")), 1);
    json_decref(r.body);
    memset(&r, 0, sizeof r);
    post(srv, "/route", route, &r);
    assert_int_equal(r.status, 409);
    json_decref(r.body);
    /* A u64 identity above INT64_MAX as a JSON number routes and is
     * forwarded as its 16 hex digits (the sim sends them so). */
    memset(&r, 0, sizeof r);
    const char *mm = "{\"model_name\":\"m\",\"request_id\":\"b\",\"token_ids\":[1,2,3,4],"
                     "\"mm_items\":[{\"start\":2,\"end\":4,\"mm_hash\":18446744073709551614}]}";
    post(srv, "/route", mm, &r);
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.body, "forward_mm_hashes")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(r.body, "mm_hashes"), 0)),
                        "fffffffffffffffe");
    json_decref(r.body);
    kvr_server_stop(srv);
}

/* The writing side: markers become bare numbers, in objects and arrays,
 * and read back through the body parser as the same u64; text that merely
 * looks like a marker (no nonce) stays a string. */
static void test_u64_markers_written_as_numbers(void **state)
{
    (void)state;
    json_t *o = json_pack("{s:o,s:[o,I,o],s:s,s:o}", "instance_id",
                          kvr_json_u64_marker(UINT64_MAX), "allowed_workers",
                          kvr_json_u64_marker(9223372036854775808ull), (json_int_t)5,
                          kvr_json_u64_marker(0), "name", "\001kvru12", "worker_id",
                          json_integer(7));
    assert_non_null(o);
    char *text = kvr_json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text, "{\"allowed_workers\":[9223372036854775808,5,0],"
                              "\"instance_id\":18446744073709551615,\"name\":\"\\u0001kvru12\","
                              "\"worker_id\":7}");
    json_t *back = kvr_json_load_body(text, strlen(text), 0, NULL);
    uint64_t v = 0;
    assert_true(kvr_json_u64(json_object_get(back, "instance_id"), false, &v));
    assert_true(v == UINT64_MAX);
    assert_true(kvr_json_u64(json_array_get(json_object_get(back, "allowed_workers"), 0), false,
                             &v));
    assert_true(v == 9223372036854775808ull);
    json_decref(back);
    free(text);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_arrays_equal),
        cmocka_unit_test(test_short_integers_read_as_jansson),
        cmocka_unit_test(test_token_runs_read_as_jansson),
        cmocka_unit_test(test_mutations_equal),
        cmocka_unit_test(test_vec_keys_only_top_level),
        cmocka_unit_test(test_u32_view_same_either_way),
        cmocka_unit_test(test_u64_fields_above_int64),
        cmocka_unit_test(test_u64_markers_written_as_numbers),
        cmocka_unit_test(test_placeholder_in_key_position_is_invalid),
        cmocka_unit_test(test_query_handler_names_bad_token),
        cmocka_unit_test(test_route_handler_books_and_takes_u64_mm_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
