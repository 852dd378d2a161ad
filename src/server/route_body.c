/* Fast /query and /route body parse; see route_body.h. */
#include "server/route_body.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
    const char *p, *end;
} scan;

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* Skips a string starting at '"'; sets *plain when it has no escapes. */
static bool skip_string(scan *s, bool *plain)
{
    *plain = true;
    s->p++;
    while (s->p < s->end) {
        char c = *s->p++;
        if (c == '"')
            return true;
        if (c == '\\') {
            *plain = false;
            if (s->p == s->end)
                return false;
            s->p++;
        }
    }
    return false;
}

/* Skips one value without validating it (jansson validates the rest later);
 * only string and bracket structure matters to find where it ends. */
static bool skip_value(scan *s)
{
    int depth = 0;
    bool plain;
    while (s->p < s->end) {
        char c = *s->p;
        if (c == '"') {
            if (!skip_string(s, &plain))
                return false;
        } else if (c == '[' || c == '{') {
            if (++depth > MAX_DEPTH)
                return false;
            s->p++;
        } else if (c == ']' || c == '}') {
            if (depth == 0)
                return true;
            depth--;
            s->p++;
        } else if (c == ',' && depth == 0) {
            return true;
        } else
            s->p++;
        if (depth == 0 && (c == '"' || c == ']' || c == '}'))
            return true;
    }
    return depth == 0;
}

static int fail(kvr_route_body *out, int status, const char *msg, size_t idx)
{
    out->status = status;
    if (idx != (size_t)-1)
        snprintf(out->error, sizeof out->error, "field 'token_ids[%zu]' %s", idx, msg);
    else
        snprintf(out->error, sizeof out->error, "%s", msg);
    return -1;
}

/* Parses the array at s->p ('[') into out->tokens. */
static int parse_tokens(scan *s, size_t max_tokens, kvr_route_body *out)
{
    size_t cap = 0;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        ws(s);
        const char *d = s->p;
        uint64_t v = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9' && v <= UINT32_MAX)
            v = v * 10 + (uint64_t)(*s->p++ - '0');
        size_t nd = (size_t)(s->p - d);
        if (nd == 0 || v > UINT32_MAX || (nd > 1 && *d == '0') ||
            (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E')))
            return fail(out, 400, "must be an integer in [0, 2^32)", out->n_tokens);
        if (out->n_tokens == max_tokens)
            return fail(out, 400, "is beyond the token limit", out->n_tokens);
        if (out->n_tokens == cap) {
            cap = cap ? cap * 2 : 1024;
            uint32_t *t = realloc(out->tokens, cap * sizeof *t);
            if (!t)
                return fail(out, 500, "out of memory", (size_t)-1);
            out->tokens = t;
        }
        out->tokens[out->n_tokens++] = (uint32_t)v;
        ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return 0;
        }
        return fail(out, 400, "malformed JSON body: bad token_ids array", (size_t)-1);
    }
}

/* Finds the top-level "token_ids" array: [*a, *b) is its text. */
static int find_tokens(const char *buf, size_t len, size_t max_tokens, kvr_route_body *out,
                       const char **a, const char **b)
{
    scan s = {buf, buf + len};
    ws(&s);
    if (s.p == s.end || *s.p != '{')
        return 0; /* not an object: jansson reports it */
    s.p++;
    for (;;) {
        ws(&s);
        if (s.p == s.end || *s.p != '"')
            return 0;
        const char *k = s.p + 1;
        bool plain;
        if (!skip_string(&s, &plain))
            return 0;
        bool is_tokens = plain && s.p - k - 1 == 9 && memcmp(k, "token_ids", 9) == 0;
        ws(&s);
        if (s.p == s.end || *s.p != ':')
            return 0;
        s.p++;
        ws(&s);
        if (is_tokens && s.p < s.end && *s.p == '[') {
            if (out->tokens || out->n_tokens)
                return 0; /* duplicate key: jansson rejects it */
            *a = s.p;
            if (parse_tokens(&s, max_tokens, out) < 0)
                return -1;
            *b = s.p;
            if (!out->tokens)
                out->tokens = malloc(sizeof *out->tokens); /* present but empty */
            if (!out->tokens)
                return fail(out, 500, "out of memory", (size_t)-1);
        } else if (!skip_value(&s))
            return 0;
        ws(&s);
        if (s.p < s.end && *s.p == ',') {
            s.p++;
            continue;
        }
        return 0;
    }
}

/* Copy state across the text before and after token_ids. */
typedef struct {
    bool in_string, escape;
    const char *str_start;
    int mm_key; /* 1: just read the key "mm_hash"; 2: its ':' too */
} rewrite;

/* Copies in[0..n) to out; returns the bytes written (at most n + n / 19 + 1).
 * An "mm_hash" written as a bare integer above INT64_MAX (a u64 identity,
 * which jansson refuses to parse) becomes the i64 with the same bits; the
 * handler reads negative mm_hash integers back as u64 bits. */
static size_t copy_rewriting(const char *in, size_t n, char *out, rewrite *st)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        char c = in[i];
        if (st->in_string) {
            out[o++] = in[i++];
            if (st->escape)
                st->escape = false;
            else if (c == '\\')
                st->escape = true;
            else if (c == '"') {
                st->in_string = false;
                st->mm_key = (in + i - 1 - st->str_start == 7 &&
                              memcmp(st->str_start, "mm_hash", 7) == 0) ? 1 : 0;
            }
            continue;
        }
        if (c == '"') {
            st->in_string = true;
            st->str_start = in + i + 1;
            st->mm_key = 0;
            out[o++] = in[i++];
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            out[o++] = in[i++];
            continue;
        }
        if (c == ':' && st->mm_key == 1) {
            st->mm_key = 2;
            out[o++] = in[i++];
            continue;
        }
        if (st->mm_key == 2 && c >= '0' && c <= '9') {
            size_t j = i;
            uint64_t v = 0;
            bool fits = true;
            while (j < n && in[j] >= '0' && in[j] <= '9') {
                uint64_t d = (uint64_t)(in[j] - '0');
                if (v > (UINT64_MAX - d) / 10)
                    fits = false;
                v = v * 10 + d;
                j++;
            }
            bool plain = j == n || (in[j] != '.' && in[j] != 'e' && in[j] != 'E');
            if (fits && plain && v > (uint64_t)INT64_MAX) {
                o += (size_t)sprintf(out + o, "%lld", (long long)(int64_t)v);
                i = j;
                st->mm_key = 0;
                continue;
            }
        }
        st->mm_key = 0;
        out[o++] = in[i++];
    }
    return o;
}

int kvr_route_body_parse(const char *buf, size_t len, size_t max_tokens, kvr_route_body *out)
{
    memset(out, 0, sizeof *out);
    const char *a = NULL, *b = NULL;
    if (find_tokens(buf, len, max_tokens, out, &a, &b) < 0) {
        kvr_route_body_free(out);
        return -1;
    }
    bool found = a != NULL;
    if (!found)
        a = b = buf + len; /* no token_ids array: the whole body is the rest */
    size_t head = (size_t)(a - buf), tail = len - (size_t)(b - buf);
    char *rest = malloc(len + len / 19 + 8);
    if (!rest) {
        kvr_route_body_free(out);
        return fail(out, 500, "out of memory", (size_t)-1);
    }
    rewrite st = {0};
    size_t k = copy_rewriting(buf, head, rest, &st);
    if (found) {
        memcpy(rest + k, "[]", 2);
        k += 2;
    }
    k += copy_rewriting(b, tail, rest + k, &st);
    json_error_t jerr;
    out->rest = json_loadb(rest, k, JSON_REJECT_DUPLICATES, &jerr);
    free(rest);
    if (!out->rest || !json_is_object(out->rest)) {
        char msg[200];
        snprintf(msg, sizeof msg, out->rest ? "request body must be a JSON object"
                                            : "malformed JSON body: %s", jerr.text);
        kvr_route_body_free(out);
        return fail(out, 400, msg, (size_t)-1);
    }
    return 0;
}

void kvr_route_body_free(kvr_route_body *b)
{
    json_decref(b->rest);
    free(b->tokens);
    b->rest = NULL;
    b->tokens = NULL;
    b->n_tokens = 0;
}
