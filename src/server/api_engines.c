/* Engine discovery over HTTP (SPEC §11): GET /engines lists every engine
 * kvrouter was given, with what it last read from it and why it is not
 * indexed when it is not; POST /engines adds one (or changes its entry) and
 * answers after its first poll; DELETE /engines forgets one and removes its
 * registrations before answering. The /workers element of a discovered
 * worker gets a small "discovery" object from here too (kvr_api_workers
 * calls kvr_api_worker_discovery), so api_workers.c knows nothing of
 * engines. The rules are the discovery layer's (discovery.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/api_engines.h"
#include "server/json_util.h"
#include "server/server_internal.h"

kvr_discovery *kvr_server_discovery(kvr_server *srv) { return srv->discovery; }

/* ---- the entry format (POST body, config "engines") --------------------- */

static const char *const engine_keys[] = {"url",        "kind",          "instance_id",
                                          "model_name", "routing_group", "block_size",
                                          "mm_identity", "accepts_mm_hashes", "image_token_id"};

static bool known_keys(json_t *obj, kvr_json_err *e)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof engine_keys / sizeof engine_keys[0] && !known; i++)
            known = strcmp(key, engine_keys[i]) == 0;
        if (!known) {
            snprintf(e->msg, sizeof e->msg,
                     "field '%.60s' is not an engine field (url, kind, instance_id, model_name, "
                     "routing_group, block_size, mm_identity, accepts_mm_hashes, "
                     "image_token_id)",
                     key);
            return false;
        }
    }
    return true;
}

static bool parse_object(json_t *obj, kvr_engine_spec *s, kvr_json_err *e)
{
    const char *kind = NULL, *mm = NULL;
    uint64_t bs = 0, itid = UINT64_MAX;
    bool accepts = false, accepts_set = false;
    if (!known_keys(obj, e) ||
        !kvr_json_get_str(obj, "url", true, true, KVR_ENGINE_URL_MAX, &s->url, e) ||
        !kvr_json_get_str(obj, "kind", false, true, 16, &kind, e) ||
        !kvr_json_get_str(obj, "model_name", false, true, KVR_NAME_MAX, &s->model_name, e) ||
        !kvr_json_get_str(obj, "routing_group", false, true, KVR_NAME_MAX, &s->routing_group,
                          e) ||
        !kvr_json_get_uint(obj, "block_size", false, 1, KVR_MAX_BLOCK_SIZE, &bs, e) ||
        !kvr_json_get_str(obj, "mm_identity", false, true, 32, &mm, e) ||
        !kvr_json_get_bool(obj, "accepts_mm_hashes", &accepts_set, &accepts, e) ||
        !kvr_json_get_uint(obj, "image_token_id", false, 0, KVR_WIDE_SENTINEL - 1, &itid, e))
        return false;
    s->has_image_token_id = itid != UINT64_MAX;
    s->image_token_id = s->has_image_token_id ? (uint32_t)itid : 0;
    json_t *id = json_object_get(obj, "instance_id");
    if (id && !json_is_null(id)) {
        if (!kvr_json_get_u64(obj, "instance_id", true, &s->instance_id, e))
            return false;
        s->has_instance_id = true;
    }
    int k = kind ? kvr_engine_kind_from_name(kind) : KVR_ENGINE_KIND_AUTO;
    int m = mm ? kvr_mm_identity_from_name(mm) : -1;
    if (k < 0 || (mm && m < 0)) {
        snprintf(e->msg, sizeof e->msg, "%s",
                 k < 0 ? "field 'kind' must be \"auto\", \"sglang\" or \"vllm\""
                       : "field 'mm_identity' must be \"legacy\", \"engine_wide\" or \"auto\"");
        return false;
    }
    s->kind = (kvr_engine_kind)k;
    s->block_size = (uint32_t)bs;
    s->mm_identity = m;
    s->accepts_mm_hashes = accepts_set ? accepts : -1;
    return true;
}

bool kvr_api_parse_engine(json_t *v, kvr_origin origin, kvr_engine_spec *s, kvr_json_err *e)
{
    memset(s, 0, sizeof *s);
    s->mm_identity = -1;
    s->accepts_mm_hashes = -1;
    s->origin = origin;
    if (json_is_string(v)) {
        s->url = json_string_value(v);
        return true;
    }
    if (!json_is_object(v)) {
        snprintf(e->msg, sizeof e->msg, "an engine is a URL string or an object with 'url'");
        return false;
    }
    return parse_object(v, s, e);
}

bool kvr_server_parse_engine(const struct json_t *v, kvr_origin origin, kvr_engine_spec *spec,
                             char *err, size_t err_len)
{
    kvr_json_err e = {{0}};
    if (kvr_api_parse_engine((json_t *)v, origin, spec, &e))
        return true;
    snprintf(err, err_len, "%s", e.msg);
    return false;
}

/* ---- rendering ------------------------------------------------------------ */

static json_t *str_or_null(const char *s) { return s && s[0] ? json_string(s) : json_null(); }

static json_t *secs(double s) { return s >= 0 ? json_real(s) : json_null(); }

static json_t *reading_json(const kvr_engine_reading_info *r)
{
    if (!r->valid)
        return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(kvr_engine_kind_name(r->kind)));
    json_object_set_new(o, "publishes", json_boolean(r->publishes));
    json_object_set_new(o, "silent_reason", str_or_null(r->silent_reason));
    json_object_set_new(o, "model_name", str_or_null(r->model_name));
    json_object_set_new(o, "model_type", str_or_null(r->model_type));
    json_object_set_new(o, "speculative_algorithm", str_or_null(r->speculative_algorithm));
    json_object_set_new(o, "block_size", json_integer(r->block_size));
    json_object_set_new(o, "dp_size", json_integer(r->dp_size));
    json_object_set_new(o, "is_eagle", json_boolean(r->is_eagle));
    json_object_set_new(o, "hicache", json_boolean(r->hicache));
    if (r->max_total_num_tokens)
        json_object_set_new(o, "max_total_num_tokens",
                            json_integer((json_int_t)r->max_total_num_tokens));
    json_object_set_new(o, "mm_identity", json_string(kvr_mm_identity_name(r->mm_identity)));
    json_object_set_new(o, "accepts_mm_hashes",
                        r->accepts_mm_hashes < 0 ? json_null()
                                                 : json_boolean(r->accepts_mm_hashes));
    json_object_set_new(o, "version", str_or_null(r->version));
    return o;
}

static json_t *ranks_json(const kvr_engine_info *e)
{
    json_t *a = json_array();
    for (size_t i = 0; i < e->n_ranks; i++) {
        const kvr_engine_rank_info *r = &e->ranks[i];
        json_t *o = json_pack("{s:I,s:s,s:o,s:s,s:b,s:s}", "dp_rank", (json_int_t)r->dp_rank,
                              "endpoint", r->endpoint, "replay_endpoint",
                              str_or_null(r->replay_endpoint), "topic", r->topic, "registered",
                              r->registered, "result", kvr_registry_result_name(r->result));
        if (r->error[0])
            json_object_set_new(o, "error", json_string(r->error));
        json_array_append_new(a, o);
    }
    return a;
}

json_t *kvr_api_engine_json(const kvr_engine_info *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "url", json_string(e->url));
    json_object_set_new(o, "kind", json_string(kvr_engine_kind_name(e->kind)));
    json_object_set_new(o, "origin", json_string(kvr_origin_name(e->origin)));
    json_object_set_new(o, "instance_id", kvr_json_u64_reply(e->worker_id));
    json_object_set_new(o, "model_name", str_or_null(e->model_name));
    json_object_set_new(o, "routing_group", json_string(e->routing_group));
    json_object_set_new(o, "state", json_string(kvr_engine_state_name(e->state)));
    json_object_set_new(o, "indexed", json_boolean(e->state == KVR_ENGINE_INDEXED));
    json_object_set_new(o, "reason", str_or_null(e->reason));
    json_object_set_new(o, "last_error", str_or_null(e->last_error));
    json_object_set_new(o, "seconds_since_added", secs(e->seconds_since_added));
    json_object_set_new(o, "seconds_since_poll", secs(e->seconds_since_poll));
    json_object_set_new(o, "seconds_since_valid_answer", secs(e->seconds_since_valid));
    json_object_set_new(o, "polls", json_integer((json_int_t)e->polls));
    json_object_set_new(o, "poll_failures", json_integer((json_int_t)e->poll_failures));
    json_object_set_new(o, "consecutive_failures",
                        json_integer((json_int_t)e->consecutive_failures));
    json_object_set_new(o, "read", reading_json(&e->read));
    json_object_set_new(o, "ranks", ranks_json(e));
    json_object_set_new(o, "ranks_registered", json_integer((json_int_t)e->ranks_registered));
    return o;
}

bool kvr_api_worker_discovery(json_t *w, const kvr_engine_infos *l, const kvr_worker_info *wi)
{
    const kvr_engine_info *e = kvr_engine_infos_find(l, wi->model_name, wi->routing_group,
                                                     wi->worker_id);
    if (!e)
        return false;
    json_object_set_new(
        w, "discovery",
        json_pack("{s:s,s:s,s:s,s:o,s:o}", "url", e->url, "kind",
                  kvr_engine_kind_name(e->read.valid ? e->read.kind : e->kind), "state",
                  kvr_engine_state_name(e->state), "reason", str_or_null(e->reason),
                  "seconds_since_valid_answer", secs(e->seconds_since_valid)));
    return true;
}

/* ---- handlers --------------------------------------------------------------- */

static json_t *states_json(const kvr_engine_infos *l)
{
    json_t *o = json_object();
    for (int s = 0; s < KVR_ENGINE_STATE_COUNT; s++)
        json_object_set_new(o, kvr_engine_state_name((kvr_engine_state)s),
                            json_integer((json_int_t)l->by_state[s]));
    return o;
}

static json_t *counters_json(const kvr_discovery_counters *c)
{
    json_t *o = json_object();
    for (size_t k = 0; k < kvr_discovery_counter_count; k++)
        json_object_set_new(
            o, kvr_discovery_counter_descs[k].name,
            json_integer((json_int_t)kvr_counter_value(c, &kvr_discovery_counter_descs[k])));
    return o;
}

void kvr_api_engines_get(kvr_server *srv, json_t *args, kvr_api_reply *reply)
{
    const char *url = json_string_value(json_object_get(args, "url"));
    char norm[KVR_ENGINE_URL_MAX], err[256];
    if (url && url[0] && !kvr_engine_url_normalize(url, norm, sizeof norm, err, sizeof err)) {
        kvr_api_error(reply, 400, "%s", err);
        return;
    }
    kvr_engine_infos l;
    if (kvr_discovery_list(srv->discovery, &l) != 0) {
        kvr_api_error(reply, 500, "out of memory");
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < l.n; i++)
        if (!url || !url[0] || strcmp(l.items[i].url, norm) == 0)
            json_array_append_new(arr, kvr_api_engine_json(&l.items[i]));
    reply->status = 200;
    reply->body = json_pack("{s:o,s:o,s:o}", "engines", arr, "states", states_json(&l),
                            "counters", counters_json(&l.counters));
    kvr_engine_infos_free(&l);
}

/* The engine of url as it stands, or null. */
static json_t *engine_now(kvr_server *srv, const char *url)
{
    char norm[KVR_ENGINE_URL_MAX], err[64];
    kvr_engine_infos l;
    json_t *out = NULL;
    if (kvr_engine_url_normalize(url, norm, sizeof norm, err, sizeof err) &&
        kvr_discovery_list(srv->discovery, &l) == 0) {
        for (size_t i = 0; i < l.n && !out; i++)
            if (strcmp(l.items[i].url, norm) == 0)
                out = kvr_api_engine_json(&l.items[i]);
        kvr_engine_infos_free(&l);
    }
    return out ? out : json_null();
}

void kvr_api_engines_post(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    kvr_engine_spec spec;
    kvr_json_err e = {{0}};
    if (!kvr_api_parse_engine(body, KVR_ORIGIN_HTTP, &spec, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    char err[400];
    kvr_discovery_result res = kvr_discovery_add(srv->discovery, &spec, err, sizeof err);
    switch (res) {
    case KVR_DISCOVERY_ADDED:
    case KVR_DISCOVERY_UPDATED:
    case KVR_DISCOVERY_UNCHANGED: break;
    case KVR_DISCOVERY_INVALID: kvr_api_error(reply, 400, "%s", err); return;
    case KVR_DISCOVERY_LIMIT:
        kvr_api_error(reply, 503, "%s", err);
        json_object_set_new(reply->body, "limit", json_string("max_engines"));
        return;
    default: kvr_api_error(reply, 500, "%s", err); return;
    }
    /* Answer with what the first poll found (the operator sees at once
     * whether it is indexed, and why not); a slow engine answers pending. */
    if (res != KVR_DISCOVERY_UNCHANGED)
        kvr_discovery_wait_poll(srv->discovery, spec.url, srv->engine_post_wait_s);
    reply->status = res == KVR_DISCOVERY_ADDED ? 201 : 200;
    reply->body = json_pack("{s:s,s:s,s:o}", "status", "ok", "result",
                            kvr_discovery_result_name(res), "engine", engine_now(srv, spec.url));
}

void kvr_api_engines_delete(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    const char *url = NULL;
    kvr_json_err e = {{0}};
    if (!kvr_json_get_str(body, "url", true, true, KVR_ENGINE_URL_MAX, &url, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    size_t ranks = 0;
    if (kvr_discovery_remove(srv->discovery, url, &ranks) != KVR_DISCOVERY_REMOVED) {
        kvr_api_error(reply, 404, "field 'url': no engine %.300s is listed", url);
        return;
    }
    reply->status = 200;
    reply->body = json_pack("{s:s,s:s,s:s,s:I}", "status", "ok", "result", "removed", "url", url,
                            "ranks_removed", (json_int_t)ranks);
}
