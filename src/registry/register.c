/* kvr_registry_register / kvr_registry_unregister: the one place a
 * registration becomes an indexer worker plus a listener (and back). The
 * contract is in include/kvrouter/registry.h. Each operation checks what
 * the caller sent, then runs whole on the ingest thread: it prepares every
 * allocation first, so a failure leaves nothing half done, then changes the
 * indexer, the listener and the records, then tells the observers. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry_internal.h"
#include "util/fds.h"
#include "util/grow.h"

static kvr_registry_result fail(kvr_registry_reply *out, kvr_registry_result res,
                                const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static kvr_registry_result fail(kvr_registry_reply *out, kvr_registry_result res,
                                const char *field, const char *fmt, ...)
{
    out->result = res;
    out->field = field;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->error, sizeof out->error, fmt, ap);
    va_end(ap);
    return res;
}

static bool name_ok(const char *s, bool required)
{
    if (!s || !s[0])
        return !required;
    return strnlen(s, KVR_NAME_MAX) < KVR_NAME_MAX;
}

static bool endpoint_syntax_ok(const char *e)
{
    return strncmp(e, "tcp://", 6) == 0 || strncmp(e, "ipc://", 6) == 0 ||
           strncmp(e, "inproc://", 9) == 0;
}

static kvr_registry_result bad_endpoint(kvr_registry_reply *out, const char *field,
                                        const char *e)
{
    if (strnlen(e, KVR_ENDPOINT_MAX) >= KVR_ENDPOINT_MAX)
        return fail(out, KVR_REGISTRY_INVALID, field, "field '%s' must be shorter than %d bytes",
                    field, KVR_ENDPOINT_MAX);
    return fail(out, KVR_REGISTRY_INVALID, field,
                "field '%s' must be a ZeroMQ endpoint (tcp://host:port), got '%s'", field, e);
}

/* Whether reg names an event feed to listen to. */
static bool has_feed(const kvr_registration *reg) { return reg->endpoint && reg->endpoint[0]; }

/* Everything that can be said about reg without the ingest thread. */
static kvr_registry_result check(const kvr_registration *reg, kvr_registry_reply *out)
{
    const kvr_worker_settings *s = &reg->settings;
    if (!name_ok(s->model_name, true))
        return fail(out, KVR_REGISTRY_INVALID, "model_name",
                    "field 'model_name' must be 1..%d bytes", KVR_NAME_MAX - 1);
    if (!name_ok(s->routing_group, false))
        return fail(out, KVR_REGISTRY_INVALID, "routing_group",
                    "field 'routing_group' must be shorter than %d bytes", KVR_NAME_MAX);
    if (!name_ok(s->lora_name, false))
        return fail(out, KVR_REGISTRY_INVALID, "lora_name",
                    "field 'lora_name' must be shorter than %d bytes", KVR_NAME_MAX);
    if (!name_ok(reg->topic, false))
        return fail(out, KVR_REGISTRY_INVALID, "topic",
                    "field 'topic' must be shorter than %d bytes", KVR_NAME_MAX);
    if (s->block_size == 0 || s->block_size > KVR_MAX_BLOCK_SIZE)
        return fail(out, KVR_REGISTRY_INVALID, "block_size",
                    "field 'block_size' must be in 1..%u, got %" PRIu32, KVR_MAX_BLOCK_SIZE,
                    s->block_size);
    if (reg->dp_rank >= KVR_MAX_DP_RANKS)
        return fail(out, KVR_REGISTRY_INVALID, "dp_rank",
                    "field 'dp_rank' must be below %u, got %" PRIu32, KVR_MAX_DP_RANKS,
                    reg->dp_rank);
    if ((unsigned)s->mm_identity > KVR_MM_AUTO)
        return fail(out, KVR_REGISTRY_INVALID, "mm_identity",
                    "field 'mm_identity' must be \"legacy\", \"engine_wide\" or \"auto\"");
    if (s->accepts_mm_hashes < -1 || s->accepts_mm_hashes > 1)
        return fail(out, KVR_REGISTRY_INVALID, "accepts_mm_hashes",
                    "field 'accepts_mm_hashes' must be -1 (unset), 0 or 1");
    if ((unsigned)s->engine >= KVR_ENGINE_COUNT)
        return fail(out, KVR_REGISTRY_INVALID, "engine",
                    "field 'engine' must be \"sglang\" or \"vllm\"");
    if (s->has_image_token_id && s->image_token_id == KVR_WIDE_SENTINEL)
        return fail(out, KVR_REGISTRY_INVALID, "image_token_id",
                    "field 'image_token_id' must be below %u", KVR_WIDE_SENTINEL);
    if ((unsigned)s->kv_events > KVR_KV_EVENTS_OFF)
        return fail(out, KVR_REGISTRY_INVALID, "kv_events",
                    "field 'kv_events' must be \"auto\", \"on\" or \"off\"");
    if (!isfinite(s->prefill_tps) || s->prefill_tps < 0)
        return fail(out, KVR_REGISTRY_INVALID, "prefill_tps",
                    "field 'prefill_tps' must be a number of tokens/s above 0");
    if (s->max_total_num_tokens > KVR_MAX_KV_CAPACITY_TOKENS)
        return fail(out, KVR_REGISTRY_INVALID, "max_total_num_tokens",
                    "field 'max_total_num_tokens' must be at most %llu tokens (0: unknown)",
                    (unsigned long long)KVR_MAX_KV_CAPACITY_TOKENS);
    if ((unsigned)reg->origin >= KVR_ORIGIN_COUNT)
        return fail(out, KVR_REGISTRY_INVALID, "origin", "origin %d is not a kvr_origin",
                    (int)reg->origin);
    const char *re = reg->replay_endpoint;
    if (!has_feed(reg)) {
        /* An engine that publishes nothing (SPEC §8, routing without KV
         * events) has no endpoint; the router approximates its cache. */
        if (s->kv_events != KVR_KV_EVENTS_OFF)
            return fail(out, KVR_REGISTRY_INVALID, "endpoint",
                        "missing field 'endpoint' (only a worker with kv_events false has none)");
        const char *needs = re && re[0] ? "replay_endpoint"
                            : reg->topic && reg->topic[0] ? "topic"
                                                          : NULL;
        if (needs)
            return fail(out, KVR_REGISTRY_INVALID, needs, "field '%s' needs an 'endpoint'",
                        needs);
        return KVR_REGISTRY_CREATED;
    }
    if (strnlen(reg->endpoint, KVR_ENDPOINT_MAX) >= KVR_ENDPOINT_MAX ||
        !endpoint_syntax_ok(reg->endpoint))
        return bad_endpoint(out, "endpoint", reg->endpoint);
    if (re && re[0] &&
        (strnlen(re, KVR_ENDPOINT_MAX) >= KVR_ENDPOINT_MAX || !endpoint_syntax_ok(re)))
        return bad_endpoint(out, "replay_endpoint", re);
    return KVR_REGISTRY_CREATED;
}

/* ---- register ------------------------------------------------------------ */

typedef struct {
    kvr_registry *r;
    const kvr_registration *reg;
    kvr_registry_reply *out;
} reg_op;

static const char *or_empty(const char *s) { return s ? s : ""; }

static bool rank_fill(reg_rank *rk, const kvr_registration *reg)
{
    rk->rank = reg->dp_rank;
    rk->origin = reg->origin;
    rk->endpoint = strdup(or_empty(reg->endpoint));
    rk->replay_endpoint = strdup(or_empty(reg->replay_endpoint));
    rk->topic = strdup(or_empty(reg->topic));
    if (rk->endpoint && rk->replay_endpoint && rk->topic)
        return true;
    reg_rank_free(rk);
    return false;
}

static reg_worker *find_worker(kvr_registry *r, kvr_worker *w)
{
    for (size_t i = 0; w && i < r->n_ws; i++)
        if (r->ws[i]->w == w)
            return r->ws[i];
    return NULL;
}

static reg_rank *find_rank(reg_worker *rw, uint32_t rank)
{
    for (size_t i = 0; rw && i < rw->n_ranks; i++)
        if (rw->ranks[i].rank == rank)
            return &rw->ranks[i];
    return NULL;
}

/* The allocations a registration may need, made before anything changes. */
typedef struct {
    reg_worker *fresh;        /* the worker's record when it has none yet */
    kvr_worker_settings s;    /* the new settings text */
    reg_rank rk;              /* the rank's new record text */
} reg_prep;

static bool prepare(kvr_registry *r, reg_worker *rw, const kvr_registration *reg, reg_prep *p)
{
    memset(p, 0, sizeof *p);
    if (!reg_settings_dup(&p->s, &reg->settings))
        return false;
    if (!rank_fill(&p->rk, reg))
        goto fail;
    if (!rw) {
        p->fresh = calloc(1, sizeof *p->fresh);
        if (!p->fresh || KVR_GROW(r->ws, r->cap_ws, r->n_ws + 1) != 0)
            goto fail;
        rw = p->fresh;
    }
    if (!find_rank(rw, reg->dp_rank) && KVR_GROW(rw->ranks, rw->cap_ranks, rw->n_ranks + 1) != 0)
        goto fail;
    return true;
fail:
    reg_settings_free(&p->s);
    reg_rank_free(&p->rk);
    if (p->fresh)
        free(p->fresh->ranks);
    free(p->fresh);
    p->fresh = NULL;
    return false;
}

static void prep_free(reg_prep *p)
{
    reg_settings_free(&p->s);
    reg_rank_free(&p->rk);
    reg_worker_free(p->fresh);
}

static kvr_registry_result summarize(kvr_reg_result res, kvr_listen_result lr)
{
    if (lr == KVR_LISTEN_CREATED)
        return KVR_REGISTRY_CREATED;
    if (res == KVR_REG_RESET)
        return KVR_REGISTRY_RESET;
    if (res == KVR_REG_UPDATED)
        return KVR_REGISTRY_UPDATED;
    return lr == KVR_LISTEN_RESTARTED ? KVR_REGISTRY_LISTENER_RESTARTED : KVR_REGISTRY_UNCHANGED;
}

/* Under r->mu: the records take the registration's text. Returns the rank
 * record; *was_new / *origin_changed say what the observers must hear. */
static reg_rank *commit(kvr_registry *r, reg_worker *rw, reg_prep *p, bool *was_new,
                        bool *origin_changed)
{
    if (p->fresh) {
        r->ws[r->n_ws++] = p->fresh;
        p->fresh = NULL;
    }
    reg_settings_free(&rw->s);
    rw->s = p->s;
    memset(&p->s, 0, sizeof p->s);
    reg_rank *rk = find_rank(rw, p->rk.rank);
    *was_new = rk == NULL;
    *origin_changed = rk && rk->origin != p->rk.origin;
    if (rk) {
        reg_rank_free(rk);
    } else {
        rk = &rw->ranks[rw->n_ranks++];
        r->n_rank_recs++;
    }
    *rk = p->rk;
    memset(&p->rk, 0, sizeof p->rk);
    return rk;
}

/* The listener side of a registration without an endpoint: none. A rank
 * that had a listener loses it (its index state stays, as for a new
 * endpoint). */
static kvr_listen_result no_feed(kvr_source *src, kvr_worker *w, const reg_rank *old)
{
    if (!old)
        return KVR_LISTEN_CREATED;
    if (!old->endpoint[0])
        return KVR_LISTEN_UNCHANGED;
    kvr_source_unlisten(src, w, old->rank);
    return KVR_LISTEN_RESTARTED;
}

static void do_register(kvr_source *src, void *arg)
{
    reg_op *op = arg;
    kvr_registry *r = op->r;
    const kvr_registration *reg = op->reg;
    const kvr_worker_settings *s = &reg->settings;
    kvr_registry_reply *out = op->out;
    kvr_indexer *ix = kvr_source_indexer(src);
    kvr_worker *existed = kvr_indexer_find(ix, s->model_name, s->routing_group, s->worker_id);
    reg_worker *rw = find_worker(r, existed);
    /* First: a socket that cannot be opened for want of a descriptor must
     * not read as a bad endpoint. */
    if (has_feed(reg) && !(rw && find_rank(rw, reg->dp_rank)) &&
        !kvr_source_descriptors_left(src, out->error, sizeof out->error)) {
        atomic_fetch_add(&r->refused_descriptors, 1);
        out->result = KVR_REGISTRY_NO_DESCRIPTORS;
        return;
    }
    if (has_feed(reg) && !kvr_source_endpoint_valid(src, reg->endpoint)) {
        fail(out, KVR_REGISTRY_INVALID, "endpoint",
             "field 'endpoint': cannot connect a ZeroMQ socket to '%s'", reg->endpoint);
        return;
    }
    const char *replay = or_empty(reg->replay_endpoint);
    if (replay[0] && !kvr_source_endpoint_valid(src, replay)) {
        fail(out, KVR_REGISTRY_INVALID, "replay_endpoint",
             "field 'replay_endpoint': cannot connect a ZeroMQ socket to '%s'", replay);
        return;
    }
    size_t limit = atomic_load(&r->max_workers);
    if (!rw && limit && r->n_ws >= limit) {
        atomic_fetch_add(&r->refused_worker_limit, 1);
        out->limit = limit;
        fail(out, KVR_REGISTRY_WORKER_LIMIT, NULL,
             "worker limit reached: max_workers = %zu workers are registered", limit);
        return;
    }
    reg_prep p;
    pthread_mutex_lock(&r->mu); /* prepare may move r->ws, which readers walk */
    bool prepared = prepare(r, rw, reg, &p);
    pthread_mutex_unlock(&r->mu);
    if (!prepared) {
        fail(out, KVR_REGISTRY_NO_MEMORY, NULL, "cannot register the worker: out of memory");
        return;
    }
    kvr_worker *w = NULL;
    kvr_reg_result res = kvr_indexer_register(ix, s, &w);
    if (!w) {
        const char *group = s->routing_group && s->routing_group[0] ? s->routing_group
                                                                    : KVR_DEFAULT_ROUTING_GROUP;
        out->group_block_size = kvr_indexer_block_size(ix, s->model_name, group);
        if (res == KVR_REG_BLOCK_SIZE_CONFLICT)
            fail(out, KVR_REGISTRY_BLOCK_SIZE_CONFLICT, "block_size",
                 "field 'block_size': %" PRIu32 " conflicts with block size %" PRIu32
                 " already registered for model '%s' group '%s'",
                 s->block_size, out->group_block_size, s->model_name, group);
        else /* check() validated every field the indexer checks */
            fail(out, KVR_REGISTRY_NO_MEMORY, NULL, "cannot register the worker: out of memory");
        prep_free(&p);
        return;
    }
    if (res == KVR_REG_RESET)
        kvr_source_reset_cursors(src, w);
    kvr_listen_result lrc = has_feed(reg) ? kvr_source_listen(src, w, s->worker_id, reg->dp_rank,
                                                              reg->endpoint, replay,
                                                              or_empty(reg->topic))
                                          : no_feed(src, w, find_rank(rw, reg->dp_rank));
    if (lrc == KVR_LISTEN_FAILED || lrc == KVR_LISTEN_NO_DESCRIPTORS) {
        if (!rw && kvr_source_count(src, w) == 0)
            kvr_indexer_unregister(ix, w); /* nothing half-registered stays behind */
        if (lrc == KVR_LISTEN_NO_DESCRIPTORS) {
            atomic_fetch_add(&r->refused_descriptors, 1);
            if (kvr_source_descriptors_left(src, out->error, sizeof out->error))
                snprintf(out->error, sizeof out->error,
                         "out of file descriptors: a ZeroMQ socket for '%s' could not be "
                         "opened (RLIMIT_NOFILE %zu)", reg->endpoint, kvr_fd_limit());
            out->result = KVR_REGISTRY_NO_DESCRIPTORS;
        } else {
            fail(out, KVR_REGISTRY_INVALID, "endpoint",
                 "field 'endpoint' (or 'replay_endpoint'/'topic'): cannot open a ZeroMQ "
                 "listener for '%s'", reg->endpoint);
        }
        prep_free(&p);
        return;
    }
    if (!rw) {
        rw = p.fresh;
        rw->w = w;
    }
    /* The router's candidates: a rank without events has no index state to
     * name it (out of memory here: it is scored as rank 0 until a batch). */
    kvr_indexer_declare_rank(ix, w, reg->dp_rank);
    out->result = summarize(res, lrc);
    out->reset = res == KVR_REG_RESET;
    out->listener_restarted = lrc == KVR_LISTEN_RESTARTED;
    kvr_worker_caps caps;
    kvr_worker_caps_get(ix, w, &caps);
    out->mm_identity = caps.mm_identity;
    out->accepts_mm_hashes = caps.accepts_mm_hashes;
    out->is_eagle = caps.is_eagle;

    bool was_new, origin_changed;
    pthread_mutex_lock(&r->mu);
    reg_rank *rk = commit(r, rw, &p, &was_new, &origin_changed);
    pthread_mutex_unlock(&r->mu);
    prep_free(&p);

    /* Observers, in the order the changes apply: the rank itself, then the
     * worker's other ranks when the worker's settings changed under them. */
    bool settings_changed = res == KVR_REG_RESET || res == KVR_REG_UPDATED;
    kvr_registration v;
    if (was_new || settings_changed || lrc == KVR_LISTEN_RESTARTED || origin_changed) {
        reg_view(rw, rk, &v);
        reg_notify(r, was_new ? KVR_REG_EVENT_ADDED : KVR_REG_EVENT_CHANGED, out->result, &v);
    }
    for (size_t i = 0; settings_changed && i < rw->n_ranks; i++) {
        if (&rw->ranks[i] == rk)
            continue;
        reg_view(rw, &rw->ranks[i], &v);
        reg_notify(r, KVR_REG_EVENT_CHANGED, out->result, &v);
    }
}

kvr_registry_result kvr_registry_register(kvr_registry *r, const kvr_registration *reg,
                                          kvr_registry_reply *reply)
{
    kvr_registry_reply local;
    kvr_registry_reply *out = reply ? reply : &local;
    memset(out, 0, sizeof *out);
    if (!r || !reg)
        return fail(out, KVR_REGISTRY_INVALID, NULL, "no registry or registration");
    if (check(reg, out) != KVR_REGISTRY_CREATED)
        return out->result;
    out->result = KVR_REGISTRY_STOPPED;
    reg_op op = {r, reg, out};
    if (kvr_source_run(r->src, do_register, &op) != 0)
        return fail(out, KVR_REGISTRY_STOPPED, NULL, "ingest thread is not running");
    return out->result;
}

/* ---- unregister ---------------------------------------------------------- */

typedef struct {
    kvr_registry *r;
    const kvr_unregistration *u;
    kvr_unregister_reply *out;
    /* removed records, told to the observers before they are freed */
    reg_rank *gone;
    reg_worker **gone_of;
    size_t n_gone, cap_gone, cap_gone_of;
    reg_worker **gone_ws;
    size_t n_gone_ws, cap_gone_ws;
} unreg_op;

static bool origin_matches(unsigned mask, kvr_origin o)
{
    return mask == 0 || (mask & KVR_ORIGIN_BIT(o)) != 0;
}

/* Removes the ranks of r->ws[at] that u selects; the worker too when nothing
 * listens for it any more (then returns true). Records move to the op's
 * lists. Under r->mu. */
static bool remove_from_worker(unreg_op *op, kvr_source *src, size_t at)
{
    kvr_registry *r = op->r;
    reg_worker *rw = r->ws[at];
    const kvr_unregistration *u = op->u;
    kvr_indexer *ix = kvr_source_indexer(src);
    kvr_unregister_reply *out = op->out;
    bool by_rank = u->routing_group && u->has_rank;
    bool matched_record = false;
    for (size_t i = 0; i < rw->n_ranks;) {
        reg_rank *rk = &rw->ranks[i];
        if ((by_rank && rk->rank != u->dp_rank) || !origin_matches(u->origins, rk->origin)) {
            i++;
            continue;
        }
        out->listeners_stopped += kvr_source_unlisten(src, rw->w, rk->rank);
        kvr_indexer_unregister_rank(ix, rw->w, rk->rank);
        op->gone[op->n_gone] = *rk;
        op->gone_of[op->n_gone++] = rw;
        memmove(rk, rk + 1, (rw->n_ranks - i - 1) * sizeof *rk);
        rw->n_ranks--;
        r->n_rank_recs--;
        out->ranks_removed++;
        matched_record = true;
    }
    if (u->origins == 0 && by_rank && !matched_record) {
        /* A rank a batch named, with state but no listener of its own. */
        size_t stopped = kvr_source_unlisten(src, rw->w, u->dp_rank);
        if (kvr_indexer_unregister_rank(ix, rw->w, u->dp_rank) || stopped) {
            out->listeners_stopped += stopped;
            out->ranks_removed++;
        }
    }
    if (rw->n_ranks > 0)
        return false;
    if (u->origins == 0)
        out->listeners_stopped += kvr_source_unlisten(src, rw->w, UINT32_MAX);
    if (kvr_source_count(src, rw->w) > 0)
        return false;
    kvr_indexer_unregister(ix, rw->w);
    out->workers_removed++;
    memmove(&r->ws[at], &r->ws[at + 1], (r->n_ws - at - 1) * sizeof r->ws[0]);
    r->n_ws--;
    op->gone_ws[op->n_gone_ws++] = rw;
    return true;
}

static bool selects_worker(const kvr_unregistration *u, const reg_worker *rw)
{
    if (rw->s.worker_id != u->worker_id || strcmp(rw->s.model_name, u->model_name) != 0)
        return false;
    if (!u->routing_group)
        return true;
    const char *g = u->routing_group[0] ? u->routing_group : KVR_DEFAULT_ROUTING_GROUP;
    return strcmp(rw->s.routing_group, g) == 0;
}

/* Room for every record the op could remove, so removing cannot fail. */
static bool reserve_gone(unreg_op *op)
{
    size_t ranks = 0, workers = 0;
    for (size_t i = 0; i < op->r->n_ws; i++)
        if (selects_worker(op->u, op->r->ws[i])) {
            ranks += op->r->ws[i]->n_ranks;
            workers++;
        }
    return KVR_GROW(op->gone, op->cap_gone, ranks) == 0 &&
           KVR_GROW(op->gone_of, op->cap_gone_of, ranks) == 0 &&
           KVR_GROW(op->gone_ws, op->cap_gone_ws, workers) == 0;
}

static void do_unregister(kvr_source *src, void *arg)
{
    unreg_op *op = arg;
    kvr_registry *r = op->r;
    kvr_unregister_reply *out = op->out;
    if (!reserve_gone(op)) {
        out->result = KVR_UNREG_NO_MEMORY;
        return;
    }
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->n_ws;)
        if (!selects_worker(op->u, r->ws[i]) || !remove_from_worker(op, src, i))
            i++;
    pthread_mutex_unlock(&r->mu);
    out->result = out->ranks_removed || out->workers_removed ? KVR_UNREG_REMOVED
                                                             : KVR_UNREG_NOT_FOUND;
    for (size_t i = 0; i < op->n_gone; i++) {
        kvr_registration v;
        reg_view(op->gone_of[i], &op->gone[i], &v);
        reg_notify(r, KVR_REG_EVENT_REMOVED, KVR_REGISTRY_UNCHANGED, &v);
    }
}

kvr_unregister_result kvr_registry_unregister(kvr_registry *r, const kvr_unregistration *u,
                                              kvr_unregister_reply *reply)
{
    kvr_unregister_reply local;
    kvr_unregister_reply *out = reply ? reply : &local;
    memset(out, 0, sizeof *out);
    if (!r || !u || !u->model_name || !u->model_name[0])
        return out->result = KVR_UNREG_INVALID;
    unreg_op op;
    memset(&op, 0, sizeof op);
    op.r = r;
    op.u = u;
    op.out = out;
    if (kvr_source_run(r->src, do_unregister, &op) != 0)
        out->result = KVR_UNREG_STOPPED;
    for (size_t i = 0; i < op.n_gone; i++)
        reg_rank_free(&op.gone[i]);
    for (size_t i = 0; i < op.n_gone_ws; i++)
        reg_worker_free(op.gone_ws[i]);
    free(op.gone);
    free(op.gone_of);
    free(op.gone_ws);
    return out->result;
}
