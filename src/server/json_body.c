/* Request body parsing. jansson's lexer costs ~70 ns per byte here, so a
 * 2,000-token /query spent ~0.9 ms in json_loadb alone (measured). Long
 * arrays of plain integers (token_ids, block_hashes as numbers) are parsed
 * by a tight loop instead and spliced back into the jansson tree; every
 * other byte still goes through jansson, so the result is identical. */
#include "server/json_body.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Shorter arrays are not worth the splice. */
#define FAST_MIN_ELEMS 32

typedef struct {
    size_t start, end; /* byte range of the array text in the body, end exclusive */
    size_t first, n;   /* values[first .. first+n) */
} fast_arr;

typedef struct {
    fast_arr *arrs;
    size_t n_arrs, cap_arrs;
    json_int_t *vals;
    size_t n_vals, cap_vals;
    bool oom;
} fast_state;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool push_val(fast_state *st, json_int_t v)
{
    if (st->n_vals == st->cap_vals) {
        size_t cap = st->cap_vals ? st->cap_vals * 2 : 1024;
        json_int_t *nv = realloc(st->vals, cap * sizeof *nv);
        if (!nv)
            return false;
        st->vals = nv;
        st->cap_vals = cap;
    }
    st->vals[st->n_vals++] = v;
    return true;
}

/* Parses "[int, int, ...]" at p (p[0] == '['). Integers exactly as JSON
 * writes them (no '+', no leading zeros, no fraction or exponent) and within
 * json_int_t; anything else returns 0 and leaves the array to jansson.
 * Returns the bytes consumed on success. */
static size_t try_int_array(fast_state *st, const char *p, const char *end)
{
    const char *s = p + 1;
    size_t first = st->n_vals;
    while (s < end && is_ws(*s))
        s++;
    if (s < end && *s == ']')
        return 0; /* empty: jansson */
    for (;;) {
        bool neg = false;
        if (s < end && *s == '-') {
            neg = true;
            s++;
        }
        if (s >= end || *s < '0' || *s > '9' || (*s == '0' && s + 1 < end && s[1] >= '0' &&
                                                 s[1] <= '9'))
            goto fail;
        uint64_t v = 0;
        while (s < end && *s >= '0' && *s <= '9') {
            uint64_t d = (uint64_t)(*s - '0');
            if (v > (UINT64_MAX - d) / 10)
                goto fail;
            v = v * 10 + d;
            s++;
        }
        if (s < end && (*s == '.' || *s == 'e' || *s == 'E'))
            goto fail;
        if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
            goto fail;
        json_int_t x = neg ? (json_int_t)(0 - v) : (json_int_t)v;
        if (!push_val(st, x)) {
            st->oom = true;
            goto fail;
        }
        while (s < end && is_ws(*s))
            s++;
        if (s < end && *s == ',') {
            s++;
            while (s < end && is_ws(*s))
                s++;
            continue;
        }
        if (s < end && *s == ']')
            break;
        goto fail;
    }
    if (st->n_vals - first < FAST_MIN_ELEMS)
        goto fail;
    if (st->n_arrs == st->cap_arrs) {
        size_t cap = st->cap_arrs ? st->cap_arrs * 2 : 4;
        fast_arr *na = realloc(st->arrs, cap * sizeof *na);
        if (!na) {
            st->oom = true;
            goto fail;
        }
        st->arrs = na;
        st->cap_arrs = cap;
    }
    st->arrs[st->n_arrs++] = (fast_arr){0, 0, first, st->n_vals - first};
    return (size_t)(s + 1 - p);
fail:
    st->n_vals = first;
    return 0;
}

/* Finds the long integer arrays outside strings. */
static void scan(fast_state *st, const char *buf, size_t len)
{
    size_t i = 0;
    while (i < len && !st->oom) {
        char c = buf[i];
        if (c == '"') {
            i++;
            while (i < len && buf[i] != '"')
                i += buf[i] == '\\' ? 2 : 1;
            i++;
        } else if (c == '[') {
            size_t used = try_int_array(st, buf + i, buf + len);
            if (used) {
                st->arrs[st->n_arrs - 1].start = i;
                st->arrs[st->n_arrs - 1].end = i + used;
                i += used;
            } else {
                i++;
            }
        } else {
            i++;
        }
    }
}

/* Placeholders are strings no client can guess: "\u0001kvr<nonce>:<i>". */
static int placeholder_index(const char *s, const char *prefix, size_t plen, size_t n_arrs)
{
    if (strncmp(s, prefix, plen) != 0)
        return -1;
    char *e;
    unsigned long i = strtoul(s + plen, &e, 10);
    return (*e == 0 && i < n_arrs) ? (int)i : -1;
}

/* Replaces v in place (via set) when it is a placeholder, else recurses. */
static bool splice(json_t *j, const fast_state *st, const char *prefix, size_t plen);

static bool visit(json_t *v, const fast_state *st, const char *prefix, size_t plen,
                  json_t **replacement)
{
    *replacement = NULL;
    if (!json_is_string(v))
        return splice(v, st, prefix, plen);
    int i = placeholder_index(json_string_value(v), prefix, plen, st->n_arrs);
    if (i < 0)
        return true;
    *replacement = kvr_json_int_array(st->vals + st->arrs[i].first, st->arrs[i].n);
    return *replacement != NULL;
}

static bool splice(json_t *j, const fast_state *st, const char *prefix, size_t plen)
{
    json_t *rep;
    if (json_is_object(j)) {
        const char *key;
        json_t *v;
        json_object_foreach(j, key, v)
        {
            if (!visit(v, st, prefix, plen, &rep) ||
                (rep && json_object_set_new(j, key, rep) != 0))
                return false;
        }
    } else if (json_is_array(j)) {
        for (size_t k = 0; k < json_array_size(j); k++)
            if (!visit(json_array_get(j, k), st, prefix, plen, &rep) ||
                (rep && json_array_set_new(j, k, rep) != 0))
                return false;
    }
    return true;
}

json_t *kvr_json_int_array(const json_int_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

json_t *kvr_json_load_body(const char *buf, size_t len, size_t flags, json_error_t *err)
{
    fast_state st;
    memset(&st, 0, sizeof st);
    scan(&st, buf, len);
    if (st.n_arrs == 0 || st.oom) {
        free(st.arrs);
        free(st.vals);
        return json_loadb(buf, len, flags, err);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char prefix[64], jprefix[64];
    uint64_t nonce = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)buf;
    snprintf(prefix, sizeof prefix, "\x01kvr%016" PRIx64 ":", nonce);
    snprintf(jprefix, sizeof jprefix, "\\u0001kvr%016" PRIx64 ":", nonce);
    size_t plen = strlen(prefix), jplen = strlen(jprefix);
    size_t cap = len + st.n_arrs * (jplen + 24) + 1;
    char *text = malloc(cap);
    json_t *j = NULL;
    if (text) {
        size_t o = 0, at = 0;
        for (size_t i = 0; i < st.n_arrs; i++) {
            memcpy(text + o, buf + at, st.arrs[i].start - at);
            o += st.arrs[i].start - at;
            o += (size_t)snprintf(text + o, cap - o, "\"%s%zu\"", jprefix, i);
            at = st.arrs[i].end;
        }
        memcpy(text + o, buf + at, len - at);
        o += len - at;
        j = json_loadb(text, o, flags, err);
        free(text);
        if (j && !splice(j, &st, prefix, plen)) {
            json_decref(j);
            j = NULL;
        }
    }
    free(st.arrs);
    free(st.vals);
    /* Any failure: jansson on the original text gives the exact error. */
    return j ? j : json_loadb(buf, len, flags, err);
}
