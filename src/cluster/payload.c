/* Every payload that crosses NATS, both ways: booking batches (msgpack),
 * membership records (JSON) and registration values (the /register JSON,
 * read by the server's codec). Reading is the one place that trusts
 * nothing that came from the broker: any process that can publish on the
 * subject or write the bucket can put anything there. Each bound below is
 * checked before the value is used; a bad event is skipped alone, a bad
 * batch or value as a whole. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <msgpuck.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "kvrouter/wire.h"
#include "util/grow.h"
#include "util/hex.h"

/* The largest count a published booking carries on top of its chain: the
 * request's tail and expected output (osl < 2^32) in blocks, plus what a
 * sender cut from a chain of at most 2^20 tokens. */
#define CL_MAX_UNIQUE_BLOCKS ((1ull << 32) + (1ull << 20))

void cl_buf_free(cl_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static char *buf_room(cl_buf *b, size_t n)
{
    if (b->len + n < b->len || kvr_grow((void **)&b->data, &b->cap, b->len + n, 1, 256) < 0)
        return NULL;
    return b->data + b->len;
}

int cl_buf_append(cl_buf *b, const void *p, size_t n)
{
    char *dst = buf_room(b, n);
    if (!dst)
        return -1;
    memcpy(dst, p, n);
    b->len += n;
    return 0;
}

/* ---- booking batches ----------------------------------------------------- */

static size_t event_size(const kvr_booking_event *ev, uint64_t owner, uint32_t n_chain)
{
    size_t n = mp_sizeof_array(10) + mp_sizeof_uint(ev->op) + mp_sizeof_uint(owner) +
               mp_sizeof_str((uint32_t)strlen(ev->request_id));
    if (ev->op != KVR_BOOKING_BOOKED)
        return n;
    const char *group = ev->routing_group ? ev->routing_group : KVR_DEFAULT_ROUTING_GROUP;
    return n + mp_sizeof_str((uint32_t)strlen(ev->model_name)) +
           mp_sizeof_str((uint32_t)strlen(group)) + mp_sizeof_uint(ev->worker_id) +
           mp_sizeof_uint(ev->dp_rank) + mp_sizeof_uint(ev->prefill_tokens) +
           mp_sizeof_uint(ev->unique_blocks + (ev->n_chain - n_chain)) +
           mp_sizeof_bin(n_chain * 8u);
}

int cl_batch_append(cl_buf *b, const kvr_booking_event *ev, uint64_t owner, uint32_t max_chain)
{
    uint32_t n_chain = ev->n_chain < max_chain ? ev->n_chain : max_chain;
    char *p = buf_room(b, event_size(ev, owner, n_chain));
    if (!p)
        return -1;
    char *start = p;
    bool booked = ev->op == KVR_BOOKING_BOOKED;
    p = mp_encode_array(p, booked ? 10 : 3);
    p = mp_encode_uint(p, ev->op);
    p = mp_encode_uint(p, owner);
    p = mp_encode_str(p, ev->request_id, (uint32_t)strlen(ev->request_id));
    if (booked) {
        const char *group = ev->routing_group ? ev->routing_group : KVR_DEFAULT_ROUTING_GROUP;
        p = mp_encode_str(p, ev->model_name, (uint32_t)strlen(ev->model_name));
        p = mp_encode_str(p, group, (uint32_t)strlen(group));
        p = mp_encode_uint(p, ev->worker_id);
        p = mp_encode_uint(p, ev->dp_rank);
        p = mp_encode_uint(p, ev->prefill_tokens);
        p = mp_encode_uint(p, ev->unique_blocks + (ev->n_chain - n_chain));
        p = mp_encode_binl(p, n_chain * 8u);
        for (uint32_t i = 0; i < n_chain; i++)
            p = mp_store_u64(p, ev->chain[i]);
    }
    b->len += (size_t)(p - start);
    return 0;
}

int cl_batch_header(cl_buf *out, uint64_t publisher, uint64_t incarnation, uint32_t n)
{
    size_t need = mp_sizeof_array(4) + mp_sizeof_uint(CL_BATCH_VERSION) +
                  mp_sizeof_uint(publisher) + mp_sizeof_uint(incarnation) + mp_sizeof_array(n);
    char *p = buf_room(out, need);
    if (!p)
        return -1;
    char *start = p;
    p = mp_encode_array(p, 4);
    p = mp_encode_uint(p, CL_BATCH_VERSION);
    p = mp_encode_uint(p, publisher);
    p = mp_encode_uint(p, incarnation);
    p = mp_encode_array(p, n);
    out->len += (size_t)(p - start);
    return 0;
}

/* After kvr_msgpack_validate every read below stays inside the payload; what
 * is left to check is types and bounds. */
static bool read_uint(const char **p, const char *end, uint64_t max, uint64_t *out)
{
    if (*p >= end || mp_typeof(**p) != MP_UINT)
        return false;
    *out = mp_decode_uint(p);
    return *out <= max;
}

static bool read_str(const char **p, const char *end, uint32_t min, uint32_t max, char *out)
{
    if (*p >= end || mp_typeof(**p) != MP_STR)
        return false;
    uint32_t n;
    const char *s = mp_decode_str(p, &n);
    if (n < min || n > max || memchr(s, 0, n))
        return false;
    memcpy(out, s, n);
    out[n] = 0;
    return true;
}

int cl_batch_open(const char *data, size_t len, cl_batch *b, char *err, size_t err_len)
{
    memset(b, 0, sizeof *b);
    if (len == 0 || len > CL_MAX_BATCH_BYTES) {
        snprintf(err, err_len, "batch of %zu bytes (1..%u)", len, CL_MAX_BATCH_BYTES);
        return -1;
    }
    kvr_batch_error e = kvr_msgpack_validate(data, len);
    if (e != KVR_BATCH_OK) {
        snprintf(err, err_len, "batch is not valid msgpack (%s)", kvr_batch_error_name(e));
        return -1;
    }
    const char *p = data, *end = data + len;
    uint64_t version, n;
    if (mp_typeof(*p) != MP_ARRAY || mp_decode_array(&p) != 4 ||
        !read_uint(&p, end, UINT64_MAX, &version) || version != CL_BATCH_VERSION ||
        !read_uint(&p, end, UINT64_MAX, &b->publisher) || b->publisher == 0 ||
        !read_uint(&p, end, UINT64_MAX, &b->incarnation) || p >= end ||
        mp_typeof(*p) != MP_ARRAY) {
        snprintf(err, err_len, "batch header is not [%d, publisher, incarnation, events]",
                 CL_BATCH_VERSION);
        return -1;
    }
    n = mp_decode_array(&p);
    if (n > CL_MAX_BATCH_EVENTS) {
        snprintf(err, err_len, "batch of %" PRIu64 " events (at most %u)", n,
                 CL_MAX_BATCH_EVENTS);
        return -1;
    }
    b->n_events = (uint32_t)n;
    b->events = p;
    b->end = end;
    return 0;
}

void cl_event_free(cl_event *e)
{
    free(e->chain);
    e->chain = NULL;
    e->chain_cap = 0;
}

static int read_chain(const char **p, const char *end, cl_event *e)
{
    if (*p >= end || mp_typeof(**p) != MP_BIN)
        return -1;
    uint32_t n;
    const char *bytes = mp_decode_bin(p, &n);
    if (n % 8 != 0 || n / 8 > CL_MAX_CHAIN)
        return -1;
    if (KVR_GROW(e->chain, e->chain_cap, n / 8 ? n / 8 : 1) < 0)
        return -2;
    for (uint32_t i = 0; i < n / 8; i++)
        e->chain[i] = mp_load_u64(&bytes);
    e->ev.chain = e->chain;
    e->ev.n_chain = n / 8;
    return 0;
}

/* The fields of one event array of k elements starting at p. */
static int read_event(const char *p, const char *end, uint32_t k, uint64_t publisher,
                      cl_event *e, const char **what)
{
    kvr_booking_event *ev = &e->ev;
    memset(ev, 0, sizeof *ev);
    uint64_t op, v;
    *what = "op";
    if (!read_uint(&p, end, KVR_BOOKING_RELEASED, &op))
        return -1;
    ev->op = (kvr_booking_op)op;
    *what = "arity";
    if (k != (op == KVR_BOOKING_BOOKED ? 10u : 3u))
        return -1;
    *what = "owner";
    if (!read_uint(&p, end, UINT64_MAX, &ev->owner) || ev->owner == 0 ||
        (op == KVR_BOOKING_BOOKED && ev->owner != publisher))
        return -1;
    *what = "request_id";
    if (!read_str(&p, end, 1, KVR_ROUTE_MAX_ID_LEN, e->id))
        return -1;
    ev->request_id = e->id;
    if (op != KVR_BOOKING_BOOKED)
        return 0;
    *what = "model_name";
    if (!read_str(&p, end, 1, KVR_NAME_MAX - 1, e->model))
        return -1;
    *what = "routing_group";
    if (!read_str(&p, end, 0, KVR_NAME_MAX - 1, e->group))
        return -1;
    ev->model_name = e->model;
    ev->routing_group = e->group[0] ? e->group : KVR_DEFAULT_ROUTING_GROUP;
    *what = "worker_id";
    if (!read_uint(&p, end, UINT64_MAX, &ev->worker_id))
        return -1;
    *what = "dp_rank";
    if (!read_uint(&p, end, KVR_MAX_DP_RANKS - 1, &v))
        return -1;
    ev->dp_rank = (uint32_t)v;
    *what = "prefill_tokens";
    if (!read_uint(&p, end, KVR_ROUTE_MAX_TOKENS, &ev->prefill_tokens))
        return -1;
    *what = "unique_blocks";
    if (!read_uint(&p, end, CL_MAX_UNIQUE_BLOCKS, &ev->unique_blocks))
        return -1;
    *what = "chain";
    return read_chain(&p, end, e);
}

int cl_batch_next(cl_batch *b, cl_event *e, char *err, size_t err_len)
{
    if (b->n_events == 0)
        return 0;
    b->n_events--;
    const char *p = b->events;
    mp_next(&b->events); /* the next event starts there, whatever this one holds */
    if (mp_typeof(*p) != MP_ARRAY) {
        snprintf(err, err_len, "event is not an array");
        return -1;
    }
    uint32_t k = mp_decode_array(&p);
    const char *what = "";
    int rc = read_event(p, b->events, k, b->publisher, e, &what);
    if (rc == -1)
        snprintf(err, err_len, "event field '%s' is missing, of the wrong type or out of bounds",
                 what);
    return rc == 0 ? 1 : rc;
}

/* ---- membership records --------------------------------------------------- */

static bool url_ok(const char *u)
{
    size_t n = strlen(u);
    return n > 0 && n < CL_MAX_URL &&
           (strncmp(u, "http://", 7) == 0 || strncmp(u, "https://", 8) == 0);
}

char *cl_member_encode(const cl_member *m)
{
    char inc[17];
    snprintf(inc, sizeof inc, "%016" PRIx64, m->incarnation);
    json_t *o = json_pack("{s:s,s:f,s:b,s:s}", "url", m->url, "started_at", m->started_at,
                          "ready", m->ready, "incarnation", inc);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return text;
}

int cl_member_decode(const char *text, size_t len, cl_member *m, char *err, size_t err_len)
{
    memset(m, 0, sizeof *m);
    if (len == 0 || len > CL_MAX_VALUE_BYTES) {
        snprintf(err, err_len, "membership record of %zu bytes (1..%u)", len, CL_MAX_VALUE_BYTES);
        return -1;
    }
    json_error_t jerr;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    const char *url = json_string_value(json_object_get(o, "url"));
    json_t *started = json_object_get(o, "started_at");
    json_t *ready = json_object_get(o, "ready");
    const char *inc = json_string_value(json_object_get(o, "incarnation"));
    int rc = -1;
    if (!json_is_object(o))
        snprintf(err, err_len, "membership record is not a JSON object");
    else if (!url || !url_ok(url))
        snprintf(err, err_len, "membership field 'url' must be an http(s) URL under %u bytes",
                 CL_MAX_URL);
    else if (!json_is_number(started) || !isfinite(json_number_value(started)) ||
             json_number_value(started) < 0)
        snprintf(err, err_len, "membership field 'started_at' must be a number >= 0");
    else if (!json_is_boolean(ready))
        snprintf(err, err_len, "membership field 'ready' must be a boolean");
    else if (!inc || strlen(inc) != 16 || strspn(inc, "0123456789abcdef") != 16)
        snprintf(err, err_len, "membership field 'incarnation' must be 16 hex digits");
    else {
        snprintf(m->url, sizeof m->url, "%s", url);
        m->started_at = json_number_value(started);
        m->ready = json_is_true(ready);
        m->incarnation = strtoull(inc, NULL, 16);
        rc = 0;
    }
    json_decref(o);
    return rc;
}

/* ---- registration values -------------------------------------------------- */

static char *hex_name(char *p, const char *s)
{
    static const char digits[] = "0123456789abcdef";
    for (; *s; s++) {
        *p++ = digits[(unsigned char)*s >> 4];
        *p++ = digits[(unsigned char)*s & 15];
    }
    return p;
}

size_t kvr_cluster_key(const char *model, const char *group, uint64_t worker_id,
                       uint32_t dp_rank, char *buf, size_t cap)
{
    if (!model || !model[0])
        return 0;
    if (!group || !group[0])
        group = KVR_DEFAULT_ROUTING_GROUP;
    size_t need = 2 * strlen(model) + 2 * strlen(group) + 1 + 16 + 1 + 8 + 2 + 1;
    if (need > cap)
        return 0;
    char *p = hex_name(buf, model);
    *p++ = '.';
    p = hex_name(p, group);
    p += sprintf(p, ".%016" PRIx64 ".%" PRIx32, worker_id, dp_rank);
    return (size_t)(p - buf);
}

int cl_reg_value_decode(const kvr_cluster_codec *codec, const char *key, const char *val,
                        size_t len, kvr_registration *reg, void **holder, char *err,
                        size_t err_len)
{
    *holder = NULL;
    if (len == 0 || len > CL_MAX_VALUE_BYTES) {
        snprintf(err, err_len, "registration value of %zu bytes (1..%u)", len,
                 CL_MAX_VALUE_BYTES);
        return -1;
    }
    if (!codec->decode(codec->user, val, len, reg, holder, err, err_len))
        return -1;
    char mine[CL_MAX_KEY];
    const kvr_worker_settings *s = &reg->settings;
    if (kvr_cluster_key(s->model_name, s->routing_group, s->worker_id, reg->dp_rank, mine,
                        sizeof mine) == 0 ||
        strcmp(mine, key) != 0) {
        snprintf(err, err_len, "registration value does not belong to its key '%.64s'", key);
        codec->release(codec->user, *holder);
        *holder = NULL;
        return -1;
    }
    reg->origin = KVR_ORIGIN_CLUSTER;
    return 0;
}

/* hex of a name, up to '.' or the end; false on odd length, a bad digit,
 * a NUL byte or more than max - 1 bytes. */
static bool unhex_name(const char **p, char *out, size_t max)
{
    size_t n = 0;
    const char *s = *p;
    while (*s && *s != '.') {
        int hi = kvr_hex_digit(s[0]), lo = s[1] ? kvr_hex_digit(s[1]) : -1;
        if (hi < 0 || lo < 0 || n + 1 >= max || (hi | lo) == 0)
            return false;
        out[n++] = (char)(hi << 4 | lo);
        s += 2;
    }
    out[n] = 0;
    *p = s;
    return n > 0;
}

bool cl_key_parse(const char *key, char *model, char *group, uint64_t *worker_id,
                  uint32_t *dp_rank)
{
    if (strlen(key) >= CL_MAX_KEY)
        return false;
    const char *p = key;
    if (!unhex_name(&p, model, KVR_NAME_MAX) || *p++ != '.' ||
        !unhex_name(&p, group, KVR_NAME_MAX) || *p++ != '.')
        return false;
    uint64_t w = 0;
    for (int i = 0; i < 16; i++, p++) {
        int d = kvr_hex_digit(*p);
        if (d < 0)
            return false;
        w = w << 4 | (uint64_t)d;
    }
    if (*p++ != '.' || !*p || strlen(p) > 8)
        return false;
    uint64_t r = 0;
    for (; *p; p++) {
        int d = kvr_hex_digit(*p);
        if (d < 0)
            return false;
        r = r << 4 | (uint64_t)d;
    }
    if (r >= KVR_MAX_DP_RANKS)
        return false;
    *worker_id = w;
    *dp_rank = (uint32_t)r;
    return true;
}
