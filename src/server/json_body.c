/* Request body parsing. jansson's lexer and one json_t per element cost
 * ~0.3 us per integer here, so a 2,000-token /query spent 0.3-0.6 ms in
 * json_loadb alone (measured). Long arrays of plain integers (token_ids,
 * block_hashes as numbers) are lexed by a tight loop instead, and each is
 * replaced in the text by a placeholder string; every other byte still goes
 * through jansson, so validation stays jansson's. After json_loadb the
 * placeholders become the arrays again, or, for the caller's vec_keys at
 * the top level, stay integer vectors with no json_t per element. */
#include "server/json_body.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Shorter arrays are not worth the detour. */
#define FAST_MIN_ELEMS 32

typedef struct {
    size_t start, end; /* text replaced, end exclusive */
    size_t first, n;   /* vals[first .. first+n) */
    bool array;        /* else one u64 member value rewritten as its int64 bits */
} span;

typedef struct {
    span *spans;
    size_t n_spans, cap_spans;
    json_int_t *vals;
    size_t n_vals, cap_vals;
    bool oom;
} fast_state;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static inline bool push_val(fast_state *st, json_int_t v)
{
    if (st->n_vals == st->cap_vals) {
        size_t cap = st->cap_vals ? st->cap_vals * 2 : 4096;
        json_int_t *nv = realloc(st->vals, cap * sizeof *nv);
        if (!nv) {
            st->oom = true;
            return false;
        }
        st->vals = nv;
        st->cap_vals = cap;
    }
    st->vals[st->n_vals++] = v;
    return true;
}

static bool push_span(fast_state *st, span s)
{
    if (st->n_spans == st->cap_spans) {
        size_t cap = st->cap_spans ? st->cap_spans * 2 : 4;
        span *ns = realloc(st->spans, cap * sizeof *ns);
        if (!ns) {
            st->oom = true;
            return false;
        }
        st->spans = ns;
        st->cap_spans = cap;
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

/* "[int, int, ...]" at p (p[0] == '[') with every value within json_int_t:
 * returns the bytes consumed, or 0 to leave the array to jansson. */
static size_t try_int_array(fast_state *st, const char *p, const char *end)
{
    const char *s = p + 1;
    size_t first = st->n_vals;
    for (;;) {
        while (s < end && is_ws(*s))
            s++;
        bool neg;
        uint64_t v;
        s = lex_int(s, end, &neg, &v);
        if (!s || v > (uint64_t)INT64_MAX + neg || !push_val(st, neg ? (json_int_t)(0 - v)
                                                                    : (json_int_t)v))
            goto fail;
        while (s < end && is_ws(*s))
            s++; /* then ']' or ',' (not '.', 'e', 'E') */
        if (s < end && *s == ']')
            break;
        if (s >= end || *s++ != ',')
            goto fail;
    }
    size_t n = st->n_vals - first;
    if (n >= FAST_MIN_ELEMS && push_span(st, (span){0, 0, first, n, true}))
        return (size_t)(s + 1 - p);
fail:
    st->n_vals = first;
    return 0;
}

/* A member value above INT64_MAX at p (a digit): returns the bytes
 * consumed, or 0. */
static size_t try_u64(fast_state *st, const char *p, const char *end)
{
    bool neg;
    uint64_t v;
    const char *s = lex_int(p, end, &neg, &v);
    if (!s || v <= (uint64_t)INT64_MAX || (s < end && (*s == '.' || *s == 'e' || *s == 'E')))
        return 0;
    if (!push_val(st, (json_int_t)v) || !push_span(st, (span){0, 0, st->n_vals - 1, 1, false}))
        return 0;
    return (size_t)(s - p);
}

/* Finds long integer arrays (and u64_key member values) outside strings.
 * No structure is checked: jansson checks the text that results. */
static void scan(fast_state *st, const char *buf, size_t len, const char *u64_key)
{
    size_t klen = u64_key ? strlen(u64_key) : 0, str_at = 0, str_len = 0, i = 0;
    int after = 0; /* 1: a string just ended; 2: and then a ':' (it was a key) */
    while (i < len && !st->oom) {
        char c = buf[i];
        size_t used = 0;
        if (c == '"') {
            str_at = ++i;
            while (i < len && buf[i] != '"')
                i += buf[i] == '\\' ? 2 : 1;
            if (i >= len)
                break;
            str_len = i++ - str_at;
            after = 1;
            continue;
        }
        if (is_ws(c)) {
            i++;
            continue;
        }
        if (c == '[')
            used = try_int_array(st, buf + i, buf + len);
        else if (after == 2 && c >= '1' && c <= '9' && klen && str_len == klen &&
                 memcmp(buf + str_at, u64_key, klen) == 0)
            used = try_u64(st, buf + i, buf + len);
        if (used) {
            st->spans[st->n_spans - 1].start = i;
            st->spans[st->n_spans - 1].end = i + used;
        }
        after = c == ':' && after == 1 ? 2 : 0;
        i += used ? used : 1;
    }
}

/* Placeholders are strings no client can guess: "\u0001kvr<nonce>:<i>". */
typedef struct {
    const fast_state *st;
    char prefix[40];
    size_t plen;
} splice_ctx;

/* The array span a placeholder stands for, or -1. */
static long span_of(const json_t *v, const splice_ctx *c)
{
    if (!json_is_string(v) || strncmp(json_string_value(v), c->prefix, c->plen) != 0)
        return -1;
    char *e;
    unsigned long i = strtoul(json_string_value(v) + c->plen, &e, 10);
    return (*e == 0 && i < c->st->n_spans && c->st->spans[i].array) ? (long)i : -1;
}

static json_t *int_array(const json_int_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

static bool splice(json_t *j, const splice_ctx *c);

/* *rep: the array v stands for when it is a placeholder; else recurses. */
static bool visit(json_t *v, const splice_ctx *c, json_t **rep)
{
    long i = span_of(v, c);
    *rep = NULL;
    if (i < 0)
        return splice(v, c);
    *rep = int_array(c->st->vals + c->st->spans[i].first, c->st->spans[i].n);
    return *rep != NULL;
}

static bool splice(json_t *j, const splice_ctx *c)
{
    json_t *rep;
    if (json_is_object(j)) {
        const char *key;
        json_t *v;
        json_object_foreach(j, key, v)
        {
            if (!visit(v, c, &rep) || (rep && json_object_set_new(j, key, rep) != 0))
                return false;
        }
    } else if (json_is_array(j)) {
        for (size_t k = 0; k < json_array_size(j); k++)
            if (!visit(json_array_get(j, k), c, &rep) ||
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

/* Moves the vec_keys placeholders of the top-level object to b->vecs. */
static bool keep_vecs(kvr_json_body *b, const char *const *keys, const splice_ctx *c)
{
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(b->root, tmp, key, v)
    {
        long i = span_of(v, c);
        const char *k = i < 0 ? NULL : vec_key(keys, key);
        if (!k)
            continue;
        kvr_json_vec *nv = realloc(b->vecs, (b->n_vecs + 1) * sizeof *nv);
        if (!nv)
            return false;
        b->vecs = nv;
        nv[b->n_vecs].key = k;
        nv[b->n_vecs].first = c->st->spans[i].first;
        nv[b->n_vecs++].n = c->st->spans[i].n;
        json_object_del(b->root, key);
    }
    return true;
}

/* The body with spans replaced; *n its length. */
static char *substitute(const char *buf, size_t len, const fast_state *st, const char *jprefix,
                        size_t *n)
{
    size_t cap = len + st->n_spans * (strlen(jprefix) + 24) + 1;
    char *text = malloc(cap);
    if (!text)
        return NULL;
    size_t o = 0, at = 0;
    for (size_t i = 0; i < st->n_spans; i++) {
        const span *s = &st->spans[i];
        memcpy(text + o, buf + at, s->start - at);
        o += s->start - at;
        if (s->array)
            o += (size_t)snprintf(text + o, cap - o, "\"%s%zu\"", jprefix, i);
        else
            o += (size_t)snprintf(text + o, cap - o, "%" JSON_INTEGER_FORMAT, st->vals[s->first]);
        at = s->end;
    }
    memcpy(text + o, buf + at, len - at);
    *n = o + len - at;
    return text;
}

int kvr_json_body_parse(const char *buf, size_t len, size_t flags, const kvr_json_body_opts *opts,
                        kvr_json_body *out, json_error_t *err)
{
    static const kvr_json_body_opts none = {NULL, NULL};
    if (!opts)
        opts = &none;
    memset(out, 0, sizeof *out);
    fast_state st;
    memset(&st, 0, sizeof st);
    scan(&st, buf, len, opts->u64_key);
    if (st.n_spans && !st.oom) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t nonce = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)buf;
        splice_ctx c = {.st = &st};
        char jprefix[48];
        snprintf(c.prefix, sizeof c.prefix, "\x01kvr%016" PRIx64 ":", nonce);
        snprintf(jprefix, sizeof jprefix, "\\u0001kvr%016" PRIx64 ":", nonce);
        c.plen = strlen(c.prefix);
        size_t n;
        char *text = substitute(buf, len, &st, jprefix, &n);
        out->root = text ? json_loadb(text, n, flags, err) : NULL;
        free(text);
        json_t *rep = NULL; /* the whole body was one array (JSON_DECODE_ANY) */
        if (out->root && ((opts->vec_keys && json_is_object(out->root) &&
                           !keep_vecs(out, opts->vec_keys, &c)) ||
                          !visit(out->root, &c, &rep)))
            kvr_json_body_free(out);
        if (rep) {
            json_decref(out->root);
            out->root = rep;
        }
    }
    free(st.spans);
    if (out->n_vecs)
        out->vals = st.vals;
    else
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
