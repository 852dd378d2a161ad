/* Baseline `approx_tree`: SGLang router's cache-aware policy. Per worker an
 * approximate tree of the prompts routed to it (what was sent, not what is
 * cached: it never hears of evictions), kept here as the set of chain hashes
 * of 16-token chunks, which is the radix tree's prefix relation at chunk
 * granularity. It sees the request as text, so two different images behind
 * the same placeholder tokens look alike to it, as they do to SGLang's. */
#ifndef KVR_SIM_APPROX_TREE_H
#define KVR_SIM_APPROX_TREE_H

#include <stddef.h>
#include <stdint.h>

#define KVR_SIM_APPROX_CHUNK 16u
#define KVR_SIM_APPROX_CACHE_THRESHOLD 0.3
#define KVR_SIM_APPROX_BALANCE_ABS 64u
#define KVR_SIM_APPROX_BALANCE_REL 1.5

typedef struct kvr_sim_approx kvr_sim_approx;

kvr_sim_approx *kvr_sim_approx_create(size_t n_workers);
void kvr_sim_approx_destroy(kvr_sim_approx *a);

/* load[w] = requests running on worker w. Imbalance guard first (max - min >
 * 64 and max > 1.5 * min: least loaded), then the best prefix match if its
 * ratio of the prompt exceeds 0.3, else the least loaded. Ties: lower load,
 * then lower index. */
size_t kvr_sim_approx_pick(kvr_sim_approx *a, const uint32_t *tokens, size_t n,
                           const uint32_t *load);
/* Records the prompt as routed to worker w. */
int kvr_sim_approx_insert(kvr_sim_approx *a, size_t w, const uint32_t *tokens, size_t n);
/* Matched prompt tokens on worker w (chunk granularity). */
size_t kvr_sim_approx_match(kvr_sim_approx *a, size_t w, const uint32_t *tokens, size_t n);

#endif
