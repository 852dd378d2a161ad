/* GET /dump: every index for a peer's recovery (SPEC §7.1, §10), streamed
 * from a snapshot (dump_snapshot.h) as the client reads it.
 *
 * Dynamo's form (the default) is one object, a key "<model>:<group>" each:
 *   {"block_size": B, "events": [RouterEvent, ...],
 *    "cursors": {"<worker>/<rank>": seq}, "cursor_digests": {...: "<16 hex>"},
 *    "model_name", "routing_group", "workers": [/register object, ...]}
 * RouterEvent as Dynamo's serde writes it: {"worker_id", "storage_tier",
 * "event": {"event_id", "data": {"stored": {"parent_hash", "start_position",
 * "blocks": [{"block_hash", "tokens_hash", "mm_extra_info"}]}}, "dp_rank"}},
 * u64 as bare JSON integers. Dynamo reads block_size and events and ignores
 * the rest; model_name and routing_group are there because a model name may
 * hold the ':' the key splits on.
 * ?format=ndjson: one JSON object a line: registrations ({"model", "group",
 * "registration"}), cursors ({"model", "group", "cursor": {"worker",
 * "rank", "seq", "digest"?}}), then store records ({"model", "group",
 * "worker", "rank", "tier", "parent", "blocks": [[engine, router], ...]}),
 * u64 as decimal strings. ?events=false leaves the events out (a joining
 * replica asks for registrations first). */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "server/dump_snapshot.h"

/* Concurrent dumps each hold a snapshot; more get 503 naming the limit. */
#define KVR_MAX_DUMPS 4
/* Text produced per refill of the stream. */
#define KVR_DUMP_CHUNK (64 * 1024)

static _Atomic int dumps_running;

typedef enum { PH_GROUP, PH_REGS, PH_CURSORS, PH_EVENTS, PH_TAIL, PH_DONE } phase;

typedef struct {
    kvr_dump_snapshot s;
    bool ndjson;
    size_t g, i;   /* group, item within the phase */
    phase ph;
    uint64_t event_id;
    kvr_sbuf out;
    size_t off; /* of out already handed to the client */
} dump_stream;

static void put(dump_stream *d, const char *t) { kvr_sbuf_append(&d->out, t, strlen(t)); }

static void dynamo_event(dump_stream *d, const kvr_dump_chain *c)
{
    const uint64_t *e = d->s.hashes + c->first, *l = e + c->n;
    kvr_sbuf *b = &d->out;
    kvr_sbuf_printf(b, "%s{\"worker_id\":%" PRIu64 ",\"storage_tier\":\"%s\",\"event\":{"
                       "\"event_id\":%" PRIu64 ",\"data\":{\"stored\":{\"parent_hash\":",
                    d->i ? "," : "", c->worker_id, kvr_dump_tier_name(c->tier), d->event_id++);
    if (c->has_parent)
        kvr_sbuf_printf(b, "%" PRIu64, c->parent);
    else
        put(d, "null");
    put(d, ",\"start_position\":null,\"blocks\":[");
    for (uint32_t k = 0; k < c->n; k++)
        kvr_sbuf_printf(b, "%s{\"block_hash\":%" PRIu64 ",\"tokens_hash\":%" PRIu64
                           ",\"mm_extra_info\":null}",
                        k ? "," : "", e[k], l[k]);
    kvr_sbuf_printf(b, "]}},\"dp_rank\":%" PRIu32 "}}", c->dp_rank);
}

static void ndjson_prefix(dump_stream *d, const kvr_dump_group *g)
{
    put(d, "{\"model\":");
    kvr_sbuf_json_str(&d->out, g->model);
    put(d, ",\"group\":");
    kvr_sbuf_json_str(&d->out, g->group);
}

static void ndjson_event(dump_stream *d, const kvr_dump_group *g, const kvr_dump_chain *c)
{
    const uint64_t *e = d->s.hashes + c->first, *l = e + c->n;
    kvr_sbuf *b = &d->out;
    ndjson_prefix(d, g);
    kvr_sbuf_printf(b, ",\"worker\":\"%" PRIu64 "\",\"rank\":%" PRIu32 ",\"tier\":\"%s\",",
                    c->worker_id, c->dp_rank, kvr_tier_name(c->tier));
    if (c->has_parent)
        kvr_sbuf_printf(b, "\"parent\":\"%" PRIu64 "\",\"blocks\":[", c->parent);
    else
        put(d, "\"parent\":null,\"blocks\":[");
    for (uint32_t k = 0; k < c->n; k++)
        kvr_sbuf_printf(b, "%s[\"%" PRIu64 "\",\"%" PRIu64 "\"]", k ? "," : "", e[k], l[k]);
    put(d, "]}\n");
}

static void ndjson_cursor(dump_stream *d, const kvr_dump_group *g, const kvr_dump_cursor *c)
{
    ndjson_prefix(d, g);
    kvr_sbuf_printf(&d->out,
                    ",\"cursor\":{\"worker\":\"%" PRIu64 "\",\"rank\":%" PRIu32 ",\"seq\":\"%" PRIu64
                    "\"",
                    c->worker_id, c->dp_rank, c->seq);
    if (c->has_digest)
        kvr_sbuf_printf(&d->out, ",\"digest\":\"%016" PRIx64 "\"", c->digest);
    put(d, "}}\n");
}

static void registration(dump_stream *d, const kvr_dump_group *g, size_t k)
{
    char *t = kvr_api_format_registration(&d->s.regs.items[g->regs[k]]);
    if (!t) {
        d->out.failed = true;
    } else if (d->ndjson) {
        ndjson_prefix(d, g);
        put(d, ",\"registration\":");
        put(d, t);
        put(d, "}\n");
    } else {
        put(d, k ? "," : "");
        put(d, t);
    }
    free(t);
}

/* The group's small parts after its events, in Dynamo's form. */
static void dynamo_tail(dump_stream *d, const kvr_dump_group *g)
{
    kvr_sbuf *b = &d->out;
    put(d, "],\"cursors\":{");
    for (size_t k = 0; k < g->n_cursors; k++) {
        const kvr_dump_cursor *c = &d->s.cursors[g->first_cursor + k];
        kvr_sbuf_printf(b, "%s\"%" PRIu64 "/%" PRIu32 "\":%" PRIu64, k ? "," : "", c->worker_id,
                        c->dp_rank, c->seq);
    }
    put(d, "},\"cursor_digests\":{");
    bool first = true;
    for (size_t k = 0; k < g->n_cursors; k++) {
        const kvr_dump_cursor *c = &d->s.cursors[g->first_cursor + k];
        if (!c->has_digest)
            continue;
        kvr_sbuf_printf(b, "%s\"%" PRIu64 "/%" PRIu32 "\":\"%016" PRIx64 "\"", first ? "" : ",",
                        c->worker_id, c->dp_rank, c->digest);
        first = false;
    }
    put(d, "},\"model_name\":");
    kvr_sbuf_json_str(b, g->model);
    put(d, ",\"routing_group\":");
    kvr_sbuf_json_str(b, g->group);
    put(d, ",\"workers\":[");
    for (size_t k = 0; k < g->n_regs; k++)
        registration(d, g, k);
    put(d, "]}");
}

static void dynamo_head(dump_stream *d, const kvr_dump_group *g)
{
    size_t n = strlen(g->model) + strlen(g->group) + 2;
    char *key = malloc(n);
    if (!key) {
        d->out.failed = true;
        return;
    }
    snprintf(key, n, "%s:%s", g->model, g->group);
    put(d, d->g ? "," : "{");
    kvr_sbuf_json_str(&d->out, key);
    kvr_sbuf_printf(&d->out, ":{\"block_size\":%" PRIu32 ",\"events\":[", g->block_size);
    free(key);
}

/* One step of the writer: the next item of the current phase. */
static void step(dump_stream *d)
{
    if (d->g == d->s.n_groups) {
        if (!d->ndjson)
            put(d, d->s.n_groups ? "}\n" : "{}\n");
        d->ph = PH_DONE;
        return;
    }
    const kvr_dump_group *g = &d->s.groups[d->g];
    switch (d->ph) {
    case PH_GROUP:
        if (!d->ndjson)
            dynamo_head(d, g);
        d->ph = d->ndjson ? PH_REGS : PH_EVENTS;
        d->i = 0;
        return;
    case PH_REGS: /* ndjson only: registrations, then cursors, first */
        if (d->i < g->n_regs)
            registration(d, g, d->i++);
        else
            d->ph = PH_CURSORS, d->i = 0;
        return;
    case PH_CURSORS:
        if (d->i < g->n_cursors)
            ndjson_cursor(d, g, &d->s.cursors[g->first_cursor + d->i++]);
        else
            d->ph = PH_EVENTS, d->i = 0;
        return;
    case PH_EVENTS:
        if (d->i < g->n_chains) {
            const kvr_dump_chain *c = &d->s.chains[g->first_chain + d->i];
            if (d->ndjson)
                ndjson_event(d, g, c);
            else
                dynamo_event(d, c);
            d->i++;
        } else {
            d->ph = PH_TAIL;
        }
        return;
    case PH_TAIL:
        if (!d->ndjson)
            dynamo_tail(d, g);
        d->g++;
        d->ph = PH_GROUP;
        return;
    case PH_DONE:
        return;
    }
}

static long stream_read(void *user, char *buf, size_t max)
{
    dump_stream *d = user;
    if (d->off == d->out.len) {
        d->out.len = d->off = 0;
        while (d->ph != PH_DONE && d->out.len < KVR_DUMP_CHUNK && !d->out.failed)
            step(d);
        if (d->out.failed)
            return -2; /* cut: a truncated dump must not look whole */
        if (d->out.len == 0)
            return -1;
    }
    size_t n = d->out.len - d->off;
    if (n > max)
        n = max;
    memcpy(buf, d->out.data + d->off, n);
    d->off += n;
    return (long)n;
}

static void stream_done(void *user)
{
    dump_stream *d = user;
    kvr_dump_snapshot_free(&d->s);
    free(d->out.data);
    free(d);
    atomic_fetch_sub(&dumps_running, 1);
}

void kvr_api_dump(kvr_server *srv, json_t *args, kvr_api_reply *reply)
{
    const char *fmt = json_string_value(json_object_get(args, "format"));
    const char *events = json_string_value(json_object_get(args, "events"));
    bool ndjson = fmt && (strcmp(fmt, "ndjson") == 0 || strcmp(fmt, "lines") == 0);
    if (fmt && !ndjson && strcmp(fmt, "dynamo") != 0) {
        kvr_api_error(reply, 400, "argument 'format' must be \"dynamo\" or \"ndjson\"");
        return;
    }
    bool with_events = !events || strcmp(events, "true") == 0 || strcmp(events, "1") == 0;
    if (events && !with_events && strcmp(events, "false") != 0 && strcmp(events, "0") != 0) {
        kvr_api_error(reply, 400, "argument 'events' must be true or false");
        return;
    }
    if (atomic_fetch_add(&dumps_running, 1) >= KVR_MAX_DUMPS) {
        atomic_fetch_sub(&dumps_running, 1);
        kvr_api_error(reply, 503, "%d dumps are being sent already (limit max_dumps)",
                      KVR_MAX_DUMPS);
        json_object_set_new(reply->body, "limit", json_string("max_dumps"));
        return;
    }
    dump_stream *d = calloc(1, sizeof *d);
    if (!d || kvr_dump_snapshot_take(srv, with_events, &d->s) != 0) {
        free(d);
        atomic_fetch_sub(&dumps_running, 1);
        kvr_api_error(reply, 503, "cannot take a dump snapshot (out of memory or stopping)");
        return;
    }
    d->ndjson = ndjson;
    d->ph = PH_GROUP;
    reply->status = 200;
    reply->stream = (kvr_api_stream){stream_read, stream_done, d};
    reply->content_type = ndjson ? "application/x-ndjson" : "application/json";
}
