/* GET /workers: settings, capabilities, listener state and every counter of
 * each worker's normalizers and sources. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_util.h"
#include "server/server_internal.h"
#include "server/workers_snapshot.h"

static void do_snapshot(kvr_source *src, void *arg)
{
    kvr_workers_snapshot *s = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    size_t n = kvr_indexer_list(ix, NULL, NULL, NULL, 0);
    s->workers = calloc(n ? n : 1, sizeof *s->workers);
    s->first = calloc(n + 1, sizeof *s->first);
    size_t total = kvr_source_count(src, NULL);
    s->listeners = calloc(total ? total : 1, sizeof *s->listeners);
    if (!s->workers || !s->first || !s->listeners)
        return;
    s->n_workers = kvr_indexer_list(ix, NULL, NULL, s->workers, n);
    if (s->n_workers > n)
        s->n_workers = n;
    size_t at = 0;
    for (size_t i = 0; i < s->n_workers; i++) {
        s->first[i] = at;
        kvr_worker_info *wi = &s->workers[i];
        kvr_worker *w = kvr_indexer_find(ix, wi->model_name, wi->routing_group, wi->worker_id);
        if (w && at < total)
            at += kvr_source_listeners(src, w, s->listeners + at, total - at);
        if (at > total)
            at = total;
    }
    s->first[s->n_workers] = at;
    s->n_listeners = at;
    s->ok = true;
}

int kvr_workers_snapshot_take(kvr_server *srv, kvr_workers_snapshot *s)
{
    memset(s, 0, sizeof *s);
    if (kvr_source_run(srv->src, do_snapshot, s) != 0 || !s->ok) {
        kvr_workers_snapshot_free(s);
        return -1;
    }
    return 0;
}

void kvr_workers_snapshot_free(kvr_workers_snapshot *s)
{
    free(s->workers);
    free(s->listeners);
    free(s->first);
    memset(s, 0, sizeof *s);
}

static json_t *norm_json(const kvr_normalizer_counters *c)
{
    json_t *o = json_object();
    for (size_t k = 0; k < kvr_normalizer_counter_count; k++) {
        const kvr_counter_desc *d = &kvr_normalizer_counter_descs[k];
        json_object_set_new(o, d->name, json_integer((json_int_t)kvr_counter_value(c, d)));
    }
    json_t *drops = json_object();
    for (int r = 1; r < KVR_DROP_COUNT; r++)
        json_object_set_new(drops, kvr_drop_reason_name((kvr_drop_reason)r),
                            json_integer((json_int_t)c->drops[r]));
    json_object_set_new(o, "drops", drops);
    return o;
}

static json_t *source_json(const kvr_source_counters *c)
{
    json_t *o = json_object();
    for (size_t k = 0; k < kvr_source_counter_count; k++) {
        const kvr_counter_desc *d = &kvr_source_counter_descs[k];
        json_object_set_new(o, d->name, json_integer((json_int_t)kvr_counter_value(c, d)));
    }
    return o;
}

static json_t *rank_obj(json_t *ranks, uint32_t rank)
{
    char key[12];
    snprintf(key, sizeof key, "%" PRIu32, rank);
    json_t *o = json_object_get(ranks, key);
    if (!o) {
        o = json_object();
        json_object_set_new(ranks, key, o);
    }
    return o;
}

static const char *worker_status(const kvr_listener_info *ls, size_t n)
{
    if (n == 0)
        return "no_listener";
    bool any_replay = false, all_live = true;
    for (size_t i = 0; i < n; i++) {
        any_replay |= ls[i].state == KVR_LISTENER_REPLAYING;
        all_live &= ls[i].state == KVR_LISTENER_LIVE;
    }
    return any_replay ? "replaying" : all_live ? "live" : "connecting";
}

static json_t *worker_json(const kvr_worker_info *wi, const kvr_listener_info *ls, size_t n_ls)
{
    kvr_normalizer_counters tot_norm;
    kvr_source_counters tot_src;
    memset(&tot_norm, 0, sizeof tot_norm);
    memset(&tot_src, 0, sizeof tot_src);
    json_t *ranks = json_object();
    json_t *endpoints = json_object();
    bool wide = wi->wide_seen;
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
        kvr_normalizer_counters_add(&tot_norm, &ri->norm);
    }
    for (size_t i = 0; i < n_ls; i++) {
        const kvr_listener_info *l = &ls[i];
        json_t *o = rank_obj(ranks, l->dp_rank);
        json_object_set_new(o, "endpoint", json_string(l->endpoint));
        json_object_set_new(o, "replay_endpoint",
                            l->replay_endpoint[0] ? json_string(l->replay_endpoint) : json_null());
        json_object_set_new(o, "topic", json_string(l->topic));
        json_object_set_new(o, "listener_state", json_string(kvr_listener_state_name(l->state)));
        json_object_set_new(o, "last_seq", l->has_seq ? kvr_json_u64_num(l->last_seq) : json_null());
        json_object_set_new(o, "seconds_since_last_event",
                            l->seconds_since_last_event >= 0
                                ? json_real(l->seconds_since_last_event)
                                : json_null());
        json_object_set_new(o, "source", source_json(&l->c));
        char key[12];
        snprintf(key, sizeof key, "%" PRIu32, l->dp_rank);
        json_object_set_new(endpoints, key, json_string(l->endpoint));
        kvr_source_counters_add(&tot_src, &l->c);
    }
    const char *detected = wi->mm_identity == KVR_MM_AUTO
                               ? (wide ? "engine_wide" : "legacy")
                               : kvr_mm_identity_name(wi->mm_identity);
    json_t *w = json_object();
    json_object_set_new(w, "instance_id", kvr_json_u64_num(wi->worker_id));
    json_object_set_new(w, "model_name", json_string(wi->model_name));
    json_object_set_new(w, "routing_group", json_string(wi->routing_group));
    json_object_set_new(w, "block_size", json_integer(wi->block_size));
    json_object_set_new(w, "lora_name", wi->lora_name[0] ? json_string(wi->lora_name) : json_null());
    json_object_set_new(w, "is_eagle", json_boolean(wi->is_eagle));
    json_object_set_new(w, "status", json_string(worker_status(ls, n_ls)));
    json_object_set_new(w, "endpoints", endpoints);
    json_object_set_new(
        w, "capabilities",
        json_pack("{s:s,s:s,s:b,s:b,s:b}", "mm_identity", kvr_mm_identity_name(wi->mm_identity),
                  "detected_mm_identity", detected, "accepts_mm_hashes", wi->accepts_mm_hashes,
                  "accepts_mm_hashes_explicit", wi->accepts_mm_hashes_explicit, "wide_seen",
                  wide));
    json_t *counters = norm_json(&tot_norm);
    json_t *src_counters = source_json(&tot_src);
    json_object_update(counters, src_counters);
    json_decref(src_counters);
    json_object_set_new(w, "counters", counters);
    json_object_set_new(w, "resets", json_integer((json_int_t)wi->resets));
    json_object_set_new(w, "batches_rejected", json_integer((json_int_t)wi->batches_rejected));
    json_object_set_new(w, "ranks", ranks);
    return w;
}

void kvr_api_workers(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    const char *model = json_string_value(json_object_get(body, "model_name"));
    kvr_workers_snapshot s;
    if (kvr_workers_snapshot_take(srv, &s) != 0) {
        kvr_api_error(reply, 503, "ingest thread is not running");
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < s.n_workers; i++) {
        if (model && strcmp(model, s.workers[i].model_name) != 0)
            continue;
        json_array_append_new(arr, worker_json(&s.workers[i], s.listeners + s.first[i],
                                               s.first[i + 1] - s.first[i]));
    }
    kvr_workers_snapshot_free(&s);
    reply->status = 200;
    reply->body = json_pack("{s:o}", "workers", arr);
}
