#include "mock/trace.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/common.h"
#include "util/u64map.h"

/* Loose upper bounds so a corrupt line cannot make us allocate wildly. */
#define MAX_HASH_IDS (1u << 20)
#define MAX_LENGTH (1u << 30)

uint32_t kvr_trace_token(uint64_t id, uint32_t pos)
{
    uint64_t h = kvr_mix64(id * 0x9E3779B97F4A7C15ULL + kvr_mix64((uint64_t)pos + 1));
    return (uint32_t)(h % KVR_TEXT_TOKEN_LIMIT);
}

size_t kvr_trace_tokens(const kvr_trace_request *r, uint32_t *out, size_t cap)
{
    size_t total = (size_t)r->n_hash_ids * KVR_TRACE_BLOCK_TOKENS;
    if (r->input_length < total)
        total = r->input_length;
    size_t w = total < cap ? total : cap;
    for (size_t i = 0; i < w; i++)
        out[i] = kvr_trace_token(r->hash_ids[i / KVR_TRACE_BLOCK_TOKENS],
                                 (uint32_t)(i % KVR_TRACE_BLOCK_TOKENS));
    return total;
}

static int get_u32(json_t *obj, const char *key, uint32_t *out, bool required)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        *out = 0;
        return required ? -1 : 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)MAX_LENGTH)
        return -1;
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int parse_request(json_t *obj, kvr_trace_request *r, const char **what)
{
    memset(r, 0, sizeof *r);
    if (!json_is_object(obj)) {
        *what = "line is not a JSON object";
        return -1;
    }
    json_t *ts = json_object_get(obj, "timestamp");
    if (ts && !json_is_number(ts)) {
        *what = "timestamp";
        return -1;
    }
    r->timestamp_ms = ts ? json_number_value(ts) : 0.0;
    if (get_u32(obj, "input_length", &r->input_length, true) < 0) {
        *what = "input_length";
        return -1;
    }
    if (get_u32(obj, "output_length", &r->output_length, false) < 0) {
        *what = "output_length";
        return -1;
    }
    json_t *ids = json_object_get(obj, "hash_ids");
    if (!json_is_array(ids) || json_array_size(ids) > MAX_HASH_IDS) {
        *what = "hash_ids";
        return -1;
    }
    size_t n = json_array_size(ids);
    r->hash_ids = malloc((n ? n : 1) * sizeof *r->hash_ids);
    if (!r->hash_ids) {
        *what = "out of memory";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            free(r->hash_ids);
            r->hash_ids = NULL;
            *what = "hash_ids element";
            return -1;
        }
        r->hash_ids[i] = (uint64_t)json_integer_value(v);
    }
    r->n_hash_ids = (uint32_t)n;
    return 0;
}

int kvr_trace_load(const char *path, size_t limit, kvr_trace *out, char *err, size_t errlen)
{
    return kvr_trace_load_slice(path, 0, limit, out, err, errlen);
}

int kvr_trace_load_slice(const char *path, size_t skip, size_t limit, kvr_trace *out, char *err,
                         size_t errlen)
{
    out->reqs = NULL;
    out->n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 0;
    char *line = NULL;
    size_t linecap = 0;
    ssize_t len;
    size_t lineno = 0;
    int rc = 0;
    while ((limit == 0 || out->n < limit) && (len = getline(&line, &linecap, f)) >= 0) {
        lineno++;
        size_t i = 0;
        while (i < (size_t)len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' ||
                                   line[i] == '\n'))
            i++;
        if (i == (size_t)len)
            continue;
        if (skip) {
            skip--;
            continue;
        }
        json_error_t jerr;
        json_t *obj = json_loadb(line, (size_t)len, 0, &jerr);
        if (!obj) {
            snprintf(err, errlen, "%s:%zu: %s", path, lineno, jerr.text);
            rc = -1;
            break;
        }
        if (out->n == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            kvr_trace_request *nr = realloc(out->reqs, ncap * sizeof *nr);
            if (!nr) {
                json_decref(obj);
                snprintf(err, errlen, "%s:%zu: out of memory", path, lineno);
                rc = -1;
                break;
            }
            out->reqs = nr;
            cap = ncap;
        }
        const char *what = NULL;
        if (parse_request(obj, &out->reqs[out->n], &what) < 0) {
            json_decref(obj);
            snprintf(err, errlen, "%s:%zu: bad %s", path, lineno, what);
            rc = -1;
            break;
        }
        json_decref(obj);
        out->n++;
    }
    free(line);
    fclose(f);
    if (rc < 0)
        kvr_trace_free(out);
    return rc;
}

void kvr_trace_free(kvr_trace *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->reqs[i].hash_ids);
    free(t->reqs);
    t->reqs = NULL;
    t->n = 0;
}
