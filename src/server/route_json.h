/* The /route reply body (SPEC §7), written in this one place as text from
 * the decision (no jansson tree: json_pack + json_dumps were ~30 k
 * instructions of a 64-worker /route, callgrind):
 *   {"worker_id", "dp_rank", "overlap_tokens", "forward_mm_hashes",
 *    "routing_tokens", "reason", "request_id", "engine",
 *    "mm_hashes" | "multi_modal_uuids" (with forward_mm_hashes),
 *    "costs": [...], "cost" (debug only)}
 * worker_id is a JSON integer over the whole u64 range, as Dynamo writes
 * it; reals are written as jansson writes them. */
#ifndef KVR_SERVER_ROUTE_JSON_H
#define KVR_SERVER_ROUTE_JSON_H

#include <stddef.h>

#include "kvrouter/route.h"

/* malloc'd NUL-terminated text (*len bytes when len is set), or NULL on
 * out of memory. */
char *kvr_route_json(const kvr_route_request *rq, const kvr_route_decision *d, size_t *len);

#endif
