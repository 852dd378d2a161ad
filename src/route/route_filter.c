/* What a /route request narrows or overrides, checked before any scoring
 * (SPEC §8): the pinned worker and rank and the allow-list drop
 * candidates, each with its own error when none is left; the per-request
 * overrides of the router's settings must be usable numbers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "route/internal.h"

static bool allowed(const kvr_route_request *req, const kvr_u64map *set, uint64_t worker_id)
{
    if (!req->allowed_workers)
        return true;
    if (set)
        return kvr_u64map_find(set, worker_id) != NULL;
    for (size_t i = 0; i < req->n_allowed_workers; i++)
        if (req->allowed_workers[i] == worker_id)
            return true;
    return false;
}

size_t route_filter_candidates(const kvr_route_request *req, kvr_query_result *q,
                               uint32_t *entry_profile, uint32_t *entry_slot)
{
    if (!req->has_worker_id && !req->has_dp_rank && !req->allowed_workers && q->n_entries)
        return q->n_entries; /* no filter: every candidate stays, uncopied */
    size_t n = 0;
    bool worker_seen = false, rank_seen = false;
    /* A long allow-list is hashed once rather than scanned per candidate. */
    kvr_u64map set;
    kvr_u64map_init(&set);
    bool use_set = req->allowed_workers && req->n_allowed_workers > 16;
    for (size_t i = 0; use_set && i < req->n_allowed_workers; i++)
        if (kvr_u64map_put(&set, req->allowed_workers[i], 1) < 0)
            use_set = false;
    for (size_t i = 0; i < q->n_entries; i++) {
        const kvr_query_entry *e = &q->entries[i];
        if (req->has_worker_id && e->worker_id != req->worker_id)
            continue;
        worker_seen = true;
        if (req->has_dp_rank && e->dp_rank != req->dp_rank)
            continue;
        rank_seen = true;
        if (!allowed(req, use_set ? &set : NULL, e->worker_id))
            continue;
        entry_profile[n] = entry_profile[i];
        entry_slot[n] = entry_slot[i];
        q->entries[n++] = *e;
    }
    kvr_u64map_free(&set);
    q->n_entries = n;
    if (n == 0) {
        if (!worker_seen)
            snprintf(q->error, sizeof q->error,
                     "worker_id: %llu is not registered for this model and group",
                     (unsigned long long)req->worker_id);
        else if (!rank_seen)
            snprintf(q->error, sizeof q->error, "dp_rank: %u is not a known rank%s",
                     req->dp_rank, req->has_worker_id ? " of the pinned worker" : "");
        else
            snprintf(q->error, sizeof q->error,
                     "allowed_workers: no registered worker is allowed");
    }
    return n;
}

kvr_route_status route_check_overrides(const kvr_route_request *req, kvr_route_decision *out)
{
    struct {
        bool has;
        double v;
        const char *name;
    } o[] = {{req->has_overlap_score_credit, req->overlap_score_credit, "overlap_score_credit"},
             {req->has_prefill_load_scale, req->prefill_load_scale, "prefill_load_scale"},
             {req->has_temperature, req->temperature, "temperature"}};
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        if (o[i].has && !(isfinite(o[i].v) && o[i].v >= 0)) {
            snprintf(out->error, sizeof out->error, "%s: must be a finite number >= 0",
                     o[i].name);
            return KVR_ROUTE_BAD_REQUEST;
        }
    if (req->request_id && (!req->request_id[0] || strlen(req->request_id) > KVR_ROUTE_MAX_ID_LEN)) {
        snprintf(out->error, sizeof out->error, "request_id: must be 1..%u characters",
                 KVR_ROUTE_MAX_ID_LEN);
        return KVR_ROUTE_BAD_REQUEST;
    }
    return KVR_ROUTE_OK;
}
