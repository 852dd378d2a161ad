/* Routing (SPEC §5 request side, §8): per-worker routing sequences for
 * requests with media, overlap scores, load-aware selection and bookings.
 * Owner: the route layer. This first version fixes the configuration and
 * lifecycle API that the server uses; the layer extends it. */
#ifndef KVROUTER_ROUTE_H
#define KVROUTER_ROUTE_H

#include "kvrouter/indexer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvr_router kvr_router;

typedef struct {
    double overlap_score_credit; /* default 1.0 */
    double prefill_load_scale;   /* default 1.0 */
    double cpu_hit_weight;       /* default 0.75 */
    double disk_hit_weight;      /* default 0.25 */
    double temperature;          /* default 0: argmin with random tie-break */
    double booking_ttl_s;        /* default 600: a lost /free cannot leak load forever */
    uint64_t rng_seed;           /* 0 -> seeded from time */
} kvr_router_config;

void kvr_router_config_default(kvr_router_config *cfg);
/* Sets one option by name (the field names above). -1 for an unknown name
 * or an out-of-range value. Used by --config and --router-opt key=value. */
int kvr_router_config_set(kvr_router_config *cfg, const char *key, double value);

kvr_router *kvr_router_create(kvr_indexer *ix, const kvr_router_config *cfg);
void kvr_router_destroy(kvr_router *r);

#ifdef __cplusplus
}
#endif
#endif
