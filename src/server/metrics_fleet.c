/* /metrics sections about the fleet as a whole: workers and index size per
 * (model, group), the router's counters and load, and HTTP. Load is summed
 * (and its maximum kept) per (model, group) on every scrape; per (worker,
 * rank) series only with metrics_per_worker. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/route.h"
#include "util/grow.h"
#include "server/metrics.h"

typedef struct {
    const char *model, *group; /* borrowed from the snapshot */
    char labels[4 * KVR_NAME_MAX + 32];
    uint64_t workers;
    uint64_t prefill, decode, requests;   /* sums over (worker, rank) */
    uint64_t max_prefill, max_decode;     /* the busiest (worker, rank) */
} group_row;

typedef struct {
    size_t worker; /* index in the snapshot */
    uint32_t rank;
    kvr_worker_load load;
} rank_load;

typedef struct {
    group_row *groups;
    size_t n_groups, cap_groups;
    size_t *group_of; /* per worker */
    rank_load *loads;
    size_t n_loads;
} fleet;

static size_t find_group(fleet *f, const kvr_worker_info *wi)
{
    for (size_t g = 0; g < f->n_groups; g++)
        if (strcmp(f->groups[g].model, wi->model_name) == 0 &&
            strcmp(f->groups[g].group, wi->routing_group) == 0)
            return g;
    if (KVR_GROW(f->groups, f->cap_groups, f->n_groups + 1) < 0)
        return SIZE_MAX;
    group_row *r = &f->groups[f->n_groups];
    memset(r, 0, sizeof *r);
    r->model = wi->model_name;
    r->group = wi->routing_group;
    char m[2 * KVR_NAME_MAX], gr[2 * KVR_NAME_MAX];
    kvr_metrics_label_value(m, sizeof m, wi->model_name);
    kvr_metrics_label_value(gr, sizeof gr, wi->routing_group);
    snprintf(r->labels, sizeof r->labels, "model=\"%s\",group=\"%s\"", m, gr);
    return f->n_groups++;
}

/* The (worker, rank) pairs the router can book: ranks with state, socket
 * ranks of the listeners, or rank 0 when the worker has neither. */
static size_t worker_ranks(const kvr_workers_snapshot *s, size_t i, uint32_t *out, size_t cap)
{
    size_t n = 0;
    const kvr_worker_info *wi = &s->workers[i];
    for (uint32_t r = 0; r < wi->n_ranks && n < cap; r++)
        out[n++] = wi->ranks[r].dp_rank;
    for (size_t k = s->first[i]; k < s->first[i + 1] && n < cap; k++) {
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = out[j] == s->listeners[k].dp_rank;
        if (!seen)
            out[n++] = s->listeners[k].dp_rank;
    }
    if (n == 0)
        out[n++] = 0;
    return n;
}

static bool fleet_build(kvr_metrics_ctx *m, fleet *f)
{
    const kvr_workers_snapshot *s = m->s;
    memset(f, 0, sizeof *f);
    size_t n = s->n_workers;
    size_t max_loads = n * KVR_MAX_RANKS_INFO + s->n_listeners + 1;
    f->group_of = malloc((n ? n : 1) * sizeof *f->group_of);
    f->loads = m->per_worker ? malloc(max_loads * sizeof *f->loads) : NULL;
    if (!f->group_of || (m->per_worker && !f->loads))
        return false;
    for (size_t i = 0; i < n; i++) {
        const kvr_worker_info *wi = &s->workers[i];
        if ((f->group_of[i] = find_group(f, wi)) == SIZE_MAX)
            return false;
        group_row *g = &f->groups[f->group_of[i]];
        g->workers++;
        uint32_t ranks[KVR_MAX_RANKS_INFO * 2];
        size_t nr = worker_ranks(s, i, ranks, sizeof ranks / sizeof ranks[0]);
        for (size_t k = 0; k < nr; k++) {
            kvr_worker_load l;
            kvr_router_load(m->srv->router, wi->model_name, wi->routing_group, wi->worker_id,
                            ranks[k], &l);
            g->prefill += l.active_prefill_tokens;
            g->decode += l.active_decode_blocks;
            g->requests += l.bookings;
            if (l.active_prefill_tokens > g->max_prefill)
                g->max_prefill = l.active_prefill_tokens;
            if (l.active_decode_blocks > g->max_decode)
                g->max_decode = l.active_decode_blocks;
            if (f->loads && f->n_loads < max_loads)
                f->loads[f->n_loads++] = (rank_load){i, ranks[k], l};
        }
    }
    return true;
}

static void fleet_free(fleet *f)
{
    free(f->groups);
    free(f->group_of);
    free(f->loads);
}

/* One gauge family with a sample per (model, group). */
static void group_gauge(kvr_sbuf *b, const fleet *f, const char *name, const char *help,
                        size_t offset)
{
    kvr_metrics_family(b, name, "gauge", help);
    for (size_t g = 0; g < f->n_groups; g++)
        kvr_sbuf_printf(b, "%s{%s} %" PRIu64 "\n", name, f->groups[g].labels,
                        *(const uint64_t *)((const char *)&f->groups[g] + offset));
}

static void index_sizes(kvr_metrics_ctx *m, const fleet *f)
{
    static const struct {
        const char *name, *help;
    } fam[3] = {{"kvr_index_blocks", "Blocks (tree nodes) in the index"},
                {"kvr_index_ownerships", "(block, owner) pairs in the index"},
                {"kvr_index_bytes", "Heap bytes held by the index"}};
    kvr_index_stats *st = calloc(f->n_groups ? f->n_groups : 1, sizeof *st);
    if (!st) {
        m->b->failed = true;
        return;
    }
    for (size_t g = 0; g < f->n_groups; g++) {
        kvr_index *idx = kvr_indexer_index(m->srv->ix, f->groups[g].model, f->groups[g].group);
        if (idx)
            kvr_index_stats_get(idx, &st[g]);
    }
    for (int k = 0; k < 3; k++) {
        kvr_metrics_family(m->b, fam[k].name, "gauge", fam[k].help);
        for (size_t g = 0; g < f->n_groups; g++) {
            uint64_t v = k == 0 ? st[g].nodes : k == 1 ? st[g].ownerships : st[g].bytes;
            kvr_sbuf_printf(m->b, "%s{%s} %" PRIu64 "\n", fam[k].name, f->groups[g].labels, v);
        }
    }
    free(st);
}

/* Per (worker, rank) load, one family per quantity. */
static void worker_loads(kvr_metrics_ctx *m, const fleet *f)
{
    static const struct {
        const char *name, *help;
    } fam[3] = {
        {"kvr_worker_active_prefill_tokens", "Uncached prompt tokens booked and not yet prefilled"},
        {"kvr_worker_active_decode_blocks", "Distinct KV blocks held by active bookings"},
        {"kvr_worker_active_requests", "Requests booked and not yet freed"}};
    for (int k = 0; k < 3; k++) {
        kvr_metrics_family(m->b, fam[k].name, "gauge", fam[k].help);
        for (size_t i = 0; i < f->n_loads; i++) {
            const rank_load *r = &f->loads[i];
            uint64_t v = k == 0   ? r->load.active_prefill_tokens
                         : k == 1 ? r->load.active_decode_blocks
                                  : r->load.bookings;
            kvr_sbuf_printf(m->b, "%s{%s,rank=\"%" PRIu32 "\"} %" PRIu64 "\n", fam[k].name,
                            m->wlabels[r->worker], r->rank, v);
        }
    }
}

void kvr_metrics_groups(kvr_metrics_ctx *m)
{
    fleet f;
    if (!fleet_build(m, &f)) {
        fleet_free(&f);
        m->b->failed = true;
        return;
    }
    group_gauge(m->b, &f, "kvr_workers", "Registered workers", offsetof(group_row, workers));
    index_sizes(m, &f);
    static const struct {
        const char *name, *help;
        size_t offset;
    } load[] = {
        {"kvr_router_active_prefill_tokens",
         "Uncached prompt tokens booked and not yet prefilled, over the group's workers",
         offsetof(group_row, prefill)},
        {"kvr_router_active_decode_blocks",
         "Distinct KV blocks held by active bookings, summed over the group's workers",
         offsetof(group_row, decode)},
        {"kvr_router_active_requests", "Requests booked and not yet freed, over the group's workers",
         offsetof(group_row, requests)},
        {"kvr_router_max_active_prefill_tokens",
         "Active prefill tokens of the group's busiest (worker, rank)",
         offsetof(group_row, max_prefill)},
        {"kvr_router_max_active_decode_blocks",
         "Active decode blocks of the group's busiest (worker, rank)",
         offsetof(group_row, max_decode)},
    };
    for (size_t k = 0; k < sizeof load / sizeof load[0]; k++)
        group_gauge(m->b, &f, load[k].name, load[k].help, load[k].offset);
    if (m->per_worker)
        worker_loads(m, &f);
    fleet_free(&f);
}

static void counter(kvr_sbuf *b, const char *name, const char *help, uint64_t v)
{
    kvr_metrics_value(b, name, "counter", help, v);
}

static void gauge(kvr_sbuf *b, const char *name, const char *help, uint64_t v)
{
    kvr_metrics_value(b, name, "gauge", help, v);
}

void kvr_metrics_router(kvr_metrics_ctx *m)
{
    kvr_router_stats st;
    kvr_router_stats_get(m->srv->router, &st);
    kvr_sbuf *b = m->b;
    counter(b, "kvr_router_queries_total", "/query calls answered by the router", st.queries);
    counter(b, "kvr_router_routes_total", "/route decisions", st.routes);
    counter(b, "kvr_router_hash_passes_total",
            "Distinct (sequence, hash profile) pairs hashed and matched", st.hash_passes);
    counter(b, "kvr_router_prefill_done_total", "Bookings moved from prefill to decode",
            st.prefill_done);
    kvr_metrics_split(b, "kvr_router_bookings_ended_total", "counter",
                      "Bookings ended, by reason (released by /free, or expired)", "reason", 2,
                      (const char *const[]){"released", "expired"},
                      (const uint64_t[]){st.bookings_released, st.bookings_expired});
    counter(b, "kvr_router_bookings_rejected_total",
            "/route calls refused with 429: max_bookings requests were booked",
            st.bookings_rejected);
    gauge(b, "kvr_router_bookings_active", "Requests booked and not yet freed",
          st.bookings_active);
    gauge(b, "kvr_router_load_entries", "(worker, rank) load records held", st.load_entries);
    gauge(b, "kvr_router_held_blocks",
          "Distinct blocks held by active bookings, over all (worker, rank)", st.held_blocks);
    gauge(b, "kvr_router_held_bytes", "Memory of the booking block sets", st.held_bytes);
    counter(b, "kvr_router_bookings_aged_out_total",
            "Bookings expired at their predicted decode end (their /free never came)",
            st.bookings_aged_out);
    counter(b, "kvr_router_rate_samples_total",
            "/prefill_done timings taken as prefill-rate samples", st.rate_samples);
    gauge(b, "kvr_router_rates_learned", "(worker, rank) with a measured prefill rate in use",
          st.rates_learned);
    counter(b, "kvr_router_rates_evicted_total",
            "Stalest learned rates dropped: 65,536 (worker, rank) rates were held",
            st.rates_evicted);
    counter(b, "kvr_router_ttft_error_samples_total",
            "/prefill_done timings that measured the ttft model's error (priced at a measured or "
            "registered rate, or the configured one with learn_prefill_rate off)",
            st.ttft_error_samples);
    /* a ratio, so printed as one: the uint64 gauge() would read 0 */
    kvr_metrics_family(b, "kvr_router_ttft_error_ratio", "gauge",
                       "The ttft model's measured error: decayed |measured - predicted| over "
                       "predicted TTFT (0 until 16 timings; tie_from_error widens the tie "
                       "window by it)");
    kvr_sbuf_printf(b, "kvr_router_ttft_error_ratio %.6g\n", st.ttft_error);
    kvr_metrics_split(b, "kvr_router_edge_prompts_total", "counter",
                      "lru_edge: prompts at a worker's LRU edge, by how they left it (a later "
                      "turn came back to it, or it aged out first)",
                      "outcome", 2, (const char *const[]){"returned", "aged_out"},
                      (const uint64_t[]){st.edge_returned, st.edge_aged_out});
    counter(b, "kvr_router_edge_limit_drops_total",
            "lru_edge: prompts dropped from a worker's edge because 1,024 were held (counted "
            "as aged out too)",
            st.edge_at_limit);
    counter(b, "kvr_router_edge_lost_total",
            "lru_edge: bookings the LRU edge missed (out of memory)", st.edge_lost);
#define LOST_COUNTER_(name, metric, help) counter(b, metric, help, st.name);
    KVR_ROUTER_LOST_COUNTERS(LOST_COUNTER_)
#undef LOST_COUNTER_
    gauge(b, "kvr_router_approx_workers",
          "(worker, rank) scored from the approximate index (no KV events)", st.approx_workers);
    gauge(b, "kvr_router_approx_blocks", "Blocks held in the approximate index",
          st.approx_blocks);
    counter(b, "kvr_router_approx_pruned_total",
            "Blocks the approximate index forgot, oldest first, because a (worker, rank) held "
            "approx_max_blocks",
            st.approx_pruned);
    counter(b, "kvr_router_approx_lost_total",
            "Bookings the approximate index noted in part (a shorter prefix) or not at all: out "
            "of memory",
            st.approx_lost);
}

/* endpoint="/path", and method="M" when the path has several methods
 * (GET, POST and DELETE /engines), so every series stays distinct. */
static void endpoint_labels(const kvr_server *srv, size_t i, char *out, size_t cap)
{
    const kvr_endpoint *e = &srv->endpoints[i];
    bool shared = false;
    for (size_t k = 0; k < srv->n_endpoints && !shared; k++)
        shared = k != i && strcmp(srv->endpoints[k].path, e->path) == 0;
    if (shared)
        snprintf(out, cap, "endpoint=\"%s\",method=\"%s\"", e->path, e->method);
    else
        snprintf(out, cap, "endpoint=\"%s\"", e->path);
}


void kvr_metrics_http(kvr_metrics_ctx *m)
{
    kvr_server *srv = m->srv;
    kvr_sbuf *b = m->b;
    kvr_metrics_family(b, "kvr_http_request_duration_seconds", "histogram",
                       "HTTP request handling latency, by endpoint");
    for (size_t i = 0; i < srv->n_endpoints; i++) {
        kvr_endpoint *e = &srv->endpoints[i];
        uint64_t buckets[KVR_LAT_BUCKETS + 1], in_bounds = 0;
        for (int k = 0; k < KVR_LAT_BUCKETS; k++)
            in_bounds += buckets[k] = atomic_load(&e->buckets[k]);
        uint64_t count = atomic_load(&e->count);
        buckets[KVR_LAT_BUCKETS] = count > in_bounds ? count - in_bounds : 0;
        char labels[128];
        endpoint_labels(srv, i, labels, sizeof labels);
        kvr_metrics_histogram(b, "kvr_http_request_duration_seconds", labels, kvr_lat_bounds,
                              KVR_LAT_BUCKETS, buckets, (double)atomic_load(&e->sum_us) / 1e6);
    }
    kvr_metrics_family(b, "kvr_http_errors_total", "counter",
                       "HTTP error replies, by endpoint and class");
    for (size_t i = 0; i < srv->n_endpoints; i++) {
        kvr_endpoint *e = &srv->endpoints[i];
        char labels[128];
        endpoint_labels(srv, i, labels, sizeof labels);
        kvr_sbuf_printf(b, "kvr_http_errors_total{%s,class=\"4xx\"} %" PRIu64 "\n", labels,
                        atomic_load(&e->status_4xx));
        kvr_sbuf_printf(b, "kvr_http_errors_total{%s,class=\"5xx\"} %" PRIu64 "\n", labels,
                        atomic_load(&e->status_5xx));
    }
#define SERVER_COUNTER_(field, series, help) counter(b, series, help, atomic_load(&srv->field));
    KVR_SERVER_COUNTERS(SERVER_COUNTER_)
#undef SERVER_COUNTER_
}
