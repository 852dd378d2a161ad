/* The benchmark stream as JSON lines (issue 6 format). u64 values are written
 * and read as plain decimal integers: general JSON libraries stop at 2^63,
 * so reading uses a small parser for exactly this line format. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "util/grow.h"

#define MAX_HASHES (1u << 22)

static int write_u64s(FILE *f, const uint64_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fprintf(f, i ? ",%" PRIu64 : "%" PRIu64, v[i]) < 0)
            return -1;
    return 0;
}

int kvr_bench_write_events(const kvr_bench_stream *s, FILE *f)
{
    for (size_t i = 0; i < s->n; i++) {
        const kvr_bench_op *op = &s->ops[i];
        const uint64_t *p = s->pool + op->off;
        const char *tier = kvr_tier_name((kvr_tier)op->tier);
        int rc = 0;
        switch (op->kind) {
        case KVR_BOP_STORE:
            rc |= fprintf(f, "{\"op\":\"store\",\"worker\":%" PRIu64 ",\"rank\":%" PRIu32
                             ",\"tier\":\"%s\",\"parent\":",
                          op->worker, op->rank, tier) < 0;
            rc |= (op->has_parent ? fprintf(f, "%" PRIu64, op->parent) : fprintf(f, "null")) < 0;
            rc |= fputs(",\"blocks\":[", f) < 0;
            for (uint32_t b = 0; b < op->n; b++)
                rc |= fprintf(f, "%s[%" PRIu64 ",%" PRIu64 "]", b ? "," : "", p[b],
                              p[op->n + b]) < 0;
            rc |= fputs("]}\n", f) < 0;
            break;
        case KVR_BOP_REMOVE:
            rc |= fprintf(f, "{\"op\":\"remove\",\"worker\":%" PRIu64 ",\"rank\":%" PRIu32
                             ",\"tier\":\"%s\",\"hashes\":[",
                          op->worker, op->rank, tier) < 0;
            rc |= write_u64s(f, p, op->n) < 0;
            rc |= fputs("]}\n", f) < 0;
            break;
        case KVR_BOP_CLEAR:
            rc |= fprintf(f, "{\"op\":\"clear\",\"worker\":%" PRIu64 ",\"rank\":%" PRIu32 "}\n",
                          op->worker, op->rank) < 0;
            break;
        default:
            rc |= fputs("{\"op\":\"match\",\"hashes\":[", f) < 0;
            rc |= write_u64s(f, p, op->n) < 0;
            rc |= fputs("]}\n", f) < 0;
            break;
        }
        if (rc)
            return -1;
    }
    return fflush(f) == 0 ? 0 : -1;
}

/* ---- reading ---- */

typedef struct {
    const char *p, *end;
} cursor;

static void ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A string without escapes (all keys and values of this format). */
static bool str(cursor *c, const char **s, size_t *len)
{
    if (!eat(c, '"'))
        return false;
    const char *q = c->p;
    while (c->p < c->end && *c->p != '"' && *c->p != '\\')
        c->p++;
    if (c->p == c->end || *c->p != '"')
        return false;
    *s = q;
    *len = (size_t)(c->p - q);
    c->p++;
    return true;
}

static bool u64(cursor *c, uint64_t *v)
{
    ws(c);
    if (c->p == c->end || *c->p < '0' || *c->p > '9')
        return false;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
        c->p++;
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return false;
    *v = x;
    return true;
}

static bool lit(cursor *c, const char *w)
{
    ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* Skips any JSON value (unknown keys are ignored). */
static bool skip(cursor *c, int depth)
{
    const char *s;
    size_t n;
    uint64_t v;
    ws(c);
    if (depth > 32 || c->p == c->end)
        return false;
    if (*c->p == '"')
        return str(c, &s, &n);
    if (*c->p == '[' || *c->p == '{') {
        char close = *c->p == '[' ? ']' : '}';
        bool obj = *c->p == '{';
        c->p++;
        if (eat(c, close))
            return true;
        do {
            if (obj && (!str(c, &s, &n) || !eat(c, ':')))
                return false;
            if (!skip(c, depth + 1))
                return false;
        } while (eat(c, ','));
        return eat(c, close);
    }
    if (*c->p == '-') {
        c->p++;
        while (c->p < c->end && strchr("0123456789.eE+-", *c->p))
            c->p++;
        return true;
    }
    if (u64(c, &v))
        return true;
    return lit(c, "null") || lit(c, "true") || lit(c, "false");
}

typedef struct {
    uint64_t *v;
    size_t n, cap;
} vec;

static bool vpush(vec *a, uint64_t x)
{
    if (kvr_grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v, 256) < 0)
        return false;
    a->v[a->n++] = x;
    return true;
}

/* "hashes": [u64, ...] or, with pairs, "blocks": [[e, l], ...] into a (e) and b (l). */
static bool u64_array(cursor *c, vec *a, vec *b)
{
    if (!eat(c, '['))
        return false;
    if (eat(c, ']'))
        return true;
    do {
        uint64_t x, y;
        if (a->n >= MAX_HASHES)
            return false;
        if (b) {
            if (!eat(c, '[') || !u64(c, &x) || !eat(c, ',') || !u64(c, &y) || !eat(c, ']') ||
                !vpush(a, x) || !vpush(b, y))
                return false;
        } else if (!u64(c, &x) || !vpush(a, x)) {
            return false;
        }
    } while (eat(c, ','));
    return eat(c, ']');
}

static bool key_is(const char *k, size_t n, const char *want)
{
    return strlen(want) == n && memcmp(k, want, n) == 0;
}

static const char *parse_line(cursor *c, kvr_bench_stream *out, vec *a, vec *b)
{
    int kind = -1;
    uint64_t worker = 0, rank = 0, parent = 0;
    bool has_worker = false, has_parent = false, has_hashes = false, has_blocks = false;
    int tier = KVR_TIER_GPU;
    a->n = b->n = 0;
    if (!eat(c, '{'))
        return "line is not a JSON object";
    if (!eat(c, '}'))
        do {
            const char *k, *s;
            size_t kn, sn;
            if (!str(c, &k, &kn) || !eat(c, ':'))
                return "key";
            if (key_is(k, kn, "op")) {
                if (!str(c, &s, &sn))
                    return "op";
                kind = key_is(s, sn, "store")    ? KVR_BOP_STORE
                       : key_is(s, sn, "remove") ? KVR_BOP_REMOVE
                       : key_is(s, sn, "clear")  ? KVR_BOP_CLEAR
                       : key_is(s, sn, "match")  ? KVR_BOP_MATCH
                                                 : -2;
                if (kind == -2)
                    return "op";
            } else if (key_is(k, kn, "worker")) {
                if (!u64(c, &worker))
                    return "worker";
                has_worker = true;
            } else if (key_is(k, kn, "rank")) {
                if (!u64(c, &rank) || rank > UINT32_MAX)
                    return "rank";
            } else if (key_is(k, kn, "tier")) {
                char name[16];
                if (!str(c, &s, &sn) || sn >= sizeof name)
                    return "tier";
                memcpy(name, s, sn);
                name[sn] = 0;
                if ((tier = kvr_tier_from_name(name)) < 0)
                    return "tier";
            } else if (key_is(k, kn, "parent")) {
                if (lit(c, "null"))
                    has_parent = false;
                else if (u64(c, &parent))
                    has_parent = true;
                else
                    return "parent";
            } else if (key_is(k, kn, "blocks")) {
                if (has_hashes || !u64_array(c, a, b))
                    return "blocks";
                has_blocks = true;
            } else if (key_is(k, kn, "hashes")) {
                if (has_blocks || !u64_array(c, a, NULL))
                    return "hashes";
                has_hashes = true;
            } else if (!skip(c, 0)) {
                return "value";
            }
        } while (eat(c, ','));
    if (!eat(c, '}'))
        return "object end";
    ws(c);
    if (c->p != c->end)
        return "trailing data";
    if (kind < 0)
        return "op";
    if (kind != KVR_BOP_MATCH && !has_worker)
        return "worker";
    if (kind == KVR_BOP_STORE && !has_blocks)
        return "blocks";
    if ((kind == KVR_BOP_REMOVE || kind == KVR_BOP_MATCH) && !has_hashes)
        return "hashes";
    size_t n = a->n;
    kvr_bench_op *op = kvr_bench_push_op(out, kind == KVR_BOP_STORE ? 2 * n : n);
    if (!op)
        return "out of memory";
    op->kind = (uint8_t)kind;
    op->tier = (uint8_t)tier;
    op->worker = worker;
    op->rank = (uint32_t)rank;
    op->has_parent = has_parent;
    op->parent = parent;
    op->n = (uint32_t)n;
    memcpy(out->pool + op->off, a->v, n * sizeof *a->v);
    if (kind == KVR_BOP_STORE)
        memcpy(out->pool + op->off + n, b->v, n * sizeof *b->v);
    return NULL;
}

int kvr_bench_read_events(const char *path, kvr_bench_stream *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    vec a = {0}, b = {0};
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        cursor c = {line, line + len};
        ws(&c);
        if (c.p == c.end)
            continue;
        const char *bad = parse_line(&c, out, &a, &b);
        if (bad) {
            snprintf(err, errlen, "%s:%zu: bad %s", path, lineno, bad);
            rc = -1;
            break;
        }
    }
    free(line);
    free(a.v);
    free(b.v);
    fclose(f);
    if (rc < 0)
        kvr_bench_stream_free(out);
    return rc;
}
