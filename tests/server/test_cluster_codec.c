/* The registrations bucket holds /register JSON written by
 * kvr_api_format_registration and read back by the /register parser
 * (api_registry.c): every field survives the round trip, equal
 * registrations give equal text, and every field the parser reads is one
 * the writer writes (checked against the parser's source, so a new
 * /register field cannot be left out of the bucket). */
#include "test_support.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static const char *full =
    "{\"instance_id\": \"18446744073709551615\", \"endpoint\": \"tcp://10.0.0.1:5557\", "
    "\"model_name\": \"kimi-k2.5\", \"block_size\": 64, \"routing_group\": \"g\", \"dp_rank\": 3, "
    "\"replay_endpoint\": \"tcp://10.0.0.1:5558\", \"topic\": \"kv\", \"lora_name\": \"ad\", "
    "\"mm_identity\": \"engine_wide\", \"accepts_mm_hashes\": true, \"is_eagle\": true, "
    "\"engine\": \"vllm\", \"image_token_id\": 151655, \"kv_events\": \"on\", "
    "\"prefill_tps\": 25000.5, \"max_total_num_tokens\": 523776}";

static void parse(const char *text, kvr_registration *reg, json_t **holder)
{
    *holder = json_loads(text, 0, NULL);
    assert_non_null(*holder);
    kvr_json_err e = {{0}};
    kvr_registration d = {.origin = KVR_ORIGIN_CLUSTER};
    d.settings.accepts_mm_hashes = -1;
    if (!kvr_api_parse_registration(*holder, &d, reg, &e))
        fail_msg("%s: %s", text, e.msg);
}

static void test_every_field_round_trips(void **state)
{
    (void)state;
    kvr_registration a, b;
    json_t *ha, *hb;
    parse(full, &a, &ha);
    char *text = kvr_api_format_registration(&a);
    assert_non_null(text);
    parse(text, &b, &hb);
    const kvr_worker_settings *x = &a.settings, *y = &b.settings;
    assert_true(x->worker_id == UINT64_MAX && y->worker_id == UINT64_MAX);
    assert_string_equal(b.endpoint, a.endpoint);
    assert_string_equal(y->model_name, x->model_name);
    assert_int_equal(y->block_size, 64);
    assert_string_equal(y->routing_group, "g");
    assert_int_equal(b.dp_rank, 3);
    assert_string_equal(b.replay_endpoint, a.replay_endpoint);
    assert_string_equal(b.topic, "kv");
    assert_string_equal(y->lora_name, "ad");
    assert_int_equal(y->mm_identity, KVR_MM_ENGINE_WIDE);
    assert_int_equal(y->accepts_mm_hashes, 1);
    assert_true(y->is_eagle);
    assert_int_equal(y->engine, x->engine);
    assert_true(y->has_image_token_id);
    assert_int_equal(y->image_token_id, 151655);
    assert_int_equal(y->kv_events, KVR_KV_EVENTS_ON);
    assert_true(y->prefill_tps == 25000.5);
    assert_true(y->max_total_num_tokens == 523776);
    /* the same registration, the same bytes */
    char *again = kvr_api_format_registration(&b);
    assert_string_equal(again, text);
    free(again);
    free(text);
    json_decref(ha);
    json_decref(hb);

    /* an engine that publishes nothing: no endpoint, kv_events kept */
    parse("{\"instance_id\": 5, \"model_name\": \"m\", \"block_size\": 16, "
          "\"kv_events\": false}",
          &a, &ha);
    text = kvr_api_format_registration(&a);
    assert_non_null(text);
    assert_null(strstr(text, "endpoint"));
    parse(text, &b, &hb);
    assert_null(b.endpoint);
    assert_int_equal(b.settings.kv_events, KVR_KV_EVENTS_OFF);
    free(text);
    json_decref(ha);
    json_decref(hb);

    /* defaults are written out: a minimal body and its explicit twin agree */
    kvr_registration m, e;
    json_t *hm, *he;
    parse("{\"instance_id\": 1, \"endpoint\": \"tcp://h:1\", \"model_name\": \"m\", "
          "\"block_size\": 16}",
          &m, &hm);
    parse("{\"instance_id\": 1, \"endpoint\": \"tcp://h:1\", \"model_name\": \"m\", "
          "\"block_size\": 16, \"routing_group\": \"default\", \"dp_rank\": 0, "
          "\"mm_identity\": \"legacy\", \"is_eagle\": false, \"engine\": \"sglang\", "
          "\"kv_events\": \"auto\"}",
          &e, &he);
    char *tm = kvr_api_format_registration(&m), *te = kvr_api_format_registration(&e);
    assert_string_equal(tm, te);
    assert_null(strstr(tm, "accepts_mm_hashes")); /* unset stays unset */
    free(tm);
    free(te);
    json_decref(hm);
    json_decref(he);
}

static void test_writer_covers_every_parsed_field(void **state)
{
    (void)state;
    size_t len;
    char *src = kvr_test_read_file(kvr_test_path("src/server/api_registry.c"), &len);
    assert_non_null(src);
    /* the parser and its helpers: from the first helper to the end of
     * kvr_api_parse_registration */
    char *start = strstr(src, "static bool parse_routing_hints(");
    char *parser = strstr(src, "bool kvr_api_parse_registration(");
    assert_non_null(start);
    assert_non_null(parser);
    assert_true(start < parser);
    char *end = strstr(parser, "\n}\n");
    assert_non_null(end);
    *end = 0;
    kvr_registration a;
    json_t *h;
    parse(full, &a, &h);
    char *text = kvr_api_format_registration(&a);
    regex_t re;
    assert_int_equal(regcomp(&re, "(kvr_json_get_[a-z0-9]+|json_object_get)\\(body, \"([a-z_]+)\"",
                             REG_EXTENDED),
                     0);
    regmatch_t mt[3];
    size_t fields = 0;
    for (const char *p = start; regexec(&re, p, 3, mt, 0) == 0; p += mt[0].rm_eo) {
        char key[64];
        snprintf(key, sizeof key, "\"%.*s\":", (int)(mt[2].rm_eo - mt[2].rm_so), p + mt[2].rm_so);
        if (!strstr(text, key))
            fail_msg("/register field %s is parsed but not written to the bucket", key);
        fields++;
    }
    assert_true(fields >= 16);
    regfree(&re);
    free(text);
    json_decref(h);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_field_round_trips),
        cmocka_unit_test(test_writer_covers_every_parsed_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
