/* The checks every engine-response validator shares (sglang.c, vllm.c):
 * JSON parsing of a bounded body, typed members with bounds, host names
 * and tcp:// endpoints. An engine answer is untrusted input: a field of the
 * wrong type, a string too long for its destination, a port outside
 * 1..65535 or a host that could smuggle another endpoint ("h:1/x", spaces,
 * '*' where an address must be) is refused with the field named. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery_internal.h"
#include "util/grow.h"

json_t *kvr_edge_json(const char *body, size_t len, const char *doc, char *err, size_t cap)
{
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        snprintf(err, cap, "%s: not JSON: %s (line %d)", doc, jerr.text, jerr.line);
    return j;
}

bool kvr_edge_host_ok(const char *host)
{
    size_t n = strlen(host);
    if (n == 0 || n > 253)
        return false;
    bool bracketed = host[0] == '[';
    if (bracketed && (n < 3 || host[n - 1] != ']'))
        return false;
    for (size_t i = bracketed; i < n - bracketed; i++) {
        char c = host[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_' || c == ':' || c == '%';
        if (!ok)
            return false;
    }
    return true;
}

bool kvr_edge_host_is_wildcard(const char *host)
{
    return !host[0] || strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0 ||
           strcmp(host, "::") == 0 || strcmp(host, "[::]") == 0;
}

static bool parse_port(const char *s, unsigned *port)
{
    if (!*s || strlen(s) > 5)
        return false;
    unsigned v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (unsigned)(*s - '0');
    }
    if (v < 1 || v > 65535)
        return false;
    *port = v;
    return true;
}

bool kvr_edge_split_tcp(const char *endpoint, char *host, size_t host_cap, unsigned *port)
{
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *h = endpoint + 6;
    const char *colon = strrchr(h, ':');
    if (!colon)
        return false;
    const char *hs = h, *he = colon;
    if (*h == '[') { /* [v6]:port */
        const char *close = strchr(h, ']');
        if (!close || close + 1 != colon)
            return false;
        hs = h + 1;
        he = close;
    }
    size_t n = (size_t)(he - hs);
    if (n >= host_cap || !parse_port(colon + 1, port))
        return false;
    memcpy(host, hs, n);
    host[n] = 0;
    /* A wildcard passes (the caller substitutes); anything else must be a host. */
    return kvr_edge_host_is_wildcard(host) || strcmp(host, "*") == 0 || kvr_edge_host_ok(host);
}

bool kvr_edge_tcp_endpoint(char *out, size_t cap, const char *host, const char *engine_host,
                           unsigned port)
{
    const char *h = kvr_edge_host_is_wildcard(host) ? engine_host : host;
    bool v6 = strchr(h, ':') != NULL && h[0] != '[';
    int n = snprintf(out, cap, "tcp://%s%s%s:%u", v6 ? "[" : "", h, v6 ? "]" : "", port);
    return n > 0 && (size_t)n < cap;
}

int kvr_edge_str(const json_t *obj, const char *key, const char *doc, char *out, size_t cap,
                 char *err, size_t ecap)
{
    out[0] = 0;
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        snprintf(err, ecap, "%s: field '%s' must be a string", doc, key);
        return -1;
    }
    size_t n = json_string_length(v);
    if (n >= cap || strlen(json_string_value(v)) != n) {
        snprintf(err, ecap, "%s: field '%s' is longer than %zu bytes (or holds a NUL)", doc, key,
                 cap - 1);
        return -1;
    }
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

int kvr_edge_int(const json_t *obj, const char *key, const char *doc, long long min,
                 long long max, long long *out, bool *present, char *err, size_t ecap)
{
    json_t *v = json_object_get(obj, key);
    *present = v && !json_is_null(v);
    if (!*present)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        snprintf(err, ecap, "%s: field '%s' must be an integer in %lld..%lld", doc, key, min,
                 max);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

int kvr_edge_bool(const json_t *obj, const char *key, const char *doc, bool *out, char *err,
                  size_t ecap)
{
    json_t *v = json_object_get(obj, key);
    *out = false;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        snprintf(err, ecap, "%s: field '%s' must be a boolean", doc, key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

bool kvr_edge_ranks(kvr_reading *r, size_t n)
{
    free(r->ranks);
    r->ranks = n ? calloc(n, sizeof *r->ranks) : NULL;
    r->n_ranks = r->ranks ? n : 0;
    r->info.dp_size = (uint32_t)r->n_ranks;
    return n == 0 || r->ranks != NULL;
}

void kvr_reading_free(kvr_reading *r)
{
    free(r->ranks);
    memset(r, 0, sizeof *r);
}

bool kvr_reading_copy(kvr_reading *dst, const kvr_reading *src)
{
    memset(dst, 0, sizeof *dst);
    dst->info = src->info;
    if (!src->n_ranks)
        return true;
    dst->ranks = malloc(src->n_ranks * sizeof *dst->ranks);
    if (!dst->ranks) {
        memset(dst, 0, sizeof *dst);
        return false;
    }
    memcpy(dst->ranks, src->ranks, src->n_ranks * sizeof *dst->ranks);
    dst->n_ranks = src->n_ranks;
    return true;
}
