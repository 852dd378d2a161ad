/* The engine-response validators (src/discovery/sglang.c, vllm.c, edge.c)
 * on the sample answers of fixtures/discovery/: each valid file reads as
 * cases.json says (endpoints offset by rank, wildcard hosts replaced by the
 * engine's, replay endpoints, block size = page x dcp, Eagle, HiCache),
 * each invalid one is refused with the field named; plus the rules that
 * need no file: engine URLs and ids, hosts, tcp endpoints, the Kimi rule,
 * Prometheus labels, and that no truncation or garbage of a valid answer
 * crashes a validator. */
#include "test_support.h"

#include <string.h>
#include <xxhash.h>

#include "discovery/discovery_internal.h"

static kvr_doc_reader reader_of(const char *doc)
{
    if (strcmp(doc, "sglang_server_info") == 0)
        return kvr_sglang_read_server_info;
    if (strcmp(doc, "sglang_model_info") == 0)
        return kvr_sglang_read_model_info;
    if (strcmp(doc, "vllm_sources") == 0)
        return kvr_vllm_read_sources;
    if (strcmp(doc, "vllm_metrics") == 0)
        return kvr_vllm_read_metrics;
    if (strcmp(doc, "vllm_models") == 0)
        return kvr_vllm_read_models;
    fail_msg("unknown doc %s", doc);
    return NULL;
}

static void expect_str_list(const json_t *want, const kvr_reading *r, const char *which)
{
    if (!want)
        return;
    assert_int_equal(json_array_size(want), r->n_ranks);
    for (size_t i = 0; i < r->n_ranks; i++) {
        const char *got = strcmp(which, "endpoints") == 0          ? r->ranks[i].endpoint
                          : strcmp(which, "replay_endpoints") == 0 ? r->ranks[i].replay_endpoint
                                                                   : r->ranks[i].topic;
        assert_string_equal(got, json_string_value(json_array_get(want, i)));
        assert_int_equal(r->ranks[i].dp_rank, i);
    }
}

static void check_expect(const json_t *ex, const kvr_reading *r)
{
    const kvr_engine_reading_info *in = &r->info;
    json_t *v;
    if ((v = json_object_get(ex, "publishes")))
        assert_int_equal(in->publishes, json_is_true(v));
    if ((v = json_object_get(ex, "model_name")))
        assert_string_equal(in->model_name, json_string_value(v));
    if ((v = json_object_get(ex, "alt_model")))
        assert_string_equal(r->alt_model, json_string_value(v));
    if ((v = json_object_get(ex, "model_type")))
        assert_string_equal(in->model_type, json_string_value(v));
    if ((v = json_object_get(ex, "version")))
        assert_string_equal(in->version, json_string_value(v));
    if ((v = json_object_get(ex, "speculative_algorithm")))
        assert_string_equal(in->speculative_algorithm, json_string_value(v));
    if ((v = json_object_get(ex, "block_size")))
        assert_int_equal(in->block_size, json_integer_value(v));
    if ((v = json_object_get(ex, "dp_size")))
        assert_int_equal(in->dp_size, json_integer_value(v));
    if ((v = json_object_get(ex, "is_eagle")))
        assert_int_equal(in->is_eagle, json_is_true(v));
    if ((v = json_object_get(ex, "hicache")))
        assert_int_equal(in->hicache, json_is_true(v));
    if ((v = json_object_get(ex, "max_total_num_tokens")))
        assert_int_equal(in->max_total_num_tokens, json_integer_value(v));
    if ((v = json_object_get(ex, "silent_reason_contains")))
        assert_non_null(strstr(in->silent_reason, json_string_value(v)));
    expect_str_list(json_object_get(ex, "endpoints"), r, "endpoints");
    expect_str_list(json_object_get(ex, "replay_endpoints"), r, "replay_endpoints");
    expect_str_list(json_object_get(ex, "topics"), r, "topics");
}

static char *fixture(const char *file, size_t *len)
{
    char rel[256];
    snprintf(rel, sizeof rel, "fixtures/discovery/%s", file);
    char *body = kvr_test_read_file(kvr_test_path(rel), len);
    assert_non_null(body);
    return body;
}

static void test_every_fixture_reads_as_cases_json_says(void **state)
{
    (void)state;
    json_t *cases = kvr_test_load_json("fixtures/discovery/cases.json");
    size_t i, checked = 0, refused = 0;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *file = json_string_value(json_object_get(c, "file"));
        size_t len;
        char *body = fixture(file, &len);
        kvr_reading r;
        memset(&r, 0, sizeof r);
        char err[KVR_DISC_ERR] = "";
        int rc = reader_of(json_string_value(json_object_get(c, "doc")))(
            body, len, json_string_value(json_object_get(c, "host")), &r, err, sizeof err);
        const char *want_err = json_string_value(json_object_get(c, "error_contains"));
        if (want_err) {
            if (rc == 0 || !strstr(err, want_err))
                fail_msg("%s: want an error naming '%s', got rc %d '%s'", file, want_err, rc, err);
            refused++;
        } else {
            if (rc != 0)
                fail_msg("%s: %s", file, err);
            check_expect(json_object_get(c, "expect"), &r);
            checked++;
        }
        kvr_reading_free(&r);
        free(body);
    }
    assert_int_equal(checked, 12);
    assert_int_equal(refused, 7);
    json_decref(cases);
}

/* The kind's finish rule: Kimi model types get mm_identity auto and
 * accepts_mm_hashes false; others keep the SPEC §5 defaults. */
static void test_kimi_model_info_gives_auto_identity_and_no_hashes(void **state)
{
    (void)state;
    const char *files[] = {"sglang_model_info_kimi_k25.json", "sglang_model_info_qwen.json"};
    for (int k = 0; k < 2; k++) {
        kvr_reading r;
        memset(&r, 0, sizeof r);
        size_t len;
        char *body = fixture("sglang_server_info_dp2.json", &len), err[KVR_DISC_ERR];
        assert_int_equal(kvr_sglang_read_server_info(body, len, "h", &r, err, sizeof err), 0);
        free(body);
        body = fixture(files[k], &len);
        assert_int_equal(kvr_sglang_read_model_info(body, len, "h", &r, err, sizeof err), 0);
        free(body);
        assert_int_equal(kvr_sglang_kind.finish(&r, err, sizeof err), 0);
        assert_int_equal(r.info.mm_identity, k == 0 ? KVR_MM_AUTO : KVR_MM_LEGACY);
        assert_int_equal(r.info.accepts_mm_hashes, k == 0 ? 0 : -1);
        assert_string_equal(r.info.model_name, "qwen2.5-7b"); /* served_model_name wins */
        kvr_reading_free(&r);
    }
    assert_true(kvr_sglang_is_kimi("kimi_k2"));
    assert_true(kvr_sglang_is_kimi("kimi_k25"));
    assert_false(kvr_sglang_is_kimi("kimi"));
    assert_false(kvr_sglang_is_kimi("qwen2_5_vl"));
}

static void test_sglang_model_falls_back_to_model_path_and_model_info(void **state)
{
    (void)state;
    const char *body = "{\"served_model_name\": null, \"model_path\": \"/m/Llama-3\", "
                       "\"kv_events\": null}";
    kvr_reading r;
    memset(&r, 0, sizeof r);
    char err[KVR_DISC_ERR];
    assert_int_equal(kvr_sglang_read_server_info(body, strlen(body), "h", &r, err, sizeof err), 0);
    assert_string_equal(r.info.model_name, "/m/Llama-3");
    kvr_reading_free(&r);
    const char *empty = "{\"kv_events\": null}", *mi = "{\"model_path\": \"from-model-info\"}";
    assert_int_equal(kvr_sglang_read_server_info(empty, strlen(empty), "h", &r, err, sizeof err),
                     0);
    assert_int_equal(kvr_sglang_read_model_info(mi, strlen(mi), "h", &r, err, sizeof err), 0);
    assert_int_equal(kvr_sglang_kind.finish(&r, err, sizeof err), 0);
    assert_string_equal(r.info.model_name, "from-model-info");
    kvr_reading_free(&r);
}

static void test_sglang_refuses_what_it_cannot_use(void **state)
{
    (void)state;
    const struct {
        const char *body, *field;
    } bad[] = {
        {"[]", "object"},
        {"{\"kv_events\": 7}", "kv_events"},
        {"{\"kv_events\": {\"publisher\": \"zmq\", \"endpoint_host\": \"*\"}}", "required"},
        {"{\"kv_events\": {\"publisher\": \"zmq\", \"endpoint_host\": \"*\", "
         "\"endpoint_port_base\": 0, \"block_size\": 16}}",
         "endpoint_port_base"},
        {"{\"kv_events\": {\"publisher\": \"zmq\", \"endpoint_host\": \"a b\", "
         "\"endpoint_port_base\": 5557, \"block_size\": 16}}",
         "endpoint_host"},
        {"{\"kv_events\": {\"publisher\": \"zmq\", \"endpoint_host\": \"*\", "
         "\"endpoint_port_base\": 5557, \"block_size\": 70000}}",
         "block_size"},
        {"{\"kv_events_config\": \"{not json\"}", "kv_events_config"},
        {"{\"kv_events_config\": \"[1]\"}", "kv_events_config"},
        {"{\"kv_events_config\": 5}", "kv_events_config"},
        {"{\"kv_events_config\": \"{\\\"publisher\\\": \\\"zmq\\\"}\"}", "page_size"},
        {"{\"page_size\": 16, \"kv_events_config\": \"{\\\"publisher\\\": \\\"zmq\\\", "
         "\\\"replay_endpoint\\\": \\\"tcp://*:99999\\\"}\"}",
         "replay_endpoint"},
        {"{\"served_model_name\": 3, \"kv_events\": null}", "served_model_name"},
        {"{\"enable_hierarchical_cache\": \"yes\", \"kv_events\": null}",
         "enable_hierarchical_cache"},
        {"{\"a\": 1, \"a\": 2}", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvr_reading r;
        memset(&r, 0, sizeof r);
        char err[KVR_DISC_ERR] = "";
        int rc = kvr_sglang_read_server_info(bad[i].body, strlen(bad[i].body), "h", &r, err,
                                             sizeof err);
        if (rc == 0 || !strstr(err, bad[i].field))
            fail_msg("case %zu: want an error naming '%s', got rc %d '%s'", i, bad[i].field, rc,
                     err);
        kvr_reading_free(&r);
    }
    /* A publisher other than zmq, an ipc endpoint: valid answers that say
     * nothing can be subscribed to. */
    const char *silent[] = {
        "{\"kv_events\": {\"publisher\": \"nats\"}}",
        "{\"page_size\": 16, \"kv_events_config\": \"{\\\"publisher\\\": \\\"zmq\\\", "
        "\\\"endpoint\\\": \\\"ipc:///tmp/kv\\\"}\"}",
        "{\"kv_events_config\": \"{\\\"publisher\\\": \\\"null\\\"}\"}",
        "{}",
    };
    for (size_t i = 0; i < sizeof silent / sizeof silent[0]; i++) {
        kvr_reading r;
        memset(&r, 0, sizeof r);
        char err[KVR_DISC_ERR] = "";
        assert_int_equal(
            kvr_sglang_read_server_info(silent[i], strlen(silent[i]), "h", &r, err, sizeof err),
            0);
        assert_false(r.info.publishes);
        assert_true(r.info.silent_reason[0] != 0);
        kvr_reading_free(&r);
    }
}

static void capacity_is(size_t i, const kvr_reading *r, uint64_t tokens, bool ignored)
{
    if (r->info.max_total_num_tokens != tokens || r->capacity_ignored != ignored)
        fail_msg("capacity case %zu: %llu, ignored %d", i,
                 (unsigned long long)r->info.max_total_num_tokens, r->capacity_ignored);
}

/* A capacity that is no count in range costs the engine nothing else, as
 * vLLM's num_gpu_blocks (test_vllm_metrics_label_parsing): the answer reads,
 * with its model, block size and publisher, the capacity unknown and
 * flagged; absent or null stays unknown and unflagged. */
static void test_sglang_bad_capacity_leaves_it_unknown(void **state)
{
    (void)state;
    const struct {
        const char *value; /* NULL: absent */
        uint64_t tokens;
        bool ignored;
    } caps[] = {
        {"65536", 65536, false},
        {"1099511627776", KVR_MAX_KV_CAPACITY_TOKENS, false},
        {NULL, 0, false},
        {"null", 0, false},
        {"\"12x\"", 0, true},
        {"\"65536\"", 0, true},
        {"-5", 0, true},
        {"0", 0, true},
        {"1099511627777", 0, true},
        {"65536.5", 0, true},
        {"[65536]", 0, true},
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        char body[512], field[64] = "";
        if (caps[i].value)
            snprintf(field, sizeof field, "\"max_total_num_tokens\": %s, ", caps[i].value);
        snprintf(body, sizeof body,
                 "{\"served_model_name\": \"m\", %s\"kv_events\": {\"publisher\": \"zmq\", "
                 "\"endpoint_host\": \"*\", \"endpoint_port_base\": 5557, \"block_size\": 16}}",
                 field);
        kvr_reading r;
        memset(&r, 0, sizeof r);
        char err[KVR_DISC_ERR] = "";
        int rc = kvr_sglang_read_server_info(body, strlen(body), "h", &r, err, sizeof err);
        if (rc != 0)
            fail_msg("capacity case %zu: refused: %s", i, err);
        assert_string_equal(r.info.model_name, "m");
        assert_true(r.info.publishes);
        assert_int_equal(r.info.block_size, 16);
        assert_int_equal(r.n_ranks, 1);
        assert_string_equal(r.ranks[0].endpoint, "tcp://h:5557");
        capacity_is(i, &r, caps[i].tokens, caps[i].ignored);
        kvr_reading_free(&r);
    }
}

static void test_vllm_metrics_label_parsing(void **state)
{
    (void)state;
    const struct {
        const char *text;
        int rc;
        uint32_t bs;
    } cases[] = {
        {"vllm:cache_config_info{block_size=\"32\"} 1.0\n", 0, 32},
        {"vllm:cache_config_info{a=\"x\\\"y,block_size=\\\"8\",block_size=\"64\"} 1\n", 0, 64},
        {"vllm:cache_config_info{block_size=\"16\"} 1\nvllm:cache_config_info{block_size=\"16\"} 1",
         0, 16},
        {"vllm:cache_config_info{block_size=\"16\"} 1\nvllm:cache_config_info{block_size=\"32\"} 1",
         -1, 0},
        {"vllm:cache_config_info{block_size=\"0\"} 1\n", -1, 0},
        {"vllm:cache_config_info{block_size=\"16x\"} 1\n", -1, 0},
        {"vllm:cache_config_info{block_size=\"99999999999999999999\"} 1\n", -1, 0},
        {"vllm:cache_config_info{block_size=\"16", -1, 0},
        {"# vllm:cache_config_info{block_size=\"16\"} 1\n", 0, 0},
        {"", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvr_reading r;
        memset(&r, 0, sizeof r);
        char err[KVR_DISC_ERR] = "";
        int rc = kvr_vllm_read_metrics(cases[i].text, strlen(cases[i].text), "h", &r, err,
                                       sizeof err);
        if (rc != cases[i].rc || (rc == 0 && r.info.block_size != cases[i].bs))
            fail_msg("case %zu: rc %d bs %u (%s)", i, rc, r.info.block_size, err);
    }
    /* num_gpu_blocks x block_size is the capacity; "None", absent or garbage
     * leaves it unknown without refusing the block size, garbage flagged for
     * the capacities_ignored counter */
    const struct {
        const char *text;
        uint64_t tokens;
        bool ignored;
    } caps[] = {
        {"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n", 16000, false},
        {"vllm:cache_config_info{num_gpu_blocks=\"None\",block_size=\"16\"} 1\n", 0, false},
        {"vllm:cache_config_info{block_size=\"16\"} 1\n", 0, false},
        {"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"12x\"} 1\n", 0, true},
        {"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"\"} 1\n", 0, true},
        {"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"0\"} 1\n", 0, true},
        {"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"999999999999999\"} 1\n", 0,
         true},
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        kvr_reading r;
        memset(&r, 0, sizeof r);
        char err[KVR_DISC_ERR] = "";
        assert_int_equal(kvr_vllm_read_metrics(caps[i].text, strlen(caps[i].text), "h", &r, err,
                                               sizeof err),
                         0);
        assert_int_equal(r.info.block_size, 16);
        capacity_is(i, &r, caps[i].tokens, caps[i].ignored);
    }
}

static void test_urls_hosts_and_endpoints(void **state)
{
    (void)state;
    char out[KVR_ENGINE_URL_MAX], err[256], host[256];
    assert_true(kvr_engine_url_normalize("http://10.0.0.1:30000//", out, sizeof out, err,
                                         sizeof err));
    assert_string_equal(out, "http://10.0.0.1:30000");
    const char *url = "http://sglang-0.pods:30000";
    assert_int_equal(kvr_engine_worker_id(url), XXH3_64bits_withSeed(url, strlen(url), 0));
    const char *bad[] = {"", "10.0.0.1:30000", "ftp://h/", "http://", "http://h:1/?q=1",
                         "http://a b:1", "file:///etc/passwd"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (kvr_engine_url_normalize(bad[i], out, sizeof out, err, sizeof err))
            fail_msg("'%s' accepted", bad[i]);
    unsigned port;
    assert_true(kvr_edge_split_tcp("tcp://*:5557", host, sizeof host, &port));
    assert_string_equal(host, "*");
    assert_int_equal(port, 5557);
    assert_true(kvr_edge_split_tcp("tcp://[::1]:7", host, sizeof host, &port));
    assert_string_equal(host, "::1");
    const char *bad_ep[] = {"tcp://h:0", "tcp://h:65536", "tcp://h:", "tcp://h", "udp://h:1",
                            "tcp://h/x:1", "tcp://[::1:5", "tcp://h:5x", "tcp://a b:1"};
    for (size_t i = 0; i < sizeof bad_ep / sizeof bad_ep[0]; i++)
        if (kvr_edge_split_tcp(bad_ep[i], host, sizeof host, &port))
            fail_msg("'%s' accepted", bad_ep[i]);
    assert_true(kvr_edge_tcp_endpoint(out, sizeof out, "*", "fd00::2", 9));
    assert_string_equal(out, "tcp://[fd00::2]:9");
    assert_true(kvr_edge_tcp_endpoint(out, sizeof out, "0.0.0.0", "[fd00::2]", 9));
    assert_string_equal(out, "tcp://[fd00::2]:9");
    assert_true(kvr_edge_tcp_endpoint(out, sizeof out, "10.1.1.1", "h", 9));
    assert_string_equal(out, "tcp://10.1.1.1:9");
}

/* Every prefix of every valid fixture, and every single-byte corruption of
 * the first kilobyte of one, through every validator: none crashes (ASan
 * checks the reads), and a refused one always says why. */
static void test_truncated_and_corrupted_answers_never_crash(void **state)
{
    (void)state;
    const char *files[] = {"sglang_server_info_dp2.json", "vllm_kv_event_sources.json",
                           "vllm_metrics.txt", "vllm_v1_models.json",
                           "sglang_model_info_kimi_k25.json"};
    kvr_doc_reader readers[] = {kvr_sglang_read_server_info, kvr_sglang_read_model_info,
                                kvr_vllm_read_sources, kvr_vllm_read_metrics,
                                kvr_vllm_read_models};
    kvr_doc_reader own[] = {kvr_sglang_read_server_info, kvr_vllm_read_sources,
                            kvr_vllm_read_metrics, kvr_vllm_read_models,
                            kvr_sglang_read_model_info};
    size_t refused = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        size_t len;
        char *body = fixture(files[f], &len);
        for (size_t cut = 0; cut < len; cut += 7)
            for (size_t k = 0; k < 5; k++) {
                kvr_reading r;
                memset(&r, 0, sizeof r);
                char err[KVR_DISC_ERR] = "";
                if (readers[k](body, cut, "h", &r, err, sizeof err) != 0) {
                    assert_true(err[0] != 0);
                    refused++;
                }
                kvr_reading_free(&r);
            }
        for (size_t at = 0; at < len && at < 1024; at++) {
            char saved = body[at];
            body[at] = (char)(saved ^ 0x5a);
            kvr_reading r;
            memset(&r, 0, sizeof r);
            char err[KVR_DISC_ERR] = "";
            if (own[f](body, len, "h", &r, err, sizeof err) != 0)
                assert_true(err[0] != 0);
            kvr_reading_free(&r);
            body[at] = saved;
        }
        free(body);
    }
    assert_true(refused > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_fixture_reads_as_cases_json_says),
        cmocka_unit_test(test_kimi_model_info_gives_auto_identity_and_no_hashes),
        cmocka_unit_test(test_sglang_model_falls_back_to_model_path_and_model_info),
        cmocka_unit_test(test_sglang_refuses_what_it_cannot_use),
        cmocka_unit_test(test_sglang_bad_capacity_leaves_it_unknown),
        cmocka_unit_test(test_vllm_metrics_label_parsing),
        cmocka_unit_test(test_urls_hosts_and_endpoints),
        cmocka_unit_test(test_truncated_and_corrupted_answers_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
