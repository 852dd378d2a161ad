/* kvr_registry_sync: one origin's records made equal to a list (a config
 * reload, a discovery poll), as one step on the ingest thread. Built only
 * from kvr_registry_register and _unregister, which run directly when
 * called on the ingest thread, so the rules stay theirs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry_internal.h"

static bool same_key(const kvr_registration *a, const kvr_registration *b)
{
    const char *ga = a->settings.routing_group && a->settings.routing_group[0]
                         ? a->settings.routing_group
                         : KVR_DEFAULT_ROUTING_GROUP;
    const char *gb = b->settings.routing_group && b->settings.routing_group[0]
                         ? b->settings.routing_group
                         : KVR_DEFAULT_ROUTING_GROUP;
    return a->settings.worker_id == b->settings.worker_id && a->dp_rank == b->dp_rank &&
           a->settings.model_name && b->settings.model_name &&
           strcmp(a->settings.model_name, b->settings.model_name) == 0 && strcmp(ga, gb) == 0;
}

typedef struct {
    kvr_registry *r;
    kvr_origin origin;
    const kvr_registration *regs;
    size_t n;
    kvr_registry_reply *replies;
    kvr_registry_sync_report *rep;
    bool ran;
} sync_op;

static void remove_stale(sync_op *op)
{
    kvr_registrations cur;
    if (kvr_registry_list(op->r, &cur) != 0)
        return; /* out of memory: keep what is there rather than guess */
    for (size_t i = 0; i < cur.n; i++) {
        const kvr_registration *c = &cur.items[i];
        if (c->origin != op->origin)
            continue;
        bool wanted = false;
        for (size_t k = 0; k < op->n && !wanted; k++)
            wanted = same_key(c, &op->regs[k]);
        if (wanted)
            continue;
        kvr_unregistration u = {.model_name = c->settings.model_name,
                                .routing_group = c->settings.routing_group,
                                .worker_id = c->settings.worker_id,
                                .has_rank = true,
                                .dp_rank = c->dp_rank,
                                .origins = KVR_ORIGIN_BIT(op->origin)};
        kvr_unregister_reply out;
        if (kvr_registry_unregister(op->r, &u, &out) == KVR_UNREG_REMOVED)
            op->rep->removed += out.ranks_removed;
    }
    kvr_registrations_free(&cur);
}

static void do_sync(kvr_source *src, void *arg)
{
    (void)src;
    sync_op *op = arg;
    op->ran = true;
    remove_stale(op);
    for (size_t i = 0; i < op->n; i++) {
        kvr_registration reg = op->regs[i];
        reg.origin = op->origin;
        kvr_registry_reply local;
        kvr_registry_reply *out = op->replies ? &op->replies[i] : &local;
        switch (kvr_registry_register(op->r, &reg, out)) {
        case KVR_REGISTRY_CREATED: op->rep->created++; break;
        case KVR_REGISTRY_UNCHANGED: op->rep->unchanged++; break;
        case KVR_REGISTRY_UPDATED:
        case KVR_REGISTRY_RESET:
        case KVR_REGISTRY_LISTENER_RESTARTED: op->rep->changed++; break;
        default: op->rep->failed++; break;
        }
    }
}

size_t kvr_registry_sync(kvr_registry *r, kvr_origin origin, const kvr_registration *regs,
                         size_t n, kvr_registry_reply *replies, kvr_registry_sync_report *report)
{
    kvr_registry_sync_report local;
    kvr_registry_sync_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    sync_op op = {r, origin, regs, n, replies, rep, false};
    if (kvr_source_run(r->src, do_sync, &op) != 0 || !op.ran) {
        for (size_t i = 0; replies && i < n; i++) {
            memset(&replies[i], 0, sizeof replies[i]);
            replies[i].result = KVR_REGISTRY_STOPPED;
            snprintf(replies[i].error, sizeof replies[i].error, "ingest thread is not running");
        }
        rep->failed = n;
    }
    return rep->failed;
}
