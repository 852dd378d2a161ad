/* kvr_json_load_body must give exactly what json_loadb gives: same tree,
 * same failures with the same error text. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_body.h"

static void same_as_jansson(const char *doc)
{
    json_error_t e1, e2;
    json_t *a = json_loadb(doc, strlen(doc), JSON_REJECT_DUPLICATES, &e1);
    json_t *b = kvr_json_load_body(doc, strlen(doc), JSON_REJECT_DUPLICATES, &e2);
    if (!a) {
        assert_null(b);
        assert_string_equal(e1.text, e2.text);
        assert_int_equal(e1.position, e2.position);
        return;
    }
    assert_non_null(b);
    if (!json_equal(a, b))
        fail_msg("differs for %.200s", doc);
    json_decref(a);
    json_decref(b);
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
    snprintf(doc, cap, "{\"a\":\"\\\"[%s]\"}", neg); /* escaped quote before */
    same_as_jansson(doc);
    free(doc);
    free(l);
    free(neg);
}

/* Random mutations of a valid body: truncations and byte flips. */
static void test_mutations_equal(void **state)
{
    (void)state;
    char *neg = int_list(40, -50, ",");
    char base[4096];
    snprintf(base, sizeof base, "{\"k\":[%s],\"s\":\"a[%s]\\\\\",\"n\":[[1,2],[%s]]}", neg, neg,
             neg);
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
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_arrays_equal),
        cmocka_unit_test(test_mutations_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
