/* From an engine's last answer to its registrations (with d->mu held, on
 * the poll thread or in kvr_discovery_remove). What discovery wrote is
 * remembered per rank (key and a digest of the registration), so a poll
 * that says what the last one said writes nothing, a changed answer writes
 * only the ranks that changed (the registry then keeps or resets each by
 * SPEC §5 rule 9), a rank or key gone is unregistered, and every
 * resync_polls polls everything is written again. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery_internal.h"
#include "kvrouter/hash.h"
#include "kvrouter/log.h"
#include "util/grow.h"

static uint64_t mix_str(uint64_t h, const char *s)
{
    s = s ? s : "";
    return kvr_hash_bytes(s, strlen(s) + 1, h);
}

static uint64_t mix_u64(uint64_t h, uint64_t v) { return kvr_hash_bytes(&v, sizeof v, h); }

static uint64_t digest_of(const kvr_registration *r)
{
    const kvr_worker_settings *s = &r->settings;
    uint64_t h = mix_str(0, s->model_name);
    h = mix_str(h, s->routing_group);
    h = mix_u64(h, s->worker_id);
    h = mix_u64(h, s->block_size);
    h = mix_u64(h, (uint64_t)s->mm_identity);
    h = mix_u64(h, (uint64_t)(int64_t)s->accepts_mm_hashes);
    h = mix_u64(h, s->is_eagle);
    h = mix_u64(h, (uint64_t)s->engine);
    h = mix_u64(h, s->has_image_token_id ? (uint64_t)s->image_token_id : UINT64_MAX);
    h = mix_u64(h, s->max_total_num_tokens);
    h = mix_u64(h, r->dp_rank);
    h = mix_str(h, r->endpoint);
    h = mix_str(h, r->replay_endpoint);
    return mix_str(h, r->topic);
}

static kvr_applied *find_applied(kvr_disc_engine *e, const kvr_registration *r)
{
    for (size_t i = 0; i < e->n_applied; i++) {
        kvr_applied *a = &e->applied[i];
        if (a->worker_id == r->settings.worker_id && a->dp_rank == r->dp_rank &&
            strcmp(a->model, r->settings.model_name) == 0 &&
            strcmp(a->group, r->settings.routing_group) == 0)
            return a;
    }
    return NULL;
}

static void unregister_one(kvr_discovery *d, const kvr_applied *a)
{
    kvr_unregistration u = {.model_name = a->model,
                            .routing_group = a->group,
                            .worker_id = a->worker_id,
                            .has_rank = true,
                            .dp_rank = a->dp_rank,
                            .origins = KVR_ORIGIN_BIT(KVR_ORIGIN_DISCOVERY)};
    kvr_unregister_reply out;
    if (kvr_registry_unregister(d->reg, &u, &out) == KVR_UNREG_REMOVED)
        d->c.unregistrations++;
}

size_t kvr_discovery_unapply(kvr_discovery *d, kvr_disc_engine *e)
{
    size_t n = e->n_applied;
    for (size_t i = 0; i < n; i++)
        unregister_one(d, &e->applied[i]);
    e->n_applied = 0;
    for (size_t i = 0; i < e->good.n_ranks; i++)
        e->good.ranks[i].registered = false;
    return n;
}

/* The registration of rank k of e's answer (strings borrowed from e). */
static void rank_registration(const kvr_disc_engine *e, size_t k, kvr_registration *reg)
{
    const kvr_engine_reading_info *in = &e->good.info;
    const kvr_engine_rank_info *rk = &e->good.ranks[k];
    memset(reg, 0, sizeof *reg);
    kvr_worker_settings *s = &reg->settings;
    s->model_name = e->model_override[0] ? e->model_override : in->model_name;
    s->routing_group = e->group;
    s->worker_id = e->worker_id;
    s->block_size = e->spec.block_size ? e->spec.block_size : in->block_size;
    s->is_eagle = in->is_eagle;
    s->mm_identity =
        e->spec.mm_identity >= 0 ? (kvr_mm_identity)e->spec.mm_identity : in->mm_identity;
    s->accepts_mm_hashes =
        e->spec.accepts_mm_hashes >= 0 ? e->spec.accepts_mm_hashes : in->accepts_mm_hashes;
    /* vLLM puts media in extra_keys: its workers hash them by SPEC §5's
     * vLLM rule, and /route forwards multi_modal_uuids to them. */
    s->engine = in->kind == KVR_ENGINE_KIND_VLLM ? KVR_ENGINE_VLLM : KVR_ENGINE_SGLANG;
    s->has_image_token_id = e->spec.has_image_token_id;
    s->image_token_id = e->spec.image_token_id;
    s->max_total_num_tokens = in->max_total_num_tokens;
    reg->dp_rank = rk->dp_rank;
    reg->endpoint = rk->endpoint;
    reg->replay_endpoint = rk->replay_endpoint;
    reg->topic = rk->topic;
    reg->origin = KVR_ORIGIN_DISCOVERY;
}

static bool wanted(const kvr_disc_engine *e, const kvr_applied *a, size_t n_desired)
{
    if (!n_desired || a->worker_id != e->worker_id || strcmp(a->group, e->group) != 0)
        return false;
    const char *model = e->model_override[0] ? e->model_override : e->good.info.model_name;
    if (strcmp(a->model, model) != 0)
        return false;
    for (size_t k = 0; k < e->good.n_ranks; k++)
        if (e->good.ranks[k].dp_rank == a->dp_rank)
            return true;
    return false;
}

static void drop_unwanted(kvr_discovery *d, kvr_disc_engine *e, size_t n_desired)
{
    for (size_t i = e->n_applied; i-- > 0;) {
        if (wanted(e, &e->applied[i], n_desired))
            continue;
        unregister_one(d, &e->applied[i]);
        e->applied[i] = e->applied[--e->n_applied];
    }
}

/* Writes rank k when it changed; returns false when the registry refused. */
static bool write_rank(kvr_discovery *d, kvr_disc_engine *e, size_t k)
{
    kvr_engine_rank_info *rk = &e->good.ranks[k];
    kvr_registration reg;
    rank_registration(e, k, &reg);
    uint64_t dg = digest_of(&reg);
    kvr_applied *a = find_applied(e, &reg);
    if (a && a->digest == dg && !e->force_write) {
        rk->registered = true;
        rk->result = a->result;
        rk->error[0] = 0;
        return true;
    }
    kvr_registry_reply out;
    kvr_registry_result res = kvr_registry_register(d->reg, &reg, &out);
    d->c.registrations++;
    rk->result = res;
    if (!kvr_registry_result_ok(res)) {
        d->c.registrations_failed++;
        rk->registered = a != NULL; /* the earlier registration stays */
        snprintf(rk->error, sizeof rk->error, "%s", out.error);
        return false;
    }
    if (!a && KVR_GROW(e->applied, e->cap_applied, e->n_applied + 1) == 0) {
        a = &e->applied[e->n_applied++];
        snprintf(a->model, sizeof a->model, "%s", reg.settings.model_name);
        snprintf(a->group, sizeof a->group, "%s", reg.settings.routing_group);
        a->worker_id = reg.settings.worker_id;
        a->dp_rank = reg.dp_rank;
    }
    if (a) { /* out of memory: not remembered, so written again next poll */
        a->digest = dg;
        a->result = res;
    }
    rk->registered = true;
    rk->error[0] = 0;
    return true;
}

static void set_state(kvr_discovery *d, kvr_disc_engine *e, bool keep, bool expired,
                      size_t failed, const kvr_engine_rank_info *first_failed)
{
    kvr_engine_state old = e->state;
    if (e->poll_ok && !e->good.info.publishes) {
        e->state = KVR_ENGINE_NO_KV_EVENTS;
        snprintf(e->reason, sizeof e->reason, "%s", e->good.info.silent_reason);
    } else if (e->poll_ok && failed) {
        e->state = KVR_ENGINE_REJECTED;
        snprintf(e->reason, sizeof e->reason, "rank %" PRIu32 ": %s: %s%s",
                 first_failed->dp_rank, kvr_registry_result_name(first_failed->result),
                 first_failed->error, failed > 1 ? " (and other ranks)" : "");
    } else if (e->poll_ok) {
        e->state = KVR_ENGINE_INDEXED;
        e->reason[0] = 0;
    } else if (keep) {
        e->state = KVR_ENGINE_STALE;
        snprintf(e->reason, sizeof e->reason,
                 "the last poll failed (%.200s); the answer of %.1f s ago stays registered "
                 "until engine_grace_s (%g s) has passed",
                 e->last_error, e->last_poll_at - e->last_valid_at, d->cfg.grace_s);
    } else {
        e->state = e->last_outcome == KVR_POLL_INVALID ? KVR_ENGINE_INVALID
                                                       : KVR_ENGINE_UNREACHABLE;
        if (expired || e->last_valid_at > 0)
            snprintf(e->reason, sizeof e->reason,
                     "no valid answer within engine_grace_s (%g s): unregistered; last "
                     "error: %.250s",
                     d->cfg.grace_s, e->last_error);
        else
            snprintf(e->reason, sizeof e->reason, "%s", e->last_error);
    }
    if (old == e->state)
        return;
    kvr_log_context ctx = {.model = e->good.info.model_name[0] ? e->good.info.model_name : NULL,
                           .has_worker = true,
                           .worker_id = e->worker_id};
    kvr_log_at(e->state == KVR_ENGINE_INDEXED ? KVR_LOG_INFO : KVR_LOG_WARN, &ctx,
               "discovery: engine %s: %s -> %s%s%s", e->url, kvr_engine_state_name(old),
               kvr_engine_state_name(e->state), e->reason[0] ? ": " : "", e->reason);
}

void kvr_discovery_apply(kvr_discovery *d, kvr_disc_engine *e, double now)
{
    bool had = e->good.info.valid;
    bool keep = had && (e->poll_ok || now - e->last_valid_at <= d->cfg.grace_s);
    bool expired = had && !keep;
    if (expired) {
        d->c.engines_expired++;
        kvr_reading_free(&e->good);
    }
    size_t n_desired = keep && e->good.info.publishes ? e->good.n_ranks : 0;
    drop_unwanted(d, e, n_desired);
    size_t failed = 0;
    const kvr_engine_rank_info *first_failed = NULL;
    for (size_t k = 0; k < n_desired; k++)
        if (!write_rank(d, e, k) && !failed++)
            first_failed = &e->good.ranks[k];
    e->force_write = false;
    set_state(d, e, keep, expired, failed, first_failed);
}
