/* The discovery layer's private parts: engines and their readings, the
 * per-kind response validators (sglang.c, vllm.c), the HTTP fetcher
 * (fetch.c), one poll of one engine (probe.c) and the registrations an
 * answer implies (apply.c). Start reading at discovery.c (the public API)
 * and poll.c (the thread).
 *
 * Threads and locks: one poll thread runs every HTTP request and every
 * registry call discovery makes. `mu` guards the engine list and every
 * engine's state; the poll thread fetches without it (on copies: a probe
 * holds the URL and host it needs) and takes it to store results and write
 * registrations, so the registrations always follow the current list.
 * kvr_discovery_remove writes its unregistrations under `mu` too. The
 * registry's calls run on the ingest thread, which never takes `mu`, so
 * holding it across them cannot deadlock. */
#ifndef KVR_DISCOVERY_INTERNAL_H
#define KVR_DISCOVERY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "kvrouter/discovery.h"
#include "util/clock.h"

/* ---- readings: what an engine's answers say, after validation ---------- */

typedef struct {
    kvr_engine_reading_info info;
    kvr_engine_rank_info *ranks; /* info.dp_size of them, owned */
    size_t n_ranks;
    char alt_model[KVR_NAME_MAX]; /* a second document's model name, if the first has none */
    /* a capacity the engine stated that is no count in range, left unknown
     * (vLLM num_gpu_blocks, SGLang max_total_num_tokens; counted:
     * capacities_ignored) */
    bool capacity_ignored;
} kvr_reading;

void kvr_reading_free(kvr_reading *r);
/* Deep copy; false when out of memory (dst empty). */
bool kvr_reading_copy(kvr_reading *dst, const kvr_reading *src);

/* Error text of a validator: the document and field it refuses. */
#define KVR_DISC_ERR 400

/* A validator reads one response body (len bytes, not NUL-terminated) into
 * r; 0, or -1 with err naming the field. host is the engine URL's host,
 * which replaces wildcard bind addresses. Nothing is trusted: types,
 * lengths, ports and hosts are all checked. */
typedef int (*kvr_doc_reader)(const char *body, size_t len, const char *host, kvr_reading *r,
                              char *err, size_t cap);

/* sglang.c */
int kvr_sglang_read_server_info(const char *body, size_t len, const char *host, kvr_reading *r,
                                char *err, size_t cap);
int kvr_sglang_read_model_info(const char *body, size_t len, const char *host, kvr_reading *r,
                               char *err, size_t cap);
/* model_type of Kimi models (kimi_k2, kimi_k25, kimi_k3...): their image
 * identities are engine-owned (SPEC §5). */
bool kvr_sglang_is_kimi(const char *model_type);

/* vllm.c */
int kvr_vllm_read_sources(const char *body, size_t len, const char *host, kvr_reading *r,
                          char *err, size_t cap);
int kvr_vllm_read_metrics(const char *body, size_t len, const char *host, kvr_reading *r,
                          char *err, size_t cap);
int kvr_vllm_read_models(const char *body, size_t len, const char *host, kvr_reading *r,
                         char *err, size_t cap);

/* One document of an engine kind. A 404 on path tries fallback (an older
 * engine's name); 404 everywhere is "absent", a failure only if required. */
typedef struct {
    const char *path;
    const char *fallback;
    bool required;
    kvr_doc_reader read;
} kvr_engine_doc;

#define KVR_ENGINE_MAX_DOCS 3

typedef struct {
    kvr_engine_kind kind;
    kvr_engine_doc docs[KVR_ENGINE_MAX_DOCS];
    size_t n_docs;
    /* After every document was read: the rules that need several of them
     * (which model name wins, the Kimi capabilities, a block size that must
     * exist). 0, or -1 with err. */
    int (*finish)(kvr_reading *r, char *err, size_t cap);
} kvr_engine_kind_def;

extern const kvr_engine_kind_def kvr_sglang_kind;
extern const kvr_engine_kind_def kvr_vllm_kind;
const kvr_engine_kind_def *kvr_engine_kind_def_of(kvr_engine_kind k);

/* edge.c: the checks every validator shares. */
/* Parses body as one JSON value of at most max_len bytes; NULL with err. */
struct json_t *kvr_edge_json(const char *body, size_t len, const char *doc, char *err,
                             size_t cap);
/* A host name or address usable in a tcp:// endpoint: letters, digits,
 * '.', '-', '_', ':' (IPv6, or bracketed), 1..253 bytes. */
bool kvr_edge_host_ok(const char *host);
/* "*", "0.0.0.0", "::", "[::]", "" : every interface of the engine. */
bool kvr_edge_host_is_wildcard(const char *host);
/* "tcp://HOST:PORT" split; false when it is not that form or the port is
 * outside 1..65535. host gets the host without brackets. */
bool kvr_edge_split_tcp(const char *endpoint, char *host, size_t host_cap, unsigned *port);
/* "tcp://H:P" with H = engine_host when host is a wildcard (IPv6 hosts
 * bracketed); false when it does not fit cap. */
bool kvr_edge_tcp_endpoint(char *out, size_t cap, const char *host, const char *engine_host,
                           unsigned port);
/* A JSON string member of at most cap-1 bytes into out ("" when absent or
 * null). -1 with err for another type or a longer string. */
int kvr_edge_str(const struct json_t *obj, const char *key, const char *doc, char *out,
                 size_t cap, char *err, size_t ecap);
/* An integer member in [min, max]; *present false when absent or null. */
int kvr_edge_int(const struct json_t *obj, const char *key, const char *doc, long long min,
                 long long max, long long *out, bool *present, char *err, size_t ecap);
/* A boolean member (absent/null: false). */
int kvr_edge_bool(const struct json_t *obj, const char *key, const char *doc, bool *out,
                  char *err, size_t ecap);
/* r->ranks resized to n zeroed entries; false when out of memory. */
bool kvr_edge_ranks(kvr_reading *r, size_t n);

/* ---- one poll of one engine (probe.c) ------------------------------------ */

typedef enum {
    KVR_POLL_OK = 0,      /* a valid answer (publishing or not) */
    KVR_POLL_UNREACHABLE, /* transport error, timeout, HTTP status other than 200/404 */
    KVR_POLL_INVALID      /* an answer the validator refused, or not an engine */
} kvr_poll_outcome;

typedef enum { KVR_SLOT_IDLE = 0, KVR_SLOT_BUSY, KVR_SLOT_OK, KVR_SLOT_ABSENT, KVR_SLOT_FAILED } kvr_slot_state;

typedef struct {
    kvr_slot_state st;
    bool on_fallback;
    kvr_poll_outcome failure; /* FAILED: why */
    char err[KVR_DISC_ERR];
} kvr_slot;

struct kvr_fetcher;

/* What the poll thread knows of an engine while polling it (a copy: the
 * engine may be removed meanwhile). */
typedef struct kvr_probe {
    uint64_t uid;          /* the engine's */
    char url[KVR_ENGINE_URL_MAX];
    char host[256];
    kvr_engine_kind want;  /* configured, or the kind detected before */
    kvr_engine_kind kind;  /* decided; AUTO while probing both */
    kvr_slot slots[KVR_ENGINE_KIND_COUNT][KVR_ENGINE_MAX_DOCS];
    kvr_reading readings[KVR_ENGINE_KIND_COUNT];
    bool done;
    kvr_poll_outcome outcome;
    char err[KVR_DISC_ERR];
    uint64_t invalid_responses, requests;
    double started;
} kvr_probe;

/* probe.c */
void kvr_probe_init(kvr_probe *p, uint64_t uid, const char *url, const char *host,
                    kvr_engine_kind want);
void kvr_probe_free(kvr_probe *p);
/* Queues the first requests on f. */
void kvr_probe_start(kvr_probe *p, struct kvr_fetcher *f);
/* The reading of the decided kind once done and OK. */
kvr_reading *kvr_probe_reading(kvr_probe *p);

/* fetch.c: concurrent GETs through libcurl multi, each with a deadline and a
 * body limit, at most KVR_DISCOVERY_MAX_INFLIGHT at once. */
typedef struct {
    int curl_code;    /* CURLE_OK (0) or the transport error */
    long status;      /* HTTP status, 0 without a response */
    const char *body; /* NUL-terminated, len bytes */
    size_t len;
    const char *error; /* transport error text ("" when none) */
} kvr_fetch_result;

typedef void (*kvr_fetch_done)(void *user, int kind, int doc, const kvr_fetch_result *res,
                               struct kvr_fetcher *f);

typedef struct kvr_fetcher kvr_fetcher;
kvr_fetcher *kvr_fetcher_create(double timeout_s, size_t max_body);
void kvr_fetcher_destroy(kvr_fetcher *f);
/* Queues GET base_url + path; done(user, kind, doc, ...) runs on the
 * thread in kvr_fetcher_run when it finishes. false when out of memory. */
bool kvr_fetcher_get(kvr_fetcher *f, const char *base_url, const char *path, kvr_fetch_done done,
                     void *user, int kind, int doc);
/* Runs until every queued request finished or *stop is set. */
void kvr_fetcher_run(kvr_fetcher *f, _Atomic bool *stop);
/* Makes a kvr_fetcher_run in another thread look at *stop now. */
void kvr_fetcher_wakeup(kvr_fetcher *f);

/* ---- engines and the discovery object ----------------------------------- */

/* What discovery wrote to the registry for one rank. */
typedef struct {
    char model[KVR_NAME_MAX];
    char group[KVR_NAME_MAX];
    uint64_t worker_id;
    uint32_t dp_rank;
    uint64_t digest; /* of everything the registration said */
    kvr_registry_result result; /* of the registration that put it in place */
} kvr_applied;

typedef struct {
    uint64_t uid; /* unique per kvr_discovery_add of a new URL */
    kvr_engine_spec spec; /* strings point at the arrays below */
    char url[KVR_ENGINE_URL_MAX];
    char host[256];
    char model_override[KVR_NAME_MAX];
    char group[KVR_NAME_MAX];
    uint64_t worker_id;
    kvr_engine_kind detected; /* AUTO until one answered */
    kvr_engine_state state;
    char reason[400];
    char last_error[400];
    double added_at, last_poll_at, last_valid_at, next_poll_at;
    uint64_t polls, poll_failures, consecutive_failures;
    uint64_t polls_started, polls_done; /* for kvr_discovery_wait_poll */
    bool force_write;         /* write every registration at the next apply */
    bool in_flight;           /* a probe of it is running */
    bool repoll;              /* poll again as soon as the running probe ends */
    bool poll_ok;             /* the last poll gave a valid answer */
    kvr_poll_outcome last_outcome;
    kvr_reading good;         /* the last valid answer (info.valid) */
    kvr_applied *applied;     /* discovery's registrations in place */
    size_t n_applied, cap_applied;
} kvr_disc_engine;

struct kvr_discovery {
    kvr_registry *reg;
    kvr_discovery_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* the poll thread: something to do */
    pthread_cond_t polled; /* waiters: a poll finished */
    kvr_disc_engine **engines;  /* in the order added */
    size_t n_engines, cap_engines;
    uint64_t next_uid;
    kvr_discovery_counters c;
    _Atomic bool stop;
    kvr_fetcher *fetcher;
    pthread_t thread;
    bool thread_started;
};

/* poll.c */
void *kvr_discovery_main(void *arg);

/* secs from now on the monotonic clock the condition variables use. */
static inline void kvr_discovery_deadline(struct timespec *ts, double secs)
{
    double t = kvr_clock_mono() + secs;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
}

/* apply.c, with d->mu held: makes e's registrations what its state implies
 * (e->good while it is valid and within grace, none otherwise); the
 * engine's state and per-rank results are updated. */
void kvr_discovery_apply(kvr_discovery *d, kvr_disc_engine *e, double now);
/* Removes every registration discovery made for e; returns the ranks. */
size_t kvr_discovery_unapply(kvr_discovery *d, kvr_disc_engine *e);

/* discovery.c */
kvr_disc_engine *kvr_discovery_find_uid(kvr_discovery *d, uint64_t uid);

#endif
