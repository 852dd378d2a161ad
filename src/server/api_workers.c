/* GET /workers[?model_name=&routing_group=]: a bare JSON array, one element
 * per registered worker in the shape of Dynamo's standalone indexer
 * (SPEC §7.1: instance_id, source, status, model_name, routing_group,
 * block_size, endpoints, listeners) with kvrouter's extras beside it:
 * settings, capabilities, summed counters, and per-rank detail (listener
 * state, last seq, source and normalizer counters). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_engines.h"
#include "server/json_util.h"
#include "server/server_internal.h"
#include "server/workers_snapshot.h"

/* Every counter of a list as {"name": value}. */
static json_t *counters_obj(const void *c, const kvr_counter_desc *descs, size_t n)
{
    json_t *o = json_object();
    for (size_t k = 0; o && k < n; k++)
        json_object_set_new(o, descs[k].name,
                            json_integer((json_int_t)kvr_counter_value(c, &descs[k])));
    return o;
}

static json_t *norm_json(const kvr_normalizer_counters *c)
{
    json_t *o = counters_obj(c, kvr_normalizer_counter_descs, kvr_normalizer_counter_count);
    json_t *drops = json_object();
    for (int r = 1; r < KVR_DROP_COUNT; r++)
        json_object_set_new(drops, kvr_drop_reason_name((kvr_drop_reason)r),
                            json_integer((json_int_t)c->drops[r]));
    json_object_set_new(o, "drops", drops);
    return o;
}

static json_t *source_json(const kvr_source_counters *c)
{
    return counters_obj(c, kvr_source_counter_descs, kvr_source_counter_count);
}

/* Child object under "<rank>", created on first use. */
static json_t *rank_obj(json_t *parent, uint32_t rank)
{
    char key[12];
    snprintf(key, sizeof key, "%" PRIu32, rank);
    json_t *o = json_object_get(parent, key);
    if (!o) {
        o = json_object();
        json_object_set_new(parent, key, o);
    }
    return o;
}

/* The per-rank detail kvrouter adds under "ranks": what the normalizer
 * applied per batch rank, and what each socket's listener saw. */
static json_t *ranks_json(const kvr_worker_info *wi, const kvr_listener_info *ls, size_t n_ls)
{
    json_t *ranks = json_object();
    for (uint32_t r = 0; r < wi->n_ranks; r++) {
        const kvr_rank_info *ri = &wi->ranks[r];
        json_t *o = rank_obj(ranks, ri->dp_rank);
        json_object_set_new(o, "effective_mm_identity",
                            json_string(kvr_mm_identity_name(ri->effective_mode)));
        json_object_set_new(
            o, "applied",
            json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "batches", (json_int_t)ri->batches,
                      "events_stored", (json_int_t)ri->events_stored, "events_removed",
                      (json_int_t)ri->events_removed, "events_cleared",
                      (json_int_t)ri->events_cleared, "events_dropped",
                      (json_int_t)ri->events_dropped, "blocks_stored",
                      (json_int_t)ri->blocks_stored, "blocks_removed",
                      (json_int_t)ri->blocks_removed));
        json_object_set_new(o, "normalizer", norm_json(&ri->norm));
    }
    for (size_t i = 0; i < n_ls; i++) {
        const kvr_listener_info *l = &ls[i];
        json_t *o = rank_obj(ranks, l->dp_rank);
        json_object_set_new(o, "endpoint", json_string(l->endpoint));
        json_object_set_new(o, "replay_endpoint",
                            l->replay_endpoint[0] ? json_string(l->replay_endpoint) : json_null());
        json_object_set_new(o, "topic", json_string(l->topic));
        json_object_set_new(o, "listener_state", json_string(kvr_listener_state_name(l->state)));
        json_object_set_new(o, "connected", json_boolean(l->connected));
        json_object_set_new(o, "last_seq", l->has_seq ? kvr_json_u64_reply(l->last_seq) : json_null());
        json_object_set_new(o, "cursor", l->has_cursor ? kvr_json_u64_reply(l->cursor) : json_null());
        json_object_set_new(o, "replay_state",
                            json_string(kvr_replay_state_name(l->replay_state)));
        json_object_set_new(o, "replay_backoff_s", json_real(l->replay_backoff_s));
        json_object_set_new(o, "replay_failures", json_integer(l->replay_failures));
        json_object_set_new(o, "replay_last_error",
                            l->replay_error[0] ? json_string(l->replay_error) : json_null());
        json_object_set_new(o, "seconds_since_last_event",
                            l->seconds_since_last_event >= 0
                                ? json_real(l->seconds_since_last_event)
                                : json_null());
        json_object_set_new(o, "source", source_json(&l->c));
    }
    return ranks;
}

/* endpoints {"<rank>": addr} and listeners {"<rank>": {endpoint, status,
 * last_error?}}, Dynamo's per-rank view of a worker. */
static void listeners_json(json_t *w, const kvr_listener_info *ls, size_t n_ls)
{
    json_t *endpoints = json_object();
    json_t *listeners = json_object();
    for (size_t i = 0; i < n_ls; i++) {
        char err[256];
        kvr_lstatus st = kvr_listener_status(&ls[i], err, sizeof err);
        json_t *o = rank_obj(listeners, ls[i].dp_rank);
        json_object_set_new(o, "endpoint", json_string(ls[i].endpoint));
        json_object_set_new(o, "status", json_string(kvr_lstatus_name(st)));
        if (err[0])
            json_object_set_new(o, "last_error", json_string(err));
        char key[12];
        snprintf(key, sizeof key, "%" PRIu32, ls[i].dp_rank);
        json_object_set_new(endpoints, key, json_string(ls[i].endpoint));
    }
    json_object_set_new(w, "endpoints", endpoints);
    json_object_set_new(w, "listeners", listeners);
}

static json_t *counters_json(const kvr_worker_info *wi, const kvr_listener_info *ls, size_t n_ls)
{
    kvr_normalizer_counters norm;
    kvr_source_counters src;
    memset(&norm, 0, sizeof norm);
    memset(&src, 0, sizeof src);
    for (uint32_t r = 0; r < wi->n_ranks; r++)
        kvr_normalizer_counters_add(&norm, &wi->ranks[r].norm);
    for (size_t i = 0; i < n_ls; i++)
        kvr_source_counters_add(&src, &ls[i].c);
    json_t *counters = norm_json(&norm);
    json_t *sc = source_json(&src);
    json_object_update(counters, sc);
    json_decref(sc);
    return counters;
}

/* The KV capacity per rank the router uses (the same for every rank of a
 * worker: one registration, one estimate over its ranks) and where it came
 * from: registered (POST /register, the C API), discovered (registered by
 * discovery from the engine's answer), estimated (from the events: none
 * registered) or null with the capacity when unknown. */
static void capacity_json(json_t *caps, const kvr_worker_info *wi, bool discovered)
{
    const char *from = !wi->kv_capacity_tokens      ? NULL
                       : !wi->max_total_num_tokens ? "estimated"
                       : discovered                ? "discovered"
                                                   : "registered";
    json_object_set_new(caps, "kv_capacity_tokens",
                        from ? json_integer((json_int_t)wi->kv_capacity_tokens) : json_null());
    json_object_set_new(caps, "kv_capacity_source", from ? json_string(from) : json_null());
}

static json_t *worker_json(const kvr_worker_info *wi, const kvr_listener_info *ls, size_t n_ls)
{
    const char *detected = wi->mm_identity == KVR_MM_AUTO
                               ? (wi->wide_seen ? "engine_wide" : "legacy")
                               : kvr_mm_identity_name(wi->mm_identity);
    json_t *w = json_object();
    json_object_set_new(w, "instance_id", kvr_json_u64_reply(wi->worker_id));
    json_object_set_new(w, "source", json_string("zmq"));
    /* A worker without KV events and without an endpoint has nothing to
     * connect to: it is routable at once (approximated). */
    kvr_lstatus st = n_ls == 0 && wi->kv_events == KVR_KV_EVENTS_OFF ? KVR_LSTATUS_ACTIVE
                                                                     : kvr_worker_status(ls, n_ls);
    json_object_set_new(w, "status", json_string(kvr_lstatus_name(st)));
    json_object_set_new(w, "model_name", json_string(wi->model_name));
    json_object_set_new(w, "routing_group", json_string(wi->routing_group));
    json_object_set_new(w, "block_size", json_integer(wi->block_size));
    listeners_json(w, ls, n_ls);
    json_object_set_new(w, "lora_name", wi->lora_name[0] ? json_string(wi->lora_name) : json_null());
    json_object_set_new(w, "is_eagle", json_boolean(wi->is_eagle));
    json_t *caps = json_pack(
        "{s:s,s:s,s:b,s:b,s:b,s:s}", "mm_identity", kvr_mm_identity_name(wi->mm_identity),
        "detected_mm_identity", detected, "accepts_mm_hashes", wi->accepts_mm_hashes,
        "accepts_mm_hashes_explicit", wi->accepts_mm_hashes_explicit, "wide_seen", wi->wide_seen,
        "engine", kvr_engine_name(wi->engine));
    json_object_set_new(caps, "kv_events", json_string(kvr_kv_events_name(wi->kv_events)));
    json_object_set_new(caps, "image_token_id",
                        wi->has_image_token_id ? json_integer(wi->image_token_id) : json_null());
    json_object_set_new(caps, "max_total_num_tokens",
                        wi->max_total_num_tokens
                            ? json_integer((json_int_t)wi->max_total_num_tokens)
                            : json_null());
    json_object_set_new(w, "capabilities", caps);
    json_object_set_new(w, "counters", counters_json(wi, ls, n_ls));
    json_object_set_new(w, "resets", json_integer((json_int_t)wi->resets));
    json_object_set_new(w, "batches_rejected", json_integer((json_int_t)wi->batches_rejected));
    json_object_set_new(w, "ranks", ranks_json(wi, ls, n_ls));
    return w;
}

/* A query argument as a filter: absent or empty means any. */
static const char *filter_arg(json_t *args, const char *key)
{
    const char *v = json_string_value(json_object_get(args, key));
    return v && v[0] ? v : NULL;
}

void kvr_api_workers(kvr_server *srv, json_t *args, kvr_api_reply *reply)
{
    const char *model = filter_arg(args, "model_name");
    const char *group = filter_arg(args, "routing_group");
    kvr_workers_snapshot s;
    kvr_snapshot_result sr = kvr_workers_snapshot_take(srv, &s);
    if (sr != KVR_SNAPSHOT_OK) {
        kvr_workers_snapshot_error(sr, reply);
        return;
    }
    kvr_engine_infos engines; /* discovered workers get a "discovery" object */
    if (kvr_discovery_list(srv->discovery, &engines) != 0)
        memset(&engines, 0, sizeof engines);
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < s.n_workers; i++) {
        const kvr_worker_info *wi = &s.workers[i];
        if ((model && strcmp(model, wi->model_name) != 0) ||
            (group && strcmp(group, wi->routing_group) != 0))
            continue;
        json_t *w = worker_json(wi, s.listeners + s.first[i], s.first[i + 1] - s.first[i]);
        /* the capacity's source says whether discovery registered it */
        capacity_json(json_object_get(w, "capabilities"), wi,
                      kvr_api_worker_discovery(w, &engines, wi));
        if (json_array_append_new(arr, w) != 0) { /* w NULL too: all or no workers */
            json_decref(arr);
            arr = NULL;
        }
    }
    kvr_engine_infos_free(&engines);
    kvr_workers_snapshot_free(&s);
    if (!arr) {
        kvr_api_error(reply, 500, "out of memory");
        return;
    }
    reply->status = 200;
    reply->body = arr;
}
