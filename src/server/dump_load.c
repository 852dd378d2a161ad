/* Peer recovery: fetch a peer's GET /dump (libcurl) and load its
 * parent-linked store records into our indexes before live events apply. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/log.h"
#include "server/json_util.h"
#include "server/server_internal.h"
#include "util/grow.h"

#define KVR_DUMP_MAX_BYTES (4ull << 30)

typedef struct {
    const char *text;
    size_t len;
    long applied;
    long skipped;
    char err[256];
    bool failed;
} load_op;

/* One record -> one kvr_indexer_load_store. Returns false on a bad record. */
static bool load_record(kvr_indexer *ix, json_t *r, load_op *op)
{
    const char *model = json_string_value(json_object_get(r, "model"));
    const char *group = json_string_value(json_object_get(r, "group"));
    const char *tier = json_string_value(json_object_get(r, "tier"));
    json_t *blocks = json_object_get(r, "blocks");
    json_t *parent = json_object_get(r, "parent");
    json_t *rank = json_object_get(r, "rank");
    kvr_dump_store ev;
    memset(&ev, 0, sizeof ev);
    if (!model || !group || !tier || !json_is_array(blocks) || !json_is_integer(rank) ||
        json_integer_value(rank) < 0 || json_integer_value(rank) > UINT32_MAX ||
        !kvr_json_u64(json_object_get(r, "worker"), false, &ev.worker_id))
        return false;
    int t = kvr_tier_from_name(tier);
    if (t < 0)
        return false;
    ev.tier = (kvr_tier)t;
    ev.dp_rank = (uint32_t)json_integer_value(rank);
    ev.has_parent = parent && !json_is_null(parent);
    if (ev.has_parent && !kvr_json_u64(parent, true, &ev.parent))
        return false;
    size_t n = json_array_size(blocks);
    if (n == 0 || n > KVR_WIRE_MAX_HASHES)
        return false;
    uint64_t *h = malloc(2 * n * sizeof *h);
    if (!h)
        return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        json_t *pair = json_array_get(blocks, i);
        ok = json_is_array(pair) && json_array_size(pair) == 2 &&
             kvr_json_u64(json_array_get(pair, 0), true, &h[i]) &&
             kvr_json_u64(json_array_get(pair, 1), true, &h[n + i]);
    }
    if (ok) {
        ev.engine_hashes = h;
        ev.local_hashes = h + n;
        ev.n = n;
        if (kvr_indexer_load_store(ix, model, group, &ev) == KVR_DROP_NONE)
            op->applied++;
        else
            op->skipped++;
    }
    free(h);
    (void)op;
    return ok;
}

static void do_load(kvr_source *src, void *arg)
{
    load_op *op = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    const char *p = op->text, *end = op->text + op->len;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    if (p < end && *p == '[') {
        json_error_t jerr;
        json_t *arr = json_loadb(p, (size_t)(end - p), 0, &jerr);
        if (!json_is_array(arr)) {
            snprintf(op->err, sizeof op->err, "dump is not a JSON array: %s", jerr.text);
            op->failed = true;
            json_decref(arr);
            return;
        }
        size_t i;
        json_t *r;
        json_array_foreach(arr, i, r) if (!load_record(ix, r, op)) op->skipped++;
        json_decref(arr);
        return;
    }
    /* JSON lines; records are in parent-before-child order, keep it. */
    size_t line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        if (le > p) {
            json_error_t jerr;
            json_t *r = json_loadb(p, (size_t)(le - p), 0, &jerr);
            if (!json_is_object(r) || !load_record(ix, r, op)) {
                op->skipped++;
                if (!r && !op->err[0])
                    snprintf(op->err, sizeof op->err, "line %zu: %s", line, jerr.text);
            }
            json_decref(r);
        }
        p = nl ? nl + 1 : end;
    }
}

long kvr_server_load_dump(kvr_server *srv, const char *text, size_t len, char *err,
                          size_t err_len)
{
    load_op op;
    memset(&op, 0, sizeof op);
    op.text = text;
    op.len = len;
    if (kvr_source_run(srv->src, do_load, &op) != 0) {
        snprintf(err, err_len, "ingest thread is not running");
        return -1;
    }
    if (op.failed) {
        snprintf(err, err_len, "%s", op.err);
        return -1;
    }
    if (op.skipped)
        kvr_log(KVR_LOG_WARN, "dump: %ld records skipped%s%s", op.skipped,
                op.err[0] ? ", first error: " : "", op.err);
    atomic_fetch_add(&srv->dump_records_loaded, (uint64_t)op.applied);
    if (err_len)
        err[0] = 0;
    return op.applied;
}

typedef struct {
    char *data;
    size_t len, cap;
    bool too_big;
} fetch_buf;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user)
{
    fetch_buf *b = user;
    size_t n = size * nmemb;
    if (b->len + n + 1 > KVR_DUMP_MAX_BYTES) {
        b->too_big = true;
        return 0;
    }
    if (kvr_grow((void **)&b->data, &b->cap, b->len + n + 1, 1, 65536) != 0)
        return 0;
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = 0;
    return n;
}

long kvr_server_fetch_peer(kvr_server *srv, const char *base_url, char *err, size_t err_len)
{
    char url[2048];
    size_t bl = strlen(base_url);
    while (bl > 0 && base_url[bl - 1] == '/')
        bl--;
    if (snprintf(url, sizeof url, "%.*s/dump", (int)bl, base_url) >= (int)sizeof url) {
        snprintf(err, err_len, "peer URL too long");
        return -1;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(err, err_len, "cannot init libcurl");
        return -1;
    }
    fetch_buf b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    long n = -1;
    if (rc != CURLE_OK)
        snprintf(err, err_len, "GET %s: %s", url,
                 b.too_big ? "dump too large" : curl_easy_strerror(rc));
    else if (code != 200)
        snprintf(err, err_len, "GET %s: HTTP %ld", url, code);
    else
        n = kvr_server_load_dump(srv, b.data ? b.data : "", b.len, err, err_len);
    free(b.data);
    return n;
}
