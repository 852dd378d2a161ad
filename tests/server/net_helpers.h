/* Test helpers for the service: an engine double (XPUB publisher + ROUTER
 * replay socket with a history ring, served by its own thread), real
 * msgpack batches, and HTTP through libcurl. Header-only so tests/server and
 * tests/cli can both include it. */
#ifndef KVR_TEST_NET_HELPERS_H
#define KVR_TEST_NET_HELPERS_H

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kvrouter/hash.h"
#include "kvrouter/server.h"
#include "kvrouter/wire_encode.h"
#include "source/frames.h"

/* ---------------------------------------------------------------- time */

static inline double th_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void th_sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }

/* ---------------------------------------------------------------- engine */

#define TH_HISTORY 4096

typedef struct {
    uint64_t seq;
    char *data;
    size_t len;
} th_hist;

typedef struct {
    void *ctx;
    void *pub;    /* XPUB: sees subscriptions, so tests wait for them */
    void *router; /* replay */
    char endpoint[128];
    char replay_endpoint[128];
    const char *topic;
    pthread_t thread;
    _Atomic int stop;
    pthread_mutex_t mu;
    th_hist hist[TH_HISTORY];
    size_t n_hist;
    uint64_t history_floor; /* entries below it are "gone" */
    bool mute;              /* replay requests get no answer */
    bool topic_frame;       /* replies carry a topic frame (newer engines) */
    int replay_requests;
    uint64_t last_replay_start;
} th_engine;

static void th_send_seq(void *s, uint64_t seq, int flags)
{
    unsigned char b[8];
    kvr_wire_encode_seq(seq, b);
    zmq_send(s, b, 8, flags);
}

static void *th_replay_main(void *arg)
{
    th_engine *e = arg;
    while (!e->stop) {
        zmq_pollitem_t it = {.socket = e->router, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 20) <= 0)
            continue;
        zmq_msg_t f[4];
        size_t n = 0;
        if (!kvr_zmq_recv_frames(e->router, 0, f, 4, &n))
            continue;
        if (n == 3 && zmq_msg_size(&f[2]) == 8) {
            uint64_t start = 0;
            kvr_frame_parse(3, zmq_msg_data(&f[2]), 8, &start); /* 8 bytes: cannot fail */
            pthread_mutex_lock(&e->mu);
            e->replay_requests++;
            e->last_replay_start = start;
            if (!e->mute) {
                for (size_t i = 0; i < e->n_hist; i++) {
                    th_hist *h = &e->hist[i];
                    if (h->seq < start || h->seq < e->history_floor)
                        continue;
                    zmq_send(e->router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
                    zmq_send(e->router, "", 0, ZMQ_SNDMORE);
                    if (e->topic_frame)
                        zmq_send(e->router, "kv", 2, ZMQ_SNDMORE);
                    th_send_seq(e->router, h->seq, ZMQ_SNDMORE);
                    zmq_send(e->router, h->data, h->len, 0);
                }
                zmq_send(e->router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
                zmq_send(e->router, "", 0, ZMQ_SNDMORE);
                th_send_seq(e->router, UINT64_MAX, ZMQ_SNDMORE);
                zmq_send(e->router, "", 0, 0);
            }
            pthread_mutex_unlock(&e->mu);
        }
        kvr_zmq_close_frames(f, 4, n);
    }
    return NULL;
}

static inline void th_engine_start(th_engine *e)
{
    memset(e, 0, sizeof *e);
    pthread_mutex_init(&e->mu, NULL);
    e->topic = "";
    e->ctx = zmq_ctx_new();
    e->pub = zmq_socket(e->ctx, ZMQ_XPUB);
    e->router = zmq_socket(e->ctx, ZMQ_ROUTER);
    int zero = 0, hwm = 1000000;
    zmq_setsockopt(e->pub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(e->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(e->router, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(e->pub, "tcp://127.0.0.1:*") != 0 ||
        zmq_bind(e->router, "tcp://127.0.0.1:*") != 0) {
        fprintf(stderr, "bind failed: %s\n", zmq_strerror(zmq_errno()));
        abort();
    }
    size_t sz = sizeof e->endpoint;
    zmq_getsockopt(e->pub, ZMQ_LAST_ENDPOINT, e->endpoint, &sz);
    sz = sizeof e->replay_endpoint;
    zmq_getsockopt(e->router, ZMQ_LAST_ENDPOINT, e->replay_endpoint, &sz);
    pthread_create(&e->thread, NULL, th_replay_main, e);
}

static inline void th_engine_stop(th_engine *e)
{
    e->stop = 1;
    pthread_join(e->thread, NULL);
    zmq_close(e->pub);
    zmq_close(e->router);
    zmq_ctx_term(e->ctx);
    for (size_t i = 0; i < e->n_hist; i++)
        free(e->hist[i].data);
    pthread_mutex_destroy(&e->mu);
}

/* The engine's replay behaviour and what its replay thread saw, under its
 * mutex (the replay thread reads and writes them under it). */
static inline void th_engine_set_mute(th_engine *e, bool mute)
{
    pthread_mutex_lock(&e->mu);
    e->mute = mute;
    pthread_mutex_unlock(&e->mu);
}

static inline void th_engine_set_history_floor(th_engine *e, uint64_t floor)
{
    pthread_mutex_lock(&e->mu);
    e->history_floor = floor;
    pthread_mutex_unlock(&e->mu);
}

static inline uint64_t th_engine_last_replay_start(th_engine *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t v = e->last_replay_start;
    pthread_mutex_unlock(&e->mu);
    return v;
}

/* Waits for a subscriber to join (XPUB delivers the subscription). */
static inline bool th_engine_wait_sub(th_engine *e, int timeout_ms)
{
    zmq_pollitem_t it = {.socket = e->pub, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return false;
    char buf[256];
    int n = zmq_recv(e->pub, buf, sizeof buf, 0);
    return n >= 1 && buf[0] == 1;
}

/* Publishes on the live socket only. */
static inline void th_engine_publish(th_engine *e, uint64_t seq, const void *payload, size_t len)
{
    zmq_send(e->pub, e->topic, strlen(e->topic), ZMQ_SNDMORE);
    th_send_seq(e->pub, seq, ZMQ_SNDMORE);
    zmq_send(e->pub, payload, len, 0);
}

/* Records in the history ring (for replay) and, when live, publishes. */
static inline void th_engine_send(th_engine *e, uint64_t seq, const void *payload, size_t len,
                                  bool live)
{
    pthread_mutex_lock(&e->mu);
    if (e->n_hist < TH_HISTORY) {
        th_hist *h = &e->hist[e->n_hist++];
        h->seq = seq;
        h->data = malloc(len ? len : 1);
        memcpy(h->data, payload, len);
        h->len = len;
    }
    pthread_mutex_unlock(&e->mu);
    if (live)
        th_engine_publish(e, seq, payload, len);
}

/* A new engine process: history gone. */
static inline void th_engine_forget(th_engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_hist; i++)
        free(e->hist[i].data);
    e->n_hist = 0;
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- events */

/* A store of n_blocks blocks of size bs with tokens[] (u64) and engine
 * hashes base+1.. , under parent (0 = none). */
static inline kvr_raw_event th_store(const uint64_t *hashes, uint32_t n_blocks, uint64_t parent,
                                     const uint64_t *tokens, uint32_t bs)
{
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_STORED;
    ev.tier = KVR_TIER_GPU;
    ev.has_parent = parent != 0;
    ev.parent = parent;
    ev.block_hashes = hashes;
    ev.n_block_hashes = n_blocks;
    ev.token_ids = tokens;
    ev.n_token_ids = n_blocks * bs;
    ev.block_size = bs;
    return ev;
}

static inline kvr_raw_event th_remove(const uint64_t *hashes, uint32_t n)
{
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_REMOVED;
    ev.tier = KVR_TIER_GPU;
    ev.block_hashes = hashes;
    ev.n_block_hashes = n;
    return ev;
}

static inline kvr_raw_event th_clear(void)
{
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_CLEARED;
    return ev;
}

/* Encodes events as one SGLang batch and sends it. */
static inline void th_send_events(th_engine *e, uint64_t seq, const kvr_raw_event *evs, size_t n,
                                  bool live)
{
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    kvr_wire_encode_batch(&w, KVR_WIRE_SGLANG, 1.0, evs, n, false, 0);
    th_engine_send(e, seq, w.data, w.len, live);
    kvr_wbuf_free(&w);
}

/* Router local hashes of whole blocks of u32-fitting tokens, no lora/salt. */
static inline size_t th_local_hashes(const uint64_t *tokens, size_t n, uint32_t bs, uint64_t *out,
                                     size_t cap)
{
    uint32_t *t = malloc((n ? n : 1) * sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = tokens[i] > UINT32_MAX ? KVR_WIDE_SENTINEL : (uint32_t)tokens[i];
    size_t k = kvr_hash_blocks(t, n, bs, false, KVR_HASH_SEED, out, cap);
    free(t);
    return k;
}

/* ---------------------------------------------------------------- HTTP */

typedef struct {
    char *data;
    size_t len;
} th_buf;

static size_t th_on_data(char *p, size_t s, size_t n, void *u)
{
    th_buf *b = u;
    b->data = realloc(b->data, b->len + s * n + 1);
    memcpy(b->data + b->len, p, s * n);
    b->len += s * n;
    b->data[b->len] = 0;
    return s * n;
}

/* Returns the HTTP status (0 on transport error); *out gets the body.
 * header: one more request header ("Name: value"), or NULL. */
static inline long th_http_with(const char *method, const char *url, const char *header,
                                const char *body, size_t body_len, char **out)
{
    CURL *c = curl_easy_init();
    th_buf b = {0};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (header)
        h = curl_slist_append(h, header);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, th_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out)
        *out = b.data ? b.data : strdup("");
    else
        free(b.data);
    return code;
}

static inline long th_http(const char *method, const char *url, const char *body, size_t body_len,
                           char **out)
{
    return th_http_with(method, url, NULL, body, body_len, out);
}

/* JSON text with every integer above INT64_MAX (kvrouter writes u64 ids as
 * bare numbers, as Dynamo does; jansson refuses them) turned into its
 * decimal string, which the tests' id readers take. malloc'd. */
static inline char *th_quote_big_ints(const char *t)
{
    size_t n = strlen(t), o = 0;
    char *out = malloc(n * 2 + 1);
    bool in_str = false;
    for (size_t i = 0; out && i < n;) {
        char c = t[i];
        if (in_str) {
            out[o++] = c;
            if (c == '\\' && i + 1 < n)
                out[o++] = t[++i];
            else if (c == '"')
                in_str = false;
            i++;
            continue;
        }
        if (c == '"')
            in_str = true;
        if (c >= '0' && c <= '9' && (i == 0 || !strchr("-.0123456789eE+", t[i - 1]))) {
            size_t j = i;
            while (j < n && t[j] >= '0' && t[j] <= '9')
                j++;
            bool big = j - i > 19 || (j - i == 19 && strncmp(t + i, "9223372036854775807", 19) > 0);
            bool plain = j == n || !strchr(".eE", t[j]);
            if (big && plain)
                out[o++] = '"';
            memcpy(out + o, t + i, j - i);
            o += j - i;
            if (big && plain)
                out[o++] = '"';
            i = j;
            continue;
        }
        out[o++] = c;
        i++;
    }
    if (out)
        out[o] = 0;
    return out;
}

/* POST/GET with JSON reply parsed (NULL if not JSON); u64 numbers above
 * INT64_MAX come back as decimal strings (th_quote_big_ints). */
static inline json_t *th_json(const char *method, const char *base, const char *path,
                              const char *body, long *status)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", base, path);
    char *out = NULL;
    long st = th_http(method, url, body, body ? strlen(body) : 0, &out);
    if (status)
        *status = st;
    char *q = th_quote_big_ints(out);
    json_t *j = q ? json_loads(q, 0, NULL) : NULL;
    free(q);
    free(out);
    return j;
}

/* /query_by_hash score of (worker, rank) in tokens; -1 when absent. */
static inline long th_score(const char *base, const char *model, const uint64_t *h, size_t n,
                            uint64_t worker, uint32_t rank)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        char d[24];
        snprintf(d, sizeof d, "%llu", (unsigned long long)h[i]);
        json_array_append_new(arr, json_string(d));
    }
    json_t *req = json_pack("{s:o,s:s}", "block_hashes", arr, "model_name", model);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    long st;
    json_t *r = th_json("POST", base, "/query_by_hash", body, &st);
    free(body);
    long v = -1;
    char w[24], rk[12];
    snprintf(w, sizeof w, "%llu", (unsigned long long)worker);
    snprintf(rk, sizeof rk, "%u", rank);
    json_t *x = json_object_get(json_object_get(json_object_get(r, "scores"), w), rk);
    if (json_is_integer(x))
        v = (long)json_integer_value(x);
    json_decref(r);
    return v;
}

/* Polls until th_score == want or the timeout; returns the last value. */
static inline long th_wait_score(const char *base, const char *model, const uint64_t *h, size_t n,
                                 uint64_t worker, uint32_t rank, long want, int timeout_ms)
{
    double end = th_now() + timeout_ms / 1000.0;
    long v;
    for (;;) {
        v = th_score(base, model, h, n, worker, rank);
        if (v == want || th_now() > end)
            return v;
        th_sleep_ms(5);
    }
}

/* A counter from GET /workers: worker's "counters" object key, or the
 * rank's source/normalizer key when rank >= 0. -1 when absent. */
static inline long long th_counter(const char *base, uint64_t worker, const char *model,
                                   const char *key)
{
    json_t *r = th_json("GET", base, "/workers", NULL, NULL);
    long long v = -1;
    size_t i;
    json_t *w;
    json_array_foreach(r, i, w)
    {
        json_t *id = json_object_get(w, "instance_id");
        if (!json_is_integer(id) || (uint64_t)json_integer_value(id) != worker ||
            strcmp(json_string_value(json_object_get(w, "model_name")), model) != 0)
            continue;
        json_t *c = json_object_get(w, "counters");
        json_t *x = json_object_get(c, key);
        if (!x)
            x = json_object_get(json_object_get(c, "drops"), key);
        if (json_is_integer(x))
            v = json_integer_value(x);
    }
    json_decref(r);
    return v;
}

static inline long long th_wait_counter(const char *base, uint64_t worker, const char *model,
                                        const char *key, long long want, int timeout_ms)
{
    double end = th_now() + timeout_ms / 1000.0;
    long long v;
    for (;;) {
        v = th_counter(base, worker, model, key);
        if (v == want || th_now() > end)
            return v;
        th_sleep_ms(5);
    }
}

/* The value of the exposition line `key value` in a /metrics text (key with
 * its labels, as written); -1 when absent. */
static inline double th_metric_in(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && (p = strstr(p, key)); p += kl)
        if ((p == text || p[-1] == '\n') && p[kl] == ' ')
            return strtod(p + kl + 1, NULL);
    return -1;
}

/* GET base/metrics, then th_metric_in; -1 when the scrape fails too. */
static inline double th_metric(const char *base, const char *key)
{
    char url[256], *text = NULL;
    snprintf(url, sizeof url, "%s/metrics", base);
    double v = th_http("GET", url, NULL, 0, &text) == 200 ? th_metric_in(text, key) : -1;
    free(text);
    return v;
}

/* kvr_server_start(cfg); base gets "http://127.0.0.1:<port>". NULL (the
 * reason on stderr) when it does not start. */
static inline kvr_server *th_server_start(const kvr_server_config *cfg, char *base, size_t cap)
{
    char err[256];
    kvr_server *srv = kvr_server_start(cfg, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "server: %s\n", err);
        return NULL;
    }
    snprintf(base, cap, "http://127.0.0.1:%d", kvr_server_port(srv));
    return srv;
}

/* th_server_start with the default configuration on a free port. */
static inline kvr_server *th_server_start_default(char *base, size_t cap)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    return th_server_start(&cfg, base, cap);
}

/* Whether GET /workers lists instance id. */
static inline bool th_has_worker(const char *base, uint64_t id)
{
    json_t *r = th_json("GET", base, "/workers", NULL, NULL);
    bool found = false;
    size_t i;
    json_t *w;
    json_array_foreach(r, i, w)
    {
        json_t *x = json_object_get(w, "instance_id");
        found = found || (json_is_integer(x) && (uint64_t)json_integer_value(x) == id);
    }
    json_decref(r);
    return found;
}

static inline long th_register(const char *base, const char *json_body, json_t **reply)
{
    long st;
    json_t *r = th_json("POST", base, "/register", json_body, &st);
    if (reply)
        *reply = r;
    else
        json_decref(r);
    return st;
}

/* POST /register of instance id, model "m", at endpoint with block_size:
 * the HTTP status. */
static inline long th_register_engine(const char *base, uint64_t id, const char *endpoint,
                                      int block_size)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\": %llu, \"endpoint\": \"%s\", \"model_name\": \"m\", "
             "\"block_size\": %d}",
             (unsigned long long)id, endpoint, block_size);
    return th_register(base, body, NULL);
}

/* Registers instance id (model "m", block size 4) at e's endpoint over HTTP,
 * waits for its subscription, stores one block of tokens 1..4 (engine hash
 * 11) and waits until /query scores it. *local gets the block's local hash.
 * Returns the score (4 once indexed), or -1 when the registration failed. */
static inline long th_index_one_block(const char *base, th_engine *e, uint64_t id,
                                      uint64_t *local)
{
    if (th_register_engine(base, id, e->endpoint, 4) != 201 || !th_engine_wait_sub(e, 10000))
        return -1;
    uint64_t tokens[4] = {1, 2, 3, 4}, h = 11;
    th_local_hashes(tokens, 4, 4, local, 1);
    kvr_raw_event ev = th_store(&h, 1, 0, tokens, 4);
    th_send_events(e, 0, &ev, 1, true);
    return th_wait_score(base, "m", local, 1, id, 0, 4, 10000);
}

#endif
