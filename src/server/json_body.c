/* Request body parsing. jansson's lexer and one json_t per element cost
 * ~0.3 us per integer here, so a 2,000-token /query spent 0.3-0.6 ms in
 * json_loadb alone (measured). Long arrays of plain integers (token_ids,
 * block_hashes as numbers) are lexed by a tight loop instead, and each is
 * replaced in the text by a placeholder string; every other byte still goes
 * through jansson, so validation stays jansson's. After json_loadb the
 * placeholders become the arrays again, or, for the caller's vec_keys at
 * the top level, stay integer vectors with no json_t per element.
 *
 * The same detour carries u64 identities (SPEC §7.1): jansson refuses
 * integers above INT64_MAX, so each such integer is replaced by a u64
 * marker string, which stays in the tree where the member is a u64 field
 * (kvr_json_body_u64 and kvr_json_u64 read it) and fails the parse
 * anywhere else, as jansson would have.
 *
 * Validity is jansson's, always: a placeholder that did not end up as a
 * value where it stood in for one (an array or a number written as an
 * object key, say) fails the detour, and the original text goes to
 * jansson, which gives the exact error. */
#include "server/json_body.h"
#include "util/grow.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Shorter arrays are not worth the detour. */
#define FAST_MIN_ELEMS 32

typedef struct {
    size_t start, end; /* text replaced, end exclusive */
    size_t first, n;   /* vals[first .. first+n) */
    bool array;        /* else one integer above INT64_MAX (its u64 bits in vals) */
    bool big;          /* array: holds an element above INT64_MAX (u64 bits) */
} span;

typedef struct {
    span *spans;
    size_t n_spans, cap_spans;
    json_int_t *vals;
    size_t n_vals, cap_vals;
    bool oom;
} fast_state;

/* Members whose values (or array elements) are u64 identities. */
static const char *const u64_keys[] = {
    "instance_id", "worker_id",   "mm_hash",     "block_hashes", "allowed_workers",
    "block_hash",  "tokens_hash", "parent_hash", "event_id",     NULL,
};

static bool is_u64_key(const char *key)
{
    for (const char *const *k = u64_keys; *k; k++)
        if (strcmp(*k, key) == 0)
            return true;
    return false;
}

/* Placeholders and markers start with "\x01kvr" and a per-process random
 * nonce no client can guess: ":<span>" for an array, "u<digits>" for a
 * u64. Markers outlive the parse (they stay in the tree), so the nonce is
 * the process's, not the request's. */
static char g_prefix[32], g_jprefix[40];
static size_t g_plen;
static pthread_once_t g_prefix_once = PTHREAD_ONCE_INIT;

static void prefix_init(void)
{
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        nonce = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&ts;
    }
    snprintf(g_prefix, sizeof g_prefix, "\x01kvr%016" PRIx64, nonce);
    snprintf(g_jprefix, sizeof g_jprefix, "\\u0001kvr%016" PRIx64, nonce);
    g_plen = strlen(g_prefix);
}

static const char *prefix(void)
{
    pthread_once(&g_prefix_once, prefix_init);
    return g_prefix;
}

bool kvr_json_body_u64(const json_t *v, uint64_t *out)
{
    const char *p = prefix();
    if (!json_is_string(v))
        return false;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n < g_plen + 2 || n > g_plen + 21 || memcmp(s, p, g_plen) != 0 || s[g_plen] != 'u')
        return false;
    uint64_t x = 0;
    for (size_t i = g_plen + 1; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *out = x;
    return true;
}

json_t *kvr_json_u64_marker(uint64_t v)
{
    char m[64];
    snprintf(m, sizeof m, "%s" "u%" PRIu64, prefix(), v);
    return json_string(m);
}

char *kvr_json_dumps(const json_t *j, size_t flags)
{
    char *text = json_dumps(j, flags);
    if (!text)
        return NULL;
    /* jansson writes a marker as the string "\u0001kvr<nonce>u<digits>";
     * the reply gets the bare digits in its place. */
    prefix();
    size_t jl = strlen(g_jprefix);
    char *first = strstr(text, g_jprefix);
    if (!first || first == text)
        return text;
    char *w = first - 1;
    const char *r = w;
    while (*r) {
        if (r[0] == '"' && strncmp(r + 1, g_jprefix, jl) == 0 && r[1 + jl] == 'u') {
            const char *d = r + 2 + jl, *e = d;
            while (*e >= '0' && *e <= '9')
                e++;
            if (e > d && *e == '"') {
                memmove(w, d, (size_t)(e - d));
                w += e - d;
                r = e + 1;
                continue;
            }
        }
        *w++ = *r++;
    }
    *w = 0;
    return text;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static inline bool push_val(fast_state *st, json_int_t v)
{
    if (st->n_vals == st->cap_vals &&
        kvr_grow((void **)&st->vals, &st->cap_vals, st->n_vals + 1, sizeof *st->vals, 4096) != 0) {
        st->oom = true;
        return false;
    }
    st->vals[st->n_vals++] = v;
    return true;
}

static bool push_span(fast_state *st, span s)
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
static size_t try_int_array(fast_state *st, const char *p, const char *end)
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
    if (n >= FAST_MIN_ELEMS && push_span(st, (span){0, 0, first, n, true, big}))
        return (size_t)(s + 1 - p);
fail:
    st->n_vals = first;
    return 0;
}

/* An integer above INT64_MAX (and at most UINT64_MAX) at p (a digit):
 * returns the bytes consumed, or 0 (jansson decides). */
static size_t try_big(fast_state *st, const char *p, const char *end)
{
    bool neg;
    uint64_t v;
    const char *s = lex_int(p, end, &neg, &v);
    if (!s || v <= (uint64_t)INT64_MAX || (s < end && (*s == '.' || *s == 'e' || *s == 'E')))
        return 0;
    if (!push_val(st, (json_int_t)v) ||
        !push_span(st, (span){0, 0, st->n_vals - 1, 1, false, true}))
        return 0;
    return (size_t)(s - p);
}

/* Finds long integer arrays and integers above INT64_MAX outside strings.
 * No structure is checked: jansson checks the text that results, and the
 * splice checks that every placeholder came back as a value. */
static void scan(fast_state *st, const char *buf, size_t len)
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

typedef struct {
    const fast_state *st;
    size_t consumed; /* placeholders found back as values */
} splice_ctx;

/* What a string of the tree is: text, an array placeholder (*span set) or
 * a u64 marker. A string with the prefix but neither form is an error. */
enum ph { PH_TEXT, PH_ARRAY, PH_U64, PH_BAD };

static enum ph placeholder(const char *str, size_t n, const fast_state *st, size_t *span_i)
{
    if (n < g_plen || memcmp(str, g_prefix, g_plen) != 0)
        return PH_TEXT;
    if (n > g_plen && str[g_plen] == 'u')
        return PH_U64;
    char *e;
    unsigned long i = strtoul(str + g_plen + (n > g_plen), &e, 10);
    if (n > g_plen + 1 && str[g_plen] == ':' && *e == 0 && i < st->n_spans && st->spans[i].array) {
        *span_i = i;
        return PH_ARRAY;
    }
    return PH_BAD;
}

/* A json_t for one value of vals: a JSON integer, or (a negative value of
 * a big span: the bits of an integer above INT64_MAX) a u64 marker. */
static json_t *val_json(json_int_t v, bool big)
{
    if (!big || v >= 0)
        return json_integer(v);
    char m[64];
    snprintf(m, sizeof m, "%s" "u%" PRIu64, g_prefix, (uint64_t)v);
    return json_string(m);
}

static json_t *int_array(const json_int_t *v, size_t n, bool big)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, val_json(v[i], big)) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

static bool splice(json_t *j, bool u64, splice_ctx *c);

/* *rep: the array v stands for when it is a placeholder; else recurses.
 * u64: v is a u64 member's value or one of its elements. */
static bool visit(json_t *v, bool u64, splice_ctx *c, json_t **rep)
{
    *rep = NULL;
    if (!json_is_string(v))
        return splice(v, u64, c);
    size_t i;
    switch (placeholder(json_string_value(v), json_string_length(v), c->st, &i)) {
    case PH_TEXT:
        return true;
    case PH_U64: /* stays a marker, for kvr_json_body_u64 */
        c->consumed++;
        return u64;
    case PH_ARRAY:
        if (c->st->spans[i].big && !u64)
            return false;
        c->consumed++;
        *rep = int_array(c->st->vals + c->st->spans[i].first, c->st->spans[i].n,
                         c->st->spans[i].big);
        return *rep != NULL;
    default:
        return false;
    }
}

static bool splice(json_t *j, bool u64, splice_ctx *c)
{
    json_t *rep;
    if (json_is_object(j)) {
        const char *key;
        json_t *v;
        json_object_foreach(j, key, v)
        {
            size_t i;
            if (placeholder(key, strlen(key), c->st, &i) != PH_TEXT)
                return false; /* an array or a number where a key must be */
            if (!visit(v, is_u64_key(key), c, &rep) ||
                (rep && json_object_set_new(j, key, rep) != 0))
                return false;
        }
    } else if (json_is_array(j)) {
        for (size_t k = 0; k < json_array_size(j); k++)
            if (!visit(json_array_get(j, k), u64, c, &rep) ||
                (rep && json_array_set_new(j, k, rep) != 0))
                return false;
    }
    return true;
}

/* The caller's string equal to key (it outlives the member), or NULL. */
static const char *vec_key(const char *const *keys, const char *key)
{
    for (; *keys; keys++)
        if (strcmp(*keys, key) == 0)
            return *keys;
    return NULL;
}

/* Moves the vec_keys placeholders of the top-level object to b->vecs. A
 * vector holding a value above INT64_MAX stays in the tree (and fails
 * there unless the key is a u64 field). */
static bool keep_vecs(kvr_json_body *b, const char *const *keys, splice_ctx *c)
{
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(b->root, tmp, key, v)
    {
        size_t i;
        const char *k = json_is_string(v) && placeholder(json_string_value(v),
                                                         json_string_length(v), c->st,
                                                         &i) == PH_ARRAY && !c->st->spans[i].big
                            ? vec_key(keys, key)
                            : NULL;
        if (!k)
            continue;
        kvr_json_vec *nv = realloc(b->vecs, (b->n_vecs + 1) * sizeof *nv);
        if (!nv)
            return false;
        b->vecs = nv;
        nv[b->n_vecs].key = k;
        nv[b->n_vecs].first = c->st->spans[i].first;
        nv[b->n_vecs++].n = c->st->spans[i].n;
        c->consumed++;
        json_object_del(b->root, key);
    }
    return true;
}

/* The body with spans replaced; *n its length. */
static char *substitute(const char *buf, size_t len, const fast_state *st, size_t *n)
{
    size_t cap = len + st->n_spans * (strlen(g_jprefix) + 32) + 1;
    char *text = malloc(cap);
    if (!text)
        return NULL;
    size_t o = 0, at = 0;
    for (size_t i = 0; i < st->n_spans; i++) {
        const span *s = &st->spans[i];
        memcpy(text + o, buf + at, s->start - at);
        o += s->start - at;
        if (s->array)
            o += (size_t)snprintf(text + o, cap - o, "\"%s:%zu\"", g_jprefix, i);
        else
            o += (size_t)snprintf(text + o, cap - o, "\"%su%" PRIu64 "\"", g_jprefix,
                                  (uint64_t)st->vals[s->first]);
        at = s->end;
    }
    memcpy(text + o, buf + at, len - at);
    *n = o + len - at;
    return text;
}

/* The tree of the substituted text with every placeholder back, or NULL
 * (the caller then asks jansson about the original text). */
static json_t *parse_substituted(const char *buf, size_t len, size_t flags,
                                 const kvr_json_body_opts *opts, const fast_state *st,
                                 kvr_json_body *out)
{
    size_t n;
    char *text = substitute(buf, len, st, &n);
    json_error_t ignored;
    out->root = text ? json_loadb(text, n, flags, &ignored) : NULL;
    free(text);
    if (!out->root)
        return NULL;
    splice_ctx c = {.st = st};
    json_t *rep = NULL; /* the whole body was one array (JSON_DECODE_ANY) */
    bool ok = (!opts->vec_keys || !json_is_object(out->root) ||
               keep_vecs(out, opts->vec_keys, &c)) &&
              visit(out->root, false, &c, &rep);
    if (rep) {
        json_decref(out->root);
        out->root = rep;
    }
    if (!ok || c.consumed != st->n_spans) {
        kvr_json_body_free(out);
        return NULL;
    }
    return out->root;
}

int kvr_json_body_parse(const char *buf, size_t len, size_t flags, const kvr_json_body_opts *opts,
                        kvr_json_body *out, json_error_t *err)
{
    static const kvr_json_body_opts none = {NULL};
    if (!opts)
        opts = &none;
    prefix();
    memset(out, 0, sizeof *out);
    fast_state st;
    memset(&st, 0, sizeof st);
    scan(&st, buf, len);
    if (st.n_spans && !st.oom && parse_substituted(buf, len, flags, opts, &st, out) &&
        out->n_vecs) {
        out->vals = st.vals; /* the kept vectors point into it */
        st.vals = NULL;
    }
    free(st.spans);
    free(st.vals);
    /* No spans, or any failure: jansson on the original text, which also
     * gives the exact error. */
    if (!out->root)
        out->root = json_loadb(buf, len, flags, err);
    return out->root ? 0 : -1;
}

void kvr_json_body_free(kvr_json_body *b)
{
    json_decref(b->root);
    free(b->vecs);
    free(b->vals);
    memset(b, 0, sizeof *b);
}

json_t *kvr_json_load_body(const char *buf, size_t len, size_t flags, json_error_t *err)
{
    kvr_json_body b;
    if (kvr_json_body_parse(buf, len, flags, NULL, &b, err) < 0)
        return NULL;
    return b.root; /* nothing else is held without vec_keys */
}

const json_int_t *kvr_json_body_ints(const kvr_json_body *b, const char *key, size_t *n)
{
    for (size_t i = 0; i < b->n_vecs; i++)
        if (strcmp(b->vecs[i].key, key) == 0) {
            *n = b->vecs[i].n;
            return b->vals + b->vecs[i].first;
        }
    return NULL;
}

kvr_json_vec_status kvr_json_body_u32(const kvr_json_body *b, const char *key, size_t max_n,
                                      uint32_t **out, size_t *n, size_t *bad)
{
    *out = NULL;
    *n = 0;
    *bad = SIZE_MAX;
    size_t cnt;
    const json_int_t *v = kvr_json_body_ints(b, key, &cnt);
    json_t *arr = v ? NULL : json_object_get(b->root, key);
    if (!v) {
        if (!arr || json_is_null(arr))
            return KVR_JSON_VEC_ABSENT;
        if (!json_is_array(arr))
            return KVR_JSON_VEC_NOT_ARRAY;
        cnt = json_array_size(arr);
    }
    if (cnt > max_n)
        return KVR_JSON_VEC_TOO_LONG;
    uint32_t *o = malloc((cnt ? cnt : 1) * sizeof *o);
    if (!o)
        return KVR_JSON_VEC_NOMEM;
    size_t i = 0;
    if (v) /* the hot case: a loop the compiler can keep tight */
        for (; i < cnt && (uint64_t)v[i] <= UINT32_MAX; i++)
            o[i] = (uint32_t)v[i];
    else
        for (json_t *t; i < cnt && json_is_integer(t = json_array_get(arr, i)) &&
                        (uint64_t)json_integer_value(t) <= UINT32_MAX;
             i++)
            o[i] = (uint32_t)json_integer_value(t);
    if (i < cnt) {
        free(o);
        *bad = i;
        return KVR_JSON_VEC_BAD_ELEM;
    }
    *out = o;
    *n = cnt;
    return KVR_JSON_VEC_OK;
}
