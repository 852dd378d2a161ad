/* The scanner of json_scan.h, apart from json_body.c because it is the
 * other half of the parser: where json_body.c trusts jansson for every
 * check and only moves values in and out of its tree, this file is the
 * byte-level lexer that must stay fast (8 and 16 bytes at a time for the
 * token ids of a /route body) and must never read past the body. Every
 * integer it does not take is left to jansson, which then judges it. */
#include "server/json_scan.h"
#include "util/grow.h"

#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static inline bool push_val(kvr_json_scan *st, json_int_t v)
{
    if (st->n_vals == st->cap_vals &&
        kvr_grow((void **)&st->vals, &st->cap_vals, st->n_vals + 1, sizeof *st->vals, 4096) != 0) {
        st->oom = true;
        return false;
    }
    st->vals[st->n_vals++] = v;
    return true;
}

static bool push_span(kvr_json_scan *st, kvr_json_span s)
{
    if (st->n_spans == st->cap_spans &&
        kvr_grow((void **)&st->spans, &st->cap_spans, st->n_spans + 1, sizeof *st->spans, 4) != 0) {
        st->oom = true;
        return false;
    }
    st->spans[st->n_spans++] = s;
    return true;
}

/* The digits of an integer as JSON writes them (optional '-', no '+', no
 * leading zeros) with a magnitude below 2^64; returns their end, or NULL
 * (left to jansson). The caller checks what follows (a fraction or an
 * exponent is not an integer). */
static inline const char *lex_int(const char *s, const char *end, bool *neg, uint64_t *out)
{
    *neg = s < end && *s == '-';
    s += *neg;
    const char *d = s, *lim = end - s > 19 ? s + 19 : end; /* 19 digits cannot overflow */
    uint64_t v = 0;
    for (unsigned c; s < lim && (c = (unsigned char)*s - '0') < 10; s++)
        v = v * 10 + c;
    if (s < end && *s >= '0' && *s <= '9') {
        uint64_t last = (uint64_t)(*s++ - '0');
        if (v > (UINT64_MAX - last) / 10 || (s < end && *s >= '0' && *s <= '9'))
            return NULL;
        v = v * 10 + last;
    }
    if (s == d || (*d == '0' && s - d > 1))
        return NULL;
    *out = v;
    return s;
}

/* The value of the n (1-7) digit bytes at the bottom of x (byte k of x is
 * the k-th character): moved to the top bytes (the zeros below are then
 * leading zeros), then pairs, quads and the two halves combined by
 * multiplication. */
static inline uint64_t digits_value(uint64_t x, unsigned n)
{
    uint64_t d = (x & 0x0F0F0F0F0F0F0F0Full) << (8 * (8 - n));
    d = (d * (10 * 256 + 1)) >> 8;
    d = ((d & 0x00FF00FF00FF00FFull) * (100 * 65536 + 1)) >> 16;
    return ((d & 0x0000FFFF0000FFFFull) * (10000ull * (1ull << 32) + 1)) >> 32;
}

/* The 8 bytes at s, byte k of the result being s[k]. */
static inline uint64_t load8(const char *s)
{
    uint64_t x;
    memcpy(&x, s, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}

/* The top bits of x's non-digit bytes. A digit byte keeps its top bit
 * clear both minus '0' (0..9) and plus 0x46 (0x76..0x7f); every other byte
 * sets it in one of the two (below '0' or from 0xb0 up minus '0', ':' to
 * 0xb9 plus 0x46). Borrows and carries only move upwards, past the first
 * non-digit, so that one is always found (bytes above it may be wrong). */
static inline uint64_t non_digits(uint64_t x)
{
    return ((x - 0x3030303030303030ull) | (x + 0x4646464646464646ull)) & 0x8080808080808080ull;
}

/* The common element, a plain integer of 1-7 digits (every token id), read
 * 8 bytes at once: the number of leading digit bytes at s (0, or 8 when
 * all are digits: then lex_int decides) and their value. s + 8 <= end. */
static inline unsigned digits8(const char *s, uint64_t *out)
{
    uint64_t x = load8(s);
    uint64_t non = non_digits(x);
    unsigned n = non ? (unsigned)__builtin_ctzll(non) / 8 : 8;
    if (n == 0 || n == 8)
        return n;
    *out = digits_value(x, n);
    return n;
}

/* Integers of 1-7 digits each followed by a comma, from s (an element's
 * start), 16 bytes at a time: a block whose non-digit bytes are all commas
 * gives one element per comma, found from the block's masks, so no element
 * waits for the end of the one before (digits8 finds where the next one
 * starts only once the last one is read). Stops at the start of the first
 * element it does not take (anything else: a last element, whitespace, a
 * sign, 8 digits or more, a leading zero), which the caller's loop then
 * reads, or when vals has no room for a block's elements. Reads below end
 * only (a block and the 8 bytes from an element's start: s + 24 <= end). */
static const char *int_lane(const char *s, const char *end, json_int_t *vals, size_t *nv,
                            size_t cap)
{
    const char *start = s, *w = s;
    size_t n = *nv;
    while (end - w >= 24 && cap - n >= 8) { /* a block holds at most 8 commas */
        unsigned non, commas;
#ifdef __SSE2__
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)w);
        non = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8('0')), /* and every byte >= 0x80 */
                         _mm_cmpgt_epi8(x, _mm_set1_epi8('9'))));
        commas = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(',')));
#else
        non = commas = 0;
        for (unsigned k = 0; k < 16; k++) {
            unsigned char c = (unsigned char)w[k];
            non |= (unsigned)(c < '0' || c > '9') << k;
            commas |= (unsigned)(c == ',') << k;
        }
#endif
        if (non != commas)
            break; /* a non-digit that is not a comma */
        for (; commas; commas &= commas - 1) {
            const char *at = w + __builtin_ctz(commas);
            size_t len = (size_t)(at - start);
            if (len - 1 > 6 || (len > 1 && *start == '0'))
                goto out; /* none or 8+ digits, or a leading zero */
            vals[n++] = (json_int_t)digits_value(load8(start), (unsigned)len); /* start + 8 < w + 24 */
            start = at + 1;
        }
        w += 16;
    }
out:
    *nv = n;
    return start;
}

/* "[int, int, ...]" at p (p[0] == '[') with every value in [INT64_MIN,
 * UINT64_MAX] (above INT64_MAX kept as its bits; the span is then big and
 * has no negative value): returns the bytes consumed, or 0 to leave the
 * array to jansson. */
static size_t try_int_array(kvr_json_scan *st, const char *p, const char *end)
{
    const char *s = p + 1;
    /* The count and the array in locals: stores to vals (json_int_t) may
     * alias st's size_t fields, so through st every element reloaded them
     * (a third of the loop's instructions). */
    size_t first = st->n_vals, nv = first, cap = st->cap_vals;
    json_int_t *vals = st->vals;
    bool big = false, any_neg = false;
    for (;;) {
        if (nv == cap) {
            st->n_vals = nv;
            if (kvr_grow((void **)&st->vals, &st->cap_vals, nv + 1, sizeof *st->vals, 4096) != 0) {
                st->oom = true;
                goto fail;
            }
            vals = st->vals;
            cap = st->cap_vals;
        }
        s = int_lane(s, end, vals, &nv, cap);
        if (nv == cap)
            continue; /* room first */
        uint64_t v = 0; /* set on every path; -O1 cannot tell */
        unsigned n = end - s >= 8 ? digits8(s, &v) : 0;
        if (n > 0 && n < 8 && (n == 1 || *s != '0')) {
            s += n; /* 0 <= v < 10^7: not big, not negative; s < end */
            vals[nv++] = (json_int_t)v;
            if (*s == ',') {
                s++;
                continue;
            }
        } else {
            while (s < end && is_ws(*s))
                s++;
            bool neg;
            s = lex_int(s, end, &neg, &v);
            if (!s || (neg && v > (uint64_t)INT64_MAX + 1))
                goto fail;
            big |= !neg && v > (uint64_t)INT64_MAX;
            any_neg |= neg && v;
            if (big && any_neg)
                goto fail; /* u64 bits and negatives would read alike: jansson's way */
            if (neg)
                v = 0 - v;
            vals[nv++] = (json_int_t)v;
            if (s < end && *s == ',') {
                s++;
                continue;
            }
        }
        while (s < end && is_ws(*s))
            s++; /* then ']' or ',' (not '.', 'e', 'E') */
        if (s < end && *s == ']')
            break;
        if (s >= end || *s++ != ',')
            goto fail;
    }
    st->n_vals = nv;
    size_t n = nv - first;
    if (n >= KVR_JSON_FAST_MIN_ELEMS && push_span(st, (kvr_json_span){0, 0, first, n, true, big}))
        return (size_t)(s + 1 - p);
fail:
    st->n_vals = first;
    return 0;
}

/* An integer above INT64_MAX (and at most UINT64_MAX) at p (a digit):
 * returns the bytes consumed, or 0 (jansson decides). */
static size_t try_big(kvr_json_scan *st, const char *p, const char *end)
{
    bool neg;
    uint64_t v;
    const char *s = lex_int(p, end, &neg, &v);
    if (!s || v <= (uint64_t)INT64_MAX || (s < end && (*s == '.' || *s == 'e' || *s == 'E')))
        return 0;
    if (!push_val(st, (json_int_t)v) ||
        !push_span(st, (kvr_json_span){0, 0, st->n_vals - 1, 1, false, true}))
        return 0;
    return (size_t)(s - p);
}

/* Finds long integer arrays and integers above INT64_MAX outside strings.
 * No structure is checked: jansson checks the text that results, and the
 * splice checks that every placeholder came back as a value. */
void kvr_json_scan_body(kvr_json_scan *st, const char *buf, size_t len)
{
    size_t i = 0;
    char prev = 0; /* the last byte outside strings and whitespace ('"' for a string) */
    while (i < len && !st->oom) {
        char c = buf[i];
        size_t used = 0;
        if (c == '"') {
            for (i++; i < len && buf[i] != '"';)
                i += buf[i] == '\\' ? 2 : 1;
            if (i >= len)
                break;
            i++;
            prev = '"';
            continue;
        }
        if (is_ws(c)) {
            i++;
            continue;
        }
        if (c == '[')
            used = try_int_array(st, buf + i, buf + len);
        else if (c >= '1' && c <= '9' && (prev == 0 || prev == '[' || prev == ',' || prev == ':'))
            used = try_big(st, buf + i, buf + len); /* where a number token starts */
        if (used) {
            st->spans[st->n_spans - 1].start = i;
            st->spans[st->n_spans - 1].end = i + used;
            prev = ']';
        } else {
            prev = c;
        }
        i += used ? used : 1;
    }
}
