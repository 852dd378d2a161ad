/* How a simulated worker (engine x dp rank) spends its time, in virtual
 * time: the part of the simulator that turns routing choices into time to
 * first token. Kept apart from the policies so the model is stated once.
 *
 * Per worker, requests prefill one at a time in arrival order (FIFO), each
 * for its uncached prompt tokens plus host-tier (HiCache) hits at
 * host_load_cost prefill tokens each (the copy back to GPU is not free).
 *
 * Decode shares the GPU with prefill. A decoding request reads its whole KV
 * context for every output token, so at decode_tps tokens/s a request with
 * context c keeps the GPU busy for c x decode_tps / kv_read_tps of each
 * second (memory-bound attention; kv_read_tps = HBM bandwidth / KV bytes per
 * token). Prefill therefore runs at
 *     prefill_tps / (1 + sum over decoding requests of c x decode_tps / kv_read_tps)
 * and a worker loaded with long decodes is slower to reach the first token
 * of the next request. kv_read_tps 0 turns this off (decode costs nothing).
 *
 * KV memory: a request holds ceil((prompt + output) / B) blocks from the
 * start of its prefill to the end of its decode; the next request in the
 * FIFO starts only when its blocks fit in kv_capacity (or the worker holds
 * nothing), so a worker full of long decodes queues new requests.
 *
 * Decode itself takes output / decode_tps seconds (its slowdown by prefill
 * is not modelled: TTFT is what is measured). TTFT = prefill end - arrival. */
#ifndef KVR_SIM_SERVING_H
#define KVR_SIM_SERVING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double prefill_tps;    /* prefill tokens/s of an otherwise idle worker */
    double decode_tps;     /* output tokens/s per decoding request */
    double kv_read_tps;    /* KV context tokens the GPU reads per second; 0 = decode is free */
    uint64_t kv_capacity;  /* blocks of KV memory per worker; 0 = unbounded */
} kvr_sim_serving_params;

typedef struct {
    double arrival;
    double work;      /* prefill-token equivalents */
    double context;   /* prompt + output / 2: the mean context a decode step reads */
    uint64_t kv_blocks;
    double decode_s;
    uint64_t uncached; /* tokens counted in the worker's queued load until prefill ends */
    uint32_t slot;
} kvr_sim_job;

typedef struct {
    uint32_t *fifo;  /* request indices waiting or prefilling, head first */
    size_t head, len, cap;
    bool prefilling; /* fifo[head] holds its KV blocks and is being prefilled */
    double left;     /* its remaining work */
    double since;    /* virtual time `left` was last brought up to date */
    uint64_t version; /* bumps when the head's end moves; older events are stale */
    uint32_t decoding;
    double decode_context; /* sum of the decoding requests' contexts */
    uint64_t kv_used;
    uint32_t running;   /* arrival .. end of decode: what least_loaded counts */
    uint64_t queued;    /* uncached tokens not yet prefilled */
} kvr_sim_worker;

typedef void (*kvr_sim_serving_fn)(void *ud, uint32_t req, uint32_t slot, double t);

typedef struct {
    kvr_sim_serving_params p;
    size_t n_slots;
    kvr_sim_worker *w;
    kvr_sim_job *jobs; /* by request index */
    size_t n_jobs;
    struct kvr_sim_ev *ev;
    size_t n_ev, ev_cap;
    uint64_t next_order;
    kvr_sim_serving_fn prefill_done, finished; /* may be NULL */
    void *ud;
    double *ttft_s; /* by request index, set at prefill end */
} kvr_sim_serving;

int kvr_sim_serving_init(kvr_sim_serving *s, const kvr_sim_serving_params *p, size_t n_slots,
                         size_t n_requests);
void kvr_sim_serving_free(kvr_sim_serving *s);
/* Request req arrives at job->arrival on job->slot (arrivals in time order,
 * after kvr_sim_serving_run_until(job->arrival)). -1 out of memory. */
int kvr_sim_serving_submit(kvr_sim_serving *s, uint32_t req, const kvr_sim_job *job);
/* Processes every prefill end and decode end up to t (inclusive), calling
 * the callbacks in time order. -1 out of memory. */
int kvr_sim_serving_run_until(kvr_sim_serving *s, double t);
/* Current prefill rate of a worker (tokens/s), for tests. */
double kvr_sim_serving_rate(const kvr_sim_serving *s, size_t slot);

#endif
