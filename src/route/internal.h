/* Route layer internals shared by its files (not installed). */
#ifndef KVR_ROUTE_INTERNAL_H
#define KVR_ROUTE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "kvrouter/route.h"
#include "util/u64map.h"

/* ---- bookings and load (bookings.c); caller holds kvr_router.mu ---------- */

/* Load of one (worker, rank), as Dynamo's ActiveSequences keeps it: pending
 * prefill is the uncached tokens of requests not yet prefilled; decode
 * blocks are DISTINCT blocks held by active requests, so requests sharing a
 * prefix on one worker count the shared blocks once. Identified blocks are
 * chain hashes of the worker's routing sequence (refcounted in `held`); the
 * rest of a request (tokens past its whole routing blocks, expected output)
 * cannot be identified and counts per request in `unique_blocks`. */
typedef struct route_load {
    uintptr_t index; /* kvr_index of (model, group): stable for the indexer's life */
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t bookings;
    uint64_t prefill_tokens;
    kvr_u64map held;        /* chain hash -> number of bookings holding it */
    uint64_t unique_blocks; /* summed over bookings */
    struct route_load *hnext;
    /* Bookings still prefilling, oldest first: the worker prefills them in
     * this order, so the head has been running since head_since and part
     * of it is done (ttft model: the queue drains while time passes). */
    struct route_booking *pending_head, *pending_tail;
    double head_since;
    /* Context tokens of the bookings past prefill: what a decode step
     * reads, so what slows this worker's prefill (ttft decode factor). */
    uint64_t decode_context;
} route_load;

/* A (worker, rank)'s measured prefill rate: decayed sums of the work and
 * the time of the requests sampled (sample_rate), so the rate is their
 * token-weighted mean and recent samples weigh more. Kept apart from
 * route_load, which is freed whenever the worker is idle. */
typedef struct route_rate {
    uintptr_t index;
    uint64_t worker_id;
    uint32_t dp_rank;
    uint32_t samples;
    double tokens, seconds;
    /* Decode speed: output tokens and the time from /prefill_done to /free. */
    uint32_t decode_samples;
    double decode_tokens, decode_seconds;
    /* Prefill tokens booked here, decaying with KVR_ROUTE_WORK_TAU_S: the
     * ttft model's tie-break among near-equal costs (select.c). */
    double work, work_at;
    double updated_at;
    struct route_edge *edge; /* its LRU edge (edge.c); NULL until booked */
    struct route_rate *hnext;
} route_rate;

/* Rates kept at most; past it the least recently updated one goes. */
#define KVR_ROUTE_MAX_RATES 65536u
/* Requests shorter than this are not rate samples: fixed per-request
 * latency would dominate their timing. */
#define KVR_ROUTE_RATE_MIN_TOKENS 256u
#define KVR_ROUTE_WORK_TAU_S 300.0
/* The ttft tie window (tie_tolerance x the lowest cost) is at most this many
 * seconds of cost. */
#define KVR_ROUTE_TIE_MAX_S 0.1
/* Measured rates within this fraction of the candidates' mean count as the
 * mean (cost.c route_fill_rates). */
#define KVR_ROUTE_RATE_SAME 0.2
/* Weight an old sample keeps when a new one arrives. */
#define KVR_ROUTE_RATE_DECAY 0.9
/* The prediction error's: it describes the model over the fleet, not one
 * worker's speed now, so it remembers ~50 requests. */
#define KVR_ROUTE_ERR_DECAY 0.98
#define KVR_ROUTE_ERR_MIN_SAMPLES 16
/* A booking aged out by its predicted decode end lives at least this long
 * after its prefill. */
#define KVR_ROUTE_DECODE_EXPIRY_MIN_S 30.0

/* ---- each worker's LRU edge (edge.c); caller holds kvr_router.mu -------- */

/* A prompt routed to a worker: its last routing block, the worker's LRU
 * clock (edge.c) when it was last touched (its stamp) and the tokens a later turn would reuse
 * of it (0 once a later turn superseded it). */
typedef struct {
    uint64_t last_hash;
    double stamp;
    double value;
} route_edge_entry;

typedef struct route_edge route_edge;

/* Of every worker's entries: how many a later turn came back to, and how
 * many aged past their worker's capacity first (at_limit of those: dropped
 * because KVR_ROUTE_EDGE_MAX were held, not by age; they count as aged out
 * for the learned return share); and the bookings no entry was noted for
 * (out of memory). */
typedef struct {
    uint64_t returned, aged_out, at_limit, lost;
} route_edge_counts;

/* Entries kept per worker at most (when its capacity is unknown, the
 * newest), and blocks probed for the entry a prompt comes back to. */
#define KVR_ROUTE_EDGE_MAX 1024u
#define KVR_ROUTE_EDGE_PROBES 256u

void route_edge_free(route_edge *g);
/* Whether g holds a prompt a placement could push past the edge. */
bool route_edge_live(const route_edge *g);
/* The LRU depth (tokens touched on the worker since) of the prompt a
 * request with these hashes (matched blocks cached on the worker) comes
 * back to; -1 when none. */
double route_edge_age(const route_edge *g, const uint64_t *hashes, uint32_t matched);
/* Tokens of other prompts that u new tokens push past the edge of a cache
 * of `capacity` tokens. */
double route_edge_loss(const route_edge *g, double capacity, double u, const uint64_t *hashes,
                       uint32_t matched);
/* A booking: the worker takes in intake_tokens and holds the prompt
 * (prompt_tokens; matched_tokens of it were cached there). *gp is created
 * on first use. -1 when out of memory (the edge stays as it was). */
int route_edge_note(route_edge **gp, const uint64_t *hashes, uint32_t n_blocks, uint32_t matched,
                    double matched_tokens, double prompt_tokens, double intake_tokens,
                    double capacity, route_edge_counts *c);

typedef struct route_booking {
    char *id;
    uint64_t owner;                   /* 0: this router's; else the peer replica that booked it */
    uint64_t idhash;
    struct route_booking *hnext;      /* same idhash */
    struct route_booking *prev, *next; /* creation order == expiry order (one TTL) */
    route_load *load;
    uint64_t prefill_tokens;
    uint64_t *chain;                  /* the blocks it holds a reference to */
    uint32_t n_chain;
    uint64_t unique_blocks;
    bool decode;
    struct route_booking *pprev, *pnext; /* the load's pending list while !decode */
    double expires_at;
    /* Rate sampling: set at /route when the worker had no prefill queued
     * (its TTFT is then this request's own prefill). */
    bool sample_rate;
    bool aged_out;        /* its expiry is the predicted end of its decode */
    uint32_t osl;         /* expected output tokens (0 unknown) */
    double prefill_done_at;
    uint64_t context;     /* isl + osl / 2: the mean context its decode reads */
    uint64_t decoding_at_route; /* the worker's decode context when it was routed */
    double routed_at;
    double decode_factor; /* prefill slowdown predicted at /route */
    double predicted_s;   /* ttft: the time to first token predicted at /route (0: none) */
} route_booking;

typedef struct {
    kvr_u64map loads; /* key hash -> route_load* (chained) */
    kvr_u64map ids;   /* id hash -> route_booking* (chained) */
    route_booking *head, *tail;
    double ttl_s;
    uint64_t n_active, expired, released, prefill_done;
    uint64_t n_loads; /* route_load entries; idle ones are freed */
    uint64_t n_refs;  /* chain entries over all bookings */
    uint64_t n_peer;  /* active bookings of other replicas (owner != 0) */
    uint64_t rejected; /* /route refused at max_bookings */
    uint64_t aged_out; /* expired at their predicted decode end */
    double decode_expiry_factor;
    kvr_u64map rates;  /* route_wr_key -> route_rate* (chained) */
    kvr_u64map fits;   /* index -> route_decode_fit* (one per (model, group)) */
    uint64_t n_rates, rate_samples;
    uint64_t rates_evicted; /* stalest rates dropped at KVR_ROUTE_MAX_RATES */
    /* Out of memory, the route goes on without (KVR_ROUTER_LOST_COUNTERS):
     * the copy cost (route_add_duplicate_cost), a booking's recent work
     * (route_rate_add_work), a prefill-rate sample (route_rate_sample), a
     * sample of the decode-slowdown fit (route_fit_sample), a decode-speed
     * sample (route_rate_decode_sample) */
#define KVR_ROUTER_LOST_FIELD_(name, metric, help) uint64_t name;
    KVR_ROUTER_LOST_COUNTERS(KVR_ROUTER_LOST_FIELD_)
#undef KVR_ROUTER_LOST_FIELD_
    route_edge_counts edges;
    /* The ttft model's error, fleet-wide: decayed sums of |measured -
     * predicted| and of predicted over this router's /prefill_done timings
     * (route_ttft_error). */
    double err_abs, err_pred;
    uint64_t err_samples;
    struct route_slots *slots; /* per (model, group): slots.c */
} route_bookings;

/* The map key of (index, worker, rank), shared by loads and rates. */
uint64_t route_wr_key(uintptr_t index, uint64_t worker_id, uint32_t dp_rank);

void route_bookings_init(route_bookings *b, double ttl_s);
void route_bookings_free(route_bookings *b);
route_load *route_load_find(route_bookings *b, uintptr_t index, uint64_t worker_id,
                            uint32_t dp_rank, bool create);
/* Distinct blocks held on the load (identified + per-request). */
uint64_t route_load_blocks(const route_load *l);
/* Prefill tokens still to do at `now` if the worker prefills its pending
 * bookings in order at `rate` tokens/s: the head's elapsed share is done
 * (never all of it: it is still booked, so it has not reported). */
double route_load_pending_tokens(const route_load *l, double rate, double now);
/* How many leading blocks of chain the load already holds. */
uint32_t route_load_held_prefix(const route_load *l, const uint64_t *chain, uint32_t n);
/* Books prefill_tokens and references to chain[0..n_chain) + unique_blocks
 * on load; *added = the distinct blocks the load gained. 0 booked,
 * 1 duplicate id, -1 out of memory (nothing booked). */
int route_book(route_bookings *b, const char *id, route_load *load, uint64_t prefill_tokens,
               const uint64_t *chain, uint32_t n_chain, uint64_t unique_blocks, double now,
               uint64_t *added, route_booking **out);
/* route_book for owner's booking (0: this router's), booked at booked_at
 * (earlier than now for a peer's), kept in expiry order. */
int route_book_as(route_bookings *b, uint64_t owner, const char *id, route_load *load,
                  uint64_t prefill_tokens, const uint64_t *chain, uint32_t n_chain,
                  uint64_t unique_blocks, double booked_at, uint64_t *added,
                  route_booking **out);
/* ttft_s < 0: measured as now - routed_at. */
kvr_route_status route_booking_prefill_done(route_bookings *b, uint64_t owner, const char *id,
                                            double now, double ttft_s);
kvr_route_status route_booking_release(route_bookings *b, uint64_t owner, const char *id,
                                        double now);
/* The owner of some peer booking (owner != 0) of id; false when none. */
bool route_booking_peer_owner(route_bookings *b, const char *id, uint64_t *owner);
size_t route_bookings_expire(route_bookings *b, double now);

/* How much decoding slows prefill, fitted per (model, group) from the rate
 * samples: seconds per prefilled token y = (1 + k x) / R against the
 * decode context x the worker had, by weighted least squares with decaying
 * sums; k = slope / intercept (rates.c). */
typedef struct {
    double w, x, y, xx, xy; /* decayed weighted sums (weight: tokens) */
    uint32_t n;
} route_decode_fit;

/* Samples, and the spread of decode context among them (tokens), before
 * the fitted slowdown replaces decode_kv_share. */
#define KVR_ROUTE_FIT_MIN_SAMPLES 32u
#define KVR_ROUTE_FIT_MIN_SPREAD 20000.0
#define KVR_ROUTE_FIT_DECAY 0.995
#define KVR_ROUTE_FIT_MAX_SHARE 1e-4

/* rates.c; caller holds kvr_router.mu. Out of memory (no fit for index
 * yet, and none can be made) the sample is counted in fit_samples_lost. */
void route_fit_sample(route_bookings *b, uintptr_t index, double tokens, double seconds,
                      double decode_context);
/* The fitted decode share of index, or fallback while the fit is not
 * trustworthy (too few samples or too little spread). */
double route_fit_share(route_bookings *b, uintptr_t index, double fallback);
route_rate *route_rate_find(route_bookings *b, uintptr_t index, uint64_t worker_id,
                            uint32_t dp_rank);
/* Adds a sample of `tokens` prefilled in `seconds`; counted in
 * rate_samples_lost when the rate cannot be created (out of memory). */
void route_rate_sample(route_bookings *b, uintptr_t index, uint64_t worker_id, uint32_t dp_rank,
                       double tokens, double seconds, double now);
/* The measured rate in tokens/s, 0 until KVR_ROUTE_RATE_MIN_SAMPLES. */
double route_rate_measured(const route_rate *rt);
/* Adds a decode of `tokens` output tokens that took `seconds`; counted in
 * decode_samples_lost when the rate cannot be created. */
void route_rate_decode_sample(route_bookings *b, uintptr_t index, uint64_t worker_id,
                              uint32_t dp_rank, double tokens, double seconds, double now);
/* Measured decode seconds per output token, 0 until MIN_SAMPLES decodes. */
double route_rate_decode_spt(const route_rate *rt);
/* Adds `tokens` of prefill booked at now to the worker's recent work;
 * returns its rate (NULL out of memory) for route_rate_note_edge. */
route_rate *route_rate_add_work(route_bookings *b, uintptr_t index, uint64_t worker_id,
                                uint32_t dp_rank, double tokens, double now);
/* Notes a booking at the LRU edge of the rate route_rate_add_work returned
 * (route_edge_note); counted in edges.lost when it cannot be noted (rt
 * NULL, or route_edge_note out of memory). */
void route_rate_note_edge(route_bookings *b, route_rate *rt, const uint64_t *hashes,
                          uint32_t n_blocks, uint32_t matched, double matched_tokens,
                          double prompt_tokens, double intake_tokens, double capacity, double now);
/* Frees every worker's LRU edge (lru_edge turned off: no booking notes
 * one any more, so what they hold would only grow stale). */
void route_rates_drop_edges(route_bookings *b);
/* The worker's recent work at now (decayed). */
double route_rate_recent_work(const route_rate *rt, double now);
/* A local /prefill_done of a booking predicted at predicted_s that took
 * measured_s; the error as a share of the predicted time, weighted by it
 * (long prompts count for what they cost), 0 until
 * KVR_ROUTE_ERR_MIN_SAMPLES. */
void route_ttft_error_sample(route_bookings *b, double predicted_s, double measured_s);
double route_ttft_error(const route_bookings *b);
void route_rates_free(route_bookings *b);

/* ---- per-(worker, rank) state slots (slots.c); caller holds kvr_router.mu -- */

/* What a /route reads of every candidate: its load entry and its rate
 * entry. Looked up by hash, that was two lookups and two cache misses a
 * candidate (~190 instructions; at 1000 workers a fifth of the request).
 * The rank cache (ranks.c) numbers each (worker, rank) of a group by its
 * position in its sorted table; the router keeps per group an array of
 * slots in that order, walked with the candidates. A slot holds its key
 * and is checked against it; it is bound on first use and re-read from the
 * maps whenever a load or a rate of its key is created or freed (it points
 * at both, so their changes need no refresh), so a stale position costs a
 * lookup, never a wrong or freed state. */
typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
    bool bound;
    route_load *load;       /* NULL: idle */
    const route_rate *rate; /* NULL: never measured nor booked */
} route_slot;

typedef struct route_slots {
    uintptr_t index;
    uint64_t gen;   /* of the rank cache the positions come from */
    route_slot *slot;
    size_t n;
    kvr_u64map pos; /* route_wr_key -> position of a bound slot */
    struct route_slots *next;
} route_slots;

/* A candidate without a position in the rank cache. */
#define KVR_ROUTE_NO_SLOT UINT32_MAX

/* The slots of index for positions of rank cache generation gen (n
 * positions); NULL when the caller's positions are older than the slots'
 * (it looks up by hash) or out of memory. */
route_slots *route_slots_for(route_bookings *b, uintptr_t index, uint64_t gen, size_t n);
/* route_slot_get when the slot at pos is not bound to the key: binds it
 * if it is free, else fills *tmp from the maps. */
const route_slot *route_slot_miss(route_bookings *b, route_slots *t, uint32_t pos,
                                  uintptr_t index, uint64_t worker_id, uint32_t dp_rank,
                                  route_slot *tmp);
/* The state of (worker, rank) at pos of t (t may be NULL, pos
 * KVR_ROUTE_NO_SLOT): the slot's own when bound to that key, else *tmp
 * filled from the maps. Valid until the next route_slots_for. */
static inline const route_slot *route_slot_get(route_bookings *b, route_slots *t, uint32_t pos,
                                               uintptr_t index, uint64_t worker_id,
                                               uint32_t dp_rank, route_slot *tmp)
{
    if (t && pos < t->n) {
        const route_slot *sl = &t->slot[pos];
        if (sl->bound && sl->worker_id == worker_id && sl->dp_rank == dp_rank)
            return sl;
    }
    return route_slot_miss(b, t, pos, index, worker_id, dp_rank, tmp);
}
/* Re-reads the slot of (index, worker, rank), if bound, from the maps:
 * called by every creation and every free of a load or a rate. */
void route_slot_changed(route_bookings *b, uintptr_t index, uint64_t worker_id, uint32_t dp_rank);
void route_slots_free(route_bookings *b);

/* ---- route_filter.c ------------------------------------------------------ */

/* Drops the candidates the request excludes (pinned worker or rank,
 * allowed_workers) in place, with their entry_profile and entry_slot;
 * returns the count left, or 0 with q->error set. */
size_t route_filter_candidates(const kvr_route_request *req, kvr_query_result *q,
                               uint32_t *entry_profile, uint32_t *entry_slot);
/* Bad per-request overrides and request ids: KVR_ROUTE_BAD_REQUEST with
 * out->error naming the field. */
kvr_route_status route_check_overrides(const kvr_route_request *req, kvr_route_decision *out);

/* ---- the idle class of a ttft /route (idle_class.c) ---------------------- */

/* The candidates of a /route as the selection scores them: at[j] is the
 * candidate (kvr_query_result entry) compact position j stands for, and
 * mult[j] how many it stands for: 1, or for rep (SIZE_MAX: none) the
 * members of the idle class, every one of which the model costs alike;
 * at[rep] is the member with the least recent work. */
typedef struct {
    uint32_t *at, *mult;
    size_t rep;
    uint32_t *members; /* the class's candidates, in candidate order */
    double *work;      /* per member: its recent work */
    size_t n_members;
    double tie_work;   /* members with at most this work are tied (route_idle_tie) */
} route_idle_split;

/* Fills sp (arrays of q->n_entries) from the candidates and their states
 * st (per entry) at now; returns the compact count. */
size_t route_idle_class(const kvr_query_result *q, const route_slot *const *st,
                        const uint32_t *entry_profile, double now, route_idle_split *sp);
/* The class is tied with the best: its members with at most max_work of
 * recent work are, and their count is returned. */
size_t route_idle_tie(route_idle_split *sp, double max_work);
/* The k-th (from 0) candidate, in candidate order, of those whose compact
 * position is tied[j] (a tied member of the class counts when the
 * representative is tied); *compact = its compact position. */
size_t route_idle_kth(const route_idle_split *sp, size_t n, const bool *tied, size_t k,
                      size_t *compact);

/* ---- approximate index (approx.c); guarded by its own mutex -------------- */

typedef struct route_approx route_approx;

typedef struct {
    pthread_mutex_t mu; /* taken after kvr_router.mu when both are held */
    kvr_u64map stores;  /* route_wr_key -> route_approx* (chained) */
    double ttl_s;
    uint64_t max_blocks; /* per (worker, rank) */
    uint64_t n_stores, n_blocks;
    uint64_t n_pruned; /* blocks forgotten past max_blocks (counted in /metrics) */
    uint64_t n_lost;   /* notes cut short or not made: out of memory */
} route_approxes;

void route_approx_init(route_approxes *a, double ttl_s, uint64_t max_blocks);
void route_approx_free(route_approxes *a);
/* A candidate scored from the approximate index: its kvr_query_result
 * entry, its worker and rank, its profile's chain and the grace. */
typedef struct {
    uint32_t at;
    uint32_t dp_rank;
    uint64_t worker_id;
    const uint64_t *chain;
    uint32_t n;
    double grace_s;
} route_approx_entry;
/* For each of the n entries: how many leading blocks of its chain (chain
 * hashes) were routed to its worker within the TTL, 0 while its first
 * block was noted less than grace_s ago, written to held[e.at]'s
 * gpu/cpu/disk blocks. One hold of the lock for all of them. */
void route_approx_held(route_approxes *a, uintptr_t index, const route_approx_entry *e, size_t n,
                       double now, kvr_query_entry *held);
/* kv_events auto: an engine's first events follow its first requests by well
 * under this; a rank silent this long after the first request routed there
 * is scored from the approximate index. */
#define KVR_ROUTE_APPROX_GRACE_S 10.0
/* Records chain[0..n) as routed to the worker at now. Out of memory it
 * records a prefix of it (the map could not take a new block) or nothing
 * (no store, no FIFO room), never leaves a hole; counted in n_lost. */
void route_approx_note(route_approxes *a, uintptr_t index, uint64_t worker_id, uint32_t dp_rank,
                       const uint64_t *chain, uint32_t n, double now);
void route_approx_sweep(route_approxes *a, double now);
/* The approx_* fields of out. */
void route_approx_stats(route_approxes *a, kvr_router_stats *out);

/* ---- per-request scratch (router.c pool) --------------------------------- */

typedef struct {
    uint64_t seed;
    bool eagle;
    kvr_seq_kind kind;
    bool vllm_ids; /* MM_PADDED with vLLM's reading of the identities (it differs) */
    uint32_t n_tokens;        /* routing sequence length */
    uint64_t *hashes;         /* local block hashes; chain hashes after route_chain_profiles */
    size_t n_blocks, hashes_cap;
    kvr_match_entry *matches; /* copied out of the match ctx */
    size_t n_matches, cap;
    /* A worker's matches (one per rank): its first one's index is
     * route_scratch.first_match[its caps entry], then same_worker[i] links
     * the next (UINT32_MAX ends). A fleet of W workers has up to W matches
     * and W candidates; a scan per candidate would cost W^2. */
    uint32_t *same_worker;
    size_t same_worker_cap;
} route_profile;

typedef struct {
    uint64_t worker_id;
    uint32_t dp_rank;
} route_wr;

typedef struct route_rank_group {
    uintptr_t index;
    double refreshed_at;
    route_wr *pairs; /* sorted; dp_rank UINT32_MAX marks a worker without ranks */
    size_t n;
    uint64_t gen; /* changes with pairs (positions name route_slots) */
    struct route_rank_group *next;
} route_rank_group;

typedef struct {
    uint32_t off, n; /* a worker's ranks in route_scratch.ranks */
    uint32_t none_pos; /* position of its "no ranks yet" entry, or KVR_ROUTE_NO_SLOT */
} route_rank_span;

typedef struct route_scratch {
    kvr_match_ctx *mctx;
    kvr_worker_caps *caps;
    size_t caps_cap;
    /* the group caps holds (kvr_index), and the caps generation it was
     * copied at (kvr_indexer_caps_list_since; 0: none) */
    uintptr_t caps_index;
    uint64_t caps_gen;
    route_rank_span *spans; /* per caps entry */
    size_t spans_cap;
    uint32_t *ranks;
    size_t ranks_cap;
    uint32_t *rank_pos; /* per s->ranks entry: its position in the rank cache */
    size_t rank_pos_cap;
    uint64_t rank_gen;  /* the rank cache's generation and size they come from */
    size_t rank_n;
    /* spans and ranks are complete (every worker found) for the workers of
     * caps at caps generation ranks_caps_gen of group ranks_index: while
     * neither changes they need no copy (route_ranks_snapshot) */
    uintptr_t ranks_index;
    uint64_t ranks_caps_gen;
    uint32_t *worker_profile; /* per caps entry: profile index */
    size_t wp_cap;
    /* Per caps entry: its first match in its profile's matches, valid when
     * match_stamp equals stamp (this request's; route_link_matches). The
     * caps entry of a match's worker comes from caps_pos (worker id ->
     * caps entry), built once per caps copy (caps_pos_gen): a lookup per
     * match, none per worker. */
    uint32_t *first_match, *match_stamp;
    size_t first_match_cap, match_stamp_cap;
    uint32_t stamp;
    kvr_u64map caps_pos;
    uint64_t caps_pos_gen;
    uintptr_t caps_pos_index;
    /* worker_profile and profiles were built for a plain request (no
     * media, LoRA or salt) from caps at this generation of this group
     * (0: not reusable; route_build_profiles) */
    uint64_t profiles_caps_gen;
    uintptr_t profiles_index;
    route_profile *profiles;
    size_t n_profiles, profiles_cap;
    /* The pad-substituted sequence, built once per request and reading:
     * [0] SGLang's (mm_hash), [1] vLLM's where it differs (SPEC §5). */
    uint32_t *padded[2];
    size_t padded_cap[2];
    uint32_t *entry_profile; /* per kvr_query_result entry: its profile */
    size_t ep_cap;
    uint32_t *entry_slot; /* per kvr_query_result entry: its rank position, or NO_SLOT */
    size_t es_cap;
    /* route_query's approximate candidates (route_approx_entry), scored
     * after the enumeration under one hold of the approximate index's
     * lock: a lock per candidate was a fifth of a 1000-worker /route */
    route_approx_entry *approx_entries;
    size_t n_approx, approx_cap;
    const route_slot **states; /* kvr_route: each candidate's state, read once */
    size_t states_cap;
    route_slot *unslotted; /* the states of candidates without a bound slot */
    size_t unslotted_cap;
    /* kvr_route's candidates when the decision does not keep them (not
     * debug): reused, as a fresh 112 KB per 1000-worker /route was not */
    kvr_route_cost *costs;
    size_t costs_cap;
    /* kvr_route's idle class split (idle_class.c): its three arrays of
     * n entries each, and tie flags */
    uint32_t *split;
    size_t split_cap;
    double *member_work;
    size_t member_work_cap;
    bool *tied;
    size_t tied_cap;
    struct route_scratch *next;
} route_scratch;

struct kvr_router {
    kvr_indexer *ix;
    kvr_router_config cfg;
    pthread_mutex_t pool_mu;
    route_scratch *pool;
    pthread_mutex_t ranks_mu;
    route_rank_group *rank_groups;
    uint64_t rank_gen; /* under ranks_mu: the last generation given a group */
    pthread_mutex_t mu; /* bookings, loads, rng, the booking hook */
    route_bookings bk;
    kvr_booking_hook_fn hook; /* booking_share.c; called under mu */
    void *hook_user;
    uint64_t peer_applied, peer_rejected, peer_forwarded; /* under mu */
    route_approxes approx;
    uint64_t rng;
    atomic_uint_fast64_t queries, routes, hash_passes;
    _Atomic double observed_time; /* clock_from_requests */
};

/* The router's clock (kvr_router_config.clock or CLOCK_MONOTONIC). */
double route_now(const kvr_router *r);

route_scratch *route_scratch_acquire(kvr_router *r);
void route_scratch_release(kvr_router *r, route_scratch *s);

/* ranks.c: fills s->spans / s->ranks for the n workers in s->caps. */
int route_ranks_snapshot(kvr_router *r, route_scratch *s, uintptr_t index, const char *model,
                         const char *group, size_t n_workers);
void route_ranks_free(kvr_router *r);

/* query.c: kvr_query without stats; the route path reuses it. With keep,
 * the scratch (profiles, their hashes, entry_profile) stays with the caller,
 * who releases it; on failure *keep is NULL. */
kvr_route_status route_query(kvr_router *r, const kvr_query_request *req, kvr_query_result *out,
                             kvr_index **index_out, route_scratch **keep);

/* sequence.c */
kvr_route_status route_validate(const kvr_query_request *req, char *err, size_t errlen);
/* Fills s->profiles / s->worker_profile for the n workers in s->caps. */
int route_build_profiles(route_scratch *s, size_t n_workers, const kvr_query_request *req);
/* Links each caps entry's matches, in match order, for every profile
 * (first_match, same_worker). -1 on out of memory. */
int route_link_matches(route_scratch *s, size_t n_workers);
/* The first match of caps entry w in its profile, UINT32_MAX if none; the
 * others follow through same_worker. */
static inline uint32_t route_first_match(const route_scratch *s, size_t w)
{
    return s->match_stamp[w] == s->stamp ? s->first_match[w] : UINT32_MAX;
}
/* Hashes and matches every profile once. -1 on out of memory. */
int route_match_profiles(route_scratch *s, kvr_index *idx, uint32_t block_size,
                         const kvr_query_request *req);
/* Turns every profile's local hashes into chain hashes (SPEC §4), in place. */
void route_chain_profiles(route_scratch *s);

/* booking_share.c, caller holds r->mu. The hook hears a booking kvr_route
 * just made; route_client_op is /prefill_done or /free of a local or a
 * peer's booking. */
void route_share_booked(kvr_router *r, const kvr_query_request *q, const kvr_route_cost *c,
                        uint64_t prefill_tokens, const uint64_t *chain, uint32_t n_chain,
                        uint64_t unique_blocks, const char *request_id);
kvr_route_status route_client_op(kvr_router *r, const char *request_id, kvr_booking_op op,
                                 double now, double ttft_s);

/* rng (router.c), caller holds r->mu. Uniform in [0, 1). */
double route_rng_uniform(kvr_router *r);
uint64_t route_rng_next(kvr_router *r);

/* ---- the cost models of a /route (cost.c); caller holds kvr_router.mu ---- */

typedef struct {
    kvr_cost_model model;
    double credit_scale, load_scale, cpu_w, disk_w, temperature;
    bool unclamped;
    double cut_w;
    double decode_share, max_slowdown, recompute_weight;
    /* ttft: whether the reuse a placement pushes past the worker's LRU edge
     * is charged, and the share of the prompts at an edge that came back
     * (route_edge_counts, learned) */
    bool edge_cost, edge_tie;
    double return_share;
    bool decode_ahead;
    bool report; /* fill the costs' figures only a debug decision shows */
} route_cost_params;

route_cost_params route_cost_params_of(const kvr_router *r, const kvr_route_request *req);
/* Each candidate's prefill rate for the ttft model (at: the compact
 * candidates' entries in q). */
void route_fill_rates(kvr_router *r, const kvr_query_result *q, const route_slot *const *st,
                      const uint32_t *at, kvr_route_cost *c, size_t n, double now);
/* Candidate e's overlaps, its current load and its cost. */
void route_fill_cost(const route_cost_params *p, const kvr_query_entry *e, const route_slot *st,
                     const route_profile *pr, uint64_t unique, uint64_t isl, uint32_t bs,
                     double now, kvr_route_cost *c);
/* ttft, once every candidate's cost is set: the copies each would make.
 * -1 when out of memory: then the costs stay as they were (plain TTFT). */
int route_add_duplicate_cost(const route_cost_params *p, kvr_route_cost *c, const uint32_t *mult,
                              size_t n, size_t n_all, uint32_t bs);
/* The tokens a candidate still has to prefill, and how much its decodes
 * slow it now. */
double route_uncached_tokens(const route_cost_params *p, const kvr_route_cost *c, uint64_t isl,
                             uint32_t bs);
double route_decode_factor(const route_cost_params *p, const route_load *l);
/* Blocks a request holds on a worker scored with profile pr past its
 * routing blocks. */
uint64_t route_unique_blocks_of(const route_profile *pr, uint64_t isl, uint32_t osl, uint32_t bs);

/* Grows *buf to hold at least need elements of size elt. */
int route_grow(void **buf, size_t *cap, size_t need, size_t elt);

#endif
