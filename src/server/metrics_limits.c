/* The /metrics families of the limits (SPEC §12): HTTP connections (open,
 * limit, refused by limit, timed out), authentication failures,
 * registrations refused by a limit, the descriptors listeners hold beside
 * process_open_fds / process_max_fds, and memory given back after the
 * index drained. Each degraded path the limits add has its counter here. */
#include <inttypes.h>

#include "server/auth.h"
#include "server/http_conns.h"
#include "server/metrics.h"

static void connections(kvr_metrics_ctx *m)
{
    kvr_conn_stats st;
    kvr_conns_stats(m->srv->conns, &st);
    kvr_sbuf *b = m->b;
    kvr_metrics_value(b, "kvr_http_connections", "gauge", "HTTP connections open", st.open);
    kvr_metrics_value(
        b, "kvr_http_connections_max", "gauge",
        "HTTP connections allowed at once (max_connections, as it fits RLIMIT_NOFILE)",
        kvr_conns_max(m->srv->conns));
    kvr_metrics_value(b, "kvr_http_connections_peak", "gauge", "Most HTTP connections open at once",
                      st.peak);
    kvr_metrics_value(b, "kvr_http_connections_accepted_total", "counter",
                      "HTTP connections accepted", st.accepted);
    kvr_metrics_family(b, "kvr_http_connections_refused_total", "counter",
                       "HTTP connections closed as they were accepted (out_of_memory: or as "
                       "they started), by the limit reached");
    for (int r = 0; r < KVR_CONN_REFUSED_COUNT; r++)
        kvr_sbuf_printf(b, "kvr_http_connections_refused_total{limit=\"%s\"} %" PRIu64 "\n",
                        kvr_conn_refusal_name((kvr_conn_refusal)r), st.refused[r]);
    kvr_metrics_value(
        b, "kvr_http_connections_timed_out_total", "counter",
        "HTTP connections closed by connection_timeout_s (a request not in full in time, an "
        "idle connection, a reply making no progress)",
        st.timed_out);
}

static void auth(kvr_metrics_ctx *m)
{
    kvr_sbuf *b = m->b;
    kvr_metrics_family(b, "kvr_http_auth_failures_total", "counter",
                       "Requests answered 401, by reason (missing: no bearer token; invalid: "
                       "a wrong one)");
    for (int r = KVR_AUTH_MISSING; r < KVR_AUTH_RESULT_COUNT; r++)
        kvr_sbuf_printf(b, "kvr_http_auth_failures_total{reason=\"%s\"} %" PRIu64 "\n",
                        kvr_auth_result_name((kvr_auth_result)r),
                        kvr_auth_failures(m->srv->auth, (kvr_auth_result)r));
}

static void registrations(kvr_metrics_ctx *m)
{
    kvr_sbuf *b = m->b;
    kvr_registry *r = m->srv->registry;
    kvr_metrics_split(b, "kvr_registrations_refused_total", "counter",
                      "Registrations refused by a limit (max_workers: 503; descriptors: no "
                      "descriptor for a new listener, 503)",
                      "limit", 2, (const char *const[]){"max_workers", "descriptors"},
                      (const uint64_t[]){kvr_registry_refused(r, KVR_REGISTRY_WORKER_LIMIT),
                                         kvr_registry_refused(r, KVR_REGISTRY_NO_DESCRIPTORS)});
    /* A listener holds an eventfd for its SUB and two for its monitor pair,
     * its engine connection when connected, and while replaying the same
     * again for its replay DEALER (an eventfd, two for the DEALER's monitor
     * pair, its connection): KVR_LISTENER_FDS in all. */
    uint64_t fds = 0;
    for (size_t k = 0; k < m->s->n_listeners; k++) {
        const kvr_listener_info *l = &m->s->listeners[k];
        fds += 3 + (l->connected ? 1 : 0) + (l->state == KVR_LISTENER_REPLAYING ? 4 : 0);
    }
    kvr_metrics_value(
        b, "kvr_listener_descriptors", "gauge",
        "File descriptors the ZeroMQ listeners hold (3 per listener, +1 connected, +4 "
        "replaying)",
        fds);
    kvr_metrics_value(
        b, "kvr_descriptors_reserved", "gauge",
        "Descriptors a new listener leaves free for HTTP connections (a registration that "
        "would take them gets 503, limit descriptors)",
        m->srv->fd_reserve);
}

void kvr_metrics_limits(kvr_metrics_ctx *m)
{
    connections(m);
    auth(m);
    registrations(m);
    kvr_metrics_value(
        m->b, "kvr_memory_trims_total", "counter",
        "malloc_trim calls (the index drained, or the RSS grew past what the index holds): "
        "freed heap pages given back",
        atomic_load(&m->srv->trim.trims));
    kvr_metrics_family(m->b, "kvr_reloads_total", "counter",
                       "Config reloads (SIGHUP), by result (failed: the running settings stay "
                       "where it failed)");
    kvr_sbuf_printf(m->b, "kvr_reloads_total{result=\"applied\"} %" PRIu64 "\n",
                    atomic_load(&m->srv->reloads[0]));
    kvr_sbuf_printf(m->b, "kvr_reloads_total{result=\"failed\"} %" PRIu64 "\n",
                    atomic_load(&m->srv->reloads[1]));
}
