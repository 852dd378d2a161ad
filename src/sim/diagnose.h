/* Routing diagnostic (not a policy): at each routing moment, what the fleet's
 * actual caches could have given the request, to split a policy's hit-rate
 * gap into capacity (nothing cached anywhere) and choice (cached elsewhere).
 * Enabled by kvr_sim_config.diagnose (`kvrouter sim --diagnose`). */
#ifndef KVR_SIM_DIAGNOSE_H
#define KVR_SIM_DIAGNOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mock/engine.h"
#include "sim/sim.h"
#include "mock/workload.h"

/* Peeks every slot's cache (no LRU change) for the request in that slot's
 * token form and adds to d: the best prefix over slots (gpu + host), the
 * best a router bound by SPEC §5 can see (Kimi engine_wide slots cut at the
 * first block overlapping an image), and the chosen slot's shortfall.
 * chosen_reused is the chosen slot's reused tokens (capped at the prompt);
 * first_on_slot: the chosen slot has served no request before this one. */
void kvr_sim_diagnose_request(kvr_sim_diagnosis *d, kvr_sim_engine **eng, const bool *kimi,
                              size_t n_slots, const kvr_sim_request *req, uint32_t block_size,
                              bool eagle, size_t chosen, uint64_t chosen_reused,
                              bool first_on_slot);

/* One line per diagnosed policy: "diagnose <policy>: ..." */
void kvr_sim_print_diagnosis(FILE *out, const char *policy, const kvr_sim_diagnosis *d,
                             uint64_t prompt_tokens, uint64_t reused_tokens);

#endif
