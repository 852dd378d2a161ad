/* A growable text buffer and the JSON pieces written into it. Replies that
 * the hot endpoints send (/route, /query, /query_by_hash) are written here
 * straight from their results: building a jansson tree and dumping it was
 * most of a /query (json_dumps formats every integer with snprintf; 64
 * workers: ~600 k of ~870 k instructions a request, callgrind). The
 * metrics and dump writers use it too. Out of memory sets `failed` and
 * every later call does nothing; the caller checks once at the end. */
#ifndef KVR_SERVER_SBUF_H
#define KVR_SERVER_SBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data; /* NUL-terminated once anything was appended */
    size_t len, cap;
    bool failed;
} kvr_sbuf;

/* kvr_sbuf_append when the text does not fit (grows, or fails). */
void kvr_sbuf_append_grow(kvr_sbuf *b, const char *s, size_t n);
/* Inline while it fits: a /query reply at 64 workers is ~700 appends of a
 * few bytes, and a call to the growth check and to memcpy each was a
 * tenth of the request's instructions. */
static inline void kvr_sbuf_append(kvr_sbuf *b, const char *s, size_t n)
{
    if (b->cap - b->len > n && !b->failed) { /* room for the NUL too */
        char *d = b->data + b->len;
        if (n <= 16)
            for (size_t i = 0; i < n; i++)
                d[i] = s[i];
        else
            memcpy(d, s, n);
        b->len += n;
        b->data[b->len] = 0;
        return;
    }
    kvr_sbuf_append_grow(b, s, n);
}
/* A string literal (its length known at compile time). */
#define KVR_SBUF_LIT(b, lit) kvr_sbuf_append((b), "" lit, sizeof(lit) - 1)
void kvr_sbuf_printf(kvr_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* v in decimal. */
void kvr_sbuf_u64(kvr_sbuf *b, uint64_t v);
/* s as a JSON string literal, escaped as jansson escapes it (", \, and
 * control characters; UTF-8 as it is). Text that is not valid UTF-8 sets
 * failed, as jansson refuses it. */
void kvr_sbuf_json_str(kvr_sbuf *b, const char *s);
/* A JSON number as jansson writes a real (%.17g, ".0" when it reads as an
 * integer, the exponent without '+' or leading zeros); null when not
 * finite (jansson has no value for it). */
void kvr_sbuf_json_real(kvr_sbuf *b, double v);
/* Hands the text over (caller frees; *len its length), or NULL when the
 * buffer failed or is empty; the buffer is reset either way. */
char *kvr_sbuf_take(kvr_sbuf *b, size_t *len);

#endif
