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
 * jansson, which gives the exact error.
 *
 * Out of memory on the detour, the original text goes to jansson too,
 * which may still parse it (a body without integers above INT64_MAX). If
 * jansson then refuses an integer as too big (the detour would have kept
 * it in a u64 field) or runs out of memory itself (it then leaves the
 * error text empty, or says so), the answer is out of memory, not
 * jansson's error.
 *
 * The lexer that finds those integers is json_scan.c's; this file holds
 * the markers, the substituted text, jansson's parse and the splice back. */
#include "server/json_body.h"
#include "server/json_scan.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

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

typedef struct {
    const kvr_json_scan *st;
    size_t consumed; /* placeholders found back as values */
    bool oom;        /* an allocation failed (not the body's fault) */
} splice_ctx;

/* What a string of the tree is: text, an array placeholder (*span set) or
 * a u64 marker. A string with the prefix but neither form is an error. */
enum ph { PH_TEXT, PH_ARRAY, PH_U64, PH_BAD };

static enum ph placeholder(const char *str, size_t n, const kvr_json_scan *st, size_t *span_i)
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
        c->oom |= *rep == NULL;
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
            if (!visit(v, is_u64_key(key), c, &rep))
                return false;
            if (rep && json_object_set_new(j, key, rep) != 0) {
                c->oom = true;
                return false;
            }
        }
    } else if (json_is_array(j)) {
        for (size_t k = 0; k < json_array_size(j); k++) {
            if (!visit(json_array_get(j, k), u64, c, &rep))
                return false;
            if (rep && json_array_set_new(j, k, rep) != 0) {
                c->oom = true;
                return false;
            }
        }
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
        if (!nv) {
            c->oom = true;
            return false;
        }
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
static char *substitute(const char *buf, size_t len, const kvr_json_scan *st, size_t *n)
{
    size_t cap = len + st->n_spans * (strlen(g_jprefix) + 32) + 1;
    char *text = malloc(cap);
    if (!text)
        return NULL;
    size_t o = 0, at = 0;
    for (size_t i = 0; i < st->n_spans; i++) {
        const kvr_json_span *s = &st->spans[i];
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
 * (the caller then asks jansson about the original text), with *oom set
 * when that was for want of memory. */
static json_t *parse_substituted(const char *buf, size_t len, size_t flags,
                                 const kvr_json_body_opts *opts, const kvr_json_scan *st,
                                 kvr_json_body *out, bool *oom)
{
    size_t n;
    char *text = substitute(buf, len, st, &n);
    json_error_t jerr;
    out->root = text ? json_loadb(text, n, flags, &jerr) : NULL;
    free(text);
    if (!out->root) {
        *oom = !text || json_error_code(&jerr) == json_error_out_of_memory;
        return NULL;
    }
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
        *oom = c.oom;
        kvr_json_body_free(out);
        return NULL;
    }
    return out->root;
}

/* The error of a body not judged for want of memory, as jansson writes its
 * own: the text, and the code in the text's last byte where
 * json_error_code() reads it (jansson.h), so a caller of
 * kvr_json_load_body tells it apart from a bad body. */
static void oom_error(json_error_t *err)
{
    memset(err, 0, sizeof *err);
    err->line = err->column = -1;
    snprintf(err->text, sizeof err->text, "out of memory");
    err->text[JSON_ERROR_TEXT_LENGTH - 1] = (char)json_error_out_of_memory;
}

int kvr_json_body_parse(const char *buf, size_t len, size_t flags, const kvr_json_body_opts *opts,
                        kvr_json_body *out, json_error_t *err)
{
    static const kvr_json_body_opts none = {NULL};
    if (!opts)
        opts = &none;
    prefix();
    memset(out, 0, sizeof *out);
    kvr_json_scan st;
    memset(&st, 0, sizeof st);
    kvr_json_scan_body(&st, buf, len);
    bool oom = st.oom;
    if (st.n_spans && !oom && parse_substituted(buf, len, flags, opts, &st, out, &oom) &&
        out->n_vecs) {
        out->vals = st.vals; /* the kept vectors point into it */
        st.vals = NULL;
    }
    free(st.spans);
    free(st.vals);
    /* No spans, or any failure: jansson on the original text, which also
     * gives the exact error, unless memory ran out (see the top). */
    if (out->root)
        return 0;
    json_error_t jerr;
    if (!err)
        err = &jerr;
    memset(err, 0, sizeof *err); /* jansson sets no error on most of its OOM paths */
    if ((out->root = json_loadb(buf, len, flags, err)))
        return 0;
    enum json_error_code code = json_error_code(err);
    if (!err->text[0] || code == json_error_out_of_memory ||
        (oom && code == json_error_numeric_overflow)) {
        oom_error(err);
        return KVR_JSON_BODY_NOMEM;
    }
    return -1;
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
