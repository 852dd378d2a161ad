/* Option tables: typed setters with bounds from text and JSON, defaults,
 * the command-line forms, config objects that reject unknown keys and wrong
 * types naming the key, key=value pairs and --help. */
#include "test_support.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kvrouter/options.h"

typedef struct {
    bool flag;
    int level;
    uint32_t threads;
    uint64_t seed;
    size_t body;
    double ratio;
    const char *name;
    int mode;
    char custom[32];
} target;

static const char *const modes[] = {"fast", "safe", NULL};

static int set_custom(const kvr_option *o, void *t, const char *text, char *err, size_t cap)
{
    (void)o;
    if (strlen(text) >= sizeof ((target *)t)->custom) {
        snprintf(err, cap, "--custom too long");
        return -1;
    }
    strcpy(((target *)t)->custom, text);
    return 0;
}

#define T(field) offsetof(target, field)
static const kvr_option rows[] = {
    {.name = "flag", .type = KVR_OPT_BOOL, .offset = T(flag), .flags = KVR_OPT_NO_VALUE,
     .help = "a switch"},
    {.name = "level", .type = KVR_OPT_INT, .offset = T(level), .min = -5, .max = 5, .def = "-1"},
    {.name = "http_threads", .type = KVR_OPT_U32, .offset = T(threads), .min = 1, .max = 64,
     .def = "2", .alias = "threads", .help = "threads"},
    {.name = "seed", .type = KVR_OPT_U64, .offset = T(seed), .min = 0,
     .max = 18446744073709551615.0},
    {.name = "max_body", .type = KVR_OPT_SIZE, .offset = T(body), .min = 1, .max = 1e9,
     .def = "4096"},
    {.name = "ratio", .type = KVR_OPT_DOUBLE, .offset = T(ratio), .min = 0, .max = HUGE_VAL,
     .def = "0.5"},
    {.name = "name", .type = KVR_OPT_STRING, .offset = T(name), .flags = KVR_OPT_NO_CONFIG},
    {.name = "mode", .type = KVR_OPT_CHOICE, .offset = T(mode), .choices = modes, .def = "safe",
     .help = "how"},
    {.name = "custom", .type = KVR_OPT_CUSTOM, .set_text = set_custom, .flags = KVR_OPT_NO_CLI},
};
#define N (sizeof rows / sizeof rows[0])

static void test_defaults_and_text_bounds(void **state)
{
    (void)state;
    target t;
    memset(&t, 0, sizeof t);
    char err[256];
    assert_int_equal(kvr_opt_defaults(rows, N, &t, err, sizeof err), 0);
    assert_int_equal(t.level, -1);
    assert_int_equal(t.threads, 2);
    assert_int_equal(t.body, 4096);
    assert_true(t.ratio == 0.5);
    assert_int_equal(t.mode, 1);
    const kvr_option *o = kvr_opt_find(rows, N, "max-body");
    assert_non_null(o);
    assert_ptr_equal(kvr_opt_find(rows, N, "threads"), &rows[2]);
    assert_null(kvr_opt_find(rows, N, "max"));
    const char *bad[] = {"0", "-1", "8k", " 7", "1000000001", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kvr_opt_set_text(o, &t, bad[i], err, sizeof err), -1);
        assert_non_null(strstr(err, "--max-body"));
        assert_int_equal(t.body, 4096); /* untouched */
    }
    assert_int_equal(kvr_opt_set_text(o, &t, "1000000000", err, sizeof err), 0);
    assert_int_equal(t.body, 1000000000);
    assert_int_equal(kvr_opt_set_text(&rows[3], &t, "18446744073709551615", err, sizeof err), 0);
    assert_true(t.seed == UINT64_MAX);
    assert_int_equal(kvr_opt_set_text(&rows[3], &t, "18446744073709551616", err, sizeof err), -1);
    assert_int_equal(kvr_opt_set_text(&rows[1], &t, "-5", err, sizeof err), 0);
    assert_int_equal(t.level, -5);
    assert_int_equal(kvr_opt_set_text(&rows[1], &t, "6", err, sizeof err), -1);
    assert_int_equal(kvr_opt_set_text(&rows[5], &t, "nan", err, sizeof err), -1);
    assert_int_equal(kvr_opt_set_text(&rows[7], &t, "slow", err, sizeof err), -1);
    assert_non_null(strstr(err, "fast, safe"));
    assert_int_equal(kvr_opt_set_double(&rows[0], &t, 1, err, sizeof err), 0);
    assert_true(t.flag);
    assert_int_equal(kvr_opt_set_double(&rows[0], &t, 0.5, err, sizeof err), -1);
}

static void test_command_line_forms(void **state)
{
    (void)state;
    target t;
    memset(&t, 0, sizeof t);
    kvr_opt_table tab = {rows, N, &t, NULL};
    char *argv[] = {"x", "--flag", "--threads", "8", "--ratio=2.5", "--name", "n1", "--custom",
                    "c", "--level", NULL};
    int argc = 10, i = 1;
    char err[256];
    assert_int_equal(kvr_opt_parse_arg(&tab, 1, argc, argv, &i, err, sizeof err), 1);
    assert_true(t.flag);
    assert_int_equal(i, 2);
    assert_int_equal(kvr_opt_parse_arg(&tab, 1, argc, argv, &i, err, sizeof err), 1);
    assert_int_equal(t.threads, 8);
    assert_int_equal(kvr_opt_parse_arg(&tab, 1, argc, argv, &i, err, sizeof err), 1);
    assert_true(t.ratio == 2.5);
    assert_int_equal(kvr_opt_parse_arg(&tab, 1, argc, argv, &i, err, sizeof err), 1);
    assert_string_equal(t.name, "n1");
    /* A config-only row is no flag. */
    assert_int_equal(kvr_opt_parse_arg(&tab, 1, argc, argv, &i, err, sizeof err), 0);
    i = 9;
    assert_int_equal(kvr_opt_parse_arg(&tab, 1, argc, argv, &i, err, sizeof err), -1);
    assert_non_null(strstr(err, "--level needs a value"));
    char *flag_value[] = {"x", "--flag=1", NULL};
    i = 1;
    assert_int_equal(kvr_opt_parse_arg(&tab, 1, 2, flag_value, &i, err, sizeof err), -1);
}

static void test_config_object_rejects_unknown_keys_and_wrong_types(void **state)
{
    (void)state;
    target t;
    memset(&t, 0, sizeof t);
    kvr_opt_table tab = {rows, N, &t, "serve."};
    char err[256];
    json_t *ok = json_loads("{\"threads\": 4, \"seed\": \"18446744073709551615\", \"ratio\": 1,"
                            " \"flag\": true, \"mode\": \"fast\", \"custom\": \"abc\","
                            " \"max_body\": 2.0}",
                            0, NULL);
    assert_int_equal(kvr_opt_load_json(&tab, 1, ok, err, sizeof err), 0);
    assert_int_equal(t.threads, 4);
    assert_true(t.seed == UINT64_MAX);
    assert_true(t.ratio == 1.0);
    assert_true(t.flag);
    assert_int_equal(t.mode, 0);
    assert_string_equal(t.custom, "abc");
    assert_int_equal(t.body, 2);
    json_decref(ok);
    struct {
        const char *json, *key;
    } bad[] = {
        {"{\"thread\": 4}", "'serve.thread'"},
        {"{\"threads\": \"4\"}", "'serve.http_threads'"},
        {"{\"threads\": 4.5}", "'serve.http_threads'"},
        {"{\"threads\": 65}", "'serve.http_threads'"},
        {"{\"flag\": \"yes\"}", "'serve.flag'"},      {"{\"ratio\": [1]}", "'serve.ratio'"},
        {"{\"name\": \"n\"}", "'serve.name'"},        {"{\"mode\": 1}", "'serve.mode'"},
        {"{\"max_body\": null}", "'serve.max_body'"}, {"{\"seed\": -1}", "'serve.seed'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i].json, 0, NULL);
        assert_non_null(j);
        err[0] = 0;
        assert_int_equal(kvr_opt_load_json(&tab, 1, j, err, sizeof err), -1);
        if (!strstr(err, bad[i].key))
            fail_msg("%s: '%s' does not name %s", bad[i].json, err, bad[i].key);
        json_decref(j);
    }
    assert_int_equal(t.threads, 4); /* nothing above changed it */
}

static void test_pairs_and_help(void **state)
{
    (void)state;
    target t;
    memset(&t, 0, sizeof t);
    kvr_opt_table tab = {rows, N, &t, "router."};
    char err[512];
    assert_int_equal(kvr_opt_set_pair(&tab, "ratio=3", err, sizeof err), 0);
    assert_true(t.ratio == 3);
    assert_int_equal(kvr_opt_set_pair(&tab, "ratio", err, sizeof err), -1);
    assert_int_equal(kvr_opt_set_pair(&tab, "ratoi=1", err, sizeof err), -1);
    assert_non_null(strstr(err, "'router.ratoi'"));
    assert_non_null(strstr(err, "ratio")); /* the known keys are listed */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    target d;
    memset(&d, 0, sizeof d);
    d.body = 77;
    kvr_opt_help(f, rows, N, true, &d);
    fclose(f);
    assert_non_null(strstr(buf, "--http-threads N"));
    assert_non_null(strstr(buf, "(also --threads)"));
    assert_non_null(strstr(buf, "--mode NAME"));
    assert_non_null(strstr(buf, "(fast|safe) (default safe)"));
    assert_non_null(strstr(buf, "(default 4096)")); /* def text wins over the struct */
    assert_null(strstr(buf, "--custom"));            /* config only */
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_text_bounds),
        cmocka_unit_test(test_command_line_forms),
        cmocka_unit_test(test_config_object_rejects_unknown_keys_and_wrong_types),
        cmocka_unit_test(test_pairs_and_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
