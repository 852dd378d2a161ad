/* The lexing half of the request-body parser (json_body.c says why there
 * is one): a scan of the body's text for long arrays of plain integers
 * and for integers above INT64_MAX, outside strings, read by tight loops
 * instead of jansson's lexer. It checks no structure: json_body.c
 * replaces what it found by placeholders, has jansson parse the rest, and
 * splices the values back. Private to the server layer. */
#ifndef KVR_SERVER_JSON_SCAN_H
#define KVR_SERVER_JSON_SCAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Shorter arrays are not worth the detour. */
#define KVR_JSON_FAST_MIN_ELEMS 32

typedef struct {
    size_t start, end; /* text replaced, end exclusive */
    size_t first, n;   /* vals[first .. first+n) */
    bool array;        /* else one integer above INT64_MAX (its u64 bits in vals) */
    bool big;          /* array: holds an element above INT64_MAX (u64 bits) */
} kvr_json_span;

typedef struct {
    kvr_json_span *spans; /* in text order, not overlapping */
    size_t n_spans, cap_spans;
    json_int_t *vals;
    size_t n_vals, cap_vals;
    bool oom; /* an allocation failed: the spans are incomplete */
} kvr_json_scan;

/* Fills st (zeroed by the caller; its arrays are the caller's to free)
 * with the spans of buf[0..len): arrays of at least
 * KVR_JSON_FAST_MIN_ELEMS integers in [INT64_MIN, UINT64_MAX] written as
 * JSON writes them (above INT64_MAX kept as their bits: the span is then
 * big and has no negative value), and single integers above INT64_MAX
 * where a number token starts. Stops at the first failed allocation
 * (st->oom). Reads below buf + len only. */
void kvr_json_scan_body(kvr_json_scan *st, const char *buf, size_t len);

#endif
