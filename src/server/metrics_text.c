/* Prometheus text-format writing shared by every /metrics section, and the
 * /route cached-share histogram (see metrics.h). */
#include "server/metrics.h"

#include <inttypes.h>
#include <stdio.h>

void kvr_metrics_family(kvr_sbuf *b, const char *name, const char *type, const char *help)
{
    kvr_sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void kvr_metrics_value(kvr_sbuf *b, const char *name, const char *type, const char *help,
                       uint64_t v)
{
    kvr_metrics_family(b, name, type, help);
    kvr_sbuf_printf(b, "%s %" PRIu64 "\n", name, v);
}

void kvr_metrics_split(kvr_sbuf *b, const char *name, const char *type, const char *help,
                       const char *label, size_t n, const char *const *values,
                       const uint64_t *counts)
{
    kvr_metrics_family(b, name, type, help);
    for (size_t i = 0; i < n; i++)
        kvr_sbuf_printf(b, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, values[i], counts[i]);
}

void kvr_metrics_label_value(char *out, size_t cap, const char *s)
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

void kvr_metrics_histogram(kvr_sbuf *b, const char *name, const char *labels,
                           const double *bounds, size_t n, const uint64_t *buckets, double sum)
{
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += buckets[i];
        kvr_sbuf_printf(b, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep,
                        bounds[i], cum);
    }
    cum += buckets[n];
    kvr_sbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    kvr_sbuf_printf(b, "%s_sum%s%s%s %.6f\n", name, open, labels, close, sum);
    kvr_sbuf_printf(b, "%s_count%s%s%s %" PRIu64 "\n", name, open, labels, close, cum);
}

/* Tenths: "none cached" gets its own bucket (le 0), so does "all" (le 1). */
const double kvr_cached_share_bounds[KVR_CACHED_SHARE_BOUNDS] = {0,   0.1, 0.2, 0.3, 0.4, 0.5,
                                                                  0.6, 0.7, 0.8, 0.9, 1};

void kvr_route_cache_observe(kvr_route_cache_stats *st, uint64_t prompt_tokens,
                             uint64_t cached_tokens)
{
    if (prompt_tokens == 0)
        return;
    if (cached_tokens > prompt_tokens)
        cached_tokens = prompt_tokens;
    double share = (double)cached_tokens / (double)prompt_tokens;
    size_t i = 0;
    while (i < KVR_CACHED_SHARE_BOUNDS && share > kvr_cached_share_bounds[i])
        i++;
    atomic_fetch_add_explicit(&st->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->sum_micro, (uint64_t)(share * 1e6 + 0.5),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&st->prompt_tokens, prompt_tokens, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->cached_tokens, cached_tokens, memory_order_relaxed);
}

void kvr_route_cache_write(kvr_sbuf *b, kvr_route_cache_stats *st)
{
    uint64_t buckets[KVR_CACHED_SHARE_BOUNDS + 1];
    for (size_t i = 0; i <= KVR_CACHED_SHARE_BOUNDS; i++)
        buckets[i] = atomic_load_explicit(&st->buckets[i], memory_order_relaxed);
    kvr_metrics_family(b, "kvr_route_cached_share", "histogram",
                       "Share of a routed prompt's tokens cached on the gpu of the worker "
                       "chosen, one observation per /route");
    kvr_metrics_histogram(b, "kvr_route_cached_share", "", kvr_cached_share_bounds,
                          KVR_CACHED_SHARE_BOUNDS, buckets,
                          (double)atomic_load(&st->sum_micro) / 1e6);
    kvr_metrics_family(b, "kvr_route_prompt_tokens_total", "counter",
                       "Prompt tokens of routed requests");
    kvr_sbuf_printf(b, "kvr_route_prompt_tokens_total %" PRIu64 "\n",
                    atomic_load(&st->prompt_tokens));
    kvr_metrics_family(b, "kvr_route_cached_tokens_total", "counter",
                       "Prompt tokens of routed requests cached on the gpu of the worker chosen");
    kvr_sbuf_printf(b, "kvr_route_cached_tokens_total %" PRIu64 "\n",
                    atomic_load(&st->cached_tokens));
}
