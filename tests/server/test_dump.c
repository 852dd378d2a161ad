/* GET /dump in Dynamo's form and kvrouter's JSON lines, loading either
 * (also a dump hand-built as Dynamo's indexer writes it, served by a stand-in
 * Dynamo peer), the peer list endpoints, and a replica that joins while its
 * engine keeps publishing and must end equal to its peer (SPEC §7.1, §10). */
#include "test_support.h"

#include <microhttpd.h>
#include <stdatomic.h>

#include "engine_proc.h"
#include "server/api.h"
#include "kvrouter/registry.h"
#include "server/json_body.h"

#define BS TH_PROC_BS
#define WAIT 20000

static kvr_server *start_with(char *base, size_t cap, const char *const *peers, size_t n_peers,
                              const char *workers_json)
{
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.peers = peers;
    cfg.n_peers = n_peers;
    cfg.workers_json = workers_json;
    kvr_server *srv = th_server_start(&cfg, base, cap);
    assert_non_null(srv);
    return srv;
}

static kvr_server *start(char *base, size_t cap, const char *const *peers, size_t n_peers)
{
    return start_with(base, cap, peers, n_peers, NULL);
}

static void reg(const char *base, uint64_t id, uint32_t rank, const th_engine *e, bool replay)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": %llu, \"dp_rank\": %u, \"endpoint\": \"%s\", \"model_name\": "
             "\"m\", \"block_size\": %d%s%s%s}",
             (unsigned long long)id, rank, e->endpoint, BS,
             replay ? ", \"replay_endpoint\": \"" : "", replay ? e->replay_endpoint : "",
             replay ? "\"" : "");
    assert_int_equal(th_register(base, body, NULL), 201);
}

static char *get(const char *base, const char *path, long *status)
{
    char url[256], *out = NULL;
    snprintf(url, sizeof url, "%s%s", base, path);
    *status = th_http("GET", url, NULL, 0, &out);
    return out;
}

/* Every ownership an index holds: (worker, rank, tier, engine, router),
 * sorted, so two indexes compare as sets. */
typedef struct {
    uint64_t worker, engine, local;
    uint32_t rank, tier;
} own;

typedef struct {
    own *v;
    size_t n, cap;
} owns;

static void collect(void *user, const char *model, const char *group, const kvr_dump_store *ev)
{
    (void)model;
    (void)group;
    owns *o = user;
    for (size_t i = 0; i < ev->n; i++) {
        if (o->n == o->cap) {
            o->cap = o->cap ? 2 * o->cap : 256;
            o->v = realloc(o->v, o->cap * sizeof *o->v);
        }
        o->v[o->n++] = (own){ev->worker_id, ev->engine_hashes[i], ev->local_hashes[i],
                             ev->dp_rank, ev->tier};
    }
}

static int own_cmp(const void *a, const void *b) { return memcmp(a, b, sizeof(own)); }

static owns ownerships(kvr_server *srv)
{
    owns o = {0};
    kvr_indexer_dump(kvr_server_indexer(srv), collect, &o);
    qsort(o.v, o.n, sizeof *o.v, own_cmp);
    return o;
}

static bool owns_equal(const owns *a, const owns *b)
{
    return a->n == b->n && memcmp(a->v, b->v, a->n * sizeof *a->v) == 0;
}

/* Two engines and what a dump must carry exactly: ranks, tiers, a chain
 * over two events (parent link), ids and hashes above 2^63. */
static void publish_fleet(const char *base, th_engine *e0, th_engine *e1, uint64_t *local,
                          bool replay)
{
    th_engine_start(e0);
    th_engine_start(e1);
    reg(base, 5, 0, e0, replay);
    reg(base, UINT64_MAX, 1, e1, false);
    assert_true(th_engine_wait_sub(e0, WAIT) && th_engine_wait_sub(e1, WAIT));
    uint64_t tokens[4 * BS];
    for (int i = 0; i < 4 * BS; i++)
        tokens[i] = 300 + (uint64_t)i;
    th_local_hashes(tokens, 4 * BS, BS, local, 4);
    uint64_t h[4] = {UINT64_MAX - 10, UINT64_MAX - 11, 77, 78};
    kvr_raw_event a = th_store(h, 2, 0, tokens, BS);
    kvr_raw_event b = th_store(h + 2, 2, h[1], tokens + 2 * BS, BS);
    th_send_events(e0, 0, &a, 1, true);
    th_send_events(e0, 1, &b, 1, true);
    kvr_raw_event c = th_store(h, 3, 0, tokens, BS);
    c.tier = KVR_TIER_CPU;
    th_send_events(e1, 0, &c, 1, true);
    assert_int_equal(th_wait_score(base, "m", local, 4, 5, 0, 4 * BS, WAIT), 4 * BS);
}

static void test_dynamo_form_as_dynamo_writes_it(void **state)
{
    (void)state;
    char base[64];
    kvr_server *a = start(base, sizeof base, NULL, 0);
    th_engine e0, e1;
    uint64_t local[4];
    publish_fleet(base, &e0, &e1, local, true);
    long st;
    char *text = NULL;
    double end = th_now() + WAIT / 1000.0;
    do { /* until worker UINT64_MAX's host-tier chain is in too */
        free(text);
        text = get(base, "/dump", &st);
    } while (!strstr(text, "host_pinned") && th_now() < end);
    assert_int_equal(st, 200);
    json_error_t jerr;
    json_t *d = kvr_json_load_body(text, strlen(text), 0, &jerr);
    json_t *g = json_object_get(d, "m:default");
    assert_true(json_is_object(g));
    assert_int_equal(json_integer_value(json_object_get(g, "block_size")), BS);
    json_t *events = json_object_get(g, "events");
    assert_true(json_array_size(events) >= 2);
    /* Dynamo's serde field names and forms, u64 as bare integers */
    assert_non_null(strstr(text, "{\"worker_id\":5,\"storage_tier\":\"device\",\"event\":{"
                                 "\"event_id\":"));
    assert_non_null(strstr(text, "\"data\":{\"stored\":{\"parent_hash\":null,"
                                 "\"start_position\":null,\"blocks\":[{\"block_hash\":"
                                 "18446744073709551605,\"tokens_hash\":"));
    assert_non_null(strstr(text, "\"worker_id\":18446744073709551615,\"storage_tier\":"
                                 "\"host_pinned\""));
    assert_non_null(strstr(text, ",\"mm_extra_info\":null}"));
    json_t *ev = json_array_get(events, 0);
    assert_true(json_is_integer(json_object_get(json_object_get(ev, "event"), "dp_rank")));
    /* kvrouter's extras: cursors (the seq the content reflects), registrations */
    json_t *cursors = json_object_get(g, "cursors");
    assert_int_equal(json_integer_value(json_object_get(cursors, "5/0")), 1);
    assert_int_equal(json_integer_value(json_object_get(cursors, "18446744073709551615/1")), 0);
    assert_int_equal(strlen(json_string_value(
                         json_object_get(json_object_get(g, "cursor_digests"), "5/0"))),
                     16);
    json_t *workers = json_object_get(g, "workers");
    assert_int_equal(json_array_size(workers), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(workers, 0), "replay_endpoint")),
        e0.replay_endpoint);
    json_decref(d);
    free(text);
    /* events=false: the registrations and cursors alone */
    text = get(base, "/dump?events=false", &st);
    assert_int_equal(st, 200);
    assert_null(strstr(text, "block_hash"));
    assert_non_null(strstr(text, "\"cursors\":{\"5/0\":1"));
    free(text);
    text = get(base, "/dump?format=xml", &st);
    assert_int_equal(st, 400);
    assert_non_null(strstr(text, "format"));
    free(text);
    kvr_server_stop(a);
    th_engine_stop(&e0);
    th_engine_stop(&e1);
}

/* kvrouter -> Dynamo form -> kvrouter, and the JSON-lines form likewise:
 * the same ownerships come back. */
static void test_dump_read_back_equal_in_both_forms(void **state)
{
    (void)state;
    char base_a[64], base_b[64], base_c[64];
    kvr_server *a = start(base_a, sizeof base_a, NULL, 0);
    th_engine e0, e1;
    uint64_t local[4];
    publish_fleet(base_a, &e0, &e1, local, false);
    owns oa;
    double end = th_now() + WAIT / 1000.0;
    do {
        oa = ownerships(a);
        if (oa.n == 4 + 3)
            break;
        free(oa.v);
        th_sleep_ms(10);
    } while (th_now() < end);
    assert_int_equal(oa.n, 7);
    const char *forms[2] = {"/dump", "/dump?format=ndjson"};
    char *bases[2] = {base_b, base_c};
    for (int f = 0; f < 2; f++) {
        long st;
        char *text = get(base_a, forms[f], &st);
        assert_int_equal(st, 200);
        kvr_server *b = start(bases[f], 64, NULL, 0);
        char err[256];
        /* one chain per (worker, rank, tier) here: the 4-block chain came in two events */
        assert_int_equal(kvr_server_load_dump(b, text, strlen(text), err, sizeof err), 2);
        owns ob = ownerships(b);
        assert_true(owns_equal(&oa, &ob));
        free(ob.v);
        free(text);
        kvr_server_stop(b);
    }
    free(oa.v);
    kvr_server_stop(a);
    th_engine_stop(&e0);
    th_engine_stop(&e1);
}

/* A stand-in for Dynamo's indexer: GET /dump answers its JSON whatever the
 * arguments, every other path 404. */
static const char *g_dynamo_dump;
static _Atomic int g_dynamo_requests;

static enum MHD_Result dynamo_peer(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *data,
                                   size_t *size, void **ctx)
{
    (void)cls, (void)method, (void)version, (void)data, (void)size, (void)ctx;
    bool dump = strcmp(url, "/dump") == 0;
    g_dynamo_requests += dump;
    const char *body = dump ? g_dynamo_dump : "{\"error\":\"not found\"}";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result q = MHD_queue_response(c, dump ? 200 : 404, r);
    MHD_destroy_response(r);
    return q;
}

/* As Dynamo's serde_json writes HashMap<String, {block_size, events}>: a
 * chain across two events (parent_hash), a lower tier, a worker id and
 * hashes above 2^63, the optional fields it writes as null, an event
 * without storage_tier (the device) beside a disk copy, and a member this
 * loader does not know. */
static void test_dynamo_hand_built_dump_loads(void **state)
{
    (void)state;
    uint64_t tokens[3 * BS], local[3];
    for (int i = 0; i < 3 * BS; i++)
        tokens[i] = 900 + (uint64_t)i;
    th_local_hashes(tokens, 3 * BS, BS, local, 3);
    char dump[4096];
    snprintf(dump, sizeof dump,
             "{\"m:default\":{\"block_size\":4,\"events\":["
             "{\"worker_id\":7,\"storage_tier\":\"device\",\"event\":{\"event_id\":0,"
             "\"data\":{\"stored\":{\"parent_hash\":null,\"start_position\":null,\"blocks\":["
             "{\"block_hash\":101,\"tokens_hash\":%llu,\"mm_extra_info\":null},"
             "{\"block_hash\":18446744073709551600,\"tokens_hash\":%llu,\"mm_extra_info\":null}"
             "]}},\"dp_rank\":0}},"
             "{\"worker_id\":7,\"storage_tier\":\"device\",\"event\":{\"event_id\":1,"
             "\"data\":{\"stored\":{\"parent_hash\":18446744073709551600,\"start_position\":2,"
             "\"blocks\":[{\"block_hash\":103,\"tokens_hash\":%llu,\"mm_extra_info\":null}]}},"
             "\"dp_rank\":0}},"
             "{\"worker_id\":18446744073709551614,\"storage_tier\":\"host_pinned\",\"event\":{"
             "\"event_id\":2,\"data\":{\"stored\":{\"parent_hash\":null,\"blocks\":["
             "{\"block_hash\":201,\"tokens_hash\":%llu}]}},\"dp_rank\":1}},"
             /* no storage_tier: Dynamo's default, the device; and a disk copy */
             "{\"worker_id\":9,\"event\":{\"event_id\":3,\"data\":{\"stored\":{"
             "\"parent_hash\":null,\"blocks\":[{\"block_hash\":301,\"tokens_hash\":%llu}]}}}},"
             "{\"worker_id\":9,\"storage_tier\":\"disk\",\"event\":{\"event_id\":4,\"data\":{"
             "\"stored\":{\"parent_hash\":null,\"blocks\":[{\"block_hash\":301,\"tokens_hash\":"
             "%llu}]}},\"dp_rank\":0}}"
             "],\"future_field\":{\"x\":[1,2]}}}",
             (unsigned long long)local[0], (unsigned long long)local[1],
             (unsigned long long)local[2], (unsigned long long)local[0],
             (unsigned long long)local[0], (unsigned long long)local[0]);
    /* Loaded directly ... */
    char base[64], err[256];
    kvr_server *a = start(base, sizeof base, NULL, 0);
    assert_int_equal(kvr_server_load_dump(a, dump, strlen(dump), err, sizeof err), 5);
    owns oa = ownerships(a);
    assert_int_equal(oa.n, 6);
    /* ... and through --peers from a Dynamo peer (no registrations, no
     * cursors: the content alone). */
    g_dynamo_dump = dump;
    struct MHD_Daemon *peer = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, NULL, NULL,
                                               dynamo_peer, NULL, MHD_OPTION_END);
    assert_non_null(peer);
    char peer_url[64];
    snprintf(peer_url, sizeof peer_url, "http://127.0.0.1:%u",
             MHD_get_daemon_info(peer, MHD_DAEMON_INFO_BIND_PORT)->port);
    const char *peers[1] = {peer_url};
    char base_b[64];
    kvr_server *b = start(base_b, sizeof base_b, peers, 1);
    assert_true(g_dynamo_requests >= 1);
    owns ob = ownerships(b);
    assert_true(owns_equal(&oa, &ob));
    /* the recovered content answers queries once the group has a block size */
    th_engine e;
    th_engine_start(&e);
    reg(base_b, 7, 0, &e, false);
    assert_int_equal(th_score(base_b, "m", local, 3, 7, 0), 3 * BS);
    reg(base_b, 9, 0, &e, false);
    assert_int_equal(th_score(base_b, "m", local, 1, 9, 0), BS); /* on the device tier */
    long st;
    char *peers_json = get(base_b, "/peers", &st);
    assert_int_equal(st, 200);
    char want[96];
    snprintf(want, sizeof want, "[\"%s\"]", peer_url);
    assert_string_equal(peers_json, want);
    free(peers_json);
    free(oa.v);
    free(ob.v);
    kvr_server_stop(b);
    kvr_server_stop(a);
    th_engine_stop(&e);
    MHD_stop_daemon(peer);
}

static void test_peer_list_endpoints(void **state)
{
    (void)state;
    char base[64];
    kvr_server *s = start(base, sizeof base, NULL, 0);
    long st;
    json_t *r = th_json("POST", base, "/register_peer", "{\"url\":\"http://10.0.0.1:8090\"}",
                        &st);
    assert_int_equal(st, 201);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
    json_decref(r);
    json_decref(th_json("POST", base, "/register_peer", "{\"url\":\"http://10.0.0.2:8090\"}",
                        &st));
    assert_int_equal(st, 201);
    json_decref(th_json("POST", base, "/register_peer", "{\"url\":\"http://10.0.0.1:8090\"}",
                        &st));
    assert_int_equal(st, 201); /* again: still one entry */
    r = th_json("GET", base, "/peers", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(r), 2);
    assert_string_equal(json_string_value(json_array_get(r, 0)), "http://10.0.0.1:8090");
    json_decref(r);
    r = th_json("POST", base, "/deregister_peer", "{\"url\":\"http://10.0.0.1:8090\"}", &st);
    assert_int_equal(st, 200);
    json_decref(r);
    r = th_json("POST", base, "/deregister_peer", "{\"url\":\"http://10.0.0.1:8090\"}", &st);
    assert_int_equal(st, 404);
    assert_non_null(json_string_value(json_object_get(r, "error")));
    json_decref(r);
    const char *bad[] = {"{}", "{\"url\":7}", "{\"url\":\"ftp://x\"}", "{\"url\":\"http://a b\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = th_json("POST", base, "/register_peer", bad[i], &st);
        assert_int_equal(st, 400);
        assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "url"));
        json_decref(r);
    }
    r = th_json("GET", base, "/peers", NULL, &st);
    assert_int_equal(json_array_size(r), 1);
    json_decref(r);
    kvr_server_stop(s);
}

/* Every registration field comes across a recovery as it was registered. */
static void test_registrations_round_trip_through_recovery(void **state)
{
    (void)state;
    char base_a[64], base_b[64];
    kvr_server *a = start(base_a, sizeof base_a, NULL, 0);
    th_engine e;
    th_engine_start(&e);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"instance_id\": 18446744073709551000, \"dp_rank\": 3, \"endpoint\": \"%s\", "
             "\"replay_endpoint\": \"%s\", \"topic\": \"kv@x\", \"model_name\": \"org/m:v2\", "
             "\"routing_group\": \"g1\", \"block_size\": 16, \"lora_name\": \"ad\", "
             "\"mm_identity\": \"auto\", \"accepts_mm_hashes\": false, \"is_eagle\": true, "
             "\"engine\": \"vllm\", \"image_token_id\": 151655}",
             e.endpoint, e.replay_endpoint);
    assert_int_equal(th_register(base_a, body, NULL), 201);
    const char *peers[1] = {base_a};
    kvr_server *b = start(base_b, sizeof base_b, peers, 1);
    kvr_registrations ra, rb;
    assert_int_equal(kvr_registry_list(kvr_server_registry(a), &ra), 0);
    assert_int_equal(kvr_registry_list(kvr_server_registry(b), &rb), 0);
    assert_int_equal(rb.n, 1);
    const kvr_registration *x = &ra.items[0], *y = &rb.items[0];
    assert_true(x->settings.worker_id == y->settings.worker_id);
    assert_int_equal(x->dp_rank, y->dp_rank);
    assert_string_equal(x->endpoint, y->endpoint);
    assert_string_equal(x->replay_endpoint, y->replay_endpoint);
    assert_string_equal(x->topic, y->topic);
    assert_string_equal(x->settings.model_name, y->settings.model_name);
    assert_string_equal(x->settings.routing_group, y->settings.routing_group);
    assert_int_equal(x->settings.block_size, y->settings.block_size);
    assert_string_equal(x->settings.lora_name, y->settings.lora_name);
    assert_int_equal(x->settings.mm_identity, y->settings.mm_identity);
    assert_int_equal(x->settings.accepts_mm_hashes, y->settings.accepts_mm_hashes);
    assert_int_equal(x->settings.is_eagle, y->settings.is_eagle);
    assert_int_equal(x->settings.engine, y->settings.engine);
    assert_int_equal(y->settings.has_image_token_id, true);
    assert_int_equal(x->settings.image_token_id, y->settings.image_token_id);
    assert_int_equal(y->origin, KVR_ORIGIN_PEER);
    kvr_registrations_free(&ra);
    kvr_registrations_free(&rb);
    kvr_server_stop(b);
    kvr_server_stop(a);
    th_engine_stop(&e);
}

/* ---------------------------------------------------------------- join */

typedef struct {
    th_engine *e;
    th_cache cache;
    atomic_int stop;
    atomic_int published;
} publisher;

static void *publish_main(void *arg)
{
    publisher *p = arg;
    for (uint64_t seq = 0; !p->stop && seq < TH_HISTORY; seq++) {
        th_step s;
        th_cache_step(&p->cache, &s);
        th_send_events(p->e, seq, s.evs, s.n, true);
        p->published++;
        th_sleep_ms(2);
    }
    return NULL;
}

/* Polls until the server's index holds exactly the engine's cache. */
static bool index_equals_engine(kvr_server *srv, const th_cache *c, uint64_t worker)
{
    static uint64_t want[TH_CACHE_MAX], got[TH_CACHE_MAX];
    size_t nw = th_cache_visible_set(c, want, TH_CACHE_MAX), ng = 0;
    double end = th_now() + WAIT / 1000.0;
    do {
        ng = th_index_held(kvr_server_indexer(srv), worker, got, TH_CACHE_MAX);
        if (th_sets_equal(want, nw, got, ng)) {
            fprintf(stderr, "  engine holds %zu blocks, index the same %zu\n", nw, ng);
            return true;
        }
        th_sleep_ms(20);
    } while (th_now() < end);
    fprintf(stderr, "  engine holds %zu blocks, index %zu\n", nw, ng);
    return false;
}

/* A replica started with --peers while the engine keeps publishing ends
 * equal to the peer (and to the engine), with and without a replay endpoint
 * to fill a gap; started with only --peers it gets the peer's registrations,
 * started with the same workers in its config too it keeps them. */
static void join_while_publishing(bool replay, bool config)
{
    char base_a[64], base_b[64];
    kvr_server *a = start(base_a, sizeof base_a, NULL, 0);
    th_engine e;
    th_engine_start(&e);
    reg(base_a, 11, 0, &e, replay);
    assert_true(th_engine_wait_sub(&e, WAIT));
    publisher p = {.e = &e};
    th_cache_init(&p.cache, replay ? 21 : 22);
    pthread_t t;
    pthread_create(&t, NULL, publish_main, &p);
    while (p.published < 100)
        th_sleep_ms(5);
    const char *peers[1] = {base_a};
    char workers[1024];
    snprintf(workers, sizeof workers,
             "[{\"instance_id\":11,\"endpoint\":\"%s\",\"model_name\":\"m\",\"block_size\":%d%s%s%s}]",
             e.endpoint, BS, replay ? ",\"replay_endpoint\":\"" : "",
             replay ? e.replay_endpoint : "", replay ? "\"" : "");
    kvr_server *b = start_with(base_b, sizeof base_b, peers, 1, config ? workers : NULL);
    int at_join = p.published;
    while (p.published < at_join + 100)
        th_sleep_ms(5);
    p.stop = 1;
    pthread_join(t, NULL);
    fprintf(stderr, "  joined after %d batches, %d in all\n", at_join, p.published);
    assert_true(index_equals_engine(a, &p.cache, 11));
    assert_true(index_equals_engine(b, &p.cache, 11));
    owns oa = ownerships(a), ob = ownerships(b);
    assert_true(owns_equal(&oa, &ob));
    free(oa.v);
    free(ob.v);
    /* B has the peer's worker: /workers lists it, /query scores it */
    json_t *w = th_json("GET", base_b, "/workers", NULL, NULL);
    assert_int_equal(json_array_size(w), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(w, 0), "instance_id")),
                     11);
    json_decref(w);
    long st;
    json_t *q = th_json("POST", base_b, "/query", "{\"model_name\":\"m\",\"token_ids\":[1,2,3,4]}",
                        &st);
    assert_int_equal(st, 200);
    json_decref(q);
    static const char *const names[] = {"batches",  "seq_gaps",       "lost_batches",
                                        "replays_ok", "replays_failed", "restarts",
                                        "rank_clears", "duplicates_skipped"};
    fprintf(stderr, "  replica's counters:");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        fprintf(stderr, " %s=%lld", names[i], th_counter(base_b, 11, "m", names[i]));
    fprintf(stderr, "\n");
    assert_int_equal(th_counter(base_b, 11, "m", "lost_batches"), 0);
    kvr_server_stop(b);
    kvr_server_stop(a);
    th_engine_stop(&e);
}

static void test_replica_joins_while_engine_publishes(void **state)
{
    (void)state;
    join_while_publishing(true, false);
}

static void test_replica_joins_while_engine_publishes_without_replay(void **state)
{
    (void)state;
    join_while_publishing(false, false);
}

static void test_replica_with_config_workers_joins_while_engine_publishes(void **state)
{
    (void)state;
    join_while_publishing(false, true);
}

/* Recovery into a replica whose listener already applied part of the
 * stream (as when the cluster's bucket registered the worker first): its
 * own state is replaced by the dump's, not merged with it, so removals the
 * two states disagree on do not leave stale blocks. */
static void test_recover_into_a_replica_that_already_listens(void **state)
{
    (void)state;
    char base_a[64], base_b[64];
    kvr_server *a = start(base_a, sizeof base_a, NULL, 0);
    kvr_server *b = start(base_b, sizeof base_b, NULL, 0);
    th_engine e;
    th_engine_start(&e);
    reg(base_a, 12, 0, &e, true);
    reg(base_b, 12, 0, &e, true);
    /* XPUB passes one subscription for the two: a late SUB replays from 0 */
    assert_true(th_engine_wait_sub(&e, WAIT));
    publisher p = {.e = &e};
    th_cache_init(&p.cache, 23);
    pthread_t t;
    pthread_create(&t, NULL, publish_main, &p);
    while (p.published < 150)
        th_sleep_ms(5);
    char err[320];
    assert_int_equal(kvr_server_recover_from_peer(b, base_a, err, sizeof err), 0);
    int at = p.published;
    while (p.published < at + 80)
        th_sleep_ms(5);
    p.stop = 1;
    pthread_join(t, NULL);
    assert_true(index_equals_engine(a, &p.cache, 12));
    assert_true(index_equals_engine(b, &p.cache, 12));
    kvr_server_stop(b);
    kvr_server_stop(a);
    th_engine_stop(&e);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamo_form_as_dynamo_writes_it),
        cmocka_unit_test(test_dump_read_back_equal_in_both_forms),
        cmocka_unit_test(test_dynamo_hand_built_dump_loads),
        cmocka_unit_test(test_peer_list_endpoints),
        cmocka_unit_test(test_registrations_round_trip_through_recovery),
        cmocka_unit_test(test_replica_joins_while_engine_publishes),
        cmocka_unit_test(test_replica_joins_while_engine_publishes_without_replay),
        cmocka_unit_test(test_replica_with_config_workers_joins_while_engine_publishes),
        cmocka_unit_test(test_recover_into_a_replica_that_already_listens),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
