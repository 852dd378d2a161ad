/* Taking the dump snapshot (dump_snapshot.h) on the ingest thread. The walk
 * of the indexes, the registrations and the cursors are one kvr_source_run,
 * so batches stop for its length; the index walk holds each index's read
 * lock anyway, so ingestion of a group would wait for it regardless. */
#include <stdlib.h>
#include <string.h>

#include "server/dump_snapshot.h"
#include "util/grow.h"

static const char *const tier_names[KVR_TIER_COUNT] = {
    [KVR_TIER_GPU] = "device",
    [KVR_TIER_CPU] = "host_pinned",
    [KVR_TIER_DISK] = "disk",
    [KVR_TIER_EXTERNAL] = "external",
};

const char *kvr_dump_tier_name(kvr_tier t)
{
    return (unsigned)t < KVR_TIER_COUNT ? tier_names[t] : "device";
}

int kvr_dump_tier_from_name(const char *name)
{
    for (int t = 0; t < KVR_TIER_COUNT; t++)
        if (strcmp(name, tier_names[t]) == 0)
            return t;
    return -1;
}

static kvr_dump_group *group_of(kvr_dump_snapshot *s, const char *model, const char *group)
{
    for (size_t i = s->n_groups; i-- > 0;)
        if (strcmp(s->groups[i].model, model) == 0 && strcmp(s->groups[i].group, group) == 0)
            return &s->groups[i];
    if (KVR_GROW(s->groups, s->cap_groups, s->n_groups + 1) != 0)
        return NULL;
    kvr_dump_group *g = &s->groups[s->n_groups];
    memset(g, 0, sizeof *g);
    g->model = strdup(model);
    g->group = strdup(group);
    if (!g->model || !g->group) {
        free(g->model);
        free(g->group);
        return NULL;
    }
    s->n_groups++;
    return g;
}

typedef struct {
    kvr_dump_snapshot *s;
    kvr_dump_group *cur;
} walk;

static void add_chain(void *user, const char *model, const char *group, const kvr_dump_store *ev)
{
    walk *w = user;
    kvr_dump_snapshot *s = w->s;
    if (s->failed)
        return;
    if (!w->cur || strcmp(w->cur->model, model) != 0 || strcmp(w->cur->group, group) != 0) {
        w->cur = group_of(s, model, group);
        if (w->cur)
            w->cur->first_chain = s->n_chains; /* a group's chains arrive together */
    }
    if (!w->cur || KVR_GROW(s->chains, s->cap_chains, s->n_chains + 1) != 0 ||
        KVR_GROW(s->hashes, s->cap_hashes, s->n_hashes + 2 * ev->n) != 0) {
        s->failed = true;
        return;
    }
    s->chains[s->n_chains++] = (kvr_dump_chain){
        .worker_id = ev->worker_id,
        .parent = ev->parent,
        .dp_rank = ev->dp_rank,
        .n = (uint32_t)ev->n,
        .tier = ev->tier,
        .has_parent = ev->has_parent,
        .first = s->n_hashes,
    };
    memcpy(s->hashes + s->n_hashes, ev->engine_hashes, ev->n * sizeof *s->hashes);
    memcpy(s->hashes + s->n_hashes + ev->n, ev->local_hashes, ev->n * sizeof *s->hashes);
    s->n_hashes += 2 * ev->n;
    s->blocks += ev->n;
    w->cur->n_chains++;
}

/* The cursor of the listener a registration started, when the index holds
 * some of its stream. */
static void add_cursor(kvr_source *src, kvr_dump_snapshot *s, kvr_dump_group *g,
                       const kvr_registration *reg)
{
    kvr_indexer *ix = kvr_source_indexer(src);
    kvr_worker *w = kvr_indexer_find(ix, reg->settings.model_name, reg->settings.routing_group,
                                     reg->settings.worker_id);
    kvr_listener_info info[8];
    size_t n = w ? kvr_source_listeners(src, w, info, 8) : 0;
    for (size_t i = 0; i < n && i < 8; i++) {
        if (info[i].dp_rank != reg->dp_rank || !info[i].has_cursor)
            continue;
        if (KVR_GROW(s->cursors, s->cap_cursors, s->n_cursors + 1) != 0) {
            s->failed = true;
            return;
        }
        s->cursors[s->n_cursors++] = (kvr_dump_cursor){
            .worker_id = info[i].worker_id,
            .seq = info[i].cursor,
            .digest = info[i].cursor_digest,
            .dp_rank = info[i].dp_rank,
            .has_digest = info[i].has_digest,
        };
        g->n_cursors++;
    }
}

typedef struct {
    kvr_server *srv;
    kvr_dump_snapshot *s;
    bool with_events;
} take_arg;

static void take(kvr_source *src, void *arg)
{
    take_arg *a = arg;
    kvr_dump_snapshot *s = a->s;
    kvr_indexer *ix = kvr_source_indexer(src);
    if (kvr_registry_list(a->srv->registry, &s->regs) != 0) {
        s->failed = true;
        return;
    }
    /* Registrations and cursors, grouped (a group's cursors together). */
    for (size_t i = 0; i < s->regs.n && !s->failed; i++) {
        const kvr_registration *r = &s->regs.items[i];
        kvr_dump_group *g = group_of(s, r->settings.model_name, r->settings.routing_group);
        if (!g || KVR_GROW(g->regs, g->cap_regs, g->n_regs + 1) != 0) {
            s->failed = true;
            break;
        }
        g->regs[g->n_regs++] = i;
    }
    for (size_t gi = 0; gi < s->n_groups && !s->failed; gi++) {
        kvr_dump_group *g = &s->groups[gi];
        g->first_cursor = s->n_cursors;
        for (size_t k = 0; k < g->n_regs; k++)
            add_cursor(src, s, g, &s->regs.items[g->regs[k]]);
    }
    if (a->with_events && !s->failed) {
        walk w = {s, NULL};
        kvr_indexer_dump(ix, add_chain, &w);
    }
    for (size_t gi = 0; gi < s->n_groups; gi++)
        s->groups[gi].block_size =
            kvr_indexer_block_size(ix, s->groups[gi].model, s->groups[gi].group);
}

int kvr_dump_snapshot_take(kvr_server *srv, bool with_events, kvr_dump_snapshot *out)
{
    memset(out, 0, sizeof *out);
    take_arg a = {srv, out, with_events};
    if (kvr_source_run(srv->src, take, &a) != 0 || out->failed) {
        kvr_dump_snapshot_free(out);
        return -1;
    }
    return 0;
}

void kvr_dump_snapshot_free(kvr_dump_snapshot *s)
{
    for (size_t i = 0; i < s->n_groups; i++) {
        free(s->groups[i].model);
        free(s->groups[i].group);
        free(s->groups[i].regs);
    }
    free(s->groups);
    free(s->chains);
    free(s->hashes);
    free(s->cursors);
    kvr_registrations_free(&s->regs);
    memset(s, 0, sizeof *s);
}
