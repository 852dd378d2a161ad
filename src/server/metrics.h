/* The pieces GET /metrics is written from (Prometheus text format 0.0.4):
 * family headers, escaped labels, histograms, the process_* families, and
 * the share-of-prompt-cached histogram /route observes. api_metrics.c is
 * where reading starts: it decides which families exist and in what order.
 *
 * Rules every writer here keeps: a family's HELP and TYPE come once, before
 * its first sample, and all its samples follow together (the format wants
 * one group per family); one family per quantity (a label splits a quantity
 * into parts that add up, never unrelated things); per-worker series only
 * when the server was started with metrics_per_worker, so 1000 workers cost
 * a fixed number of fleet series by default. */
#ifndef KVR_SERVER_METRICS_H
#define KVR_SERVER_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "server/server_internal.h"
#include "server/workers_snapshot.h"

/* What every section of one scrape reads. wlabels[i] is worker i's
 * `model="..",group="..",worker=".."` (escaped), set only when per_worker. */
#define KVR_METRICS_WLABELS_MAX (4 * KVR_NAME_MAX + 48)
typedef struct {
    kvr_server *srv;
    kvr_sbuf *b;
    const kvr_workers_snapshot *s;
    bool per_worker;
    char (*wlabels)[KVR_METRICS_WLABELS_MAX];
} kvr_metrics_ctx;

/* metrics_fleet.c: workers and index per (model, group), router counters
 * and load (per (model, group) always, per (worker, rank) when per_worker),
 * HTTP. */
void kvr_metrics_groups(kvr_metrics_ctx *m);
void kvr_metrics_router(kvr_metrics_ctx *m);
void kvr_metrics_http(kvr_metrics_ctx *m);
/* metrics_limits.c: HTTP connections and their limits, auth failures,
 * registrations refused by a limit, listener descriptors (SPEC §12). */
void kvr_metrics_limits(kvr_metrics_ctx *m);

/* "# HELP name help\n# TYPE name type\n". */
void kvr_metrics_family(kvr_sbuf *b, const char *name, const char *type, const char *help);
/* A family of one unlabelled sample: "name v". */
void kvr_metrics_value(kvr_sbuf *b, const char *name, const char *type, const char *help,
                       uint64_t v);
/* A family of n samples split by one label: name{label="values[i]"} counts[i]. */
void kvr_metrics_split(kvr_sbuf *b, const char *name, const char *type, const char *help,
                       const char *label, size_t n, const char *const *values,
                       const uint64_t *counts);
/* s escaped as a label value (\\, \", \n) into out (truncated to cap). */
void kvr_metrics_label_value(char *out, size_t cap, const char *s);
/* A histogram's samples: name_bucket{labels,le=...} (cumulative), _sum and
 * _count. labels is "" or `k="v",...` without braces; buckets[i] counts the
 * observations in (bounds[i-1], bounds[i]], buckets[n] those above. */
void kvr_metrics_histogram(kvr_sbuf *b, const char *name, const char *labels,
                           const double *bounds, size_t n, const uint64_t *buckets, double sum);

/* process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_start_time_seconds, process_open_fds,
 * process_max_fds, from /proc/self (the names and meanings of the Prometheus
 * client libraries), and kvr_build_info{version}. */
void kvr_metrics_process(kvr_sbuf *b);

/* The cached-share histogram (kvr_route_cache_stats, server_internal.h):
 * /route observes the share of the prompt's tokens cached (gpu overlap) on
 * the worker it chose, once per successful decision. */
extern const double kvr_cached_share_bounds[KVR_CACHED_SHARE_BOUNDS];
void kvr_route_cache_observe(kvr_route_cache_stats *st, uint64_t prompt_tokens,
                             uint64_t cached_tokens);
void kvr_route_cache_write(kvr_sbuf *b, kvr_route_cache_stats *st);

#endif
