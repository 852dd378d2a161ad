/* POST /register and POST /unregister: JSON <-> the registry's settings
 * structs. The rules (SPEC §5 rule 9, which registrations an unregistration
 * removes) are the registry's (include/kvrouter/registry.h); this file only
 * reads fields, naming the bad one, and writes replies. The same parser
 * reads --config workers, so a config entry and a /register body are one
 * format. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/json_util.h"
#include "server/server_internal.h"

/* kv_events ("auto", "on", "off", or true = on / false = off) and
 * prefill_tps (tokens/s > 0) and max_total_num_tokens (the rank's KV cache
 * capacity in tokens, SGLang's name): what the router needs to score the
 * worker (route.h), no index state. */
static bool parse_routing_hints(json_t *body, kvr_worker_settings *s, kvr_json_err *e)
{
    json_t *ke = json_object_get(body, "kv_events");
    if (json_is_boolean(ke)) {
        s->kv_events = json_is_true(ke) ? KVR_KV_EVENTS_ON : KVR_KV_EVENTS_OFF;
    } else if (ke && !json_is_null(ke)) {
        const char *v = json_string_value(ke);
        int k = -1;
        for (int i = KVR_KV_EVENTS_AUTO; v && i <= KVR_KV_EVENTS_OFF; i++)
            if (strcmp(v, kvr_kv_events_name((kvr_kv_events)i)) == 0)
                k = i;
        if (k < 0) {
            snprintf(e->msg, sizeof e->msg,
                     "field 'kv_events' must be \"auto\", \"on\", \"off\" or a boolean");
            return false;
        }
        s->kv_events = (kvr_kv_events)k;
    }
    json_t *tps = json_object_get(body, "prefill_tps");
    if (tps && !json_is_null(tps)) {
        if (!json_is_number(tps) || !(json_number_value(tps) > 0) ||
            !isfinite(json_number_value(tps))) {
            snprintf(e->msg, sizeof e->msg,
                     "field 'prefill_tps' must be a number of tokens/s above 0");
            return false;
        }
        s->prefill_tps = json_number_value(tps);
    }
    uint64_t cap = 0;
    if (!kvr_json_get_uint(body, "max_total_num_tokens", false, 1, KVR_MAX_KV_CAPACITY_TOKENS,
                           &cap, e))
        return false;
    if (cap)
        s->max_total_num_tokens = cap;
    return true;
}

/* Whether body registers an engine that publishes nothing (kv_events false
 * or "off"): it needs no endpoint (SPEC §8, routing without KV events). */
static bool says_no_events(json_t *body)
{
    json_t *ke = json_object_get(body, "kv_events");
    return json_is_false(ke) || (json_is_string(ke) && strcmp(json_string_value(ke), "off") == 0);
}

bool kvr_api_parse_registration(json_t *body, const kvr_registration *defaults,
                                kvr_registration *reg, kvr_json_err *e)
{
    memset(reg, 0, sizeof *reg);
    if (defaults)
        *reg = *defaults;
    kvr_worker_settings *s = &reg->settings;
    uint64_t bs = s->block_size, rank = reg->dp_rank, itid = UINT64_MAX;
    const char *mm = NULL, *engine = NULL;
    bool accepts = false, accepts_set = false, eagle = s->is_eagle;
    if (!s->routing_group)
        s->routing_group = KVR_DEFAULT_ROUTING_GROUP;
    if (!json_is_object(body)) {
        snprintf(e->msg, sizeof e->msg, "a registration must be a JSON object");
        return false;
    }
    if (!kvr_json_get_u64(body, "instance_id", true, &s->worker_id, e) ||
        !kvr_json_get_str(body, "endpoint", !reg->endpoint && !says_no_events(body), true,
                          KVR_ENDPOINT_MAX, &reg->endpoint, e) ||
        !kvr_json_get_str(body, "model_name", !s->model_name, true, KVR_NAME_MAX,
                          &s->model_name, e) ||
        !kvr_json_get_uint(body, "block_size", bs == 0, 1, KVR_MAX_BLOCK_SIZE, &bs, e) ||
        !kvr_json_get_str(body, "routing_group", false, true, KVR_NAME_MAX, &s->routing_group,
                          e) ||
        !kvr_json_get_uint(body, "dp_rank", false, 0, KVR_MAX_DP_RANKS - 1, &rank, e) ||
        !kvr_json_get_str(body, "replay_endpoint", false, false, KVR_ENDPOINT_MAX,
                          &reg->replay_endpoint, e) ||
        !kvr_json_get_str(body, "topic", false, false, KVR_NAME_MAX, &reg->topic, e) ||
        !kvr_json_get_str(body, "lora_name", false, false, KVR_NAME_MAX, &s->lora_name, e) ||
        !kvr_json_get_str(body, "mm_identity", false, false, 64, &mm, e) ||
        !kvr_json_get_bool(body, "accepts_mm_hashes", &accepts_set, &accepts, e) ||
        !kvr_json_get_bool(body, "is_eagle", NULL, &eagle, e) ||
        !kvr_json_get_str(body, "engine", false, false, 16, &engine, e) ||
        !kvr_json_get_uint(body, "image_token_id", false, 0, KVR_WIDE_SENTINEL - 1, &itid, e))
        return false;
    if (engine && engine[0]) {
        int en = kvr_engine_from_name(engine);
        if (en < 0) {
            snprintf(e->msg, sizeof e->msg, "field 'engine' must be \"sglang\" or \"vllm\"");
            return false;
        }
        s->engine = (kvr_engine)en;
    }
    if (itid != UINT64_MAX) {
        s->has_image_token_id = true;
        s->image_token_id = (uint32_t)itid;
    }
    s->block_size = (uint32_t)bs;
    reg->dp_rank = (uint32_t)rank;
    s->is_eagle = eagle;
    if (accepts_set)
        s->accepts_mm_hashes = accepts ? 1 : 0;
    else if (!defaults)
        s->accepts_mm_hashes = -1;
    if (!parse_routing_hints(body, s, e))
        return false;
    if (mm && mm[0]) {
        int m = kvr_mm_identity_from_name(mm);
        if (m < 0) {
            snprintf(e->msg, sizeof e->msg,
                     "field 'mm_identity' must be \"legacy\", \"engine_wide\" or \"auto\"");
            return false;
        }
        s->mm_identity = (kvr_mm_identity)m;
    }
    return true;
}

/* The other direction, for the cluster's registrations bucket (its values
 * are /register JSON, read back by the parser above): every field the
 * parser reads, defaults written out, keys sorted, so equal registrations
 * give equal text. A new /register field goes in both (test_cluster_codec
 * round-trips every field). */
char *kvr_api_format_registration(const kvr_registration *reg)
{
    const kvr_worker_settings *s = &reg->settings;
    json_t *o = json_pack("{s:o,s:s,s:I,s:s,s:I,s:s,s:b,s:s,s:s}", "instance_id",
                          kvr_json_u64_num(s->worker_id), "model_name", s->model_name,
                          "block_size", (json_int_t)s->block_size,
                          "routing_group",
                          s->routing_group && s->routing_group[0] ? s->routing_group
                                                                  : KVR_DEFAULT_ROUTING_GROUP,
                          "dp_rank", (json_int_t)reg->dp_rank, "mm_identity",
                          kvr_mm_identity_name(s->mm_identity), "is_eagle", s->is_eagle,
                          "engine", kvr_engine_name(s->engine), "kv_events",
                          kvr_kv_events_name(s->kv_events));
    if (!o)
        return NULL;
    if (reg->endpoint && reg->endpoint[0])
        json_object_set_new(o, "endpoint", json_string(reg->endpoint));
    if (s->prefill_tps > 0)
        json_object_set_new(o, "prefill_tps", json_real(s->prefill_tps));
    if (s->max_total_num_tokens)
        json_object_set_new(o, "max_total_num_tokens", json_integer((json_int_t)s->max_total_num_tokens));
    if (reg->replay_endpoint && reg->replay_endpoint[0])
        json_object_set_new(o, "replay_endpoint", json_string(reg->replay_endpoint));
    if (reg->topic && reg->topic[0])
        json_object_set_new(o, "topic", json_string(reg->topic));
    if (s->lora_name && s->lora_name[0])
        json_object_set_new(o, "lora_name", json_string(s->lora_name));
    if (s->accepts_mm_hashes >= 0)
        json_object_set_new(o, "accepts_mm_hashes", json_boolean(s->accepts_mm_hashes > 0));
    if (s->has_image_token_id)
        json_object_set_new(o, "image_token_id", json_integer(s->image_token_id));
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return text;
}

bool kvr_server_parse_registration(const struct json_t *obj, const kvr_registration *defaults,
                                   kvr_registration *reg, char *err, size_t err_len)
{
    kvr_json_err e = {{0}};
    if (kvr_api_parse_registration((json_t *)obj, defaults, reg, &e))
        return true;
    snprintf(err, err_len, "%s", e.msg);
    return false;
}

int kvr_api_registry_status(kvr_registry_result r)
{
    switch (r) {
    case KVR_REGISTRY_CREATED: return 201;
    case KVR_REGISTRY_UNCHANGED:
    case KVR_REGISTRY_UPDATED:
    case KVR_REGISTRY_RESET:
    case KVR_REGISTRY_LISTENER_RESTARTED: return 200;
    case KVR_REGISTRY_INVALID: return 400;
    case KVR_REGISTRY_BLOCK_SIZE_CONFLICT: return 409;
    case KVR_REGISTRY_WORKER_LIMIT: return 503;
    case KVR_REGISTRY_STOPPED:
    case KVR_REGISTRY_NO_DESCRIPTORS: return 503;
    case KVR_REGISTRY_NO_MEMORY:
    case KVR_REGISTRY_RESULT_COUNT: break;
    }
    return 500;
}

void kvr_api_register(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    kvr_registration reg;
    kvr_json_err e = {{0}};
    kvr_registration http = {.origin = KVR_ORIGIN_HTTP};
    http.settings.accepts_mm_hashes = -1;
    if (!kvr_api_parse_registration(body, &http, &reg, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    kvr_registry_reply out;
    kvr_registry_result res = kvr_registry_register(srv->registry, &reg, &out);
    if (!kvr_registry_result_ok(res)) {
        kvr_api_error(reply, kvr_api_registry_status(res), "%s", out.error);
        if (res == KVR_REGISTRY_WORKER_LIMIT)
            json_object_set_new(reply->body, "limit", json_string("max_workers"));
        else if (res == KVR_REGISTRY_NO_DESCRIPTORS)
            json_object_set_new(reply->body, "limit", json_string("descriptors"));
        return;
    }
    const kvr_worker_settings *s = &reg.settings;
    reply->status = kvr_api_registry_status(res);
    /* Dynamo's client reads "status": "ok"; what happened is "result". */
    reply->body = json_pack("{s:s,s:s,s:o,s:I,s:s,s:s,s:I,s:s,s:b,s:b,s:b}", "status", "ok",
                            "result", kvr_registry_result_name(res), "instance_id",
                            kvr_json_u64_reply(s->worker_id), "dp_rank", (json_int_t)reg.dp_rank,
                            "model_name", s->model_name, "routing_group", s->routing_group,
                            "block_size", (json_int_t)s->block_size, "mm_identity",
                            kvr_mm_identity_name(out.mm_identity), "accepts_mm_hashes",
                            out.accepts_mm_hashes, "is_eagle", out.is_eagle, "reset", out.reset);
    json_object_set_new(reply->body, "engine", json_string(kvr_engine_name(s->engine)));
    json_object_set_new(reply->body, "image_token_id",
                        s->has_image_token_id ? json_integer(s->image_token_id) : json_null());
    if (out.reset)
        json_object_set_new(reply->body, "message",
                            json_string("settings changed (block size, mm_identity, eagle, "
                                        "lora, engine or image_token_id): the worker's indexed "
                                        "state and normalizers were cleared"));
    if (out.listener_restarted)
        json_object_set_new(reply->body, "listener_restarted", json_true());
}

void kvr_api_unregister(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    kvr_unregistration u;
    memset(&u, 0, sizeof u);
    uint64_t rank = 0;
    u.routing_group = NULL; /* absent: every group of the model (SPEC §7.1) */
    kvr_json_err e = {{0}};
    if (!kvr_json_get_u64(body, "instance_id", true, &u.worker_id, &e) ||
        !kvr_json_get_str(body, "model_name", true, true, KVR_NAME_MAX, &u.model_name, &e) ||
        !kvr_json_get_str(body, "routing_group", false, true, KVR_NAME_MAX, &u.routing_group,
                          &e) ||
        !kvr_json_get_uint(body, "dp_rank", false, 0, KVR_MAX_DP_RANKS - 1, &rank, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    json_t *r = json_object_get(body, "dp_rank");
    u.has_rank = u.routing_group && r && !json_is_null(r); /* without a group: ignored */
    u.dp_rank = (uint32_t)rank;
    const char *where = u.routing_group ? u.routing_group : "any group";
    kvr_unregister_reply out;
    switch (kvr_registry_unregister(srv->registry, &u, &out)) {
    case KVR_UNREG_REMOVED:
        break;
    case KVR_UNREG_NOT_FOUND:
        if (u.has_rank)
            kvr_api_error(reply, 404,
                          "field 'dp_rank': rank %" PRIu32 " of instance_id %" PRIu64
                          " is not registered for model '%s' group '%s'",
                          u.dp_rank, u.worker_id, u.model_name, where);
        else
            kvr_api_error(reply, 404,
                          "field 'instance_id': %" PRIu64 " is not registered for model '%s' (%s)",
                          u.worker_id, u.model_name, where);
        return;
    case KVR_UNREG_STOPPED:
        kvr_api_error(reply, 503, "ingest thread is not running");
        return;
    default:
        kvr_api_error(reply, 500, "cannot unregister: out of memory");
        return;
    }
    reply->status = 200;
    reply->body = json_pack("{s:s,s:s,s:o,s:I,s:I,s:I}", "status", "ok", "result", "unregistered",
                            "instance_id", kvr_json_u64_reply(u.worker_id), "ranks_removed",
                            (json_int_t)out.ranks_removed, "workers_removed",
                            (json_int_t)out.workers_removed, "listeners_stopped",
                            (json_int_t)out.listeners_stopped);
}
