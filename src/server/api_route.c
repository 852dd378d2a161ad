/* Route-layer endpoints: POST /query, /route, /prefill_done, /free. Thin
 * JSON wrappers over kvr_query / kvr_route (include/kvrouter/route.h). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/cluster.h"
#include "kvrouter/route.h"
#include "server/api.h"
#include "server/json_util.h"
#include "server/metrics.h"
#include "server/route_json.h"
#include "server/scores_json.h"
#include "util/hex.h"

typedef struct {
    kvr_query_request q;
    uint32_t *tokens;
    kvr_mm_item *items;
    uint64_t *allowed;
} parsed;

static void parsed_free(parsed *p)
{
    free(p->tokens);
    free(p->items);
    free(p->allowed);
}

/* Absent and null both mean "not given", as json_util.h reads fields. */
static bool given(json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    return v && !json_is_null(v);
}

/* mm_hash: a JSON integer up to 2^64 - 1 (a negative one = its u64 bits),
 * or a 16-hex-digit string, or a 64-hex-digit string (a SHA-256 / BLAKE3
 * image hash). SGLang reads the whole hex value, so its last 16 digits count
 * (the last 8 bytes big-endian, the same rule as a wire `bin` hash, SPEC
 * §3); vLLM identifies media by the first 16 (kvr_media_id, SPEC §5), which
 * the item carries as its vLLM reading. */
static bool parse_mm_hash(const json_t *v, kvr_mm_item *it)
{
    uint64_t *out = &it->mm_hash;
    if (json_is_integer(v)) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (kvr_json_body_u64(v, out))
        return true;
    if (!json_is_string(v))
        return false;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n != 16 && n != 64)
        return false;
    kvr_str str = {s, (uint32_t)n};
    if (n == 64 && kvr_is_hex64(str)) {
        it->has_mm_hash_vllm = true;
        it->mm_hash_vllm = kvr_media_id(str);
    }
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        int d = kvr_hex_digit(s[i]);
        if (d < 0)
            return false;
        x = (x << 4) | (uint64_t)d; /* earlier digits shift out */
    }
    *out = x;
    return true;
}

static bool parse_items(json_t *arr, parsed *p, kvr_api_reply *reply)
{
    if (!json_is_array(arr)) {
        kvr_api_error(reply, 400, "field 'mm_items' must be an array of {start, end, mm_hash?}");
        return false;
    }
    size_t n = json_array_size(arr);
    if (n > KVR_ROUTE_MAX_MM_ITEMS) {
        kvr_api_error(reply, 400, "field 'mm_items' has more than %u items",
                      KVR_ROUTE_MAX_MM_ITEMS);
        return false;
    }
    p->items = calloc(n ? n : 1, sizeof *p->items);
    if (!p->items) {
        kvr_api_error(reply, 500, "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        if (!json_is_object(o)) {
            kvr_api_error(reply, 400, "field 'mm_items[%zu]' must be an object", i);
            return false;
        }
        static const char *const keys[2] = {"start", "end"};
        uint64_t v[2];
        for (int k = 0; k < 2; k++) {
            json_t *x = json_object_get(o, keys[k]);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) > (json_int_t)UINT32_MAX) {
                kvr_api_error(reply, 400, "field 'mm_items[%zu].%s' must be an integer in [0, 2^32)",
                              i, keys[k]);
                return false;
            }
            v[k] = (uint64_t)json_integer_value(x);
        }
        p->items[i].start = (uint32_t)v[0];
        p->items[i].end = (uint32_t)v[1];
        json_t *h = json_object_get(o, "mm_hash");
        if (h && !json_is_null(h)) {
            if (!parse_mm_hash(h, &p->items[i])) {
                kvr_api_error(reply, 400,
                              "field 'mm_items[%zu].mm_hash' must be a 64-bit integer or a 16- or "
                              "64-hex-digit string", i);
                return false;
            }
            p->items[i].has_mm_hash = true;
        }
    }
    p->q.mm_items = p->items;
    p->q.n_mm_items = n;
    return true;
}

/* token_ids: required; empty only when allow_empty (/query answers an empty
 * prompt with empty scores, as Dynamo does; /route has nothing to route). */
static bool parse_tokens(const kvr_json_body *b, bool allow_empty, parsed *p,
                         kvr_api_reply *reply)
{
    size_t n, bad;
    switch (kvr_json_body_u32(b, "token_ids", KVR_ROUTE_MAX_TOKENS, &p->tokens, &n, &bad)) {
    case KVR_JSON_VEC_OK:
        if (n > 0 || allow_empty)
            break;
        /* fall through */
    case KVR_JSON_VEC_ABSENT:
    case KVR_JSON_VEC_NOT_ARRAY:
        kvr_api_error(reply, 400, "field 'token_ids' must be a %sarray of u32",
                      allow_empty ? "" : "non-empty ");
        return false;
    case KVR_JSON_VEC_TOO_LONG:
        kvr_api_error(reply, 400, "field 'token_ids' has more than %u tokens",
                      KVR_ROUTE_MAX_TOKENS);
        return false;
    case KVR_JSON_VEC_BAD_ELEM:
        kvr_api_error(reply, 400, "field 'token_ids[%zu]' must be an integer in [0, 2^32)", bad);
        return false;
    case KVR_JSON_VEC_NOMEM:
        kvr_api_error(reply, 500, "out of memory");
        return false;
    }
    p->q.token_ids = p->tokens;
    p->q.n_tokens = n;
    return true;
}

/* The /query fields, shared by /route. */
static bool parse_query(const kvr_json_body *b, bool allow_empty, parsed *p,
                        kvr_api_reply *reply)
{
    kvr_json_err e = {{0}};
    json_t *body = b->root;
    memset(p, 0, sizeof *p);
    if (!kvr_json_get_str(body, "model_name", true, true, KVR_NAME_MAX, &p->q.model_name, &e) ||
        !kvr_json_get_str(body, "routing_group", false, true, KVR_NAME_MAX, &p->q.routing_group,
                          &e) ||
        !kvr_json_get_str(body, "lora_name", false, false, KVR_NAME_MAX, &p->q.lora_name, &e) ||
        !kvr_json_get_str(body, "cache_salt", false, false, KVR_NAME_MAX, &p->q.cache_salt, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return false;
    }
    if (!parse_tokens(b, allow_empty, p, reply))
        return false;
    json_t *items = json_object_get(body, "mm_items");
    if (items && !json_is_null(items) && !parse_items(items, p, reply))
        return false;
    return true;
}

static void route_error(kvr_api_reply *reply, kvr_route_status st, const char *msg)
{
    kvr_api_error(reply, kvr_route_status_http(st), "%s", msg);
}

/* An empty prompt matches nothing: empty scores, once the model and the
 * media items (which must lie inside the tokens) check out. */
static bool empty_query_ok(kvr_server *srv, const parsed *p, kvr_api_reply *reply)
{
    const char *group = p->q.routing_group ? p->q.routing_group : KVR_DEFAULT_ROUTING_GROUP;
    if (p->q.n_mm_items > 0) {
        kvr_api_error(reply, 400, "field 'mm_items[0].start': beyond the end of 'token_ids' "
                                  "(empty)");
        return false;
    }
    if (!kvr_indexer_index(kvr_server_indexer(srv), p->q.model_name, group)) {
        kvr_api_error(reply, 404, "field 'model_name': unknown model '%s' (routing_group '%s')",
                      p->q.model_name, group);
        return false;
    }
    return true;
}

void kvr_api_query(kvr_server *srv, const kvr_json_body *b, kvr_api_reply *reply)
{
    parsed p;
    if (!parse_query(b, true, &p, reply)) {
        parsed_free(&p);
        return;
    }
    kvr_query_result res;
    kvr_query_result_init(&res);
    kvr_route_status st = KVR_ROUTE_OK;
    if (p.q.n_tokens == 0) {
        if (!empty_query_ok(srv, &p, reply))
            goto out;
        res.block_size = 1;
    } else {
        st = kvr_query(kvr_server_router(srv), &p.q, &res);
    }
    if (st != KVR_ROUTE_OK) {
        route_error(reply, st, res.error);
        goto out;
    }
    kvr_scores_json sj;
    if (kvr_scores_json_init(&sj, res.block_size))
        for (size_t i = 0; i < res.n_entries; i++) {
            const kvr_query_entry *e = &res.entries[i];
            kvr_scores_json_add(&sj, e->worker_id, e->dp_rank, e->gpu_blocks, e->cpu_blocks,
                                e->disk_blocks);
        }
    reply->text = kvr_scores_json_finish(&sj, NULL);
    if (reply->text) {
        reply->status = 200;
        reply->content_type = "application/json";
    } else {
        kvr_api_error(reply, 500, "out of memory");
    }
out:
    kvr_query_result_free(&res);
    parsed_free(&p);
}

static bool get_number(json_t *body, const char *key, bool *has, double *out, kvr_api_reply *reply)
{
    json_t *v = json_object_get(body, key);
    *has = false;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0) {
        kvr_api_error(reply, 400, "field '%s' must be a finite number >= 0", key);
        return false;
    }
    *has = true;
    *out = json_number_value(v);
    return true;
}

/* time_s: a simulator's virtual clock (router option clock_from_requests;
 * otherwise checked and ignored). */
static bool observe_time(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    bool has = false;
    double t = 0;
    if (!get_number(body, "time_s", &has, &t, reply))
        return false;
    if (has)
        kvr_router_observe_time(kvr_server_router(srv), t);
    return true;
}

static bool parse_route(kvr_server *srv, const kvr_json_body *b, parsed *p,
                        kvr_route_request *rq, kvr_api_reply *reply)
{
    json_t *body = b->root;
    if (!parse_query(b, false, p, reply))
        return false;
    memset(rq, 0, sizeof *rq);
    rq->q = p->q;
    kvr_json_err e = {{0}};
    uint64_t osl = 0, rank = 0;
    rq->has_dp_rank = given(body, "dp_rank");
    rq->has_worker_id = given(body, "worker_id");
    if (!kvr_json_get_str(body, "request_id", true, true, KVR_ROUTE_MAX_ID_LEN + 1,
                          &rq->request_id, &e) ||
        !kvr_json_get_uint(body, "osl", false, 0, UINT32_MAX, &osl, &e) ||
        !kvr_json_get_u64(body, "worker_id", false, &rq->worker_id, &e) ||
        !kvr_json_get_uint(body, "dp_rank", false, 0, UINT32_MAX, &rank, &e) ||
        !kvr_json_get_bool(body, "debug", NULL, &rq->debug, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return false;
    }
    rq->osl = (uint32_t)osl;
    rq->dp_rank = (uint32_t)rank;
    if (!observe_time(srv, body, reply))
        return false;
    if (!get_number(body, "temperature", &rq->has_temperature, &rq->temperature, reply) ||
        !get_number(body, "overlap_score_credit", &rq->has_overlap_score_credit,
                    &rq->overlap_score_credit, reply) ||
        !get_number(body, "prefill_load_scale", &rq->has_prefill_load_scale,
                    &rq->prefill_load_scale, reply))
        return false;
    json_t *aw = json_object_get(body, "allowed_workers");
    if (aw && !json_is_null(aw)) {
        size_t n = json_is_array(aw) ? json_array_size(aw) : 0;
        if (!json_is_array(aw) || n > 65536) {
            kvr_api_error(reply, 400, "field 'allowed_workers' must be an array of worker ids");
            return false;
        }
        p->allowed = malloc((n ? n : 1) * sizeof *p->allowed);
        if (!p->allowed) {
            kvr_api_error(reply, 500, "out of memory");
            return false;
        }
        for (size_t i = 0; i < n; i++)
            if (!kvr_json_u64(json_array_get(aw, i), false, &p->allowed[i])) {
                kvr_api_error(reply, 400, "field 'allowed_workers[%zu]' must be a worker id", i);
                return false;
            }
        rq->allowed_workers = p->allowed;
        rq->n_allowed_workers = n;
    }
    return true;
}

void kvr_api_route(kvr_server *srv, const kvr_json_body *b, kvr_api_reply *reply)
{
    parsed p;
    kvr_route_request rq;
    if (!parse_route(srv, b, &p, &rq, reply)) {
        parsed_free(&p);
        return;
    }
    kvr_route_decision d;
    kvr_route_status st = kvr_route(kvr_server_router(srv), &rq, &d);
    if (st != KVR_ROUTE_OK) {
        route_error(reply, st, d.error);
    } else {
        kvr_route_cache_observe(&srv->route_cache, rq.q.n_tokens, d.overlap_tokens);
        reply->text = kvr_route_json(&rq, &d, NULL);
        reply->status = 200;
        reply->content_type = "application/json";
        if (!reply->text) {
            /* The booking stands only if the caller learns where it went. */
            kvr_router_release(kvr_server_router(srv), rq.request_id);
            kvr_api_error(reply, 500, "out of memory");
        }
    }
    kvr_route_decision_free(&d);
    parsed_free(&p);
    kvr_cluster_publish_due(srv->cluster); /* the router's lock is released */
}

/* token_ids: a u32 vector, no json_t per token (u64 numbers above
 * INT64_MAX, in mm_hash or worker_id, are the body parser's for every
 * endpoint). */
static const char *const vec_keys[] = {"token_ids", NULL};
const kvr_json_body_opts kvr_api_route_body_opts = {vec_keys};

static void booking_call(kvr_server *srv, json_t *body, kvr_api_reply *reply, bool release)
{
    kvr_json_err e = {{0}};
    const char *id = NULL;
    /* body is an object: http.c answered 400 otherwise. */
    if (!kvr_json_get_str(body, "request_id", true, true, KVR_ROUTE_MAX_ID_LEN + 1, &id, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    /* ttft_ms: the caller's own measure of the prefill (a gateway that
     * reports late, or a simulator in virtual time); else the router times it. */
    bool has_ttft = false;
    double ttft_ms = -1;
    if (!observe_time(srv, body, reply) ||
        (!release && !get_number(body, "ttft_ms", &has_ttft, &ttft_ms, reply)))
        return;
    kvr_router *r = kvr_server_router(srv);
    kvr_route_status st = release ? kvr_router_release(r, id)
                                  : kvr_router_prefill_done_after(r, id, has_ttft ? ttft_ms / 1000.0 : -1);
    kvr_cluster_publish_due(srv->cluster);
    if (st != KVR_ROUTE_OK) {
        kvr_api_error(reply, 404, "field 'request_id': no active booking '%s' (unknown, freed or "
                      "expired)", id);
        return;
    }
    reply->status = 200;
    reply->body = json_pack("{s:s,s:s}", "request_id", id, "status",
                            release ? "freed" : "decode");
}

void kvr_api_prefill_done(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    booking_call(srv, body, reply, false);
}

void kvr_api_free(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    booking_call(srv, body, reply, true);
}
