/* Request bodies to jansson trees, fast for long integer arrays (see
 * json_body.c for why). Two uses of one scanner: a tree with the arrays
 * spliced back (kvr_json_load_body), or, for hot handlers, chosen top-level
 * arrays handed out as integer vectors without any json_t per element. */
#ifndef KVR_SERVER_JSON_BODY_H
#define KVR_SERVER_JSON_BODY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Same result and errors as json_loadb(buf, len, flags, err), except that
 * integers above INT64_MAX (up to 2^64 - 1) are accepted where the member is
 * a u64 field (instance_id, worker_id, mm_hash, block_hashes,
 * allowed_workers, and the dump's block_hash, tokens_hash, parent_hash,
 * event_id: the member's value, or the elements of its array), as u64
 * markers that kvr_json_body_u64 reads. Anywhere else they fail as jansson
 * fails them ("too big integer"). Out of memory (kvr_json_body_parse's
 * KVR_JSON_BODY_NOMEM) err->text is "out of memory" and
 * json_error_code(err) json_error_out_of_memory. */
json_t *kvr_json_load_body(const char *buf, size_t len, size_t flags, json_error_t *err);

/* A u64 marker of a parsed body (an integer above INT64_MAX that stood in
 * a u64 field) -> its value. False for anything else, including strings a
 * client sent: the marker carries a per-process random nonce. */
bool kvr_json_body_u64(const json_t *v, uint64_t *out);

/* The writing side, for replies built as jansson trees: jansson cannot hold
 * an integer above INT64_MAX, so a u64 identity above it goes in the tree
 * as a marker, and kvr_json_dumps (json_dumps with flags) writes each
 * marker as the bare JSON number. Dumped by json_dumps instead, a marker
 * would be a string no reader expects: trees with markers go through
 * kvr_json_dumps. */
json_t *kvr_json_u64_marker(uint64_t v);
char *kvr_json_dumps(const json_t *j, size_t flags);

typedef struct {
    /* Top-level members (NULL-terminated) that stay out of the tree when
     * they are long arrays of plain integers within int64; read them with
     * kvr_json_body_u32 / kvr_json_body_ints. */
    const char *const *vec_keys;
} kvr_json_body_opts;

typedef struct {
    const char *key; /* the caller's vec_keys string */
    size_t first, n; /* vals[first .. first+n) */
} kvr_json_vec;

typedef struct {
    json_t *root;
    kvr_json_vec *vecs; /* the vec_keys members kept out of root */
    size_t n_vecs;
    json_int_t *vals;
} kvr_json_body;

/* json_loadb(buf, len, flags, err) with opts (NULL: none). 0 on success
 * (free with kvr_json_body_free), -1 with err as json_loadb sets it, or
 * KVR_JSON_BODY_NOMEM when the body could not be judged for want of
 * memory: jansson ran out, or the fast path did and jansson then refused
 * an integer as too big (which the fast path may have kept in a u64
 * field); err->text is then "out of memory", json_error_code(err)
 * json_error_out_of_memory. kvr_json_load_body returns NULL for both. */
#define KVR_JSON_BODY_NOMEM (-2)
int kvr_json_body_parse(const char *buf, size_t len, size_t flags, const kvr_json_body_opts *opts,
                        kvr_json_body *out, json_error_t *err);
void kvr_json_body_free(kvr_json_body *b);

/* The values of top-level member key when it was kept out of root; NULL
 * when it was not (absent, short, not plain integers: then root has it). */
const json_int_t *kvr_json_body_ints(const kvr_json_body *b, const char *key, size_t *n);

typedef enum {
    KVR_JSON_VEC_OK,
    KVR_JSON_VEC_ABSENT,    /* missing or null */
    KVR_JSON_VEC_NOT_ARRAY,
    KVR_JSON_VEC_TOO_LONG,  /* more than max_n elements */
    KVR_JSON_VEC_BAD_ELEM,  /* *bad: index of the first element not in [0, 2^32) */
    KVR_JSON_VEC_NOMEM,
} kvr_json_vec_status;

/* Top-level member key as a u32 array, wherever it ended up (a kept vector
 * or the tree), so handlers have one path. On OK *out is malloc'd (also
 * for an empty array) and *n set. */
kvr_json_vec_status kvr_json_body_u32(const kvr_json_body *b, const char *key, size_t max_n,
                                      uint32_t **out, size_t *n, size_t *bad);

#endif
