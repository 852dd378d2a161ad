/* GET /metrics: Prometheus text exposition (format 0.0.4). This file picks
 * the families and their order; metrics.h has the writing rules. Source and
 * normalizer counters come from their layers' X-macro lists, so a new
 * counter there is a new family here with nothing to add: each counter is
 * kvr_<source_>NAME_total (gauges drop _total), except the few whose names
 * share a prefix that makes them parts of one quantity (events_stored ->
 * kvr_events_total{type="stored"}, see source_groups). Fleet totals always;
 * the same families per worker, named kvr_worker_*, with
 * metrics_per_worker. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/metrics.h"
#include "util/clock.h"

/* Counters of a list whose names start with prefix are one family, split by
 * a label whose value is the rest of the name. */
typedef struct {
    const char *prefix; /* of the counter names */
    const char *family; /* without kvr_ and _total */
    const char *label;
    const char *help;
} group_rule;

static const group_rule source_groups[] = {
    {"events_", "events", "type", "KV events in applied batches, by type"},
    {"blocks_", "blocks", "op", "Blocks named by applied events, by operation"},
    {"replays_", "replays", "result", "Gap replays from the engine's replay endpoint, by result"},
};

typedef struct {
    const kvr_counter_desc *descs;
    size_t n;
    const char *prefix;        /* of families not grouped: "source_" or "" */
    const group_rule *groups;
    size_t n_groups;
    const void *total;         /* fleet sum */
    const void *rows;          /* per worker, stride bytes apart; NULL when off */
    size_t stride;
} counter_list;

typedef struct {
    char name[96];     /* without kvr_ or kvr_worker_, with _total for counters */
    const char *label; /* NULL: the family has one member */
    const char *value; /* the label's value */
    const char *help;
    bool gauge;
} family_ref;

static family_ref family_of(const counter_list *cl, const kvr_counter_desc *d)
{
    family_ref f = {.help = d->help, .gauge = d->kind == KVR_METRIC_GAUGE};
    for (size_t g = 0; !f.gauge && g < cl->n_groups; g++) {
        size_t len = strlen(cl->groups[g].prefix);
        if (strncmp(d->name, cl->groups[g].prefix, len) == 0) {
            snprintf(f.name, sizeof f.name, "%s_total", cl->groups[g].family);
            f.label = cl->groups[g].label;
            f.value = d->name + len;
            f.help = cl->groups[g].help;
            return f;
        }
    }
    snprintf(f.name, sizeof f.name, "%s%s%s", cl->prefix, d->name, f.gauge ? "" : "_total");
    return f;
}

/* A counter list's families, worked out once per scrape: refs[k] is desc
 * k's family, lead[k] the first desc of that family. */
#define KVR_LIST_MAX 64
typedef struct {
    family_ref refs[KVR_LIST_MAX];
    size_t lead[KVR_LIST_MAX];
    size_t n;
} list_plan;

static void plan_list(const counter_list *cl, list_plan *p)
{
    p->n = cl->n < KVR_LIST_MAX ? cl->n : KVR_LIST_MAX;
    for (size_t k = 0; k < p->n; k++) {
        p->refs[k] = family_of(cl, &cl->descs[k]);
        p->lead[k] = k;
        for (size_t j = 0; j < k; j++)
            if (strcmp(p->refs[j].name, p->refs[k].name) == 0) {
                p->lead[k] = p->lead[j];
                break;
            }
    }
}

/* The family led by desc `first`: fleet samples (scope "kvr_") or per-worker
 * samples (scope "kvr_worker_"). */
static void list_family(kvr_metrics_ctx *m, const counter_list *cl, const list_plan *p,
                        size_t first, const char *scope)
{
    const family_ref *f = &p->refs[first];
    char name[128];
    snprintf(name, sizeof name, "%s%s", scope, f->name);
    kvr_metrics_family(m->b, name, f->gauge ? "gauge" : "counter", f->help);
    bool per_worker = strcmp(scope, "kvr_worker_") == 0;
    size_t rows = per_worker ? m->s->n_workers : 1;
    for (size_t r = 0; r < rows; r++) {
        const void *c = per_worker ? (const char *)cl->rows + r * cl->stride : cl->total;
        const char *wl = per_worker ? m->wlabels[r] : "";
        for (size_t k = first; k < p->n; k++) {
            if (p->lead[k] != first)
                continue;
            const family_ref *g = &p->refs[k];
            uint64_t v = kvr_counter_value(c, &cl->descs[k]);
            const char *sep = wl[0] && g->label ? "," : "";
            if (g->label)
                kvr_sbuf_printf(m->b, "%s{%s%s%s=\"%s\"} %" PRIu64 "\n", name, wl, sep,
                                g->label, g->value, v);
            else if (wl[0])
                kvr_sbuf_printf(m->b, "%s{%s} %" PRIu64 "\n", name, wl, v);
            else
                kvr_sbuf_printf(m->b, "%s %" PRIu64 "\n", name, v);
        }
    }
}

static void list_families(kvr_metrics_ctx *m, const counter_list *cl, const char *scope)
{
    list_plan p;
    plan_list(cl, &p);
    for (size_t k = 0; k < p.n; k++)
        if (p.lead[k] == k)
            list_family(m, cl, &p, k, scope);
}

/* kvr_drops_total{reason}: from total, or per worker from the counters at
 * rows, stride bytes apart. */
static void drops_family(kvr_metrics_ctx *m, const char *scope, const kvr_normalizer_counters *total,
                         const void *rows, size_t stride)
{
    char name[64];
    snprintf(name, sizeof name, "%sdrops_total", scope);
    kvr_metrics_family(m->b, name, "counter", "Events dropped before the index, by reason");
    size_t n = rows ? m->s->n_workers : 1;
    for (size_t r = 0; r < n; r++) {
        const kvr_normalizer_counters *c =
            rows ? (const kvr_normalizer_counters *)((const char *)rows + r * stride) : total;
        for (int d = 1; d < KVR_DROP_COUNT; d++)
            kvr_sbuf_printf(m->b, "%s{%s%sreason=\"%s\"} %" PRIu64 "\n", name,
                            rows ? m->wlabels[r] : "", rows ? "," : "",
                            kvr_drop_reason_name((kvr_drop_reason)d), c->drops[d]);
    }
}

typedef struct {
    kvr_source_counters src;
    kvr_normalizer_counters norm;
} worker_sums;

/* Source and normalizer counters: fleet totals, then per worker. */
static void counter_lists(kvr_metrics_ctx *m)
{
    const kvr_workers_snapshot *s = m->s;
    worker_sums total;
    memset(&total, 0, sizeof total);
    worker_sums *rows = m->per_worker ? calloc(s->n_workers ? s->n_workers : 1, sizeof *rows)
                                      : NULL;
    if (m->per_worker && !rows) {
        m->b->failed = true;
        return;
    }
    for (size_t i = 0; i < s->n_workers; i++) {
        worker_sums w;
        memset(&w, 0, sizeof w);
        for (size_t k = s->first[i]; k < s->first[i + 1]; k++)
            kvr_source_counters_add(&w.src, &s->listeners[k].c);
        for (uint32_t r = 0; r < s->workers[i].n_ranks; r++)
            kvr_normalizer_counters_add(&w.norm, &s->workers[i].ranks[r].norm);
        kvr_source_counters_add(&total.src, &w.src);
        kvr_normalizer_counters_add(&total.norm, &w.norm);
        if (rows)
            rows[i] = w;
    }
    counter_list src = {kvr_source_counter_descs, kvr_source_counter_count, "source_",
                        source_groups, sizeof source_groups / sizeof source_groups[0],
                        &total.src, rows ? &rows[0].src : NULL, sizeof *rows};
    counter_list norm = {kvr_normalizer_counter_descs, kvr_normalizer_counter_count, "", NULL, 0,
                         &total.norm, rows ? &rows[0].norm : NULL, sizeof *rows};
    list_families(m, &src, "kvr_");
    list_families(m, &norm, "kvr_");
    drops_family(m, "kvr_", &total.norm, NULL, 0);
    if (rows) {
        list_families(m, &src, "kvr_worker_");
        list_families(m, &norm, "kvr_worker_");
        drops_family(m, "kvr_worker_", NULL, &rows[0].norm, sizeof *rows);
    }
    free(rows);
}

/* Listeners by status (Dynamo's words, as in /workers), replays in
 * progress, and when events last arrived: the newest over the fleet, the
 * stalest listener's, and per (worker, rank). */
static void listener_families(kvr_metrics_ctx *m)
{
    const kvr_workers_snapshot *s = m->s;
    uint64_t by_status[KVR_LSTATUS_COUNT] = {0}, replaying = 0;
    double now = kvr_clock_wall(), newest = -1, stalest = -1;
    for (size_t k = 0; k < s->n_listeners; k++) {
        const kvr_listener_info *l = &s->listeners[k];
        by_status[kvr_listener_status(l, NULL, 0)]++;
        replaying += l->state == KVR_LISTENER_REPLAYING;
        if (l->seconds_since_last_event < 0)
            continue;
        double t = now - l->seconds_since_last_event;
        if (newest < 0 || t > newest)
            newest = t;
        if (stalest < 0 || t < stalest)
            stalest = t;
    }
    kvr_sbuf *b = m->b;
    kvr_metrics_family(b, "kvr_listeners", "gauge",
                       "ZeroMQ listeners (worker x rank), by status (pending, active, paused, "
                       "failed: as GET /workers says)");
    for (int st = 0; st < KVR_LSTATUS_COUNT; st++)
        kvr_sbuf_printf(b, "kvr_listeners{status=\"%s\"} %" PRIu64 "\n",
                        kvr_lstatus_name((kvr_lstatus)st), by_status[st]);
    kvr_metrics_family(b, "kvr_listeners_replaying", "gauge",
                       "Listeners refilling a sequence gap from a replay endpoint");
    kvr_sbuf_printf(b, "kvr_listeners_replaying %" PRIu64 "\n", replaying);
    kvr_metrics_family(b, "kvr_last_event_timestamp_seconds", "gauge",
                       "Unix time of the newest message from any listener");
    if (newest >= 0)
        kvr_sbuf_printf(b, "kvr_last_event_timestamp_seconds %.3f\n", newest);
    kvr_metrics_family(b, "kvr_listener_last_event_min_timestamp_seconds", "gauge",
                       "Unix time of the last message of the listener that has waited longest "
                       "(listeners that never heard one count in kvr_listeners{status=\"pending\"})");
    if (stalest >= 0)
        kvr_sbuf_printf(b, "kvr_listener_last_event_min_timestamp_seconds %.3f\n", stalest);
    if (!m->per_worker)
        return;
    kvr_metrics_family(b, "kvr_worker_last_event_timestamp_seconds", "gauge",
                       "Unix time of the last message on the (worker, rank) listener");
    for (size_t i = 0; i < s->n_workers; i++)
        for (size_t k = s->first[i]; k < s->first[i + 1]; k++) {
            const kvr_listener_info *l = &s->listeners[k];
            if (l->seconds_since_last_event >= 0)
                kvr_sbuf_printf(b, "kvr_worker_last_event_timestamp_seconds{%s,rank=\"%" PRIu32
                                   "\"} %.3f\n",
                                m->wlabels[i], l->dp_rank, now - l->seconds_since_last_event);
        }
}

static bool worker_labels(kvr_metrics_ctx *m)
{
    const kvr_workers_snapshot *s = m->s;
    m->wlabels = malloc((s->n_workers ? s->n_workers : 1) * sizeof *m->wlabels);
    if (!m->wlabels)
        return false;
    for (size_t i = 0; i < s->n_workers; i++) {
        char model[2 * KVR_NAME_MAX], group[2 * KVR_NAME_MAX];
        kvr_metrics_label_value(model, sizeof model, s->workers[i].model_name);
        kvr_metrics_label_value(group, sizeof group, s->workers[i].routing_group);
        snprintf(m->wlabels[i], sizeof m->wlabels[i],
                 "model=\"%s\",group=\"%s\",worker=\"%" PRIu64 "\"", model, group,
                 s->workers[i].worker_id);
    }
    return true;
}

/* The replica cluster (SPEC §10), with --nats: the NATS connection state
 * (1 for the current one), then the cluster's counter list like the source
 * and normalizer lists: kvr_cluster_NAME_total, gauges kvr_cluster_NAME. */
static void cluster_metrics(kvr_metrics_ctx *m)
{
    if (!m->srv->cluster)
        return;
    kvr_cluster_status st;
    kvr_cluster_status_get(m->srv->cluster, &st);
    kvr_metrics_family(m->b, "kvr_cluster_connection", "gauge",
                       "NATS connection state of the replica cluster: 1 for the current one");
    for (int k = KVR_CLUSTER_CONNECTING; k <= KVR_CLUSTER_CLOSED; k++)
        kvr_sbuf_printf(m->b, "kvr_cluster_connection{state=\"%s\"} %d\n",
                        kvr_cluster_conn_name((kvr_cluster_conn)k), st.conn == (kvr_cluster_conn)k);
    counter_list cl = {kvr_cluster_counter_descs, kvr_cluster_counter_count, "cluster_", NULL, 0,
                       &st.c, NULL, 0};
    list_families(m, &cl, "kvr_");
}

/* Engine discovery (SPEC §11): engines by state (every state, 0 included),
 * then the discovery counter list like the source and normalizer lists:
 * kvr_discovery_NAME_total. */
static void discovery_metrics(kvr_metrics_ctx *m)
{
    kvr_engine_infos l;
    if (kvr_discovery_list(m->srv->discovery, &l) != 0) {
        m->b->failed = true;
        return;
    }
    kvr_metrics_family(m->b, "kvr_discovery_engines", "gauge",
                       "Engines given to discovery (--engines, config, POST /engines), by state "
                       "(GET /engines says why one is not indexed)");
    for (int st = 0; st < KVR_ENGINE_STATE_COUNT; st++)
        kvr_sbuf_printf(m->b, "kvr_discovery_engines{state=\"%s\"} %zu\n",
                        kvr_engine_state_name((kvr_engine_state)st), l.by_state[st]);
    counter_list cl = {kvr_discovery_counter_descs, kvr_discovery_counter_count, "discovery_",
                       NULL, 0, &l.counters, NULL, 0};
    list_families(m, &cl, "kvr_");
    kvr_engine_infos_free(&l);
}

void kvr_api_metrics(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    (void)body;
    kvr_workers_snapshot s;
    kvr_snapshot_result sr = kvr_workers_snapshot_take(srv, &s);
    if (sr != KVR_SNAPSHOT_OK) {
        kvr_workers_snapshot_error(sr, reply);
        return;
    }
    kvr_sbuf b = {0};
    kvr_metrics_ctx m = {srv, &b, &s, srv->metrics_per_worker, NULL};
    if (m.per_worker && !worker_labels(&m)) {
        b.failed = true;
        m.per_worker = false;
    }
    kvr_metrics_process(&b);
    kvr_metrics_groups(&m);
    listener_families(&m);
    counter_lists(&m);
    kvr_metrics_router(&m);
    cluster_metrics(&m);
    discovery_metrics(&m);
    kvr_route_cache_write(&b, &srv->route_cache);
    kvr_metrics_http(&m);
    kvr_metrics_limits(&m);
    free(m.wlabels);
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
