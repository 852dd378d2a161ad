/* The only file that knows cnats (libnats, Debian's libnats-dev): the
 * connection and its events, the two KV buckets, the bookings stream, its
 * replay consumer, the live bookings subscription and the bookings'
 * publishes. Everything above speaks in keys, values and batches.
 *
 * cnats choices: reconnect forever (250 ms apart) and retry a first
 * connection that fails, so a replica started before nats-server simply
 * catches up; send each publish at once (cnats otherwise holds writes ~1 ms
 * to coalesce them, which the outbox already does: a booking reached the
 * other replicas in 2.0 ms at p50 with it, see README); ping every 5 s so a server that vanished without a FIN is
 * noticed in ~10 s; JetStream API calls wait at most 2 s, so a dead server
 * cannot hold the control thread longer than that; the bookings
 * subscriptions have no pending limit (a replay of the whole stream arrives
 * at once; the stream's MaxBytes bounds it); no echo (feed.c). */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "kvrouter/log.h"

#define JS_WAIT_MS 2000
#define JS_ERR_STREAM_NAME_IN_USE 10058

struct cl_nats {
    natsOptions *opts;
    natsConnection *nc;
    jsCtx *js;
    cl_nats_events ev;
    pthread_mutex_t mu; /* kv[], sub, closed */
    pthread_cond_t cv;
    kvStore *kv[CL_BUCKET_COUNT];
    char stream[KVR_CLUSTER_NAME_MAX + 16];
    char subject[KVR_CLUSTER_NAME_MAX + 16];
    natsSubscription *sub;  /* the replay's consumer */
    bool sub_done; /* the subscription's last callback has returned */
    natsSubscription *live; /* the bookings subject, no echo */
    bool live_done;
    bool closed;
};

struct cl_watch {
    kvWatcher *w;
    kvEntry *cur;
};

static void end_live(cl_nats *n);

static void set_err(char *err, size_t err_len, const char *what, natsStatus s)
{
    const char *last = nats_GetLastError(NULL);
    snprintf(err, err_len, "%s: %s%s%s", what, natsStatus_GetText(s), last ? " - " : "",
             last ? last : "");
}

static void on_connected(natsConnection *nc, void *closure)
{
    (void)nc;
    cl_nats *n = closure;
    n->ev.on_conn(n->ev.user, KVR_CLUSTER_CONNECTED);
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    cl_nats *n = closure;
    n->ev.on_conn(n->ev.user, KVR_CLUSTER_RECONNECTING);
}

static void mark_done(cl_nats *n, bool *done)
{
    pthread_mutex_lock(&n->mu);
    *done = true;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

static void on_closed(natsConnection *nc, void *closure)
{
    (void)nc;
    cl_nats *n = closure;
    mark_done(n, &n->closed);
}

static void on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus err,
                           void *closure)
{
    (void)nc;
    (void)sub;
    (void)closure;
    KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: NATS asynchronous error: %s",
                    natsStatus_GetText(err));
}

cl_nats *cl_nats_open(const char *url, const cl_nats_events *ev, char *err, size_t err_len)
{
    /* cnats spins up to 2,000 trylocks on a busy mutex before it blocks
     * (its default): between the flusher, its read loop and the delivery
     * thread that was ~10 % of a /route's instructions (callgrind, see
     * README). The first call in a process, before any connection, is the
     * one that counts; later ones change nothing and return OK
     * (ILLEGAL_STATE: another thread is opening the library meanwhile). */
    natsStatus open = nats_Open(0);
    if (open != NATS_OK && open != NATS_ILLEGAL_STATE) {
        set_err(err, err_len, "cnats initialisation", open);
        return NULL;
    }
    cl_nats *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    n->ev = *ev;
    pthread_mutex_init(&n->mu, NULL);
    cl_cond_init(&n->cv);
    natsStatus s = natsOptions_Create(&n->opts);
    if (s == NATS_OK)
        s = natsOptions_SetURL(n->opts, url);
    if (s == NATS_OK)
        s = natsOptions_SetName(n->opts, "kvrouter");
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(n->opts, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(n->opts, 250);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(n->opts, 2000);
    if (s == NATS_OK)
        s = natsOptions_SetPingInterval(n->opts, 5000);
    if (s == NATS_OK)
        s = natsOptions_SetMaxPingsOut(n->opts, 2);
    if (s == NATS_OK)
        s = natsOptions_SetSendAsap(n->opts, true);
    /* The live bookings subscription never gets this replica's own batches
     * (feed.c). JetStream's deliveries and replies are the server's own
     * messages: no echo does not touch them. */
    if (s == NATS_OK)
        s = natsOptions_SetNoEcho(n->opts, true);
    if (s == NATS_OK)
        s = natsOptions_SetRetryOnFailedConnect(n->opts, true, on_connected, n);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(n->opts, on_disconnected, n);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(n->opts, on_connected, n);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(n->opts, on_closed, n);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(n->opts, on_async_error, n);
    if (s != NATS_OK) {
        set_err(err, err_len, "NATS options", s);
        natsOptions_Destroy(n->opts);
        free(n);
        return NULL;
    }
    s = natsConnection_Connect(&n->nc, n->opts);
    if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
        set_err(err, err_len, "NATS connection", s);
        natsOptions_Destroy(n->opts);
        free(n);
        return NULL;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = JS_WAIT_MS;
    natsStatus js = natsConnection_JetStream(&n->js, n->nc, &jo);
    if (js != NATS_OK) {
        set_err(err, err_len, "JetStream context", js);
        cl_nats_close(n);
        return NULL;
    }
    if (s == NATS_OK)
        on_connected(n->nc, n);
    return n;
}

void cl_nats_close(cl_nats *n)
{
    if (!n)
        return;
    cl_nats_unsubscribe(n);
    end_live(n);
    for (int b = 0; b < CL_BUCKET_COUNT; b++)
        kvStore_Destroy(n->kv[b]);
    /* The closed callback runs on a cnats thread: wait for it, so nothing
     * calls into n after it is freed. */
    natsConnection_Close(n->nc);
    pthread_mutex_lock(&n->mu);
    struct timespec deadline = cl_deadline(5);
    while (!n->closed && pthread_cond_timedwait(&n->cv, &n->mu, &deadline) == 0)
        ;
    bool closed = n->closed;
    pthread_mutex_unlock(&n->mu);
    jsCtx_Destroy(n->js);
    natsConnection_Destroy(n->nc);
    natsOptions_Destroy(n->opts);
    if (!closed) {
        kvr_log(KVR_LOG_WARN, "cluster: NATS connection did not report closing; leaking it");
        return;
    }
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

size_t cl_nats_max_payload(cl_nats *n)
{
    int64_t m = natsConnection_GetMaxPayload(n->nc);
    return m > 0 ? (size_t)m : 1024 * 1024;
}

/* The bucket if it exists with any configuration, else created with ours. */
static natsStatus open_bucket(cl_nats *n, const char *name, int64_t ttl_ns, kvStore **out)
{
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = name;
    kc.History = 1;
    kc.TTL = ttl_ns;
    kc.MaxValueSize = (int32_t)CL_MAX_VALUE_BYTES;
    kc.StorageType = js_FileStorage;
    natsStatus s = js_CreateKeyValue(out, n->js, &kc);
    if (s != NATS_OK)
        s = js_KeyValue(out, n->js, name);
    return s;
}

static natsStatus ensure_stream(cl_nats *n, const cl_nats_limits *lim, char *err,
                                size_t err_len)
{
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    const char *subjects[1] = {n->subject};
    sc.Name = n->stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_MemoryStorage;
    sc.MaxAge = lim->booking_max_age_ns;
    sc.MaxBytes = lim->stream_max_bytes;
    sc.Discard = js_DiscardOld;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_AddStream(&si, n->js, &sc, NULL, &jerr);
    if (s != NATS_OK && jerr == JS_ERR_STREAM_NAME_IN_USE) {
        /* Another replica made it with other limits: use it as it is. */
        s = js_GetStreamInfo(&si, n->js, n->stream, NULL, &jerr);
        if (s == NATS_OK && si->Config->MaxAge != sc.MaxAge)
            KVR_LOG_LIMITED(KVR_LOG_WARN, NULL,
                            "cluster: stream %s keeps bookings %.0f s, this replica's TTL is "
                            "%.0f s (set the same booking_ttl_s on every replica)",
                            n->stream, (double)si->Config->MaxAge / 1e9,
                            (double)sc.MaxAge / 1e9);
    }
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK)
        set_err(err, err_len, "bookings stream", s);
    return s;
}

int cl_nats_ensure(cl_nats *n, const cl_names *names, const cl_nats_limits *lim, char *err,
                   size_t err_len)
{
    snprintf(n->stream, sizeof n->stream, "%s", names->stream);
    snprintf(n->subject, sizeof n->subject, "%s", names->subject);
    const int64_t ttl[CL_BUCKET_COUNT] = {0, lim->membership_ttl_ns};
    for (int b = 0; b < CL_BUCKET_COUNT; b++) {
        kvStore *kv = NULL;
        natsStatus s = open_bucket(n, names->bucket[b], ttl[b], &kv);
        if (s != NATS_OK) {
            set_err(err, err_len, names->bucket[b], s);
            return -1;
        }
        pthread_mutex_lock(&n->mu);
        if (!n->kv[b]) {
            n->kv[b] = kv;
            kv = NULL;
        }
        pthread_mutex_unlock(&n->mu);
        kvStore_Destroy(kv); /* the handle we hold already names it */
    }
    return ensure_stream(n, lim, err, err_len) == NATS_OK ? 0 : -1;
}

static kvStore *bucket(cl_nats *n, cl_bucket b)
{
    pthread_mutex_lock(&n->mu);
    kvStore *kv = n->kv[b];
    pthread_mutex_unlock(&n->mu);
    return kv; /* set once, destroyed only by cl_nats_close */
}

int cl_nats_kv_put(cl_nats *n, cl_bucket b, const char *key, const char *val, size_t len)
{
    kvStore *kv = bucket(n, b);
    uint64_t rev;
    return kv && kvStore_Put(&rev, kv, key, val, (int)len) == NATS_OK ? 0 : -1;
}

int cl_nats_kv_delete(cl_nats *n, cl_bucket b, const char *key)
{
    kvStore *kv = bucket(n, b);
    return kv && kvStore_Delete(kv, key) == NATS_OK ? 0 : -1;
}

cl_watch *cl_nats_watch(cl_nats *n, cl_bucket b)
{
    cl_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_lock(&n->mu);
    natsStatus s = n->kv[b] ? kvStore_WatchAll(&w->w, n->kv[b], NULL) : NATS_ILLEGAL_STATE;
    pthread_mutex_unlock(&n->mu);
    if (s != NATS_OK) {
        free(w);
        return NULL;
    }
    return w;
}

cl_watch_result cl_nats_watch_next(cl_watch *w, int timeout_ms, cl_kv_entry *out)
{
    kvEntry_Destroy(w->cur);
    w->cur = NULL;
    natsStatus s = kvWatcher_Next(&w->cur, w->w, timeout_ms > 0 ? timeout_ms : 1);
    if (s == NATS_TIMEOUT)
        return CL_WATCH_TIMEOUT;
    if (s != NATS_OK)
        return CL_WATCH_BROKEN;
    if (!w->cur)
        return CL_WATCH_CAUGHT_UP;
    out->key = kvEntry_Key(w->cur);
    if (kvEntry_Operation(w->cur) == kvOp_Put) {
        out->val = kvEntry_Value(w->cur);
        out->len = (size_t)kvEntry_ValueLen(w->cur);
        if (!out->val) /* an empty value: no replica writes one */
            out->val = "";
    } else {
        out->val = NULL;
        out->len = 0;
    }
    return CL_WATCH_ENTRY;
}

void cl_nats_watch_destroy(cl_watch *w)
{
    if (!w)
        return;
    kvEntry_Destroy(w->cur);
    kvWatcher_Destroy(w->w);
    free(w);
}

static void on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    cl_nats *n = closure;
    jsMsgMetaData *md = NULL;
    if (natsMsg_GetMetaData(&md, msg) == NATS_OK)
        n->ev.on_batch(n->ev.user, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg),
                       md->Timestamp, md->NumPending);
    jsMsgMetaData_Destroy(md);
    natsMsg_Destroy(msg);
}

static void on_live(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    cl_nats *n = closure;
    n->ev.on_live(n->ev.user, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg));
    natsMsg_Destroy(msg);
}

static void on_sub_complete(void *closure)
{
    cl_nats *n = closure;
    mark_done(n, &n->sub_done);
}

static void on_live_complete(void *closure)
{
    cl_nats *n = closure;
    mark_done(n, &n->live_done);
}

/* A new subscription (made with status s): no pending limit, its
 * completion callback, then into *slot. 0, or -1 with err. */
static int keep_sub(cl_nats *n, natsStatus s, natsSubscription *sub, void (*on_complete)(void *),
                    natsSubscription **slot, const char *what, char *err, size_t err_len)
{
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(sub, -1, -1);
    if (s == NATS_OK)
        s = natsSubscription_SetOnCompleteCB(sub, on_complete, n);
    if (s != NATS_OK) {
        set_err(err, err_len, what, s);
        natsSubscription_Destroy(sub);
        return -1;
    }
    pthread_mutex_lock(&n->mu);
    *slot = sub;
    pthread_mutex_unlock(&n->mu);
    return 0;
}

/* Unsubscribes *slot and waits for its completion flag. */
static void end_sub(cl_nats *n, natsSubscription **slot, bool *done)
{
    pthread_mutex_lock(&n->mu);
    natsSubscription *sub = *slot;
    *slot = NULL;
    pthread_mutex_unlock(&n->mu);
    if (!sub)
        return;
    natsSubscription_Unsubscribe(sub);
    pthread_mutex_lock(&n->mu);
    struct timespec deadline = cl_deadline(5);
    while (!*done && pthread_cond_timedwait(&n->cv, &n->mu, &deadline) == 0)
        ;
    pthread_mutex_unlock(&n->mu);
    natsSubscription_Destroy(sub);
}

static void end_live(cl_nats *n)
{
    end_sub(n, &n->live, &n->live_done);
}

int cl_nats_live_subscribe(cl_nats *n, char *err, size_t err_len)
{
    pthread_mutex_lock(&n->mu);
    bool have = n->live != NULL;
    if (!have)
        n->live_done = false;
    pthread_mutex_unlock(&n->mu);
    if (have)
        return 0;
    natsSubscription *sub = NULL;
    natsStatus s = natsConnection_Subscribe(&sub, n->nc, n->subject, on_live, n);
    return keep_sub(n, s, sub, on_live_complete, &n->live, "bookings subscription", err,
                    err_len);
}

int cl_nats_subscribe(cl_nats *n, bool *none_pending, char *err, size_t err_len)
{
    cl_nats_unsubscribe(n);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, n->js, n->stream, NULL, &jerr);
    if (s != NATS_OK) {
        set_err(err, err_len, "bookings stream info", s);
        return -1;
    }
    *none_pending = si->State.Msgs == 0;
    jsStreamInfo_Destroy(si);

    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = n->stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    natsSubscription *sub = NULL;
    pthread_mutex_lock(&n->mu);
    n->sub_done = false;
    pthread_mutex_unlock(&n->mu);
    s = js_Subscribe(&sub, n->js, n->subject, on_msg, n, NULL, &so, &jerr);
    return keep_sub(n, s, sub, on_sub_complete, &n->sub, "bookings replay", err, err_len);
}

void cl_nats_unsubscribe(cl_nats *n)
{
    end_sub(n, &n->sub, &n->sub_done);
}

/* A plain NATS publish on the stream's subject: the stream stores it all
 * the same, without a JetStream acknowledgement per batch (a round trip,
 * a reply subscription and a pending-ack entry each: they cost more CPU
 * than the rest of the bookings' path, and a lost batch is worth a few
 * seconds of one replica's load view). */
int cl_nats_publish(cl_nats *n, const char *data, size_t len)
{
    if (natsConnection_Status(n->nc) != NATS_CONN_STATUS_CONNECTED)
        return -1;
    return natsConnection_Publish(n->nc, n->subject, data, (int)len) == NATS_OK ? 0 : -1;
}
