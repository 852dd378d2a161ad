/* SPEC §5 "vLLM media identity" end to end: SPEC's worked example as a vLLM
 * engine publishes it (map-encoded events, extra_keys per block) over real
 * ZeroMQ into a running server, matched through HTTP from both sides
 * (/query_by_hash with the three hashes, /query and /route with the
 * request's media item), /route forwarding multi_modal_uuids, fail-closed
 * counting in /workers and /metrics, and engine / image_token_id as
 * effective settings (rule 9). */
#include "test_support.h"

#include <msgpuck.h>

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT 10000
#define P 151655u
#define ID_HEX "2f97f006c0e2eb2e000000000000000000000000000000000000000000000000"

static const uint64_t HASHES[3] = {7331677667249377233ull, 6677993274819731130ull,
                                   8927742194906953538ull};
static const char *const REQ_TOKENS =
    "[100,151652,151655,151655,151655,151655,151655,151655,151653,200,201,202]";

typedef struct {
    kvr_server *srv;
    char base[64];
    th_engine e;
} fixture;

static void start(fixture *f)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    f->srv = th_server_start(&cfg, f->base, sizeof f->base);
    assert_non_null(f->srv);
    th_engine_start(&f->e);
}

static void stop(fixture *f)
{
    th_engine_stop(&f->e);
    kvr_server_stop(f->srv);
}

static long reg(fixture *f, uint64_t id, const char *extra, json_t **reply)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": %llu, \"endpoint\": \"%s\", \"model_name\": \"qwen\", "
             "\"block_size\": %d%s}",
             (unsigned long long)id, f->e.endpoint, BS, extra ? extra : "");
    return th_register(f->base, body, reply);
}

/* The worked example's store as vLLM's publisher sends it: a map event
 * (msgspec tag=True, no array_like), extra_keys [[[id, 2]], [[id, -2]], nil]. */
static void send_worked_example(fixture *f, uint64_t seq)
{
    static uint64_t tok[12] = {100, 151652, P, P, P, P, P, P, 151653, 200, 201, 202};
    static const uint64_t engine_hashes[3] = {0x1001, 0x1002, 0x1003};
    static char extra[256];
    mp_format(extra, sizeof extra, "[[[%s %d]] [[%s %d]] NIL]", ID_HEX, 2, ID_HEX, -2);
    kvr_raw_event ev = th_store(engine_hashes, 3, 0, tok, BS);
    const char *p = extra;
    ev.n_extra_keys = mp_decode_array(&p);
    ev.extra_keys = p;
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_wire_encode_batch(&w, KVR_WIRE_VLLM, 1.0, &ev, 1, true, 0);
    /* map-encoded: the event is a map whose first key is "type" */
    const char *q = w.data;
    mp_decode_array(&q);
    mp_next(&q);
    mp_decode_array(&q);
    assert_int_equal(mp_typeof(*q), MP_MAP);
    th_engine_send(&f->e, seq, w.data, w.len, true);
    kvr_wbuf_free(&w);
}

/* /query score of worker id, rank 0, for the example's request with media
 * item mm_hash (a JSON value text, or NULL for none). */
static long query(fixture *f, uint64_t id, const char *mm_hash)
{
    char body[1024], w[24];
    snprintf(body, sizeof body,
             "{\"model_name\":\"qwen\",\"token_ids\":%s,"
             "\"mm_items\":[{\"start\":2,\"end\":8%s%s}]}",
             REQ_TOKENS, mm_hash ? ",\"mm_hash\":" : "", mm_hash ? mm_hash : "");
    long st;
    json_t *r = th_json("POST", f->base, "/query", body, &st);
    assert_int_equal(st, 200);
    snprintf(w, sizeof w, "%llu", (unsigned long long)id);
    json_t *x = json_object_get(json_object_get(json_object_get(r, "scores"), w), "0");
    long v = json_is_integer(x) ? (long)json_integer_value(x) : -1;
    json_decref(r);
    return v;
}

static void test_worked_example_both_sides(void **state)
{
    (void)state;
    fixture f;
    start(&f);
    json_t *r = NULL;
    assert_int_equal(reg(&f, 3, ", \"engine\": \"vllm\", \"image_token_id\": 151655", &r), 201);
    assert_string_equal(json_string_value(json_object_get(r, "engine")), "vllm");
    assert_int_equal(json_integer_value(json_object_get(r, "image_token_id")), P);
    json_decref(r);
    assert_true(th_engine_wait_sub(&f.e, WAIT));
    send_worked_example(&f, 0);
    /* event side: the three hashes of SPEC §5 */
    assert_int_equal(th_wait_score(f.base, "qwen", HASHES, 3, 3, 0, 3 * BS, WAIT), 3 * BS);
    /* request side: the same three, with the identity as 16 or 64 hex digits
     * (vLLM reads a 64-hex identity by its first 16) */
    assert_int_equal(query(&f, 3, "\"2f97f006c0e2eb2e\""), 3 * BS);
    assert_int_equal(query(&f, 3, "\"" ID_HEX "\""), 3 * BS);
    assert_int_equal(query(&f, 3, "3429473553062488878"), 3 * BS); /* the same u64 */
    /* another image: its pads differ from block 0 on; no identity: the text
     * before the image is less than a block */
    assert_int_equal(query(&f, 3, "\"2f97f006c0e2eb2f\""), -1);
    assert_int_equal(query(&f, 3, NULL), -1);

    /* /route forwards vLLM's identity field, each 16 digits and 48 zeros */
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model_name\":\"qwen\",\"request_id\":\"v1\",\"token_ids\":%s,"
             "\"mm_items\":[{\"start\":2,\"end\":8,\"mm_hash\":\"" ID_HEX "\"}]}",
             REQ_TOKENS);
    long st;
    r = th_json("POST", f.base, "/route", body, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_integer_value(json_object_get(r, "worker_id")), 3);
    assert_int_equal(json_integer_value(json_object_get(r, "overlap_tokens")), 3 * BS);
    assert_true(json_is_true(json_object_get(r, "forward_mm_hashes")));
    assert_string_equal(json_string_value(json_object_get(r, "engine")), "vllm");
    json_t *uuids = json_object_get(r, "multi_modal_uuids");
    assert_int_equal(json_array_size(uuids), 1);
    assert_string_equal(json_string_value(json_array_get(uuids, 0)), ID_HEX);
    assert_null(json_object_get(r, "mm_hashes"));
    json_decref(r);

    /* /workers shows the capabilities and a clean counter */
    json_t *ws = th_json("GET", f.base, "/workers", NULL, NULL);
    json_t *caps = json_object_get(json_array_get(ws, 0), "capabilities");
    assert_string_equal(json_string_value(json_object_get(caps, "engine")), "vllm");
    assert_int_equal(json_integer_value(json_object_get(caps, "image_token_id")), P);
    json_decref(ws);
    assert_int_equal(th_counter(f.base, 3, "qwen", "mm_unmapped_blocks"), 0);
    stop(&f);
}

/* A vLLM worker registered without image_token_id cannot map the media:
 * the store stops before the first media block, counted in /workers and
 * /metrics; nothing is hashed as plain placeholders. */
static void test_without_image_token_id_fails_closed(void **state)
{
    (void)state;
    fixture f;
    start(&f);
    assert_int_equal(reg(&f, 4, ", \"engine\": \"vllm\"", NULL), 201);
    assert_true(th_engine_wait_sub(&f.e, WAIT));
    send_worked_example(&f, 0);
    assert_int_equal(th_wait_counter(f.base, 4, "qwen", "mm_unmapped_blocks", 1, WAIT), 1);
    assert_int_equal(th_counter(f.base, 4, "qwen", "mm_stores_truncated"), 1);
    assert_int_equal(th_counter(f.base, 4, "qwen", "mm_blocks_excluded"), 3);
    assert_int_equal(th_score(f.base, "qwen", HASHES, 3, 4, 0), -1);
    char url[128], *m = NULL;
    snprintf(url, sizeof url, "%s/metrics", f.base);
    assert_int_equal(th_http("GET", url, NULL, 0, &m), 200);
    assert_non_null(strstr(m, "kvr_mm_unmapped_blocks_total 1\n"));
    free(m);
    stop(&f);
}

/* engine and image_token_id are effective settings: a change resets the
 * worker's state (SPEC §5 rule 9), the same values keep it. */
static void test_engine_and_image_token_id_reset(void **state)
{
    (void)state;
    fixture f;
    start(&f);
    const char *vllm = ", \"engine\": \"vllm\", \"image_token_id\": 151655";
    assert_int_equal(reg(&f, 5, vllm, NULL), 201);
    assert_true(th_engine_wait_sub(&f.e, WAIT));
    send_worked_example(&f, 0);
    assert_int_equal(th_wait_score(f.base, "qwen", HASHES, 3, 5, 0, 3 * BS, WAIT), 3 * BS);
    json_t *r = NULL;
    assert_int_equal(reg(&f, 5, vllm, &r), 200);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "unchanged");
    json_decref(r);
    assert_int_equal(th_score(f.base, "qwen", HASHES, 3, 5, 0), 3 * BS);
    assert_int_equal(reg(&f, 5, ", \"engine\": \"vllm\", \"image_token_id\": 151654", &r), 200);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "reset");
    json_decref(r);
    assert_int_equal(th_score(f.base, "qwen", HASHES, 3, 5, 0), -1);
    send_worked_example(&f, 1);
    /* the same store under the new id: media without a run of 151654 */
    assert_int_equal(th_wait_counter(f.base, 5, "qwen", "mm_unmapped_blocks", 1, WAIT), 1);
    assert_int_equal(reg(&f, 5, vllm, &r), 200);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "reset");
    json_decref(r);
    assert_int_equal(reg(&f, 5, ", \"image_token_id\": 151655", &r), 200); /* engine sglang */
    assert_string_equal(json_string_value(json_object_get(r, "result")), "reset");
    json_decref(r);
    /* bad values name the field */
    const char *bad[][2] = {{", \"engine\": \"trt\"", "engine"},
                            {", \"image_token_id\": 4294967295", "image_token_id"},
                            {", \"image_token_id\": -1", "image_token_id"},
                            {", \"engine\": 1", "engine"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(reg(&f, 6, bad[i][0], &r), 400);
        assert_non_null(strstr(json_string_value(json_object_get(r, "error")), bad[i][1]));
        json_decref(r);
    }
    stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example_both_sides),
        cmocka_unit_test(test_without_image_token_id_fails_closed),
        cmocka_unit_test(test_engine_and_image_token_id_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
