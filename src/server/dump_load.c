/* Peer dumps into the indexer (dump_load.h). Every value is parsed by
 * jansson (through kvr_json_load_body, which keeps hashes above 2^63
 * exact); what is written here only finds where one value ends, so a dump
 * is parsed one record at a time and nothing from the wire is trusted: a
 * bad record is skipped and counted, the rest still loads. */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/log.h"
#include "server/dump_load.h"
#include "server/dump_snapshot.h"
#include "server/json_body.h"
#include "server/auth.h"
#include "util/grow.h"

/* Records and hashes held before they are applied in one ingest step. */
#define KVR_DUMP_FLUSH_RECORDS 65536u
#define KVR_DUMP_FLUSH_HASHES (2u << 20)
#define KVR_DUMP_MAX_DEPTH 64

typedef struct {
    size_t name; /* (model, group) at names[2*name], names[2*name+1] */
    kvr_dump_store ev;
    size_t first;
} pending_rec;

struct kvr_dump_pending {
    pending_rec *recs;
    size_t n, cap;
    uint64_t *hashes;
    size_t n_hashes, cap_hashes;
    char **names;
    size_t n_names, cap_names; /* entries, two per pair */
};

void kvr_dump_fail(kvr_dump_loader *l, const char *fmt, const char *what)
{
    if (!l->err[0])
        snprintf(l->err, sizeof l->err, fmt, what);
}

/* A record dropped for want of memory: skipped, and said so. */
static void lost(kvr_dump_loader *l)
{
    l->skipped++;
    kvr_dump_fail(l, "%s", "out of memory");
}

void kvr_dump_loader_init(kvr_dump_loader *l, kvr_server *srv, bool apply_events)
{
    memset(l, 0, sizeof *l);
    l->srv = srv;
    l->apply_events = apply_events;
    l->regs = json_array();
    l->pending = calloc(1, sizeof *l->pending);
    if (!l->regs || !l->pending) {
        l->failed = true;
        kvr_dump_fail(l, "%s", "out of memory");
    }
}

/* ---------------------------------------------------------------- values */

const char *kvr_dump_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Where the JSON value starting at p ends (strings skipped with their
 * escapes, containers by depth); NULL when it does not end before e. Only
 * finds the end: jansson parses the value. */
const char *kvr_dump_value_end(const char *p, const char *e)
{
    if (p >= e)
        return NULL;
    if (*p == '"') {
        for (p++; p < e; p++) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                return p + 1;
        }
        return NULL;
    }
    if (*p != '{' && *p != '[') {
        while (p < e && !strchr(",:}] \t\r\n", *p) && *p)
            p++;
        return p;
    }
    int depth = 0;
    for (; p < e; p++) {
        if (*p == '"') {
            const char *q = kvr_dump_value_end(p, e);
            if (!q)
                return NULL;
            p = q - 1;
        } else if (*p == '{' || *p == '[') {
            if (++depth > KVR_DUMP_MAX_DEPTH)
                return NULL;
        } else if (*p == '}' || *p == ']') {
            if (--depth == 0)
                return p + 1;
        }
    }
    return NULL;
}

json_t *kvr_dump_parse(kvr_dump_loader *l, const char *p, const char *q)
{
    json_error_t jerr;
    if ((size_t)(q - p) > KVR_DUMP_MAX_RECORD)
        return NULL;
    json_t *v = kvr_json_load_body(p, (size_t)(q - p), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                                   &jerr);
    if (!v && json_error_code(&jerr) == json_error_out_of_memory)
        kvr_dump_fail(l, "%s", "out of memory");
    return v;
}

/* Calls fn for each element of the array at [p, q). false when it is not
 * an array of complete values. */
bool kvr_dump_each(kvr_dump_loader *l, const char *p, const char *q, kvr_dump_element_fn fn,
                         void *ctx)
{
    p = kvr_dump_ws(p, q);
    if (p == q || *p != '[')
        return false;
    p = kvr_dump_ws(p + 1, q);
    if (p < q && *p == ']')
        return true;
    while (p < q) {
        const char *v = kvr_dump_value_end(p, q);
        if (!v)
            return false;
        fn(l, p, v, ctx);
        p = kvr_dump_ws(v, q);
        if (p < q && *p == ']')
            return true;
        if (p == q || *p != ',')
            return false;
        p = kvr_dump_ws(p + 1, q);
    }
    return false;
}

/* ---------------------------------------------------------------- stores */

static void apply_pending(kvr_source *src, void *arg)
{
    kvr_dump_loader *l = arg;
    kvr_dump_pending *pd = l->pending;
    kvr_indexer *ix = kvr_source_indexer(src);
    for (size_t i = 0; i < pd->n; i++) {
        pending_rec *r = &pd->recs[i];
        r->ev.engine_hashes = pd->hashes + r->first;
        r->ev.local_hashes = pd->hashes + r->first + r->ev.n;
        if (kvr_indexer_load_store(ix, pd->names[2 * r->name], pd->names[2 * r->name + 1],
                                   &r->ev) == KVR_DROP_NONE)
            l->applied++;
        else
            l->skipped++;
    }
}

static void flush(kvr_dump_loader *l)
{
    kvr_dump_pending *pd = l->pending;
    if (pd->n && kvr_source_run(l->srv->src, apply_pending, l) != 0) {
        l->skipped += (long)pd->n;
        kvr_dump_fail(l, "%s", "ingest thread is not running");
    }
    for (size_t i = 0; i < pd->n_names; i++)
        free(pd->names[i]);
    pd->n = pd->n_hashes = pd->n_names = 0;
}

static bool name_index(kvr_dump_pending *pd, const char *model, const char *group, size_t *out)
{
    if (pd->n_names && strcmp(pd->names[pd->n_names - 2], model) == 0 &&
        strcmp(pd->names[pd->n_names - 1], group) == 0) {
        *out = pd->n_names / 2 - 1;
        return true;
    }
    if (KVR_GROW(pd->names, pd->cap_names, pd->n_names + 2) != 0)
        return false;
    char *m = strdup(model), *g = strdup(group);
    if (!m || !g) {
        free(m);
        free(g);
        return false;
    }
    pd->names[pd->n_names++] = m;
    pd->names[pd->n_names++] = g;
    *out = pd->n_names / 2 - 1;
    return true;
}

void kvr_dump_add_store(kvr_dump_loader *l, const char *model, const char *group,
                      const kvr_dump_store *ev, json_t *blocks, kvr_dump_hash_fn get)
{
    kvr_dump_pending *pd = l->pending;
    size_t n = json_array_size(blocks), name;
    if (n == 0 || n > KVR_WIRE_MAX_HASHES) {
        l->skipped++;
        return;
    }
    if (!name_index(pd, model, group, &name) || KVR_GROW(pd->recs, pd->cap, pd->n + 1) != 0 ||
        KVR_GROW(pd->hashes, pd->cap_hashes, pd->n_hashes + 2 * n) != 0) {
        lost(l);
        return;
    }
    uint64_t *h = pd->hashes + pd->n_hashes;
    for (size_t i = 0; i < n; i++)
        if (!get(blocks, i, &h[i], &h[n + i])) {
            l->skipped++;
            return;
        }
    pending_rec *r = &pd->recs[pd->n++];
    r->name = name;
    r->ev = *ev;
    r->ev.n = n;
    r->first = pd->n_hashes;
    pd->n_hashes += 2 * n;
    if (pd->n >= KVR_DUMP_FLUSH_RECORDS || pd->n_hashes >= KVR_DUMP_FLUSH_HASHES)
        flush(l);
}

/* ---------------------------------------------------------------- records */

void kvr_dump_add_registration(kvr_dump_loader *l, json_t *reg, const char *model,
                             const char *group)
{
    if (!json_is_object(reg)) {
        l->skipped++;
        return;
    }
    if ((model && !json_object_get(reg, "model_name") &&
         json_object_set_new(reg, "model_name", json_string(model)) != 0) ||
        (group && !json_object_get(reg, "routing_group") &&
         json_object_set_new(reg, "routing_group", json_string(group)) != 0) ||
        json_array_append(l->regs, reg) != 0)
        lost(l);
}

void kvr_dump_add_cursor(kvr_dump_loader *l, const char *model, const char *group,
                       uint64_t worker, uint32_t rank, uint64_t seq, const char *digest)
{
    if (KVR_GROW(l->cursors, l->cap_cursors, l->n_cursors + 1) != 0) {
        lost(l);
        return;
    }
    kvr_dump_cursor_rec *c = &l->cursors[l->n_cursors];
    memset(c, 0, sizeof *c);
    c->model = strdup(model);
    c->group = strdup(group);
    if (!c->model || !c->group) {
        free(c->model);
        free(c->group);
        lost(l);
        return;
    }
    c->worker_id = worker;
    c->dp_rank = rank;
    c->seq = seq;
    char *end = NULL;
    if (digest && strlen(digest) == 16) {
        c->digest = strtoull(digest, &end, 16);
        c->has_digest = end && *end == 0;
    }
    l->n_cursors++;
}

/* ---------------------------------------------------------------- lines */

static bool line_block(json_t *blocks, size_t i, uint64_t *engine, uint64_t *local)
{
    json_t *pair = json_array_get(blocks, i);
    return json_is_array(pair) && json_array_size(pair) == 2 &&
           kvr_json_u64(json_array_get(pair, 0), true, engine) &&
           kvr_json_u64(json_array_get(pair, 1), true, local);
}

/* One kvrouter record: a store, a cursor or a registration. */
static void line_record(kvr_dump_loader *l, const char *p, const char *q, void *ctx)
{
    (void)ctx;
    json_t *r = kvr_dump_parse(l, p, q);
    const char *model = json_string_value(json_object_get(r, "model"));
    const char *group = json_string_value(json_object_get(r, "group"));
    json_t *cursor = json_object_get(r, "cursor");
    json_t *reg = json_object_get(r, "registration");
    json_t *blocks = json_object_get(r, "blocks");
    uint64_t worker, seq;
    json_t *rank = json_object_get(json_is_object(cursor) ? cursor : r, "rank");
    bool rank_ok = json_is_integer(rank) && json_integer_value(rank) >= 0 &&
                   json_integer_value(rank) <= UINT32_MAX;
    if (!model || !group) {
        l->skipped++;
    } else if (reg) {
        kvr_dump_add_registration(l, reg, model, group);
    } else if (json_is_object(cursor)) {
        if (rank_ok && kvr_json_u64(json_object_get(cursor, "worker"), false, &worker) &&
            kvr_json_u64(json_object_get(cursor, "seq"), false, &seq))
            kvr_dump_add_cursor(l, model, group, worker, (uint32_t)json_integer_value(rank), seq,
                       json_string_value(json_object_get(cursor, "digest")));
        else
            l->skipped++;
    } else if (l->apply_events) {
        l->events++;
        kvr_dump_store ev = {0};
        const char *tier = json_string_value(json_object_get(r, "tier"));
        int t = tier ? kvr_tier_from_name(tier) : -1;
        json_t *parent = json_object_get(r, "parent");
        ev.has_parent = parent && !json_is_null(parent);
        if (t < 0 || !rank_ok || !json_is_array(blocks) ||
            !kvr_json_u64(json_object_get(r, "worker"), false, &ev.worker_id) ||
            (ev.has_parent && !kvr_json_u64(parent, true, &ev.parent))) {
            l->skipped++;
        } else {
            ev.tier = (kvr_tier)t;
            ev.dp_rank = (uint32_t)json_integer_value(rank);
            kvr_dump_add_store(l, model, group, &ev, blocks, line_block);
        }
    }
    json_decref(r);
}

/* Whole lines of buf; keeps a cut last line. */
static void take_lines(kvr_dump_loader *l, bool last)
{
    const char *p = l->buf, *e = l->buf + l->len;
    while (p < e) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        if (!nl && !last)
            break;
        const char *le = nl ? nl : e, *s = kvr_dump_ws(p, le);
        if (s < le)
            line_record(l, s, le, NULL);
        p = nl ? nl + 1 : e;
    }
    l->len = (size_t)(e - p);
    memmove(l->buf, p, l->len);
}

/* ---------------------------------------------------------------- input */

bool kvr_dump_loader_feed(kvr_dump_loader *l, const char *data, size_t len, bool ndjson)
{
    if (!l->decided && ndjson)
        l->ndjson = l->decided = true;
    if (l->len + len + 1 > (l->ndjson ? KVR_DUMP_MAX_RECORD : KVR_DUMP_MAX_BYTES)) {
        kvr_dump_fail(l, "%s", l->ndjson ? "a dump line is too long" : "the dump is too large");
        l->failed = true;
        return false;
    }
    if (kvr_grow((void **)&l->buf, &l->cap, l->len + len + 1, 1, 65536) != 0) {
        kvr_dump_fail(l, "%s", "out of memory");
        l->failed = true;
        return false;
    }
    memcpy(l->buf + l->len, data, len);
    l->len += len;
    if (l->ndjson)
        take_lines(l, false);
    return true;
}

/* Without a content type: one JSON value followed by another (or a first
 * record naming "model") is JSON lines; '[' is kvrouter's old array. */
static void decide(kvr_dump_loader *l)
{
    const char *e = l->buf + l->len, *p = kvr_dump_ws(l->buf, e), *v = kvr_dump_value_end(p, e);
    l->decided = true;
    if (p == e || *p != '{' || !v)
        return;
    if (kvr_dump_ws(v, e) < e) {
        l->ndjson = true;
        return;
    }
    json_t *r = kvr_dump_parse(l, p, v);
    l->ndjson = json_is_string(json_object_get(r, "model"));
    json_decref(r);
}

bool kvr_dump_loader_finish(kvr_dump_loader *l)
{
    if (!l->failed && l->buf) {
        if (!l->decided)
            decide(l);
        const char *e = l->buf + l->len, *p = kvr_dump_ws(l->buf, e);
        if (l->ndjson)
            take_lines(l, true);
        else if (p < e && *p == '[')
            l->failed = !kvr_dump_each(l, p, e, line_record, NULL);
        else if (p < e)
            kvr_dump_load_dynamo(l, p, e);
    }
    flush(l);
    if (l->skipped)
        kvr_log(KVR_LOG_WARN, "dump: %ld records skipped%s%s", l->skipped,
                l->err[0] ? ", first error: " : "", l->err);
    return !l->failed;
}

void kvr_dump_loader_free(kvr_dump_loader *l)
{
    if (l->pending) {
        for (size_t i = 0; i < l->pending->n_names; i++)
            free(l->pending->names[i]);
        free(l->pending->names);
        free(l->pending->recs);
        free(l->pending->hashes);
        free(l->pending);
    }
    for (size_t i = 0; i < l->n_cursors; i++) {
        free(l->cursors[i].model);
        free(l->cursors[i].group);
    }
    free(l->cursors);
    free(l->buf);
    json_decref(l->regs);
    memset(l, 0, sizeof *l);
}

long kvr_server_load_dump(kvr_server *srv, const char *text, size_t len, char *err,
                          size_t err_len)
{
    kvr_dump_loader l;
    kvr_dump_loader_init(&l, srv, true);
    bool ok = kvr_dump_loader_feed(&l, text, len, false) && kvr_dump_loader_finish(&l);
    long n = ok ? l.applied : -1;
    snprintf(err, err_len, "%s", ok ? "" : l.err);
    if (ok)
        atomic_fetch_add(&srv->dump_records_loaded, (uint64_t)l.applied);
    kvr_dump_loader_free(&l);
    return n;
}

/* ---------------------------------------------------------------- fetch */

typedef struct {
    kvr_dump_loader *l;
    CURL *c;
} fetch_ctx;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user)
{
    fetch_ctx *f = user;
    size_t n = size * nmemb;
    const char *ctype = NULL;
    curl_easy_getinfo(f->c, CURLINFO_CONTENT_TYPE, &ctype);
    bool ndjson = ctype && strstr(ctype, "ndjson");
    return kvr_dump_loader_feed(f->l, ptr, n, ndjson) ? n : 0;
}

bool kvr_dump_fetch(kvr_dump_loader *l, const char *base_url, const char *path_and_args)
{
    char url[2048];
    size_t bl = strlen(base_url);
    while (bl > 0 && base_url[bl - 1] == '/')
        bl--;
    if (snprintf(url, sizeof url, "%.*s%s", (int)bl, base_url, path_and_args) >=
        (int)sizeof url) {
        kvr_dump_fail(l, "%s", "peer URL too long");
        return false;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        kvr_dump_fail(l, "%s", "cannot init libcurl");
        return false;
    }
    fetch_ctx f = {l, c};
    struct curl_slist *headers = kvr_server_peer_headers(l->srv, NULL);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &f);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    if (rc == CURLE_OK && code == 200)
        return true;
    char why[128];
    if (rc != CURLE_OK)
        snprintf(why, sizeof why, "%.120s", l->err[0] ? l->err : curl_easy_strerror(rc));
    else
        snprintf(why, sizeof why, "HTTP %ld", code);
    snprintf(l->err, sizeof l->err, "GET %.100s: %s", url, why);
    l->failed = true;
    return false;
}
