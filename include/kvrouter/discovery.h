/* Engine discovery (SPEC §11): operators give engine URLs, kvrouter asks
 * each engine for its KV-event sources and registers its (worker, rank)
 * listeners itself through the registry (origin KVR_ORIGIN_DISCOVERY), then
 * keeps them current by polling: a new engine is added, a restarted one
 * re-registered when its settings change (SPEC §5 rule 9, the registry's
 * rules), a vanished one unregistered after the grace period.
 *
 * What is read: SGLang's GET /server_info (`kv_events`, `kv_events_config`,
 * served model name, speculative algorithm, HiCache) and GET /model_info
 * (`model_type`: Kimi models get mm_identity "auto" and accepts_mm_hashes
 * false); vLLM's GET /kv_event_sources, /metrics (block size) and
 * /v1/models. Every response passes one validator per engine kind
 * (src/discovery/sglang.c, vllm.c: bounded sizes, types, ports, hosts)
 * before anything is used; a bad answer is reported, counted and treated
 * like no answer.
 *
 * The rules, per engine:
 * - Its worker id is `instance_id` when given, else XXH3-64 (seed 0) of its
 *   URL (kvr_engine_worker_id): stable across restarts and router replicas.
 * - A poll that answers with valid sources makes the registrations exactly
 *   those (ranks added, changed or removed, each by the registry's rules:
 *   unchanged settings keep listener and index; changed effective settings
 *   clear the worker's state). `kv_events` null or no sources is a valid
 *   answer: nothing is registered for the engine, and /engines says why.
 * - A poll that fails (unreachable, timeout, HTTP error, invalid answer)
 *   changes no registration: the last valid answer stays registered until
 *   `grace_s` seconds have passed since the last valid one; then the
 *   engine's registrations are removed (counted in engines_expired). Only
 *   the grace period decides a vanish; one bad answer never does.
 * - Registrations are written only when what an engine's answer implies
 *   differs from what discovery last wrote, and every `resync_polls` polls
 *   of an engine in full (so a rank unregistered by hand comes back).
 *
 * Threading: one poll thread per kvr_discovery does every HTTP request
 * (libcurl multi, at most KVR_DISCOVERY_MAX_INFLIGHT at once, each with a
 * deadline) and every registry call; the functions below may be called from
 * any thread. kvr_discovery_remove unregisters before it returns. */
#ifndef KVROUTER_DISCOVERY_H
#define KVROUTER_DISCOVERY_H

#include "kvrouter/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_discovery kvr_discovery;

/* What an engine is. AUTO asks SGLang's /server_info and vLLM's
 * /kv_event_sources and keeps the kind that answers. */
typedef enum {
    KVR_ENGINE_KIND_AUTO = 0,
    KVR_ENGINE_KIND_SGLANG,
    KVR_ENGINE_KIND_VLLM,
    KVR_ENGINE_KIND_COUNT
} kvr_engine_kind;

const char *kvr_engine_kind_name(kvr_engine_kind k); /* "auto", "sglang", "vllm" */
int kvr_engine_kind_from_name(const char *name);     /* -1 if unknown */

/* Bounds. An engine URL is http:// or https://, at most this long; dp ranks
 * per engine (the largest data-parallel deployments run a few hundred). */
#define KVR_ENGINE_URL_MAX 512
#define KVR_DISCOVERY_MAX_RANKS 1024
/* HTTP requests in flight at once, over every engine. */
#define KVR_DISCOVERY_MAX_INFLIGHT 128

/* One engine to discover. Strings are copied by kvr_discovery_add. Fields
 * left zero/NULL/-1 take what the engine says. */
typedef struct {
    const char *url;            /* required: http(s)://host[:port][/prefix] */
    kvr_engine_kind kind;
    bool has_instance_id;
    uint64_t instance_id;       /* else kvr_engine_worker_id(url) */
    const char *model_name;     /* else served_model_name / model_path / /v1/models */
    const char *routing_group;  /* NULL or "": "default" */
    uint32_t block_size;        /* 0: the engine's */
    int mm_identity;            /* -1: from the model (Kimi: auto), else kvr_mm_identity */
    int accepts_mm_hashes;      /* -1: from the model (Kimi: false), 0, 1 */
    /* The model's media placeholder token (SPEC §5 vLLM media identity,
     * 151655 for Qwen-VL): no engine endpoint says it, so the entry does. */
    bool has_image_token_id;
    uint32_t image_token_id;    /* below KVR_WIDE_SENTINEL */
    kvr_origin origin;          /* who listed it: CLI, CONFIG or HTTP */
} kvr_engine_spec;

/* An engine URL without trailing slashes, the form ids are made from.
 * False when it is not an http(s) URL with a host (err says why). */
bool kvr_engine_url_normalize(const char *url, char *out, size_t cap, char *err, size_t err_cap);
/* XXH3-64, seed 0, of the normalized URL. */
uint64_t kvr_engine_worker_id(const char *normalized_url);

typedef struct {
    double poll_s;       /* between polls of one engine; 0 -> 5 */
    double grace_s;      /* without a valid answer before unregistering; 0 -> 30 */
    double timeout_s;    /* one HTTP request, connection included; 0 -> 2 */
    size_t max_engines;  /* 0 -> 1024 */
    size_t max_response_bytes; /* one response body; 0 -> 4 MiB */
    unsigned resync_polls;     /* full re-registration every N polls; 0 -> 12 */
} kvr_discovery_config;

/* An engine's state, as /engines and kvr_discovery_engines{state} say it. */
#define KVR_ENGINE_STATES(X)                                                               \
    X(PENDING, "pending", "added, no poll finished yet")                                   \
    X(INDEXED, "indexed", "every advertised rank is registered")                           \
    X(STALE, "stale",                                                                      \
      "the last poll failed; the last valid answer stays registered until the grace "      \
      "period ends")                                                                       \
    X(UNREACHABLE, "unreachable",                                                          \
      "no answer (never, or none within the grace period): nothing registered")            \
    X(INVALID, "invalid",                                                                  \
      "answers that fail validation (never valid, or none within the grace period): "     \
      "nothing registered")                                                                \
    X(NO_KV_EVENTS, "no_kv_events", "the engine publishes no KV events: nothing to index") \
    X(REJECTED, "rejected",                                                                \
      "the registry refused a rank (block size conflict, worker limit, bad endpoint)")

typedef enum {
#define KVR_ENGINE_STATE_ENUM_(e, name, help) KVR_ENGINE_##e,
    KVR_ENGINE_STATES(KVR_ENGINE_STATE_ENUM_)
#undef KVR_ENGINE_STATE_ENUM_
    KVR_ENGINE_STATE_COUNT
} kvr_engine_state;

const char *kvr_engine_state_name(kvr_engine_state s);
const char *kvr_engine_state_help(kvr_engine_state s);

/* Discovery counters, one list (names are the /metrics contract:
 * kvr_discovery_NAME_total). */
#define KVR_DISCOVERY_COUNTERS(X)                                                          \
    X(polls, KVR_METRIC_COUNTER, "Engine polls finished (every request of one engine)")    \
    X(poll_failures, KVR_METRIC_COUNTER,                                                   \
      "Polls that gave no valid answer (unreachable, timeout, HTTP error, invalid)")       \
    X(invalid_responses, KVR_METRIC_COUNTER,                                               \
      "Engine responses refused by the validator (types, sizes, ports, hosts)")            \
    X(capacities_ignored, KVR_METRIC_COUNTER,                                              \
      "Valid polls whose stated KV capacity (vLLM num_gpu_blocks) was no count in range "  \
      "(registered as unknown)")                                                           \
    X(http_requests, KVR_METRIC_COUNTER, "HTTP requests sent to engines")                  \
    X(registrations, KVR_METRIC_COUNTER,                                                   \
      "Rank registrations written (new or changed answers, and resyncs)")                  \
    X(registrations_failed, KVR_METRIC_COUNTER, "Rank registrations the registry refused") \
    X(unregistrations, KVR_METRIC_COUNTER, "Rank registrations removed by discovery")     \
    X(engines_expired, KVR_METRIC_COUNTER,                                                 \
      "Engines whose registrations were removed when the grace period ended")

typedef struct {
#define KVR_DISCOVERY_COUNTER_FIELD_(name, kind, help) uint64_t name;
    KVR_DISCOVERY_COUNTERS(KVR_DISCOVERY_COUNTER_FIELD_)
#undef KVR_DISCOVERY_COUNTER_FIELD_
} kvr_discovery_counters;

extern const kvr_counter_desc kvr_discovery_counter_descs[];
extern const size_t kvr_discovery_counter_count;

/* One rank an engine advertises, and what registering it did. */
typedef struct {
    uint32_t dp_rank;
    char endpoint[KVR_ENDPOINT_MAX];
    char replay_endpoint[KVR_ENDPOINT_MAX]; /* "" when none */
    char topic[KVR_NAME_MAX];
    bool registered;               /* discovery's registration of it is in place */
    kvr_registry_result result;    /* of the last registration written */
    char error[320];               /* "" unless it failed */
} kvr_engine_rank_info;

/* What the last valid answer said (valid == false: nothing yet). */
typedef struct {
    bool valid;
    kvr_engine_kind kind;           /* the kind that answered */
    bool publishes;                 /* false: kv_events null / no sources */
    char silent_reason[160];        /* why it publishes nothing ("" when it does) */
    char model_name[KVR_NAME_MAX];
    char model_type[64];            /* SGLang /model_info; "" when unknown */
    char speculative_algorithm[32]; /* SGLang; "" when none */
    uint32_t block_size;            /* 0 when it publishes nothing */
    uint32_t dp_size;
    bool is_eagle;
    bool hicache;                   /* SGLang enable_hierarchical_cache */
    /* KV cache capacity per rank in tokens (SGLang max_total_num_tokens;
     * vLLM num_gpu_blocks x block_size of cache_config_info); 0 unknown */
    uint64_t max_total_num_tokens;
    kvr_mm_identity mm_identity;    /* what it is registered with */
    int accepts_mm_hashes;          /* -1: the SPEC §5 default */
    char version[64];               /* the engine's version, "" when not said */
} kvr_engine_reading_info;

typedef struct {
    char url[KVR_ENGINE_URL_MAX];
    kvr_engine_kind kind;            /* as configured */
    kvr_origin origin;
    uint64_t worker_id;
    char model_name[KVR_NAME_MAX];   /* registered under ("" before a valid answer) */
    char routing_group[KVR_NAME_MAX];
    kvr_engine_state state;
    char reason[400];     /* why it is not indexed ("" when it is) */
    char last_error[400]; /* of the last failed poll ("" after a valid one) */
    double seconds_since_added;
    double seconds_since_poll;        /* -1: never polled */
    double seconds_since_valid;       /* -1: never a valid answer */
    uint64_t polls, poll_failures, consecutive_failures;
    kvr_engine_reading_info read;
    kvr_engine_rank_info *ranks;      /* read.dp_size entries when read.valid */
    size_t n_ranks;
    size_t ranks_registered;
} kvr_engine_info;

typedef struct {
    kvr_engine_info *items;
    size_t n;
    kvr_discovery_counters counters;
    size_t by_state[KVR_ENGINE_STATE_COUNT];
} kvr_engine_infos;

/* Starts the poll thread. NULL when out of memory or the thread cannot
 * start. reg must outlive it. */
kvr_discovery *kvr_discovery_create(kvr_registry *reg, const kvr_discovery_config *cfg);
/* Stops the poll thread (an HTTP request in flight is abandoned) and frees
 * everything. Registrations it made stay in the registry. */
void kvr_discovery_destroy(kvr_discovery *d);

typedef enum {
    KVR_DISCOVERY_ADDED = 0, /* a new engine; it is polled at once */
    KVR_DISCOVERY_UNCHANGED, /* the URL was listed with the same spec */
    KVR_DISCOVERY_UPDATED,   /* the URL was listed; its spec (and origin) now spec's */
    KVR_DISCOVERY_INVALID,   /* url not http(s) with a host, a field out of bounds */
    KVR_DISCOVERY_LIMIT,     /* max_engines engines are listed */
    KVR_DISCOVERY_NOT_FOUND, /* remove: no such URL */
    KVR_DISCOVERY_REMOVED,   /* remove: listed no more, its registrations removed */
    KVR_DISCOVERY_NO_MEMORY,
    KVR_DISCOVERY_RESULT_COUNT
} kvr_discovery_result;

const char *kvr_discovery_result_name(kvr_discovery_result r);

/* Adds an engine (keyed by its normalized URL) or updates its spec; an
 * updated engine is polled again at once. err (INVALID, LIMIT) names the
 * field or the limit. */
kvr_discovery_result kvr_discovery_add(kvr_discovery *d, const kvr_engine_spec *spec, char *err,
                                       size_t err_cap);
/* Forgets the engine and removes every registration discovery made for it
 * before returning (*ranks_removed gets their number; may be NULL). */
kvr_discovery_result kvr_discovery_remove(kvr_discovery *d, const char *url,
                                          size_t *ranks_removed);
/* Makes the engines listed by `origin` exactly specs (a config reload):
 * others of that origin are removed, each spec added or updated. Engines
 * of other origins stay. Returns the number of specs refused (their errors
 * logged). */
size_t kvr_discovery_sync(kvr_discovery *d, kvr_origin origin, const kvr_engine_spec *specs,
                          size_t n);

/* Waits until the engine of url has finished a poll that started after
 * this call, or timeout_s passes. true when one finished. */
bool kvr_discovery_wait_poll(kvr_discovery *d, const char *url, double timeout_s);

/* A snapshot of every engine (in the order added), counters and states. 0,
 * or -1 when out of memory (*out empty). */
int kvr_discovery_list(kvr_discovery *d, kvr_engine_infos *out);
void kvr_engine_infos_free(kvr_engine_infos *l);
/* The engine registered as (model, group, worker_id) in l, or NULL. */
const kvr_engine_info *kvr_engine_infos_find(const kvr_engine_infos *l, const char *model,
                                             const char *group, uint64_t worker_id);

#ifdef __cplusplus
}
#endif
#endif
