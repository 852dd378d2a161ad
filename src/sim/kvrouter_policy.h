/* The `kvrouter` policy: the simulated fleet registered with a running
 * router, each request routed by POST /route, and the router's view kept in
 * step with the engines: after a request's events are published the
 * simulator polls GET /workers until the router reports that engine's
 * sequence number as applied, before it routes the next request.
 *
 * Cost of that barrier (demo fleet, 1500 requests, 2 shared cores): about
 * 4 ms per request, 1.5 polls on average, most of it building the /workers
 * reply; it is 40% of the kvrouter run's wall time. With --sync-every 8 it
 * drops to 0.6 ms/request and the router's predicted overlap still equals
 * the engines' own (events apply in well under a millisecond, before the
 * next /route arrives), but only the per-request barrier guarantees that no
 * decision ever sees stale state, so it is the default. */
#ifndef KVR_SIM_KVROUTER_POLICY_H
#define KVR_SIM_KVROUTER_POLICY_H

#include "mock/engine.h"
#include "sim/sim.h"

typedef struct kvr_sim_kr kvr_sim_kr;

/* Registers every (engine, rank) slot (worker id = engine index + 1), waits
 * for each engine to see the router's subscription, then has every engine
 * publish AllBlocksCleared so the router starts from empty caches. */
kvr_sim_kr *kvr_sim_kr_create(const kvr_sim_config *cfg, kvr_sim_engine **engines,
                              size_t n_slots, char *err, size_t errlen);
/* Unregisters the fleet. */
void kvr_sim_kr_destroy(kvr_sim_kr *kr);

/* Returns the chosen slot, or -1 (counted) when the router failed. */
/* t: the virtual time of each call, in seconds (time_s). */
long kvr_sim_kr_route(kvr_sim_kr *kr, size_t idx, const kvr_sim_request *req, uint32_t osl,
                      double t);
void kvr_sim_kr_prefill_done(kvr_sim_kr *kr, size_t idx, double t);
void kvr_sim_kr_free(kvr_sim_kr *kr, size_t idx, double t);
/* Marks slot as having published; every sync_every calls waits until the
 * router applied everything published so far. */
void kvr_sim_kr_published(kvr_sim_kr *kr, size_t slot);
/* Waits for every slot marked since the last sync. */
void kvr_sim_kr_sync(kvr_sim_kr *kr);
void kvr_sim_kr_stats(const kvr_sim_kr *kr, kvr_sim_result *out);
/* Reads the router's counters for the fleet (drops by reason, wide tokens,
 * media blocks excluded, sequence gaps) from GET /workers into out. */
void kvr_sim_kr_collect(kvr_sim_kr *kr, kvr_sim_result *out);

#endif
