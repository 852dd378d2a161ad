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

int kvr_route_body_parse(const char *buf, size_t len, size_t max_tokens, kvr_route_body *out)
{
    memset(out, 0, sizeof *out);
    const char *a = NULL, *b = NULL;
    if (find_tokens(buf, len, max_tokens, out, &a, &b) < 0) {
        kvr_route_body_free(out);
        return -1;
    }
    json_error_t jerr;
    if (a) {
        size_t head = (size_t)(a - buf), tail = len - (size_t)(b - buf);
        char *rest = malloc(head + 2 + tail + 1);
        if (!rest) {
            kvr_route_body_free(out);
            return fail(out, 500, "out of memory", (size_t)-1);
        }
        memcpy(rest, buf, head);
        memcpy(rest + head, "[]", 2);
        memcpy(rest + head + 2, b, tail);
        out->rest = json_loadb(rest, head + 2 + tail, JSON_REJECT_DUPLICATES, &jerr);
        free(rest);
    } else
        out->rest = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
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
