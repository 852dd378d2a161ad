/* GET /metrics: Prometheus text exposition (format 0.0.4). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"
#include "server/workers_snapshot.h"

/* Label value escaping per the exposition format: \\, \", \n. */
static void label_str(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            out[o++] = '\\';
            out[o++] = *s;
        } else if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = 0;
}

typedef struct {
    char model[KVR_NAME_MAX * 2];
    char group[KVR_NAME_MAX * 2];
    uint64_t worker;
} wlabels;

#define WL "model=\"%s\",group=\"%s\",worker=\"%" PRIu64 "\""
#define WLA(l) (l)->model, (l)->group, (l)->worker

static void help(kvr_sbuf *b, const char *name, const char *type, const char *text)
{
    kvr_sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* The HELP/TYPE lines of a counter list's gauges (its counters share one
 * family, whose help the caller writes). */
static void list_help(kvr_sbuf *b, const kvr_counter_desc *descs, size_t n, const char *prefix)
{
    char gauge[96];
    for (size_t k = 0; k < n; k++) {
        if (descs[k].kind != KVR_METRIC_GAUGE)
            continue;
        snprintf(gauge, sizeof gauge, "%s%s", prefix, descs[k].name);
        help(b, gauge, "gauge", descs[k].help);
    }
}

/* A counter list's values: counters are labels of `family`; each gauge is its
 * own metric, named prefix + name. */
static void list_values(kvr_sbuf *b, const wlabels *l, const kvr_counter_desc *descs, size_t n,
                        const void *counters, const char *prefix, const char *family)
{
    for (size_t k = 0; k < n; k++) {
        const kvr_counter_desc *d = &descs[k];
        if (d->kind == KVR_METRIC_GAUGE)
            kvr_sbuf_printf(b, "%s%s{" WL "} %" PRIu64 "\n", prefix, d->name, WLA(l),
                            kvr_counter_value(counters, d));
        else
            kvr_sbuf_printf(b, "%s{" WL ",counter=\"%s\"} %" PRIu64 "\n", family, WLA(l),
                            d->name, kvr_counter_value(counters, d));
    }
}

static void worker_metrics(kvr_sbuf *b, const kvr_workers_snapshot *s)
{
    help(b, "kvr_events_total", "counter", "KV events received, by type");
    help(b, "kvr_blocks_total", "counter", "Blocks named by received events, by operation");
    help(b, "kvr_drops_total", "counter", "Events dropped, by reason");
    help(b, "kvr_mm_total", "counter", "Media exclusion counters (SPEC 5), by name");
    list_help(b, kvr_normalizer_counter_descs, kvr_normalizer_counter_count, "kvr_");
    help(b, "kvr_source_total", "counter", "Sequence and transport counters, by name");
    list_help(b, kvr_source_counter_descs, kvr_source_counter_count, "kvr_source_");
    for (size_t i = 0; i < s->n_workers; i++) {
        const kvr_worker_info *wi = &s->workers[i];
        wlabels l;
        label_str(l.model, sizeof l.model, wi->model_name);
        label_str(l.group, sizeof l.group, wi->routing_group);
        l.worker = wi->worker_id;
        kvr_source_counters c;
        memset(&c, 0, sizeof c);
        for (size_t k = s->first[i]; k < s->first[i + 1]; k++)
            kvr_source_counters_add(&c, &s->listeners[k].c);
        kvr_normalizer_counters n;
        memset(&n, 0, sizeof n);
        for (uint32_t r = 0; r < wi->n_ranks; r++)
            kvr_normalizer_counters_add(&n, &wi->ranks[r].norm);
        const char *types[] = {"stored", "removed", "cleared", "dropped"};
        uint64_t ev[] = {c.events_stored, c.events_removed, c.events_cleared, c.events_dropped};
        for (int t = 0; t < 4; t++)
            kvr_sbuf_printf(b, "kvr_events_total{" WL ",type=\"%s\"} %" PRIu64 "\n", WLA(&l),
                            types[t], ev[t]);
        kvr_sbuf_printf(b, "kvr_blocks_total{" WL ",op=\"stored\"} %" PRIu64 "\n", WLA(&l),
                        c.blocks_stored);
        kvr_sbuf_printf(b, "kvr_blocks_total{" WL ",op=\"removed\"} %" PRIu64 "\n", WLA(&l),
                        c.blocks_removed);
        for (int d = 1; d < KVR_DROP_COUNT; d++)
            kvr_sbuf_printf(b, "kvr_drops_total{" WL ",reason=\"%s\"} %" PRIu64 "\n", WLA(&l),
                            kvr_drop_reason_name((kvr_drop_reason)d), n.drops[d]);
        list_values(b, &l, kvr_normalizer_counter_descs, kvr_normalizer_counter_count, &n,
                    "kvr_", "kvr_mm_total");
        list_values(b, &l, kvr_source_counter_descs, kvr_source_counter_count, &c,
                    "kvr_source_", "kvr_source_total");
    }
    uint64_t by_state[KVR_LISTENER_STATE_COUNT] = {0};
    for (size_t k = 0; k < s->n_listeners; k++)
        by_state[s->listeners[k].state]++;
    help(b, "kvr_listeners", "gauge", "ZeroMQ listeners (worker x rank), by state");
    for (int st = 0; st < KVR_LISTENER_STATE_COUNT; st++)
        kvr_sbuf_printf(b, "kvr_listeners{state=\"%s\"} %" PRIu64 "\n",
                        kvr_listener_state_name((kvr_listener_state)st), by_state[st]);
}

static void index_metrics(kvr_sbuf *b, kvr_server *srv, const kvr_workers_snapshot *s)
{
    help(b, "kvr_index_blocks", "gauge", "Blocks (tree nodes) in the index");
    help(b, "kvr_index_ownerships", "gauge", "(block, owner) pairs in the index");
    help(b, "kvr_index_bytes", "gauge", "Heap bytes held by the index");
    for (size_t i = 0; i < s->n_workers; i++) {
        const kvr_worker_info *wi = &s->workers[i];
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(s->workers[j].model_name, wi->model_name) == 0 &&
                   strcmp(s->workers[j].routing_group, wi->routing_group) == 0;
        kvr_index *idx = seen ? NULL : kvr_indexer_index(srv->ix, wi->model_name,
                                                         wi->routing_group);
        if (!idx)
            continue;
        kvr_index_stats st;
        kvr_index_stats_get(idx, &st);
        char m[KVR_NAME_MAX * 2], g[KVR_NAME_MAX * 2];
        label_str(m, sizeof m, wi->model_name);
        label_str(g, sizeof g, wi->routing_group);
        kvr_sbuf_printf(b, "kvr_index_blocks{model=\"%s\",group=\"%s\"} %" PRIu64 "\n", m, g,
                        st.nodes);
        kvr_sbuf_printf(b, "kvr_index_ownerships{model=\"%s\",group=\"%s\"} %" PRIu64 "\n", m,
                        g, st.ownerships);
        kvr_sbuf_printf(b, "kvr_index_bytes{model=\"%s\",group=\"%s\"} %" PRIu64 "\n", m, g,
                        st.bytes);
    }
}

static void http_metrics(kvr_sbuf *b, kvr_server *srv)
{
    help(b, "kvr_http_request_duration_seconds", "histogram",
         "HTTP request handling latency, by endpoint");
    for (size_t i = 0; i < srv->n_endpoints; i++) {
        kvr_endpoint *e = &srv->endpoints[i];
        uint64_t cum = 0;
        for (int k = 0; k < KVR_LAT_BUCKETS; k++) {
            cum += atomic_load(&e->buckets[k]);
            kvr_sbuf_printf(b,
                            "kvr_http_request_duration_seconds_bucket{endpoint=\"%s\",le=\"%g\"} "
                            "%" PRIu64 "\n",
                            e->path, kvr_lat_bounds[k], cum);
        }
        uint64_t count = atomic_load(&e->count);
        kvr_sbuf_printf(b,
                        "kvr_http_request_duration_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} "
                        "%" PRIu64 "\n",
                        e->path, count);
        kvr_sbuf_printf(b, "kvr_http_request_duration_seconds_sum{endpoint=\"%s\"} %.6f\n",
                        e->path, (double)atomic_load(&e->sum_us) / 1e6);
        kvr_sbuf_printf(b, "kvr_http_request_duration_seconds_count{endpoint=\"%s\"} %" PRIu64
                        "\n", e->path, count);
    }
    help(b, "kvr_http_errors_total", "counter", "HTTP error replies, by endpoint and class");
    for (size_t i = 0; i < srv->n_endpoints; i++) {
        kvr_endpoint *e = &srv->endpoints[i];
        kvr_sbuf_printf(b, "kvr_http_errors_total{endpoint=\"%s\",class=\"4xx\"} %" PRIu64 "\n",
                        e->path, atomic_load(&e->status_4xx));
        kvr_sbuf_printf(b, "kvr_http_errors_total{endpoint=\"%s\",class=\"5xx\"} %" PRIu64 "\n",
                        e->path, atomic_load(&e->status_5xx));
    }
    help(b, "kvr_http_body_too_large_total", "counter", "Requests refused with 413");
    kvr_sbuf_printf(b, "kvr_http_body_too_large_total %" PRIu64 "\n",
                    atomic_load(&srv->requests_413));
    help(b, "kvr_dump_records_loaded_total", "counter", "Store records loaded from peers");
    kvr_sbuf_printf(b, "kvr_dump_records_loaded_total %" PRIu64 "\n",
                    atomic_load(&srv->dump_records_loaded));
}

static void router_metrics(kvr_sbuf *b, kvr_server *srv)
{
    kvr_router_stats st;
    kvr_router_stats_get(srv->router, &st);
    help(b, "kvr_router_total", "counter", "Router calls and booking outcomes, by name");
    const struct {
        const char *name;
        uint64_t v;
    } counters[] = {{"queries", st.queries},
                    {"routes", st.routes},
                    {"hash_passes", st.hash_passes},
                    {"bookings_expired", st.bookings_expired},
                    {"bookings_released", st.bookings_released},
                    {"prefill_done", st.prefill_done}};
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        kvr_sbuf_printf(b, "kvr_router_total{name=\"%s\"} %" PRIu64 "\n", counters[i].name,
                        counters[i].v);
    help(b, "kvr_router_bookings_active", "gauge", "Requests booked and not yet freed");
    kvr_sbuf_printf(b, "kvr_router_bookings_active %" PRIu64 "\n", st.bookings_active);
    help(b, "kvr_router_held_blocks", "gauge",
         "Distinct blocks held by active bookings, over all (worker, rank)");
    kvr_sbuf_printf(b, "kvr_router_held_blocks %" PRIu64 "\n", st.held_blocks);
    help(b, "kvr_router_held_bytes", "gauge", "Memory of the booking block sets");
    kvr_sbuf_printf(b, "kvr_router_held_bytes %" PRIu64 "\n", st.held_bytes);
}

void kvr_api_metrics(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    (void)body;
    kvr_workers_snapshot s;
    if (kvr_workers_snapshot_take(srv, &s) != 0) {
        kvr_api_error(reply, 503, "ingest thread is not running");
        return;
    }
    kvr_sbuf b = {0};
    help(&b, "kvr_workers", "gauge", "Registered workers");
    kvr_sbuf_printf(&b, "kvr_workers %zu\n", s.n_workers);
    worker_metrics(&b, &s);
    index_metrics(&b, srv, &s);
    router_metrics(&b, srv);
    http_metrics(&b, srv);
    kvr_workers_snapshot_free(&s);
    if (b.failed || !b.data) {
        free(b.data);
        kvr_api_error(reply, 500, "out of memory");
        return;
    }
    reply->status = 200;
    reply->text = b.data;
    reply->content_type = "text/plain; version=0.0.4";
}
