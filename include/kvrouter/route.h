/* Routing (SPEC §5 request side, §8): per-worker routing sequences for
 * requests with media, overlap scores, load-aware selection and bookings.
 * Owner: the route layer. The server's HTTP handlers (/query, /route,
 * /prefill_done, /free) are thin JSON wrappers over this API, so a gateway
 * written in C can embed the same routing without HTTP.
 *
 * Thread-safety: every function may be called from any thread at once.
 * Hashing and index matching run without the router's lock; only the
 * selection + booking step (reads and writes of load) is serialized. */
#ifndef KVROUTER_ROUTE_H
#define KVROUTER_ROUTE_H

#include "kvrouter/indexer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_router kvr_router;

/* How a candidate's cost is computed (kvr_route below has both formulas). */
typedef enum {
    /* Predicted time to first token, in seconds: the default. Its knobs are
     * physical: prefill tokens/s per worker (registered, learned from
     * /prefill_done timing, or prefill_tps below), what a host/disk hit
     * saves (cpu_hit_weight, disk_hit_weight) and how much decoding slows
     * prefill (decode_kv_share). */
    KVR_COST_TTFT = 0,
    /* SPEC §8's / Dynamo's formula with its knobs (overlap_score_credit,
     * prefill_load_scale, unclamped_prefill, media_cut_weight). */
    KVR_COST_DYNAMO = 1
} kvr_cost_model;

/* "ttft", "dynamo"; NULL for an unknown value. */
const char *kvr_cost_model_name(kvr_cost_model m);

/* ttft: what the router makes of each worker's LRU edge (its KV capacity,
 * registered as max_total_num_tokens or estimated from its events, and the
 * tokens it took in since each prompt routed there): the prompts of other
 * conversations a placement's new tokens would push past that edge. */
typedef enum {
    KVR_EDGE_OFF = 0, /* not charged (the default: neither rule won, README) */
    /* their tokens, at the share of prompts that came back before aging
     * out, as seconds of the candidate's prefill added to its cost */
    KVR_EDGE_COST = 1,
    /* among the candidates within tie_tolerance, the fewest such tokens
     * first, then the least recent work */
    KVR_EDGE_TIE = 2
} kvr_lru_edge;

/* "off", "cost", "tie"; NULL for an unknown value. */
const char *kvr_lru_edge_name(kvr_lru_edge e);

typedef struct {
    kvr_cost_model cost_model;   /* default KVR_COST_TTFT */
    double overlap_score_credit; /* default 1.0 (dynamo) */
    double prefill_load_scale;   /* default 1.0 (dynamo) */
    double cpu_hit_weight;       /* default 0.75: share of a prefill token a host-tier hit saves */
    double disk_hit_weight;      /* default 0.25: likewise for disk */
    double temperature;          /* default 0: argmin with random tie-break */
    double booking_ttl_s;        /* default 600: a lost /free cannot leak load forever */
    uint64_t rng_seed;           /* 0 -> seeded from time */
    /* Workers' rank lists are cached per (model, group) for this long (a new
     * worker refreshes at once; a new rank with overlap is seen at once;
     * a new rank without overlap within this delay). 0 -> every request. */
    double rank_refresh_s;       /* default 1.0 */
    /* Opt-in departures from SPEC §8's letter (dynamo model only); false / 0
     * (and a zeroed struct) keep it exactly.
     * unclamped_prefill drops the max(0, .) of the prefill term: with the
     * clamp, every worker whose credit covers its load ties on that term
     * and the decode term alone picks among them, so a longer overlap stops
     * counting once any overlap covers the load.
     * media_cut_weight: a candidate whose routing sequence stops at media it
     * cannot be told (SPEC §5 text prefix) pays this much cost per whole
     * block of the request past the cut (cost units: the decode term's;
     * prefill_load_scale x k makes a cut block weigh k blocks of prefill).
     * What the request leaves in that worker's cache past the cut is
     * invisible to the router, so its follow-ups cannot be routed back
     * there; a worker that can be told the identities keeps them visible. */
    bool unclamped_prefill;      /* default false */
    double media_cut_weight;     /* default 0 */
    /* ttft model. prefill_tps: the prefill rate of a worker that neither
     * registered one nor has been measured (when other workers of its group
     * have been measured, their mean is used instead, so an unmeasured
     * worker is neither shunned nor flooded). In a fleet of equal workers
     * the rate scales every cost alike and does not change a choice. */
    double prefill_tps;          /* default 10000 tokens/s */
    /* Fraction of a worker's GPU time one KV token held by its decoding
     * requests takes per second: decode reads the whole context for every
     * output token, so prefill slows by (1 + decode_kv_share x held tokens).
     * = decode tokens/s per request x KV bytes per token / HBM bytes/s:
     * 50 x 320 kB / 3.35 TB/s = 4.8e-6 for a 70B GQA model on an H100.
     * The factor is capped at 1 + max_decode_slowdown, so a worker whose
     * /free calls were lost is not shunned for good. With learn_prefill_rate
     * the share is fitted per (model, group) from the prefill-rate samples
     * once there are enough of them; this is the value until then. */
    double decode_kv_share;      /* default 5e-6 */
    /* The fleet's cost of copying a prefix other workers hold: the blocks a
     * candidate lacks that others' caches hold become one more copy of
     * them, which evicts cache other conversations come back to. A block
     * held by k candidates counts 1/k (every worker's copy of a shared
     * system prompt costs next to nothing; a conversation held by one
     * worker, all of it), and each copied token costs recompute_weight
     * prefill tokens of the candidate's time. */
    double recompute_weight;     /* default 20 */
    /* Candidates whose cost is within this fraction of the lowest (and
     * within 0.1 s of it) and that give up at most this fraction of the
     * request's tokens of cache against the best of them are equally good to
     * the model; the one with the least prefill booked there lately
     * (decaying over 300 s) takes the request (reason "balanced"): cold
     * conversations spread over every cache. 0 = argmin, random tie-break. */
    double tie_tolerance;        /* default 0.05 */
    double max_decode_slowdown;  /* default 2 */
    /* Learn each (worker, rank)'s prefill rate from /prefill_done (the
     * caller's ttft_ms, or the time since /route) for requests routed to a
     * worker with no prefill queued: ttft = uncached x decode factor / rate. */
    bool learn_prefill_rate;     /* default true */
    kvr_lru_edge lru_edge;       /* default KVR_EDGE_OFF */
    /* ttft: the requests queued ahead of a request on a worker decode
     * while it prefills, so their context slows its own prefill as the
     * worker's current decodes do (the queue itself drains at today's
     * rate). */
    bool decode_ahead;           /* default false */
    /* ttft: past a predicted second the tie window is at least the
     * model's measured error (|measured - predicted| TTFT over predicted,
     * decayed, over this router's /prefill_done timings) times the cost,
     * not only 0.1 s / cost^2 (still at most tie_tolerance x cost and
     * 0.1 s); until 16 timings are measured, exactly the latter. */
    bool tie_from_error;         /* default false */
    /* Active bookings at once; a /route that would book more gets
     * KVR_ROUTE_LIMIT (HTTP 429) naming the limit. 0 = unlimited. */
    uint64_t max_bookings;       /* default 262144 */
    /* A booking whose worker's decode speed has been measured (time from
     * /prefill_done to /free per output token) ages out this many times
     * its predicted decode after its /prefill_done (at least 30 s), when
     * that is before booking_ttl_s: a lost /free stops counting once the
     * request is surely finished. 0 = only booking_ttl_s. Bookings without
     * an osl keep the TTL. */
    double decode_expiry_factor; /* default 4 */
    /* The router's clock in seconds (bookings' TTL, rate timing, queue
     * drain, rank cache); NULL -> CLOCK_MONOTONIC. For embedding programs
     * with their own clock, and tests. */
    double (*clock)(void *ud);
    void *clock_ud;
    /* Simulators only: the clock is the latest time passed to
     * kvr_router_observe_time (the `time_s` field of /route, /prefill_done,
     * /free), so a replay in virtual time is timed in virtual time. A
     * production router keeps this off: its callers' clocks are not its own. */
    bool clock_from_requests;    /* default false */
    /* The approximate index (a worker registered with kv_events off, or auto
     * with no batch applied on that rank yet): the blocks routed to it are
     * its cache for approx_ttl_s after the last request that carried them,
     * at most approx_max_blocks per (worker, rank), oldest forgotten first;
     * set it near the engines' KV capacity in blocks. */
    double approx_ttl_s;         /* default 120 (Dynamo's --no-kv-events TTL) */
    uint64_t approx_max_blocks;  /* default 32768 */
} kvr_router_config;

/* Defaults from the option table (kvr_router_options). */
void kvr_router_config_default(kvr_router_config *cfg);
/* Sets one option by name (the field names above). -1 for an unknown name
 * or an out-of-range value. cost_model takes its enum value here (0 ttft,
 * 1 dynamo). */
int kvr_router_config_set(kvr_router_config *cfg, const char *key, double value);
/* The same from text: a number, true/false, or cost_model's name ("ttft",
 * "dynamo"). -1 for an unknown name or a bad value. */
int kvr_router_config_parse(kvr_router_config *cfg, const char *key, const char *value);
/* The option table behind these (include/kvrouter/options.h): rows target a
 * kvr_router_config. `serve --router-opt`, the config file's "router"
 * object and --help use it. */
struct kvr_option;
const struct kvr_option *kvr_router_options(size_t *n);

kvr_router *kvr_router_create(kvr_indexer *ix, const kvr_router_config *cfg);
/* Applies cfg to a running router (SIGHUP reload), thread-safe: the
 * settings whose option rows carry KVR_OPT_RELOAD (all but booking_ttl_s,
 * rng_seed and clock_from_requests, and the clock callback, which stay as
 * created). Bookings already made keep what they were booked with; the
 * next /route uses the new settings. Returns how many settings changed,
 * -1 without a router or cfg. */
int kvr_router_set_config(kvr_router *r, const kvr_router_config *cfg);
/* The settings the router runs with now. */
void kvr_router_config_get(kvr_router *r, kvr_router_config *out);
/* clock_from_requests: moves the clock to t seconds (never backwards).
 * Without it, does nothing. */
void kvr_router_observe_time(kvr_router *r, double t);
void kvr_router_destroy(kvr_router *r);

/* ---- requests ---------------------------------------------------------- */

/* Bounds applied before any work (a request above them is a 400). */
#define KVR_ROUTE_MAX_TOKENS (1u << 20)
#define KVR_ROUTE_MAX_MM_ITEMS 65536u
#define KVR_ROUTE_MAX_ID_LEN 256u

/* One media item: token positions [start, end) hold the engine's placeholder
 * tokens. mm_hash is the caller's image identity, when it has one, as
 * SGLang reads it. vLLM reads a 64-hex identity by its first 16 digits
 * where SGLang takes the low 64 bits (SPEC §5): has_mm_hash_vllm then says
 * vLLM workers use mm_hash_vllm instead (unset: mm_hash for both). */
typedef struct {
    uint32_t start;
    uint32_t end;
    bool has_mm_hash;
    uint64_t mm_hash;
    bool has_mm_hash_vllm;
    uint64_t mm_hash_vllm;
} kvr_mm_item;

typedef struct {
    const char *model_name;
    const char *routing_group;   /* NULL -> "default" */
    const uint32_t *token_ids;
    size_t n_tokens;             /* 1..KVR_ROUTE_MAX_TOKENS */
    const kvr_mm_item *mm_items; /* ordered, non-overlapping, inside the tokens */
    size_t n_mm_items;
    /* NULL or "" -> each worker's registered adapter (SPEC §7). */
    const char *lora_name;
    const char *cache_salt;      /* NULL or "" -> none */
} kvr_query_request;

/* Which sequence a worker is scored with (SPEC §5 request side). */
typedef enum {
    KVR_SEQ_PLAIN = 0,       /* no media items: the tokens as given */
    KVR_SEQ_MM_PADDED = 1,   /* accepts_mm_hashes and every item hashed: pad values substituted */
    KVR_SEQ_TEXT_PREFIX = 2  /* otherwise: tokens before the first media position */
} kvr_seq_kind;

const char *kvr_seq_kind_name(kvr_seq_kind k);

typedef enum {
    KVR_ROUTE_OK = 0,
    KVR_ROUTE_BAD_REQUEST,   /* 400; error names the field */
    KVR_ROUTE_UNKNOWN_MODEL, /* 404; no worker registered for (model, group) */
    KVR_ROUTE_NO_CANDIDATE,  /* 400; pin / allowed_workers left no candidate */
    KVR_ROUTE_DUPLICATE_ID,  /* 409; request_id already booked */
    KVR_ROUTE_UNKNOWN_ID,    /* 404; /free or /prefill_done of an unknown id */
    KVR_ROUTE_NO_MEMORY,     /* 500 */
    KVR_ROUTE_LIMIT          /* 429; max_bookings active bookings already */
} kvr_route_status;

/* Suggested HTTP status of a result. */
int kvr_route_status_http(kvr_route_status s);

/* One candidate (worker, dp_rank). Overlaps are whole blocks from the start
 * of that worker's routing sequence: gpu <= cpu <= disk (cpu and disk are
 * the reach when those tiers continue the gpu prefix, SPEC §6). */
typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    bool rank_seen;          /* false: the worker has no rank yet, counted as rank 0 */
    uint32_t gpu_blocks;
    uint32_t cpu_blocks;
    uint32_t disk_blocks;
    uint32_t routing_tokens; /* length of the sequence hashed for this worker */
    kvr_seq_kind seq_kind;
    bool forward_mm_hashes;  /* only with KVR_SEQ_MM_PADDED */
    kvr_engine engine;       /* the worker's: vLLM gets multi_modal_uuids */
    /* The overlap is what the router routed there (kv_events off, or auto
     * with no event yet on this rank), not what its events said; gpu, cpu
     * and disk are then equal. */
    bool approximate;
    double prefill_tps;      /* registered prefill rate, 0 = unknown */
    /* KV capacity in tokens (kvr_worker_caps.kv_capacity_tokens: registered,
     * else estimated from the worker's events); 0 = unknown */
    uint64_t kv_capacity_tokens;
} kvr_query_entry;

typedef struct {
    uint32_t block_size;
    kvr_query_entry *entries; /* every candidate (worker, rank) of (model, group) */
    size_t n_entries;
    size_t cap;
    /* Distinct (sequence, hash profile) pairs hashed and matched for this
     * request: each once, however many workers share it. */
    uint32_t n_hash_passes;
    char error[192];          /* set when the status is not OK */
} kvr_query_result;

void kvr_query_result_init(kvr_query_result *res);
void kvr_query_result_free(kvr_query_result *res);

/* Overlap of every registered (worker, rank) of (model, group) with the
 * request, each scored with the sequence that fits its capabilities. */
kvr_route_status kvr_query(kvr_router *r, const kvr_query_request *req, kvr_query_result *out);

/* ---- routing ----------------------------------------------------------- */

typedef enum {
    KVR_REASON_BEST_COST = 0,
    KVR_REASON_TIE_RANDOM,
    KVR_REASON_SAMPLED,
    KVR_REASON_PINNED,
    KVR_REASON_BALANCED /* ttft: several within tie_tolerance; the least recent work won */
} kvr_route_reason;

const char *kvr_route_reason_name(kvr_route_reason r);

typedef struct {
    kvr_query_request q;
    const char *request_id;    /* booked under this id; NULL -> decide without booking */
    uint32_t osl;              /* expected output tokens (0 unknown): decode blocks */
    bool has_worker_id;        /* pin to this worker (reason "pinned") */
    uint64_t worker_id;
    bool has_dp_rank;          /* only this rank */
    uint32_t dp_rank;
    const uint64_t *allowed_workers; /* NULL -> every worker */
    size_t n_allowed_workers;
    /* Per-request overrides of the router configuration. */
    bool has_overlap_score_credit;
    double overlap_score_credit;
    bool has_prefill_load_scale;
    double prefill_load_scale;
    bool has_temperature;
    double temperature;
    bool debug;                /* fill kvr_route_decision.costs */
} kvr_route_request;

typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t gpu_blocks, cpu_blocks, disk_blocks;
    uint32_t routing_tokens;
    uint64_t active_prefill_tokens; /* before this request's booking */
    uint64_t active_decode_blocks;  /* distinct blocks held, before this request */
    uint64_t new_blocks;            /* blocks this request would add on this worker */
    double credit;                  /* dynamo: credit; ttft: tokens the caches save */
    double prefill_tps;             /* ttft: the rate used (0 with dynamo) */
    double queued_tokens;           /* ttft: prefill still ahead of it, estimated now */
    double recent_work;             /* ttft: prefill tokens booked there lately (decayed) */
    double decode_factor;           /* ttft: the decode slowdown used (0 with dynamo) */
    /* ttft: the LRU depth of the prompt this request comes back to on the
     * worker: tokens taken in or hit again there since it was last touched,
     * older prompts' hits counted (-1: none routed there; debug only),
     * and the tokens of other prompts its new tokens would push past the
     * worker's LRU edge (0 when its capacity is unknown) */
    double prefix_age_tokens;
    double edge_loss_tokens;
    double cost;                    /* ttft: predicted seconds to first token */
    /* ttft: that prediction alone, before the copy cost (recompute_weight)
     * and lru_edge=cost add to cost: what /prefill_done timings measure the
     * model's error against (0 with dynamo) */
    double ttft_s;
    double probability;             /* softmax weight when sampled, else 1 for the pick */
} kvr_route_cost;

typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t overlap_tokens;   /* gpu overlap blocks x block size */
    uint32_t routing_tokens;
    bool forward_mm_hashes;    /* forward every item's mm_hash, in item order */
    kvr_engine engine;         /* the chosen worker's (vLLM: as multi_modal_uuids) */
    kvr_route_reason reason;
    double cost;
    uint32_t block_size;
    uint64_t booked_prefill_tokens; /* uncached tokens on the chosen worker */
    uint64_t booked_blocks;         /* distinct blocks the booking added there */
    kvr_route_cost *costs;     /* debug only (malloc'd); kvr_route_decision_free */
    size_t n_costs;
    uint32_t n_hash_passes;
    char error[192];
} kvr_route_decision;

void kvr_route_decision_free(kvr_route_decision *d);

/* Scores every candidate, picks one (SPEC §8) and books the request on it.
 *
 * Candidates: every registered (worker, rank) of (model, group); a worker
 * with no rank state yet counts as rank 0. Filters: has_worker_id (reason
 * "pinned"; the best of its ranks unless has_dp_rank), has_dp_rank,
 * allowed_workers. None left -> KVR_ROUTE_NO_CANDIDATE naming the filter.
 *
 * Cost, cost_model ttft (the default): the predicted time to first token,
 *   cost = (queued + uncached) x decode_factor / prefill_tps
 *          + recompute_weight x copied x B / prefill_tps,
 *   copied = sum over the blocks other candidates' tiers reach and this one's
 *            do not of 1 / (candidates reaching that block),
 *   queued = active_prefill_tokens less what the worker has done of its
 *            oldest pending booking since it started (at that rate; at most
 *            90 % of it: it has not reported yet),
 *   uncached = isl - B x (gpu + cpu_hit_weight x (cpu - gpu)
 *                           + disk_hit_weight x (disk - cpu)),
 *   decode_factor = 1 + min(decode_kv_share x active_decode_blocks x B,
 *                           max_decode_slowdown),
 * prefill_tps = the worker's measured rate (learn_prefill_rate, after
 * KVR_ROUTE_RATE_MIN_SAMPLES samples), else its registered one, else the
 * mean measured rate of the candidates, else the configured prefill_tps.
 * Overlaps of an approximate entry (kv_events) come from what was routed
 * there; a booking on it records the request's routing blocks there.
 * Cost, cost_model dynamo (SPEC §8):
 *   cost = prefill_load_scale * max(0, (active_prefill_tokens + isl)/B - credit)
 *        + active_decode_blocks + new_blocks,
 *   credit = overlap_score_credit * gpu + cpu_hit_weight * (cpu - gpu)
 *          + disk_hit_weight * (disk - cpu)   (blocks of that worker's sequence).
 * isl = the request's whole token count (the engine prefills all of it, even
 * the part after the first image that cannot route). temperature 0: argmin,
 * ties (within 1e-9 relative) broken uniformly at random ("tie_random");
 * T > 0: softmax of -(cost - min)/(max - min)/T ("sampled").
 *
 * Load semantics follow Dynamo's KV router (ActiveSequences):
 * active_prefill_tokens sums the UNCACHED tokens (isl - gpu overlap x B) of
 * the worker's requests not yet prefilled; active_decode_blocks counts the
 * DISTINCT blocks its active requests hold: routing blocks are identified by
 * chain hash and refcounted, so requests sharing a prefix on one worker
 * count it once; the rest of a request (tokens past its whole routing
 * blocks, plus osl) is ceil((isl - routing_blocks x B + osl)/B) blocks of
 * its own. new_blocks = the request's blocks that worker does not hold yet
 * (so an idle worker's decode term is the request's own size, the same for
 * every worker with the same routing sequence).
 *
 * Booking (when request_id is set; a duplicate id -> KVR_ROUTE_DUPLICATE_ID;
 * max_bookings active already -> KVR_ROUTE_LIMIT, counted in
 * bookings_rejected): the prefill tokens (dynamo: isl - gpu x B; ttft: the
 * model's uncached) and the request's blocks on the chosen (worker, rank). Blocks count as active_decode_blocks from the start (KV
 * memory is held during prefill too); prefill_done drops the prefill tokens;
 * release drops both. Bookings expire booking_ttl_s after /route. */
kvr_route_status kvr_route(kvr_router *r, const kvr_route_request *req, kvr_route_decision *out);

/* The request's prefill finished: its prefill tokens stop counting, its
 * blocks stay. KVR_ROUTE_UNKNOWN_ID for an unknown or expired id. The time
 * since /route is a sample of the worker's prefill rate (learn_prefill_rate;
 * only when nothing was queued ahead of the request). */
kvr_route_status kvr_router_prefill_done(kvr_router *r, const char *request_id);
/* The same with the time to first token the caller measured (seconds;
 * negative -> the time since /route): a gateway that reports late, or a
 * simulator in virtual time, says how long the prefill really took. */
kvr_route_status kvr_router_prefill_done_after(kvr_router *r, const char *request_id,
                                               double ttft_s);
/* Releases the booking. KVR_ROUTE_UNKNOWN_ID for an unknown or expired id. */
kvr_route_status kvr_router_release(kvr_router *r, const char *request_id);
/* Expires bookings older than booking_ttl_s (returns how many) and blocks of
 * the approximate index past approx_ttl_s. Every call above also expires
 * lazily; a server calls this periodically too. */
size_t kvr_router_sweep(kvr_router *r);

typedef struct {
    uint64_t active_prefill_tokens;
    uint64_t active_decode_blocks;
    uint32_t bookings;
} kvr_worker_load;

/* Current load of (worker, rank) in (model, group); zeros when none. */
void kvr_router_load(kvr_router *r, const char *model, const char *group, uint64_t worker_id,
                     uint32_t dp_rank, kvr_worker_load *out);

/* Samples before a measured prefill rate replaces the registered or default
 * one. */
#define KVR_ROUTE_RATE_MIN_SAMPLES 4
/* The measured prefill rate of (worker, rank) in tokens/s, 0 until it has
 * KVR_ROUTE_RATE_MIN_SAMPLES samples (or for an unknown model/group). */
double kvr_router_prefill_rate(kvr_router *r, const char *model, const char *group,
                               uint64_t worker_id, uint32_t dp_rank);

/* What the router went on without for want of memory, each counted where
 * it was lost (name, /metrics series, help): the /route or timing went on,
 * without the part named. One list: kvr_router_stats, the router's own
 * counts and /metrics expand it, so a new one is one line here plus the
 * code that moves it. */
#define KVR_ROUTER_LOST_COUNTERS(X)                                                        \
    X(copy_cost_lost, "kvr_router_copy_cost_lost_total",                                   \
      "ttft /route calls priced without the copy cost (recompute_weight): out of memory")  \
    X(work_lost, "kvr_router_work_lost_total",                                             \
      "Bookings whose prefill the recent work (the tie-break) missed: out of memory")      \
    X(rate_samples_lost, "kvr_router_rate_samples_lost_total",                             \
      "/prefill_done timings the prefill rate missed: out of memory")                      \
    X(fit_samples_lost, "kvr_router_fit_samples_lost_total",                               \
      "/prefill_done timings the fit of how decoding slows prefill missed: out of memory") \
    X(decode_samples_lost, "kvr_router_decode_samples_lost_total",                         \
      "/free timings the decode speed missed: out of memory")

typedef struct {
    uint64_t queries;
    uint64_t routes;
    uint64_t hash_passes;
    uint64_t bookings_active;
    uint64_t bookings_expired;
    uint64_t bookings_released;
    uint64_t prefill_done;
    uint64_t load_entries; /* (worker, rank) load records held (idle ones are freed) */
    uint64_t held_blocks;       /* distinct identified blocks held, over all load records */
    uint64_t booked_block_refs; /* block references held by active bookings */
    uint64_t held_bytes;        /* memory of both (0 when nothing is booked) */
    uint64_t bookings_rejected; /* /route refused: max_bookings reached */
    uint64_t bookings_aged_out; /* expired at their predicted decode end (decode_expiry_factor) */
    uint64_t max_bookings;      /* the limit (0 = unlimited) */
    uint64_t rate_samples;      /* /prefill_done timings taken as prefill-rate samples */
    uint64_t rates_learned;     /* (worker, rank) with a measured prefill rate in use */
    uint64_t rates_evicted;     /* stalest rates dropped past 65,536 (worker, rank) */
    /* the ttft model's measured error (tie_from_error; 0 until 16 timings) */
    double ttft_error;
    uint64_t ttft_error_samples;
    uint64_t approx_workers;    /* (worker, rank) with blocks in the approximate index */
    uint64_t approx_blocks;     /* blocks held there */
    uint64_t approx_pruned;     /* blocks forgotten because a (worker, rank) held approx_max_blocks */
    /* lru_edge (off: all 0): prompts at a worker's LRU edge that a later
     * turn came back to, that aged out first (past the capacity, or the
     * oldest past 1,024 a worker; edge_at_limit counts those), and bookings
     * the edge missed for want of memory */
    uint64_t edge_returned, edge_aged_out, edge_at_limit, edge_lost;
    /* Out of memory: bookings the approximate index noted in part (a
     * shorter prefix) or not at all */
    uint64_t approx_lost;
#define KVR_ROUTER_LOST_FIELD_(name, metric, help) uint64_t name;
    KVR_ROUTER_LOST_COUNTERS(KVR_ROUTER_LOST_FIELD_)
#undef KVR_ROUTER_LOST_FIELD_
} kvr_router_stats;

void kvr_router_stats_get(kvr_router *r, kvr_router_stats *out);

/* ---- bookings shared between replicas ----------------------------------
 * Several routers serving one fleet count each other's bookings (SPEC §10).
 * The router knows no transport: a hook hears every change to this
 * router's own bookings, and kvr_router_apply_peer feeds the other
 * replicas' changes back. A peer's booking lives in the same load records
 * as local ones, so a block that requests on two replicas hold on one
 * worker counts once, as it would for two local requests; bookings are
 * told apart by owner, so a peer booking never collides with a local one
 * of the same request_id. Expiry is not an event: every router expires a
 * booking booking_ttl_s after it was made, wherever it was made. */

typedef enum {
    KVR_BOOKING_BOOKED = 0,    /* kvr_route booked request_id */
    KVR_BOOKING_PREFILL_DONE,  /* its prefill tokens stop counting */
    KVR_BOOKING_RELEASED       /* /free */
} kvr_booking_op;

typedef struct {
    kvr_booking_op op;
    /* Whose booking: 0 = this router's own; any other value names the peer
     * replica that made it (the cluster layer's replica id). */
    uint64_t owner;
    const char *request_id;
    /* BOOKED only. chain: the routing sequence's chain hashes (SPEC §4)
     * whose blocks the booking holds; unique_blocks: its blocks that no
     * chain hash names (tail and output; a sender that shortens the chain
     * adds what it cut here). */
    const char *model_name;
    const char *routing_group; /* NULL -> "default" */
    uint64_t worker_id;
    uint32_t dp_rank;
    uint64_t prefill_tokens;
    const uint64_t *chain;
    uint32_t n_chain;
    uint64_t unique_blocks;
    /* kvr_router_apply_peer only: the prefill is already done, and how long
     * ago it was booked (its TTL runs from then). */
    bool decode;
    double age_s;
} kvr_booking_event;

/* Called under the router's lock, in the order the changes apply, with
 * owner 0 for this router's bookings (BOOKED from kvr_route, PREFILL_DONE
 * and RELEASED from kvr_router_prefill_done / kvr_router_release), and with
 * the peer's owner when kvr_router_prefill_done / kvr_router_release named a
 * request a peer booked: this router applies it to its view of that booking
 * and the hook must tell the owner. Never for kvr_router_apply_peer's
 * changes (no echo) nor for expiry. The hook must not call the router; the
 * event and its strings are valid during the call only. */
typedef void (*kvr_booking_hook_fn)(void *user, const kvr_booking_event *ev);

/* Sets (fn NULL: clears) the hook; once it returns, the previous hook is
 * not running and will not be called again. */
void kvr_router_set_booking_hook(kvr_router *r, kvr_booking_hook_fn fn, void *user);

/* Applies a change another replica made, without calling the hook:
 * - owner != 0: the peer's booking (owner, request_id) is booked, moved to
 *   decode or released in this router's load view.
 * - owner == 0: a change to this router's own booking that this router did
 *   not make itself: a previous run of this replica (same owner id) booked
 *   it and this run adopts it, or a peer forwards a /prefill_done or /free
 *   of it. Adopted bookings then behave as if kvr_route had made them.
 * Results: OK (applied; also a BOOKED already older than booking_ttl_s,
 * which is not booked); BAD_REQUEST (request_id empty or longer than
 * KVR_ROUTE_MAX_ID_LEN, BOOKED without a model, age_s not finite);
 * UNKNOWN_MODEL (BOOKED for a (model, group) with no index here);
 * DUPLICATE_ID (BOOKED of a booking this owner already has: nothing
 * changed); UNKNOWN_ID (PREFILL_DONE / RELEASED of a booking not held,
 * e.g. expired); NO_MEMORY (nothing changed). */
kvr_route_status kvr_router_apply_peer(kvr_router *r, const kvr_booking_event *ev);

typedef struct {
    uint64_t active;        /* peers' bookings in the load view now */
    uint64_t applied;       /* kvr_router_apply_peer calls that changed something */
    uint64_t rejected;      /* ... that did not (any result other than OK) */
    uint64_t forwarded;     /* prefill_done / release of a peer's booking (hook owner != 0) */
} kvr_router_peer_stats;

void kvr_router_peer_stats_get(kvr_router *r, kvr_router_peer_stats *out);

#ifdef __cplusplus
}
#endif
#endif
