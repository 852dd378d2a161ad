/* The one-object dump forms (dump_load.h): Dynamo's indexer's and
 * kvrouter's, {"<model>:<group>": {"block_size", "events": [RouterEvent,
 * ...], kvrouter's "model_name", "routing_group", "cursors",
 * "cursor_digests", "workers"}}. The object is walked member by member and
 * each RouterEvent is parsed alone, so a million-block dump never becomes
 * one jansson tree. */
#include <stdlib.h>
#include <string.h>

#include "server/dump_load.h"
#include "server/dump_snapshot.h"

typedef struct {
    const char *model, *group;
} group_ctx;

static bool dynamo_block(json_t *blocks, size_t i, uint64_t *engine, uint64_t *local)
{
    json_t *b = json_array_get(blocks, i);
    return kvr_json_u64(json_object_get(b, "block_hash"), true, engine) &&
           kvr_json_u64(json_object_get(b, "tokens_hash"), true, local);
}

/* One RouterEvent: {"worker_id", "storage_tier"?, "event": {"event_id",
 * "data": {"stored": {"parent_hash", "blocks": [...]}}, "dp_rank"?}}. Only
 * stored events are a dump's content; others are counted and skipped. */
static void dynamo_event(kvr_dump_loader *l, const char *p, const char *q, void *ctx)
{
    group_ctx *g = ctx;
    l->events++;
    json_t *v = kvr_dump_parse(l, p, q);
    json_t *event = json_object_get(v, "event");
    json_t *stored = json_object_get(json_object_get(event, "data"), "stored");
    json_t *tier = json_object_get(v, "storage_tier");
    json_t *rank = json_object_get(event, "dp_rank");
    json_t *parent = json_object_get(stored, "parent_hash");
    kvr_dump_store ev = {0};
    int t = KVR_TIER_GPU; /* absent: Dynamo's default */
    if (tier && !json_is_null(tier))
        t = json_is_string(tier) ? kvr_dump_tier_from_name(json_string_value(tier)) : -1;
    ev.has_parent = parent && !json_is_null(parent);
    if (!json_is_object(stored) || t < 0 ||
        !kvr_json_u64(json_object_get(v, "worker_id"), false, &ev.worker_id) ||
        (rank && !json_is_null(rank) &&
         (!json_is_integer(rank) || json_integer_value(rank) < 0 ||
          json_integer_value(rank) > UINT32_MAX)) ||
        (ev.has_parent && !kvr_json_u64(parent, true, &ev.parent))) {
        l->skipped++;
        json_decref(v);
        return;
    }
    ev.tier = (kvr_tier)t;
    ev.dp_rank = json_is_integer(rank) ? (uint32_t)json_integer_value(rank) : 0;
    kvr_dump_add_store(l, g->model, g->group, &ev, json_object_get(stored, "blocks"), dynamo_block);
    json_decref(v);
}

/* "<worker>/<rank>" -> its numbers. */
static bool cursor_key(const char *k, uint64_t *worker, uint32_t *rank)
{
    char *end;
    unsigned long long w = strtoull(k, &end, 10);
    if (end == k || *end != '/')
        return false;
    const char *r = end + 1;
    unsigned long rk = strtoul(r, &end, 10);
    if (end == r || *end || rk > UINT32_MAX)
        return false;
    *worker = w;
    *rank = (uint32_t)rk;
    return true;
}

static void dynamo_cursors(kvr_dump_loader *l, const group_ctx *g, json_t *cursors,
                           json_t *digests)
{
    const char *k;
    json_t *v;
    json_object_foreach(cursors, k, v)
    {
        uint64_t worker, seq;
        uint32_t rank;
        if (!cursor_key(k, &worker, &rank) || !kvr_json_u64(v, false, &seq)) {
            l->skipped++;
            continue;
        }
        kvr_dump_add_cursor(l, g->model, g->group, worker, rank, seq,
                   json_string_value(json_object_get(digests, k)));
    }
}

typedef struct {
    const char *key_p, *key_q; /* member name slice */
    const char *p, *q;         /* value slice */
} member;

#define GROUP_MEMBERS 16

/* The members of the object at [p, q) (at most GROUP_MEMBERS); -1 when it
 * is not a complete object. */
static int members(const char *p, const char *q, member *out)
{
    int n = 0;
    p = kvr_dump_ws(p, q);
    if (p == q || *p != '{')
        return -1;
    p = kvr_dump_ws(p + 1, q);
    if (p < q && *p == '}')
        return 0;
    while (p < q) {
        const char *k = kvr_dump_value_end(p, q);
        if (!k || *p != '"')
            return -1;
        const char *c = kvr_dump_ws(k, q);
        if (c == q || *c != ':')
            return -1;
        const char *v = kvr_dump_ws(c + 1, q);
        const char *ve = kvr_dump_value_end(v, q);
        if (!ve)
            return -1;
        if (n < GROUP_MEMBERS)
            out[n++] = (member){p + 1, k - 1, v, ve};
        p = kvr_dump_ws(ve, q);
        if (p < q && *p == '}')
            return n;
        if (p == q || *p != ',')
            return -1;
        p = kvr_dump_ws(p + 1, q);
    }
    return -1;
}

static const member *find(const member *m, int n, const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < n; i++)
        if ((size_t)(m[i].key_q - m[i].key_p) == len && memcmp(m[i].key_p, name, len) == 0)
            return &m[i];
    return NULL;
}

static json_t *member_value(kvr_dump_loader *l, const member *m)
{
    return m ? kvr_dump_parse(l, m->p, m->q) : NULL;
}

static void worker_element(kvr_dump_loader *l, const char *p, const char *q, void *ctx)
{
    group_ctx *g = ctx;
    json_t *reg = kvr_dump_parse(l, p, q);
    kvr_dump_add_registration(l, reg, g->model, g->group);
    json_decref(reg);
}

/* One "<model>:<group>" entry. Dynamo splits the key at its first ':';
 * kvrouter's own model_name and routing_group say it exactly. */
static void dynamo_group(kvr_dump_loader *l, const char *key, const char *p, const char *q)
{
    member m[GROUP_MEMBERS];
    int n = members(p, q, m);
    if (n < 0) {
        kvr_dump_fail(l, "dump entry '%s' is not a JSON object", key);
        l->failed = true;
        return;
    }
    json_t *model_j = member_value(l, find(m, n, "model_name"));
    json_t *group_j = member_value(l, find(m, n, "routing_group"));
    char *split = strdup(key);
    char *colon = split ? strchr(split, ':') : NULL;
    if (colon)
        *colon = 0;
    group_ctx g = {
        json_string_value(model_j) ? json_string_value(model_j) : split,
        json_string_value(group_j) ? json_string_value(group_j)
                                   : colon ? colon + 1 : KVR_DEFAULT_ROUTING_GROUP,
    };
    const member *events = find(m, n, "events"), *workers = find(m, n, "workers");
    if (g.model && workers && !kvr_dump_each(l, workers->p, workers->q, worker_element, &g))
        kvr_dump_fail(l, "dump entry '%s': 'workers' is not an array", key);
    const member *cm = find(m, n, "cursors");
    json_t *cursors = member_value(l, cm);
    json_t *digests = member_value(l, find(m, n, "cursor_digests"));
    if (g.model && json_is_object(cursors))
        dynamo_cursors(l, &g, cursors, digests);
    else if (g.model && cm && !json_is_null(cursors))
        l->skipped++; /* not an object (or no memory to read it): the group's cursors */
    if (g.model && events && l->apply_events &&
        !kvr_dump_each(l, events->p, events->q, dynamo_event, &g))
        kvr_dump_fail(l, "dump entry '%s': 'events' is not an array", key);
    json_decref(cursors);
    json_decref(digests);
    json_decref(model_j);
    json_decref(group_j);
    free(split);
}

void kvr_dump_load_dynamo(kvr_dump_loader *l, const char *p, const char *e)
{
    p = kvr_dump_ws(p, e);
    if (p == e || *p != '{') {
        l->failed = true;
        kvr_dump_fail(l, "%s", "a dump is a JSON object, JSON lines or a JSON array");
        return;
    }
    p = kvr_dump_ws(p + 1, e);
    while (p < e && *p != '}') {
        const char *k = kvr_dump_value_end(p, e);
        json_t *key = k && *p == '"' ? kvr_dump_parse(l, p, k) : NULL;
        const char *c = k ? kvr_dump_ws(k, e) : e;
        const char *v = c < e && *c == ':' ? kvr_dump_ws(c + 1, e) : e;
        const char *ve = kvr_dump_value_end(v, e);
        if (!json_is_string(key) || !ve) {
            json_decref(key);
            l->failed = true;
            kvr_dump_fail(l, "%s", "the dump object is cut short or malformed");
            return;
        }
        dynamo_group(l, json_string_value(key), v, ve);
        json_decref(key);
        p = kvr_dump_ws(ve, e);
        if (p < e && *p == ',')
            p = kvr_dump_ws(p + 1, e);
    }
}

