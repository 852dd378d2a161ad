#include "sim/kvrouter_policy.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock/clock.h"
#include "sim/router_client.h"

struct kvr_sim_kr {
    const kvr_sim_config *cfg;
    kvr_sim_engine **eng;
    size_t n_slots;
    kvr_sim_http *http;
    kvr_sim_buf body, resp;
    bool *dirty;
    size_t since_sync;
    uint64_t route_errors, sync_timeouts, sync_polls;
    uint64_t overlap_tokens; /* sum of the router's overlap_tokens for its choices */
    double sync_s;
    bool warned;
};

static uint64_t worker_id(const kvr_sim_kr *kr, size_t slot) { return slot / kr->cfg->dp + 1; }
static uint32_t slot_rank(const kvr_sim_kr *kr, size_t slot) { return (uint32_t)(slot % kr->cfg->dp); }

static bool post(kvr_sim_kr *kr, const char *path, long *status)
{
    *status = 0;
    return kvr_sim_http_call(kr->http, path, kr->body.data, kr->body.len, status, &kr->resp) == 0;
}

static void warn_once(kvr_sim_kr *kr, const char *what, long status)
{
    if (kr->warned || !kr->cfg->log)
        return;
    kr->warned = true;
    fprintf(kr->cfg->log, "sim: %s failed (HTTP %ld): %.300s\n", what, status,
            kr->resp.data ? kr->resp.data : "");
}

static bool json_u64(json_t *v, uint64_t *out)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_string(v)) {
        char *end;
        unsigned long long x = strtoull(json_string_value(v), &end, 10);
        if (*end == '\0' && end != json_string_value(v)) {
            *out = x;
            return true;
        }
    }
    return false;
}

/* The router's last applied sequence number for (worker, rank), from
 * GET /workers ([{"instance_id", "ranks": {"<r>": {"last_seq"}}}]).
 * Returns -1 while it has none. */
static int64_t router_last_seq(kvr_sim_kr *kr, json_t *workers, uint64_t id, uint32_t rank)
{
    size_t i;
    json_t *w;
    json_array_foreach(workers, i, w) {
        uint64_t wid;
        const char *model = json_string_value(json_object_get(w, "model_name"));
        if (!json_u64(json_object_get(w, "instance_id"), &wid) || wid != id || !model ||
            strcmp(model, kr->cfg->model_name) != 0)
            continue;
        char key[16];
        snprintf(key, sizeof key, "%" PRIu32, rank);
        uint64_t seq;
        json_t *r = json_object_get(json_object_get(w, "ranks"), key);
        if (r && json_u64(json_object_get(r, "last_seq"), &seq))
            return (int64_t)seq;
        return -1;
    }
    return -1;
}

static bool any_dirty(const kvr_sim_kr *kr)
{
    for (size_t s = 0; s < kr->n_slots; s++)
        if (kr->dirty[s])
            return true;
    return false;
}

void kvr_sim_kr_sync(kvr_sim_kr *kr)
{
    double t0 = kvr_sim_seconds(CLOCK_MONOTONIC);
    double deadline = t0 + kr->cfg->sync_timeout_ms / 1000.0;
    unsigned backoff_us = 50;
    while (any_dirty(kr)) {
        long status;
        kr->sync_polls++;
        if (kvr_sim_http_call(kr->http, "/workers", NULL, 0, &status, &kr->resp) == 0 &&
            status == 200) {
            json_t *root = json_loadb(kr->resp.data, kr->resp.len, 0, NULL);
            json_t *workers = root;
            for (size_t s = 0; s < kr->n_slots; s++) {
                if (!kr->dirty[s])
                    continue;
                int64_t want = kvr_sim_engine_last_seq(kr->eng[s]);
                if (router_last_seq(kr, workers, worker_id(kr, s), slot_rank(kr, s)) >= want)
                    kr->dirty[s] = false;
            }
            json_decref(root);
        }
        if (kvr_sim_seconds(CLOCK_MONOTONIC) > deadline) {
            kr->sync_timeouts++;
            memset(kr->dirty, 0, kr->n_slots * sizeof *kr->dirty);
            break;
        }
        if (any_dirty(kr)) {
            struct timespec ts = {0, (long)backoff_us * 1000};
            nanosleep(&ts, NULL);
            if (backoff_us < 2000)
                backoff_us *= 2;
        }
    }
    kr->since_sync = 0;
    kr->sync_s += kvr_sim_seconds(CLOCK_MONOTONIC) - t0;
}

void kvr_sim_kr_published(kvr_sim_kr *kr, size_t slot)
{
    if (kvr_sim_engine_last_seq(kr->eng[slot]) >= 0)
        kr->dirty[slot] = true;
    if (++kr->since_sync >= (kr->cfg->sync_every ? kr->cfg->sync_every : 1))
        kvr_sim_kr_sync(kr);
}

static int register_slot(kvr_sim_kr *kr, size_t s, char *err, size_t errlen)
{
    size_t engine = s / kr->cfg->dp;
    bool kimi = kvr_sim_engine_is_kimi(kr->cfg, engine);
    kvr_sim_buf_reset(&kr->body);
    kvr_sim_buf_printf(&kr->body,
                       "{\"instance_id\":%" PRIu64 ",\"dp_rank\":%" PRIu32
                       ",\"endpoint\":\"%s\",\"replay_endpoint\":\"%s\",\"model_name\":\"%s\","
                       "\"block_size\":%" PRIu32 ",\"mm_identity\":\"%s\",\"is_eagle\":%s,"
                       "\"max_total_num_tokens\":%zu}",
                       worker_id(kr, s), slot_rank(kr, s), kvr_sim_engine_endpoint(kr->eng[s]),
                       kvr_sim_engine_replay_endpoint(kr->eng[s]), kr->cfg->model_name,
                       kr->cfg->block_size, kimi ? "engine_wide" : "legacy",
                       kr->cfg->eagle ? "true" : "false",
                       kr->cfg->capacity * (size_t)kr->cfg->block_size);
    long status;
    if (!post(kr, "/register", &status) || (status != 200 && status != 201)) {
        snprintf(err, errlen, "POST /register for worker %" PRIu64 " rank %" PRIu32
                              " failed (HTTP %ld): %.200s",
                 worker_id(kr, s), slot_rank(kr, s), status, kr->resp.data ? kr->resp.data : "");
        return -1;
    }
    return 0;
}

kvr_sim_kr *kvr_sim_kr_create(const kvr_sim_config *cfg, kvr_sim_engine **engines,
                              size_t n_slots, char *err, size_t errlen)
{
    kvr_sim_kr *kr = calloc(1, sizeof *kr);
    if (!kr) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    kr->cfg = cfg;
    kr->eng = engines;
    kr->n_slots = n_slots;
    kr->dirty = calloc(n_slots, sizeof *kr->dirty);
    kr->http = kvr_sim_http_create(cfg->router_url);
    if (!kr->dirty || !kr->http) {
        snprintf(err, errlen, "cannot set up the HTTP client");
        goto fail;
    }
    for (size_t s = 0; s < n_slots; s++)
        if (register_slot(kr, s, err, errlen) != 0)
            goto fail;
    for (size_t s = 0; s < n_slots; s++) {
        if (!kvr_sim_engine_wait_subscriber(engines[s], cfg->sync_timeout_ms)) {
            snprintf(err, errlen, "the router never subscribed to %s",
                     kvr_sim_engine_endpoint(engines[s]));
            goto fail;
        }
        /* A fresh engine announces an empty cache: whatever the router kept
         * for this worker id from an earlier run is gone. */
        if (kvr_sim_engine_clear(engines[s]) != 0) {
            snprintf(err, errlen, "publish failed on %s", kvr_sim_engine_endpoint(engines[s]));
            goto fail;
        }
        kr->dirty[s] = true;
    }
    kvr_sim_kr_sync(kr);
    if (kr->sync_timeouts) {
        snprintf(err, errlen, "the router did not apply the engines' first batches within %d ms",
                 cfg->sync_timeout_ms);
        goto fail;
    }
    kr->sync_s = 0;
    kr->sync_polls = 0;
    return kr;
fail:
    kvr_sim_kr_destroy(kr);
    return NULL;
}

void kvr_sim_kr_destroy(kvr_sim_kr *kr)
{
    if (!kr)
        return;
    for (size_t s = 0; kr->http && s < kr->n_slots; s++) {
        kvr_sim_buf_reset(&kr->body);
        kvr_sim_buf_printf(&kr->body,
                           "{\"instance_id\":%" PRIu64 ",\"dp_rank\":%" PRIu32
                           ",\"model_name\":\"%s\"}",
                           worker_id(kr, s), slot_rank(kr, s), kr->cfg->model_name);
        long status;
        post(kr, "/unregister", &status);
    }
    kvr_sim_http_destroy(kr->http);
    kvr_sim_buf_free(&kr->body);
    kvr_sim_buf_free(&kr->resp);
    free(kr->dirty);
    free(kr);
}

long kvr_sim_kr_route(kvr_sim_kr *kr, size_t idx, const kvr_sim_request *req, uint32_t osl,
                      double t)
{
    kvr_sim_buf *b = &kr->body;
    kvr_sim_buf_reset(b);
    kvr_sim_buf_printf(b, "{\"model_name\":\"%s\",\"request_id\":\"sim-%zu\",\"osl\":%" PRIu32
                          ",\"time_s\":%.6f,\"token_ids\":[",
                       kr->cfg->model_name, idx, osl, t);
    /* Prompts run to 100k+ tokens: format by hand rather than build a JSON
     * tree per token. */
    char num[16];
    for (size_t i = 0; i < req->n; i++) {
        int len = snprintf(num, sizeof num, i ? ",%" PRIu32 : "%" PRIu32, req->route[i]);
        kvr_sim_buf_append(b, num, (size_t)len);
    }
    kvr_sim_buf_printf(b, "]");
    if (req->n_items) {
        kvr_sim_buf_printf(b, ",\"mm_items\":[");
        for (size_t i = 0; i < req->n_items; i++)
            kvr_sim_buf_printf(b, "%s{\"start\":%" PRIu32 ",\"end\":%" PRIu32
                                  ",\"mm_hash\":%" PRIu64 "}",
                               i ? "," : "", req->items[i].start, req->items[i].end,
                               req->items[i].mm_hash);
        kvr_sim_buf_printf(b, "]");
    }
    if (kr->cfg->route_extra && kr->cfg->route_extra[0])
        kvr_sim_buf_printf(b, ",%s", kr->cfg->route_extra);
    kvr_sim_buf_printf(b, "}");
    long status;
    if (!post(kr, "/route", &status) || status != 200) {
        kr->route_errors++;
        warn_once(kr, "POST /route", status);
        return -1;
    }
    json_t *root = json_loadb(kr->resp.data, kr->resp.len, 0, NULL);
    uint64_t id = 0, rank = 0;
    long slot = -1;
    if (json_u64(json_object_get(root, "worker_id"), &id) && id >= 1 &&
        (!json_object_get(root, "dp_rank") || json_u64(json_object_get(root, "dp_rank"), &rank)) &&
        rank < kr->cfg->dp && (id - 1) * kr->cfg->dp + rank < kr->n_slots)
        slot = (long)((id - 1) * kr->cfg->dp + rank);
    uint64_t ov;
    if (slot >= 0 && json_u64(json_object_get(root, "overlap_tokens"), &ov))
        kr->overlap_tokens += ov;
    json_decref(root);
    if (slot < 0) {
        kr->route_errors++;
        warn_once(kr, "POST /route (reply names no simulated worker)", status);
    }
    return slot;
}

static void request_call(kvr_sim_kr *kr, const char *path, size_t idx, double t)
{
    kvr_sim_buf_reset(&kr->body);
    kvr_sim_buf_printf(&kr->body, "{\"request_id\":\"sim-%zu\",\"time_s\":%.6f}", idx, t);
    long status;
    if (!post(kr, path, &status) || status != 200) {
        kr->route_errors++;
        warn_once(kr, path, status);
    }
}

/* The virtual time goes with every call (the router the sim starts runs
 * with clock_from_requests), so the router times prefills, drains queues
 * and expires bookings in the sim's time, not in the sim's wall time. */
void kvr_sim_kr_prefill_done(kvr_sim_kr *kr, size_t idx, double t)
{
    request_call(kr, "/prefill_done", idx, t);
}

void kvr_sim_kr_free(kvr_sim_kr *kr, size_t idx, double t) { request_call(kr, "/free", idx, t); }

static uint64_t counter(json_t *obj, const char *key)
{
    uint64_t v = 0;
    json_u64(json_object_get(obj, key), &v);
    return v;
}

void kvr_sim_kr_collect(kvr_sim_kr *kr, kvr_sim_result *out)
{
    long status;
    if (kvr_sim_http_call(kr->http, "/workers", NULL, 0, &status, &kr->resp) != 0 ||
        status != 200)
        return;
    json_t *root = json_loadb(kr->resp.data, kr->resp.len, 0, NULL);
    json_t *drops_by_reason = json_object();
    size_t i;
    json_t *w;
    json_array_foreach(root, i, w) {
        const char *model = json_string_value(json_object_get(w, "model_name"));
        if (!model || strcmp(model, kr->cfg->model_name) != 0)
            continue;
        json_t *c = json_object_get(w, "counters");
        out->router_wide_tokens += counter(c, "wide_tokens_seen");
        out->router_mm_excluded += counter(c, "mm_blocks_excluded");
        out->router_seq_gaps += counter(c, "seq_gaps");
        const char *reason;
        json_t *v;
        json_object_foreach(json_object_get(c, "drops"), reason, v) {
            uint64_t n = 0;
            if (!json_u64(v, &n) || n == 0)
                continue;
            out->router_drops += n;
            uint64_t prev = counter(drops_by_reason, reason);
            json_object_set_new(drops_by_reason, reason, json_integer((json_int_t)(prev + n)));
        }
    }
    size_t len = 0;
    const char *reason;
    json_t *v;
    out->router_drop_detail[0] = '\0';
    json_object_foreach(drops_by_reason, reason, v) {
        int m = snprintf(out->router_drop_detail + len, sizeof out->router_drop_detail - len,
                         "%s%s=%lld", len ? " " : "", reason, (long long)json_integer_value(v));
        if (m < 0 || (size_t)m >= sizeof out->router_drop_detail - len)
            break;
        len += (size_t)m;
    }
    json_decref(drops_by_reason);
    json_decref(root);
}

void kvr_sim_kr_stats(const kvr_sim_kr *kr, kvr_sim_result *out)
{
    out->route_errors = kr->route_errors;
    out->sync_timeouts = kr->sync_timeouts;
    out->http_calls = kvr_sim_http_calls(kr->http);
    out->http_s = kvr_sim_http_seconds(kr->http);
    out->sync_polls = kr->sync_polls;
    out->sync_s = kr->sync_s;
    out->router_overlap_tokens = kr->overlap_tokens;
}
