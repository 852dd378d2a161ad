/* Three replicas sharing a fleet through a real nats-server (SPEC §10),
 * in-process kvrouter servers over real HTTP and ZeroMQ: a registration on
 * one appears on the others; the same engine events give identical /query
 * answers everywhere; a booking on one changes the choice on another and
 * its /free elsewhere reaches it; bookings expire on every replica; a NATS
 * outage stops nothing, and a worker registered meanwhile reaches the
 * others once NATS is back. A replica never reads its own bookings back. Every wait polls with a deadline. */
#include "test_support.h"

#include <nats/nats.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "nats_server.h"
#include "net_helpers.h"
#include "server/api.h"

#define BS 4
#define WAIT_MS 30000
#define N 3

typedef struct {
    th_nats nats;
    kvr_server *srv[N];
    char base[N][64];
    int port[N];
    char name[32];
} fx;

static int group_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (!th_nats_start(&f->nats))
        return -1;
    *state = f;
    return 0;
}

static int group_teardown(void **state)
{
    fx *f = *state;
    th_nats_stop(&f->nats);
    free(f);
    return 0;
}

/* How long a start waits for NATS (a test of refusals shortens it). */
static uint32_t startup_timeout_ms = 10000;
/* A replica's own way to NATS (a proxy that can cut it), else the server. */
static const char *nats_url_of[N];

static kvr_server *start_replica(fx *f, int i, double ttl)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = f->port[i];
    cfg.router.booking_ttl_s = ttl;
    cfg.router.rank_refresh_s = 0;
    cfg.cluster.nats_url = nats_url_of[i] ? nats_url_of[i] : f->nats.url;
    cfg.cluster.name = f->name;
    cfg.cluster.heartbeat_ms = 300;
    cfg.cluster.startup_timeout_ms = startup_timeout_ms;
    return th_server_start(&cfg, f->base[i], sizeof f->base[i]);
}

/* A fresh cluster (its own name) of N replicas. */
static void start_all(fx *f, const char *name, double ttl)
{
    snprintf(f->name, sizeof f->name, "%s%d", name, (int)getpid());
    for (int i = 0; i < N; i++) {
        f->port[i] = th_free_port();
        f->srv[i] = start_replica(f, i, ttl);
        assert_non_null(f->srv[i]);
    }
}

static void stop_all(fx *f)
{
    for (int i = 0; i < N; i++) {
        kvr_server_stop(f->srv[i]);
        f->srv[i] = NULL;
    }
}

static void reg(const char *base, uint64_t id, const th_engine *e)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": %llu, \"endpoint\": \"%s\", \"replay_endpoint\": \"%s\", "
             "\"model_name\": \"m\", \"block_size\": %d}",
             (unsigned long long)id, e->endpoint, e->replay_endpoint, BS);
    long st = th_register(base, body, NULL);
    assert_true(st == 201 || st == 200);
}

static void wait_worker(const char *base, uint64_t id)
{
    for (double end = th_now() + WAIT_MS / 1e3; !th_has_worker(base, id);) {
        if (th_now() > end)
            fail_msg("worker %llu never appeared on %s", (unsigned long long)id, base);
        th_sleep_ms(20);
    }
}

static kvr_worker_load load_on(fx *f, int i, uint64_t worker)
{
    kvr_worker_load l;
    kvr_router_load(kvr_server_router(f->srv[i]), "m", NULL, worker, 0, &l);
    return l;
}

/* Polls until (worker)'s bookings on replica i are `want`. */
static void wait_bookings(fx *f, int i, uint64_t worker, uint32_t want)
{
    for (double end = th_now() + WAIT_MS / 1e3; load_on(f, i, worker).bookings != want;) {
        if (th_now() > end)
            fail_msg("replica %d: worker %llu has %u bookings, want %u", i,
                     (unsigned long long)worker, load_on(f, i, worker).bookings, want);
        th_sleep_ms(10);
    }
}

static const char *tokens_json = "[11,12,13,14,21,22,23,24,31,32,33,34]";

static json_t *route(const char *base, const char *id, uint64_t pin)
{
    char body[512], pinned[64] = "";
    if (pin)
        snprintf(pinned, sizeof pinned, ", \"worker_id\": %llu", (unsigned long long)pin);
    snprintf(body, sizeof body,
             "{\"model_name\": \"m\", \"token_ids\": %s, \"request_id\": \"%s\"%s}", tokens_json,
             id, pinned);
    long st;
    json_t *r = th_json("POST", base, "/route", body, &st);
    if (st != 200)
        fail_msg("/route %s on %s: %ld", id, base, st);
    return r;
}

static char *query_text(const char *base)
{
    char body[256];
    snprintf(body, sizeof body, "{\"model_name\": \"m\", \"token_ids\": %s}", tokens_json);
    json_t *r = th_json("POST", base, "/query", body, NULL);
    char *t = r ? json_dumps(r, JSON_SORT_KEYS | JSON_COMPACT) : strdup("null");
    json_decref(r);
    return t;
}

static long long cluster_metric(const char *base, const char *needle)
{
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "%s/metrics", base);
    th_http("GET", url, NULL, 0, &out);
    const char *p = strstr(out, needle);
    long long v = p ? atoll(p + strlen(needle)) : -1;
    free(out);
    return v;
}

static void wait_metric(const char *base, const char *needle, long long want)
{
    for (double end = th_now() + WAIT_MS / 1e3; cluster_metric(base, needle) != want;) {
        if (th_now() > end)
            fail_msg("%s: %s is %lld, want %lld", base, needle, cluster_metric(base, needle),
                     want);
        th_sleep_ms(20);
    }
}

static void test_registration_and_queries_agree(void **state)
{
    fx *f = *state;
    start_all(f, "agree", 600);
    th_engine e;
    th_engine_start(&e);
    int verbose = 1; /* every replica's subscription shows, not only the first */
    zmq_setsockopt(e.pub, ZMQ_XPUB_VERBOSE, &verbose, sizeof verbose);
    reg(f->base[0], 1, &e);
    for (int i = 1; i < N; i++)
        wait_worker(f->base[i], 1);
    for (int i = 0; i < N; i++)
        assert_true(th_engine_wait_sub(&e, WAIT_MS));

    /* 3 blocks stored, then the middle one's descendant removed. */
    uint64_t tok[12] = {11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34};
    uint64_t h[3] = {101, 102, 103};
    kvr_raw_event st = th_store(h, 3, 0, tok, BS);
    th_send_events(&e, 0, &st, 1, true);
    kvr_raw_event rm = th_remove(&h[2], 1);
    th_send_events(&e, 1, &rm, 1, true);
    uint64_t local[3];
    th_local_hashes(tok, 12, BS, local, 3);
    for (int i = 0; i < N; i++)
        if (th_wait_score(f->base[i], "m", local, 3, 1, 0, 2 * BS, WAIT_MS) != 2 * BS)
            fail_msg("replica %d never indexed the two blocks", i);
    char *q0 = query_text(f->base[0]);
    assert_non_null(strstr(q0, "\"scores\""));
    for (int i = 1; i < N; i++) {
        char *q = query_text(f->base[i]);
        assert_string_equal(q, q0);
        free(q);
    }
    free(q0);

    /* An unregistration on another replica removes it everywhere. */
    long code;
    json_t *r = th_json("POST", f->base[2], "/unregister",
                        "{\"instance_id\": 1, \"model_name\": \"m\"}", &code);
    json_decref(r);
    assert_int_equal(code, 200);
    for (int i = 0; i < N; i++)
        for (double end = th_now() + WAIT_MS / 1e3; th_has_worker(f->base[i], 1);) {
            if (th_now() > end)
                fail_msg("replica %d still has worker 1", i);
            th_sleep_ms(20);
        }
    stop_all(f);
    th_engine_stop(&e);
}

static void test_booking_on_one_changes_the_choice_on_another(void **state)
{
    fx *f = *state;
    start_all(f, "book", 600);
    th_engine e1, e2;
    th_engine_start(&e1);
    th_engine_start(&e2);
    reg(f->base[0], 1, &e1);
    reg(f->base[0], 2, &e2);
    for (int i = 1; i < N; i++) {
        wait_worker(f->base[i], 1);
        wait_worker(f->base[i], 2);
    }
    /* Two idle workers; replica 0 books three requests on worker 1. */
    for (int k = 0; k < 3; k++) {
        char id[16];
        snprintf(id, sizeof id, "a%d", k);
        json_decref(route(f->base[0], id, 1));
    }
    for (int i = 1; i < N; i++)
        wait_bookings(f, i, 1, 3);
    /* Replica 0 never read those batches back: the live subject has no
     * echo, the stream is read only to catch up. */
    assert_true(cluster_metric(f->base[0], "\nkvr_cluster_batches_published_total ") >= 1);
    assert_int_equal(cluster_metric(f->base[0], "\nkvr_cluster_own_batches_skipped_total "), 0);
    /* Each wake of the flusher is one booking that found it asleep: never
     * more than the bookings sent or lost. */
    long long wakes = cluster_metric(f->base[0], "\nkvr_cluster_flusher_wakes_total ");
    assert_true(wakes >= 0);
    assert_true(wakes <= cluster_metric(f->base[0], "\nkvr_cluster_bookings_published_total ") +
                             cluster_metric(f->base[0], "\nkvr_cluster_publish_failures_total "));
    /* Replica 1, which booked nothing itself, sends the next one to 2. */
    for (int k = 0; k < 4; k++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", k);
        json_t *r = route(f->base[1], id, 0);
        assert_int_equal(json_integer_value(json_object_get(r, "worker_id")), 2);
        json_decref(r);
        json_t *fr = th_json("POST", f->base[1], "/free", "{\"request_id\": \"b0\"}", NULL);
        json_decref(fr);
    }
    /* A /free on replica 2 of replica 0's booking reaches replica 0. */
    long code;
    json_t *fr = th_json("POST", f->base[2], "/free", "{\"request_id\": \"a1\"}", &code);
    json_decref(fr);
    assert_int_equal(code, 200);
    for (int i = 0; i < N; i++)
        wait_bookings(f, i, 1, 2);
    fr = th_json("POST", f->base[0], "/free", "{\"request_id\": \"a1\"}", &code);
    json_decref(fr);
    assert_int_equal(code, 404); /* its owner released it already */
    stop_all(f);
    th_engine_stop(&e1);
    th_engine_stop(&e2);
}

static void test_bookings_expire_on_every_replica(void **state)
{
    fx *f = *state;
    start_all(f, "ttl", 2.0);
    th_engine e;
    th_engine_start(&e);
    reg(f->base[0], 1, &e);
    for (int i = 1; i < N; i++)
        wait_worker(f->base[i], 1);
    json_decref(route(f->base[1], "t1", 1));
    for (int i = 0; i < N; i++)
        if (i != 1)
            wait_bookings(f, i, 1, 1);
    /* Nobody frees it: gone everywhere after its 2 s. */
    for (int i = 0; i < N; i++)
        wait_bookings(f, i, 1, 0);
    stop_all(f);
    th_engine_stop(&e);
}

static void test_nats_outage(void **state)
{
    fx *f = *state;
    start_all(f, "outage", 600);
    th_engine e1, e9;
    th_engine_start(&e1);
    th_engine_start(&e9);
    reg(f->base[0], 1, &e1);
    for (int i = 1; i < N; i++)
        wait_worker(f->base[i], 1);

    long long reads[N];
    for (int i = 0; i < N; i++) {
        reads[i] = cluster_metric(f->base[i], "\nkvr_cluster_registration_reads_total ");
        assert_true(reads[i] >= 1); /* the start's */
    }
    th_nats_kill(&f->nats);
    for (int i = 0; i < N; i++)
        wait_metric(f->base[i], "kvr_cluster_connection{state=\"reconnecting\"} ", 1);
    /* Routing and queries go on; a worker registered now applies here. */
    for (int k = 0; k < 3; k++) {
        char *q = query_text(f->base[k]);
        assert_non_null(strstr(q, "\"scores\""));
        free(q);
    }
    json_decref(route(f->base[0], "during", 0));
    assert_true(cluster_metric(f->base[0], "\nkvr_cluster_publish_failures_total ") >=
                1);
    reg(f->base[0], 9, &e9);
    assert_true(th_has_worker(f->base[0], 9));

    assert_true(th_nats_run(&f->nats));
    for (int i = 0; i < N; i++) {
        wait_metric(f->base[i], "kvr_cluster_connection{state=\"connected\"} ", 1);
        wait_worker(f->base[i], 9);
        assert_true(th_has_worker(f->base[i], 1));
        /* the reconnection read the bucket whole again */
        for (double end = th_now() + WAIT_MS / 1e3;
             cluster_metric(f->base[i], "\nkvr_cluster_registration_reads_total ") <= reads[i];)
        {
            if (th_now() > end)
                fail_msg("%s: no read of the bucket after the reconnection", f->base[i]);
            th_sleep_ms(20);
        }
    }
    /* The booking made during the outage stayed local (the others never
     * counted it); bookings flow again. */
    assert_int_equal(load_on(f, 0, 1).bookings, 1);
    json_decref(route(f->base[0], "after", 1));
    for (int i = 1; i < N; i++)
        wait_bookings(f, i, 1, 1);
    stop_all(f);
    th_engine_stop(&e1);
    th_engine_stop(&e9);
}

/* ---- a TCP forwarder that can cut one replica off NATS -------------------- */

#define PROXY_PAIRS 32

typedef struct {
    int listen_fd, port, target_port;
    char url[64];
    pthread_t th;
    _Atomic bool cut, stop;
    int fd[PROXY_PAIRS][2]; /* the proxy thread's only */
} proxy;

static void pair_close(proxy *p, int k)
{
    close(p->fd[k][0]);
    close(p->fd[k][1]);
    p->fd[k][0] = p->fd[k][1] = -1;
}

/* Copies what one side sent to the other; false at its end. */
static bool forward(int from, int to)
{
    char buf[65536];
    ssize_t n = read(from, buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0)
            return false;
        off += w;
    }
    return n > 0;
}

/* While cut: every connection it held is closed and new ones are closed
 * as soon as accepted (the replica sees a refused reconnection). */
static void *proxy_main(void *arg)
{
    proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        bool cut = atomic_load(&p->cut);
        struct pollfd pf[1 + 2 * PROXY_PAIRS];
        int who[1 + 2 * PROXY_PAIRS], n = 0;
        pf[n] = (struct pollfd){p->listen_fd, POLLIN, 0};
        who[n++] = -1;
        for (int k = 0; k < PROXY_PAIRS; k++) {
            if (p->fd[k][0] < 0)
                continue;
            if (cut) {
                pair_close(p, k);
                continue;
            }
            for (int side = 0; side < 2; side++) {
                pf[n] = (struct pollfd){p->fd[k][side], POLLIN, 0};
                who[n++] = 2 * k + side;
            }
        }
        if (poll(pf, (nfds_t)n, 20) <= 0)
            continue;
        for (int i = 1; i < n; i++) {
            int k = who[i] / 2, side = who[i] % 2;
            if ((pf[i].revents & (POLLIN | POLLHUP | POLLERR)) && p->fd[k][0] >= 0 &&
                !forward(p->fd[k][side], p->fd[k][1 - side]))
                pair_close(p, k);
        }
        if (pf[0].revents & POLLIN) {
            int c = accept(p->listen_fd, NULL, NULL);
            int t = c >= 0 && !cut ? th_connect(p->target_port) : -1;
            int k = 0;
            while (k < PROXY_PAIRS && p->fd[k][0] >= 0)
                k++;
            if (t < 0 || k == PROXY_PAIRS) {
                if (c >= 0)
                    close(c);
                if (t >= 0)
                    close(t);
                continue;
            }
            p->fd[k][0] = c;
            p->fd[k][1] = t;
        }
    }
    for (int k = 0; k < PROXY_PAIRS; k++)
        if (p->fd[k][0] >= 0)
            pair_close(p, k);
    return NULL;
}

static void proxy_start(proxy *p, int target_port)
{
    memset(p, 0, sizeof *p);
    for (int k = 0; k < PROXY_PAIRS; k++)
        p->fd[k][0] = p->fd[k][1] = -1;
    p->target_port = target_port;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    assert_int_equal(bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(p->listen_fd, 16), 0);
    assert_int_equal(getsockname(p->listen_fd, (struct sockaddr *)&sa, &len), 0);
    p->port = ntohs(sa.sin_port);
    snprintf(p->url, sizeof p->url, "nats://127.0.0.1:%d", p->port);
    assert_int_equal(pthread_create(&p->th, NULL, proxy_main, p), 0);
}

static void proxy_stop(proxy *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    close(p->listen_fd);
}

/* An unregistration made while a replica is cut off NATS reaches it once
 * it is back (the delete marker in the bucket: from its watcher catching
 * up, or the whole read its reconnection makes) and removes the worker it
 * still held; the replica does not write that worker back. */
static void test_unregister_while_a_replica_is_cut_off(void **state)
{
    fx *f = *state;
    proxy p;
    proxy_start(&p, f->nats.port);
    nats_url_of[1] = p.url;
    snprintf(f->name, sizeof f->name, "cut%d", (int)getpid());
    for (int i = 0; i < 2; i++) {
        f->port[i] = th_free_port();
        f->srv[i] = start_replica(f, i, 600);
        assert_non_null(f->srv[i]);
    }
    th_engine e1, e2;
    th_engine_start(&e1);
    th_engine_start(&e2);
    reg(f->base[0], 1, &e1);
    reg(f->base[0], 2, &e2);
    wait_worker(f->base[1], 1);
    wait_worker(f->base[1], 2);

    atomic_store(&p.cut, true);
    wait_metric(f->base[1], "kvr_cluster_connection{state=\"reconnecting\"} ", 1);
    long code;
    json_decref(th_json("POST", f->base[0], "/unregister",
                        "{\"instance_id\": 1, \"model_name\": \"m\"}", &code));
    assert_int_equal(code, 200);
    assert_false(th_has_worker(f->base[0], 1));
    assert_true(th_has_worker(f->base[1], 1)); /* it cannot know yet */
    long long reads = cluster_metric(f->base[1], "\nkvr_cluster_registration_reads_total ");

    atomic_store(&p.cut, false);
    wait_metric(f->base[1], "kvr_cluster_connection{state=\"connected\"} ", 1);
    for (double end = th_now() + WAIT_MS / 1e3; th_has_worker(f->base[1], 1);) {
        if (th_now() > end)
            fail_msg("the replica cut off still has worker 1");
        th_sleep_ms(20);
    }
    /* (the delete may come from the watcher's own catching up first; the
     * whole read follows) */
    for (double end = th_now() + WAIT_MS / 1e3;
         cluster_metric(f->base[1], "\nkvr_cluster_registration_reads_total ") <= reads;) {
        if (th_now() > end)
            fail_msg("no read of the bucket after the reconnection");
        th_sleep_ms(20);
    }
    assert_true(th_has_worker(f->base[1], 2));
    /* and the bucket was not refilled from the replica that was away */
    th_sleep_ms(300);
    assert_false(th_has_worker(f->base[0], 1));
    for (int i = 0; i < 2; i++) {
        kvr_server_stop(f->srv[i]);
        f->srv[i] = NULL;
    }
    nats_url_of[1] = NULL;
    proxy_stop(&p);
    th_engine_stop(&e1);
    th_engine_stop(&e2);
}

/* Polls until the counter (a "\nkvr_cluster_..._total " needle) is at least 1. */
static void wait_counted(const char *base, const char *needle)
{
    for (double end = th_now() + WAIT_MS / 1e3; cluster_metric(base, needle) < 1;) {
        if (th_now() > end)
            fail_msg("%s:%s never counted", base, needle);
        th_sleep_ms(20);
    }
}

/* What NATS refuses the control thread is counted, not only logged: a setup
 * whose stream cannot be made (another stream holds the bookings subject),
 * a replay whose consumer the stream does not take (its one consumer is
 * taken), a membership record the bucket does not take (values of at most
 * 8 bytes). The stream and the buckets are set up beforehand with cnats. */
static void test_refused_setup_replay_and_heartbeat_are_counted(void **state)
{
    fx *f = *state;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, f->nats.url), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    startup_timeout_ms = 1000; /* the start cannot complete */
    char stream[96], subject[96], bucket[96];

    /* A cluster whose bookings subject another stream holds. */
    snprintf(f->name, sizeof f->name, "squat%d", (int)getpid());
    snprintf(subject, sizeof subject, "kvr.%s.bookings", f->name);
    const char *subjects[1] = {subject};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = "SQUATTER";
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_MemoryStorage;
    assert_int_equal(js_AddStream(NULL, js, &sc, NULL, NULL), NATS_OK);
    f->port[0] = th_free_port();
    f->srv[0] = start_replica(f, 0, 600);
    assert_non_null(f->srv[0]);
    wait_counted(f->base[0], "\nkvr_cluster_setup_failures_total ");
    assert_int_equal(cluster_metric(f->base[0], "\nkvr_cluster_heartbeat_failures_total "), 0);
    kvr_server_stop(f->srv[0]);
    f->srv[0] = NULL;
    assert_int_equal(js_DeleteStream(js, "SQUATTER", NULL, NULL), NATS_OK);

    /* A cluster whose stream takes one consumer (taken) and whose
     * membership bucket takes 8-byte values. */
    snprintf(f->name, sizeof f->name, "refuse%d", (int)getpid());
    snprintf(stream, sizeof stream, "KVR_%s_BOOKINGS", f->name);
    snprintf(subject, sizeof subject, "kvr.%s.bookings", f->name);
    snprintf(bucket, sizeof bucket, "KVR_%s_REPLICAS", f->name);
    jsStreamConfig_Init(&sc);
    sc.Name = stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_MemoryStorage;
    sc.MaxConsumers = 1;
    assert_int_equal(js_AddStream(NULL, js, &sc, NULL, NULL), NATS_OK);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = "taken";
    cc.AckPolicy = js_AckExplicit;
    assert_int_equal(js_AddConsumer(NULL, js, stream, &cc, NULL, NULL), NATS_OK);
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = bucket;
    kc.MaxValueSize = 8;
    kvStore *kv = NULL;
    assert_int_equal(js_CreateKeyValue(&kv, js, &kc), NATS_OK);
    kvStore_Destroy(kv);
    f->srv[0] = start_replica(f, 0, 600);
    assert_non_null(f->srv[0]);
    wait_counted(f->base[0], "\nkvr_cluster_replay_failures_total ");
    wait_counted(f->base[0], "\nkvr_cluster_heartbeat_failures_total ");
    kvr_server_stop(f->srv[0]);
    f->srv[0] = NULL;
    js_DeleteStream(js, stream, NULL, NULL);
    startup_timeout_ms = 10000;
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registration_and_queries_agree),
        cmocka_unit_test(test_booking_on_one_changes_the_choice_on_another),
        cmocka_unit_test(test_bookings_expire_on_every_replica),
        cmocka_unit_test(test_nats_outage),
        cmocka_unit_test(test_unregister_while_a_replica_is_cut_off),
        cmocka_unit_test(test_refused_setup_replay_and_heartbeat_are_counted),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
