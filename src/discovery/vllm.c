/* vLLM engines: the validators of GET /kv_event_sources, /metrics and
 * /v1/models and what they mean.
 *
 * /kv_event_sources lists one source per data-parallel rank, each
 * {data_parallel_rank, endpoint, replay_endpoint, topic} with the endpoints
 * already offset by rank (vLLM binds them); releases answer
 * {"sources": [...]} or the bare list. A wildcard host in an endpoint
 * (the bind form, host "*") is the engine's own host. The block size is the
 * block_size label of /metrics' vllm:cache_config_info gauge; the model is
 * the first base model of /v1/models (entries with a parent are LoRA
 * adapters). Registrations say engine "vllm" (SPEC §5, vLLM media
 * identity). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery_internal.h"

static int read_endpoint(const json_t *src, const char *key, const char *doc, bool required,
                         const char *engine_host, char *out, size_t cap, char *err,
                         size_t ecap)
{
    char text[KVR_ENDPOINT_MAX], host[256];
    unsigned port;
    if (kvr_edge_str(src, key, doc, text, sizeof text, err, ecap) != 0)
        return -1;
    out[0] = 0;
    if (!text[0] && !required)
        return 0;
    if (!kvr_edge_split_tcp(text, host, sizeof host, &port) ||
        !kvr_edge_tcp_endpoint(out, cap, host, engine_host, port)) {
        snprintf(err, ecap, "%s: field '%s' must be tcp://HOST:PORT (port 1..65535), got '%.100s'",
                 doc, key, text);
        return -1;
    }
    return 0;
}

static int read_source(const json_t *src, size_t i, const char *engine_host,
                       kvr_engine_rank_info *rk, char *err, size_t cap)
{
    char doc[64];
    snprintf(doc, sizeof doc, "/kv_event_sources: sources[%zu]", i);
    if (!json_is_object(src)) {
        snprintf(err, cap, "%s must be an object", doc);
        return -1;
    }
    long long rank = (long long)i;
    bool has_rank;
    if (kvr_edge_int(src, "data_parallel_rank", doc, 0, KVR_DISCOVERY_MAX_RANKS - 1, &rank,
                     &has_rank, err, cap) ||
        read_endpoint(src, "endpoint", doc, true, engine_host, rk->endpoint,
                      sizeof rk->endpoint, err, cap) ||
        read_endpoint(src, "replay_endpoint", doc, false, engine_host, rk->replay_endpoint,
                      sizeof rk->replay_endpoint, err, cap) ||
        kvr_edge_str(src, "topic", doc, rk->topic, sizeof rk->topic, err, cap))
        return -1;
    rk->dp_rank = (uint32_t)(has_rank ? rank : (long long)i);
    return 0;
}

int kvr_vllm_read_sources(const char *body, size_t len, const char *host, kvr_reading *r,
                          char *err, size_t cap)
{
    json_t *j = kvr_edge_json(body, len, "/kv_event_sources", err, cap);
    if (!j)
        return -1;
    json_t *list = json_is_object(j) ? json_object_get(j, "sources") : j;
    int rc = -1;
    size_t n = json_array_size(list);
    if (!json_is_array(list))
        snprintf(err, cap, "/kv_event_sources: must be a list of sources or {\"sources\": [...]}");
    else if (n > KVR_DISCOVERY_MAX_RANKS)
        snprintf(err, cap, "/kv_event_sources: %zu sources, more than %d", n,
                 KVR_DISCOVERY_MAX_RANKS);
    else if (!kvr_edge_ranks(r, n))
        snprintf(err, cap, "out of memory");
    else
        rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = read_source(json_array_get(list, i), i, host, &r->ranks[i], err, cap);
        for (size_t k = 0; rc == 0 && k < i; k++)
            if (r->ranks[k].dp_rank == r->ranks[i].dp_rank) {
                snprintf(err, cap, "/kv_event_sources: data_parallel_rank %u is listed twice",
                         r->ranks[i].dp_rank);
                rc = -1;
            }
    }
    if (rc == 0 && n == 0)
        snprintf(r->info.silent_reason, sizeof r->info.silent_reason,
                 "/kv_event_sources lists no source: the engine publishes no KV events");
    r->info.publishes = rc == 0 && n > 0;
    if (rc != 0)
        kvr_edge_ranks(r, 0);
    json_decref(j);
    return rc;
}

/* The value of label `want` in a Prometheus sample's label set starting at
 * p (just after '{'); false when absent, malformed or too long. */
static bool label_value(const char *p, const char *end, const char *want, char *out, size_t cap)
{
    size_t wl = strlen(want);
    while (p < end && *p != '}') {
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq || eq + 1 >= end || eq[1] != '"')
            return false;
        bool match = (size_t)(eq - p) == wl && memcmp(p, want, wl) == 0;
        size_t n = 0;
        const char *v = eq + 2;
        for (; v < end && *v != '"'; v++) {
            if (*v == '\\' && v + 1 < end)
                v++;
            if (match && n + 1 < cap)
                out[n++] = *v;
            else if (match)
                return false;
        }
        if (v >= end)
            return false;
        if (match) {
            out[n] = 0;
            return true;
        }
        p = v + 1;
        if (p < end && *p == ',')
            p++;
    }
    return false;
}

int kvr_vllm_read_metrics(const char *body, size_t len, const char *host, kvr_reading *r,
                          char *err, size_t cap)
{
    (void)host;
    static const char family[] = "vllm:cache_config_info{";
    const char *end = body + len;
    uint32_t found = 0;
    uint64_t blocks = 0;
    for (const char *line = body; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *le = nl ? nl : end;
        if ((size_t)(le - line) > sizeof family &&
            memcmp(line, family, sizeof family - 1) == 0) {
            char v[16];
            char *stop;
            unsigned long bs = 0;
            if (label_value(line + sizeof family - 1, le, "block_size", v, sizeof v))
                bs = strtoul(v, &stop, 10);
            if (!bs || bs > KVR_MAX_BLOCK_SIZE || *stop) {
                snprintf(err, cap,
                         "/metrics: vllm:cache_config_info has no block_size in 1..%u",
                         KVR_MAX_BLOCK_SIZE);
                return -1;
            }
            if (found && found != bs) {
                snprintf(err, cap, "/metrics: vllm:cache_config_info says block sizes %u and %lu",
                         found, bs);
                return -1;
            }
            found = (uint32_t)bs;
            /* num_gpu_blocks: the KV cache capacity (absent, "None" or out
             * of range: unknown, not an error; the block size routes; out
             * of range is counted) */
            unsigned long long nb = 0;
            if (label_value(line + sizeof family - 1, le, "num_gpu_blocks", v, sizeof v) &&
                strcmp(v, "None") != 0) {
                nb = strtoull(v, &stop, 10);
                if (*stop || nb == 0 || nb > KVR_MAX_KV_CAPACITY_TOKENS / bs) {
                    nb = 0;
                    r->capacity_ignored = true;
                }
            }
            if (nb)
                blocks = nb;
        }
        line = le + 1;
    }
    r->info.block_size = found;
    r->info.max_total_num_tokens = blocks * found;
    return 0;
}

int kvr_vllm_read_models(const char *body, size_t len, const char *host, kvr_reading *r,
                         char *err, size_t cap)
{
    (void)host;
    json_t *j = kvr_edge_json(body, len, "/v1/models", err, cap);
    if (!j)
        return -1;
    json_t *data = json_object_get(j, "data");
    int rc = -1;
    if (!json_is_array(data)) {
        snprintf(err, cap, "/v1/models: field 'data' must be a list");
    } else {
        rc = 0;
        for (size_t i = 0; rc == 0 && i < json_array_size(data) && !r->alt_model[0]; i++) {
            json_t *m = json_array_get(data, i);
            json_t *parent = json_object_get(m, "parent");
            if (!json_is_object(m)) {
                snprintf(err, cap, "/v1/models: data[%zu] must be an object", i);
                rc = -1;
            } else if (!parent || json_is_null(parent)) {
                rc = kvr_edge_str(m, "id", "/v1/models: data[]", r->alt_model,
                                  sizeof r->alt_model, err, cap);
            }
        }
    }
    json_decref(j);
    return rc;
}

/* A missing block size or model is for poll.c to judge: the engine's entry
 * in kvrouter may name them. */
static int vllm_finish(kvr_reading *r, char *err, size_t cap)
{
    (void)err;
    (void)cap;
    memcpy(r->info.model_name, r->alt_model, sizeof r->info.model_name);
    r->info.mm_identity = KVR_MM_LEGACY;
    r->info.accepts_mm_hashes = -1;
    if (!r->info.publishes)
        r->info.block_size = 0;
    return 0;
}

const kvr_engine_kind_def kvr_vllm_kind = {
    .kind = KVR_ENGINE_KIND_VLLM,
    .docs = {{"/kv_event_sources", NULL, true, kvr_vllm_read_sources},
             {"/metrics", NULL, false, kvr_vllm_read_metrics},
             {"/v1/models", NULL, false, kvr_vllm_read_models}},
    .n_docs = 3,
    .finish = vllm_finish,
};
