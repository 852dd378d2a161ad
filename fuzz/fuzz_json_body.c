/* libFuzzer target: the request-body fast path (src/server/json_body.c)
 * against jansson on the same bytes. Either both accept and the trees are
 * equal (the kept integer vectors spliced back in, u64 markers compared as
 * jansson would see them had it taken integers up to 2^64 - 1), or both
 * refuse with jansson's own error; the one allowed difference is the u64
 * extension itself: jansson refuses "too big integer" where the fast path
 * keeps such an integer in a u64 field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_body.h"

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_json_body: %s\n", what);
        abort();
    }
}

static const char *const vec_keys[] = {"token_ids", "block_hashes", "k", NULL};
static const kvr_json_body_opts opts = {vec_keys};

/* The tree with the kept vectors put back as arrays. */
static json_t *with_vecs(const kvr_json_body *b)
{
    json_t *t = json_deep_copy(b->root);
    for (size_t i = 0; t && i < b->n_vecs; i++) {
        size_t n;
        const json_int_t *v = kvr_json_body_ints(b, b->vecs[i].key, &n);
        check(v != NULL, "a kept vector reads back");
        json_t *a = json_array();
        for (size_t k = 0; k < n; k++)
            json_array_append_new(a, json_integer(v[k]));
        check(json_object_get(t, b->vecs[i].key) == NULL, "a kept vector is out of the tree");
        json_object_set_new(t, b->vecs[i].key, a);
    }
    return t;
}

/* Whether t holds a u64 marker anywhere. */
static bool has_marker(const json_t *t)
{
    uint64_t v;
    if (kvr_json_body_u64(t, &v))
        return v > (uint64_t)INT64_MAX;
    const char *key;
    json_t *x;
    size_t i;
    if (json_is_object(t)) {
        json_object_foreach((json_t *)t, key, x)
            if (has_marker(x))
                return true;
    } else if (json_is_array(t)) {
        json_array_foreach(t, i, x)
            if (has_marker(x))
                return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    for (int pass = 0; pass < 2; pass++) {
        size_t flags = JSON_REJECT_DUPLICATES | (pass ? JSON_DECODE_ANY : 0);
        json_error_t ej, ef;
        json_t *want = json_loadb(buf, size, flags, &ej);
        kvr_json_body got;
        int rc = kvr_json_body_parse(buf, size, flags, pass ? NULL : &opts, &got, &ef);
        if (want) {
            check(rc == 0, "a body jansson accepts is accepted");
            json_t *t = with_vecs(&got);
            check(json_equal(want, t), "the same tree as jansson's");
            json_decref(t);
        } else if (rc == 0) {
            check(json_error_code(&ej) == json_error_numeric_overflow,
                  "accepted only what the u64 extension accepts");
            check(has_marker(got.root), "and it holds an integer above INT64_MAX");
        } else {
            check(strcmp(ej.text, ef.text) == 0 && ej.position == ef.position,
                  "refused with jansson's own error");
        }
        json_decref(want);
        if (rc == 0)
            kvr_json_body_free(&got);
    }
    return 0;
}
