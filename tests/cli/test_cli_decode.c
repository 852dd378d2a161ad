/* `kvrouter decode` and `kvrouter hash` as a user runs them: the built
 * binary on fixture hex and hash vectors, asserting output lines and exit
 * codes. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char out[65536];
    int status;
} run_result;

/* Runs `kvrouter ARGS` through the shell; stdout captured, stderr dropped
 * unless the args redirect it. */
static void run(run_result *r, const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s", kvr_test_binary(), args);
    char *out = kvr_test_run(cmd, &r->status);
    snprintf(r->out, sizeof r->out, "%s", out);
    free(out);
}

static json_t *fixture_payload(json_t *root, const char *name)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(root, "payloads"), i, p) {
        if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0)
            return p;
    }
    fail_msg("no payload %s", name);
    return NULL;
}

/* decode --hex of a named fixture payload */
static void run_fixture(run_result *r, const char *name)
{
    json_t *root = kvr_test_load_json("fixtures/wire/payloads.json");
    char args[4096];
    snprintf(args, sizeof args, "decode --hex %s",
             json_string_value(json_object_get(fixture_payload(root, name), "hex")));
    json_decref(root);
    run(r, args);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* `kvrouter ARGS` exits with status and prints exactly out */
static void expect_run(const char *args, int status, const char *out)
{
    run_result r;
    run(&r, args);
    assert_int_equal(r.status, status);
    assert_string_equal(r.out, out);
}

/* each command line fails with one "kvrouter CMD: ..." line and exit 2 */
static void expect_usage_errors(const char *prefix, const char *const *bad, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char args[256];
        run_result r;
        snprintf(args, sizeof args, "%s 2>&1", bad[i]);
        run(&r, args);
        assert_int_equal(r.status, 2);
        assert_int_equal(count_lines(r.out), 1);
        assert_true(strncmp(r.out, prefix, strlen(prefix)) == 0);
    }
}

static void test_decode_wide_tokens_exact(void **state)
{
    (void)state;
    run_result r;
    run_fixture(&r, "sglang_kimi_wide_tokens");
    assert_int_equal(r.status, 0);
    assert_string_equal(
        r.out, "{\"type\":\"stored\",\"dp_rank\":0,\"tier\":\"gpu\",\"parent\":null,"
               "\"block_hashes\":[18446744073709551611,6,7],\"token_ids\":[11,12,13,14,15,16,"
               "17,18,4294967303,4611686018427387915,1099511627779,9223372036854775792],"
               "\"block_size\":4,\"eagle\":false,\"lora_name\":null,\"cache_salt\":null,"
               "\"group_idx\":null,\"kv_cache_spec_kind\":null,"
               "\"kv_cache_spec_sliding_window\":null,\"locality\":null,\"lora_id\":null,"
               "\"session_id\":null}\n");
}

/* every line is a JSON object whose fields match the fixture's meaning */
static void test_decode_lines_are_json(void **state)
{
    (void)state;
    run_result r;
    run_fixture(&r, "sglang_metadata_map_pos7");
    assert_int_equal(r.status, 0);
    assert_int_equal(count_lines(r.out), 1);
    json_error_t err;
    json_t *j = json_loads(r.out, 0, &err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "stored");
    assert_string_equal(json_string_value(json_object_get(j, "tier")), "cpu");
    assert_true(json_is_null(json_object_get(j, "dp_rank")));
    assert_int_equal(json_integer_value(json_object_get(j, "parent")), 100);
    assert_string_equal(json_string_value(json_object_get(j, "cache_salt")), "tenant-a");
    assert_string_equal(json_string_value(json_object_get(j, "session_id")), "s1");
    assert_true(json_is_null(json_object_get(j, "lora_name")));
    assert_int_equal(json_array_size(json_object_get(j, "token_ids")), 8);
    json_decref(j);

    run_fixture(&r, "vllm_map_stored");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "\"block_hashes\":[15760518052499183552]"));
    assert_non_null(strstr(r.out, "\"group_idx\":0,\"kv_cache_spec_kind\":\"full_attention\""));

    run_fixture(&r, "eagle_bigram");
    assert_non_null(strstr(r.out, "\"token_ids\":[1,2,3,4,5,6,7,8,9],\"block_size\":4,"
                                  "\"eagle\":true"));
    run_fixture(&r, "sglang_removed_disk");
    assert_string_equal(r.out, "{\"type\":\"removed\",\"dp_rank\":0,\"tier\":\"disk\","
                               "\"block_hashes\":[100,200],\"group_idx\":null,"
                               "\"kv_cache_spec_kind\":null,"
                               "\"kv_cache_spec_sliding_window\":null,\"locality\":null}\n");
    run_fixture(&r, "batch_two_fields");
    assert_string_equal(r.out, "{\"type\":\"cleared\",\"dp_rank\":null}\n");
}

static void test_decode_dropped_events(void **state)
{
    (void)state;
    run_result r;
    run_fixture(&r, "batch_one_bad_event");
    assert_int_equal(r.status, 0);
    assert_int_equal(count_lines(r.out), 3);
    const char *second = strchr(r.out, '\n') + 1;
    assert_true(strncmp(r.out, "{\"type\":\"stored\"", 16) == 0);
    assert_true(strncmp(second, "{\"type\":\"dropped\",\"reason\":\"unknown_event\"}\n", 44) == 0);
    assert_non_null(strstr(second + 44, "{\"type\":\"removed\""));

    run_fixture(&r, "unknown_medium");
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "{\"type\":\"dropped\",\"reason\":\"unknown_tier\"}\n");
}

static void test_decode_malformed_batch(void **state)
{
    (void)state;
    run_result r;
    /* truncated: reason on stderr, nothing on stdout, exit 2 */
    expect_run("decode --hex 93cb40 2>&1", 2, "kvrouter decode: malformed batch: invalid_msgpack\n");
    expect_run("decode --hex 05 2>&1", 2, "kvrouter decode: malformed batch: bad_shape\n");
    run(&r, "decode --hex 05 2>/dev/null");
    assert_string_equal(r.out, "");
}

static void test_decode_file_and_stdin(void **state)
{
    (void)state;
    char path[] = "/tmp/kvr_cli_decode_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    /* [2.0, [["AllBlocksCleared"]], 7] */
    static const char bytes[] = "\x93\xcb\x40\x00\x00\x00\x00\x00\x00\x00\x91\x91\xb0"
                                "AllBlocksCleared\x07";
    FILE *f = fdopen(fd, "wb");
    fwrite(bytes, 1, sizeof bytes - 1, f);
    fclose(f);
    run_result r;
    char args[256];
    snprintf(args, sizeof args, "decode --file %s", path);
    run(&r, args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "{\"type\":\"cleared\",\"dp_rank\":7}\n");
    snprintf(args, sizeof args, "decode - < %s", path);
    run(&r, args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "{\"type\":\"cleared\",\"dp_rank\":7}\n");
    unlink(path);
    run(&r, "decode --file /nonexistent/kvr 2>/dev/null");
    assert_int_equal(r.status, 1);
}

static void test_decode_bad_arguments(void **state)
{
    (void)state;
    run_result r;
    const char *const bad[] = {"decode",          "decode --hex",
                               "decode --hex 9",  "decode --hex zz",
                               "decode --what",   "decode --hex 90 --file x",
                               "decode --bench --iterations 0", "decode --bench --hex 90"};
    expect_usage_errors("kvrouter decode: ", bad, sizeof bad / sizeof bad[0]);
    run(&r, "decode --help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: kvrouter decode"));
}

static void test_decode_bench_runs(void **state)
{
    (void)state;
    run_result r;
    run(&r, "decode --bench --iterations 3");
    assert_int_equal(r.status, 0);
    const char *last = strrchr(r.out, '{');
    assert_non_null(last);
    json_t *j = json_loads(last, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "events_per_batch")), 64);
    assert_int_equal(json_integer_value(json_object_get(j, "iterations")), 3);
    assert_true(json_integer_value(json_object_get(j, "payload_bytes")) > 64 * 64);
    assert_true(json_number_value(json_object_get(j, "mb_per_s")) > 0);
    json_decref(j);
}

/* every block vector of fixtures/hash_vectors.json through the CLI */
static void test_hash_vectors(void **state)
{
    (void)state;
    json_t *root = kvr_test_load_json("fixtures/hash_vectors.json");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(root, "block_hashes"), i, v) {
        char args[512];
        int n = snprintf(args, sizeof args, "hash --block-size 4");
        json_t *lora = json_object_get(v, "lora_name"), *salt = json_object_get(v, "cache_salt");
        if (json_is_string(lora))
            n += snprintf(args + n, sizeof args - (size_t)n, " --lora %s", json_string_value(lora));
        if (json_is_string(salt))
            n += snprintf(args + n, sizeof args - (size_t)n, " --salt=%s", json_string_value(salt));
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(v, "tokens"), k, t)
            n += snprintf(args + n, sizeof args - (size_t)n, " %lld", json_integer_value(t));
        run_result r;
        run(&r, args);
        assert_int_equal(r.status, 0);
        char want[64];
        snprintf(want, sizeof want, "%s\n", json_string_value(json_object_get(v, "hash")));
        assert_string_equal(r.out, want);
    }
    json_t *e = json_array_get(json_object_get(root, "eagle_window"), 0);
    run_result r;
    run(&r, "hash --eagle --block-size 4 1 2 3 4 5");
    char want[64];
    snprintf(want, sizeof want, "%s\n", json_string_value(json_object_get(e, "hash")));
    assert_string_equal(r.out, want);
    json_decref(root);
}

static void test_hash_blocks_and_errors(void **state)
{
    (void)state;
    run_result r;
    /* two whole blocks, the trailing partial one ignored */
    expect_run("hash --block-size 4 1 2 3 4 5 6 7 8 9", 0, "14643705804678351452\n16777012769546811212\n");
    expect_run("hash --block-size 4 1 2 3", 0, "");
    /* the largest u32 is a token; one above is not */
    run(&r, "hash --block-size 1 4294967295");
    assert_int_equal(r.status, 0);
    assert_int_equal(count_lines(r.out), 1);
    const char *const bad[] = {"hash 1 2 3 4", "hash --block-size 4 4294967296",
                         "hash --block-size 4 -1", "hash --block-size 4 1x",
                         "hash --block-size 0 1", "hash --block-size 4",
                         "hash --block-size 4 --lora", "hash --block-size 4 --frob 1",
                         "hash --block-size x 1"};
    expect_usage_errors("kvrouter hash: ", bad, sizeof bad / sizeof bad[0]);
    run(&r, "hash --help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: kvrouter hash"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_wide_tokens_exact),
        cmocka_unit_test(test_decode_lines_are_json),
        cmocka_unit_test(test_decode_dropped_events),
        cmocka_unit_test(test_decode_malformed_batch),
        cmocka_unit_test(test_decode_file_and_stdin),
        cmocka_unit_test(test_decode_bad_arguments),
        cmocka_unit_test(test_decode_bench_runs),
        cmocka_unit_test(test_hash_vectors),
        cmocka_unit_test(test_hash_blocks_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
