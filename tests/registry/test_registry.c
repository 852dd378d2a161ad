/* The registry's contract (include/kvrouter/registry.h) without HTTP: each
 * result with the condition that produces it, the unregistration scopes,
 * the records and origins kvr_registry_list shows, the observer's events,
 * and the worker limit. Real ZeroMQ publishers feed the listeners. */
#include "test_support.h"

#include <math.h>

#include "kvrouter/registry.h"
#include "../server/net_helpers.h"

#define BS 4
#define WAIT 10000

typedef struct {
    kvr_indexer *ix;
    kvr_source *src;
    kvr_registry *reg;
} fx;

static void fx_start(fx *f, size_t max_workers)
{
    f->ix = kvr_indexer_create();
    f->src = kvr_source_create(f->ix, NULL);
    kvr_registry_config c = {.max_workers = max_workers};
    f->reg = kvr_registry_create(f->src, &c);
    assert_non_null(f->reg);
}

static void fx_stop(fx *f)
{
    kvr_source_destroy(f->src);
    kvr_registry_destroy(f->reg);
    kvr_indexer_destroy(f->ix);
}

static kvr_registration rg(const char *group, uint64_t id, uint32_t rank, const char *endpoint)
{
    kvr_registration r;
    memset(&r, 0, sizeof r);
    r.settings.model_name = "m";
    r.settings.routing_group = group;
    r.settings.worker_id = id;
    r.settings.block_size = BS;
    r.settings.accepts_mm_hashes = -1;
    r.dp_rank = rank;
    r.endpoint = endpoint;
    r.origin = KVR_ORIGIN_HTTP;
    return r;
}

/* Blocks of worker `id` rank 0 seen by a match of one block of tokens. */
static uint32_t matched(fx *f, const char *group, uint64_t id, const uint64_t *tokens)
{
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    uint64_t local[1];
    th_local_hashes(tokens, BS, BS, local, 1);
    const kvr_match_entry *e = NULL;
    size_t n = kvr_indexer_match_hashes(f->ix, "m", group, ctx, local, 1, &e);
    uint32_t blocks = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].worker_id == id)
            blocks = e[i].gpu_blocks;
    kvr_match_ctx_destroy(ctx);
    return blocks;
}

static bool wait_matched(fx *f, const char *group, uint64_t id, const uint64_t *tokens,
                         uint32_t want)
{
    double end = th_now() + WAIT / 1000.0;
    while (th_now() < end) {
        if (matched(f, group, id, tokens) == want)
            return true;
        th_sleep_ms(5);
    }
    return false;
}

static void publish_block(th_engine *e, uint64_t seq, uint64_t hash, const uint64_t *tokens)
{
    kvr_raw_event ev = th_store(&hash, 1, 0, tokens, BS);
    th_send_events(e, seq, &ev, 1, true);
}

static void test_each_result_and_its_condition(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 0);
    th_engine e, e2;
    th_engine_start(&e);
    th_engine_start(&e2);
    kvr_registry_reply out;
    kvr_registration r = rg(NULL, 1, 0, e.endpoint);
    assert_int_equal(kvr_registry_register(f.reg, &r, &out), KVR_REGISTRY_CREATED);
    assert_false(out.reset);
    assert_true(th_engine_wait_sub(&e, WAIT));
    uint64_t tokens[BS] = {1, 2, 3, 4};
    publish_block(&e, 0, 11, tokens);
    assert_true(wait_matched(&f, NULL, 1, tokens, 1));

    /* Same settings, explicit defaults: UNCHANGED, state kept. */
    r.settings.routing_group = "default";
    r.settings.accepts_mm_hashes = 1;
    assert_int_equal(kvr_registry_register(f.reg, &r, &out), KVR_REGISTRY_UNCHANGED);
    assert_int_equal(matched(&f, NULL, 1, tokens), 1);

    /* accepts_mm_hashes flipped: UPDATED, state kept. */
    r.settings.accepts_mm_hashes = 0;
    assert_int_equal(kvr_registry_register(f.reg, &r, &out), KVR_REGISTRY_UPDATED);
    assert_false(out.accepts_mm_hashes);
    assert_int_equal(matched(&f, NULL, 1, tokens), 1);

    /* Same settings, new endpoint: LISTENER_RESTARTED, index kept. */
    r.endpoint = e2.endpoint;
    assert_int_equal(kvr_registry_register(f.reg, &r, &out), KVR_REGISTRY_LISTENER_RESTARTED);
    assert_true(out.listener_restarted);
    assert_int_equal(matched(&f, NULL, 1, tokens), 1);

    /* Changed mm_identity: RESET, state cleared, the listener keeps going. */
    r.settings.mm_identity = KVR_MM_ENGINE_WIDE;
    assert_int_equal(kvr_registry_register(f.reg, &r, &out), KVR_REGISTRY_RESET);
    assert_true(out.reset);
    assert_false(out.listener_restarted);
    assert_int_equal(out.mm_identity, KVR_MM_ENGINE_WIDE);
    assert_int_equal(matched(&f, NULL, 1, tokens), 0);
    assert_true(th_engine_wait_sub(&e2, WAIT));
    publish_block(&e2, 0, 12, tokens);
    assert_true(wait_matched(&f, NULL, 1, tokens, 1));

    /* A new rank with other settings: CREATED, and the reset said. */
    kvr_registration r1 = r;
    r1.dp_rank = 1;
    r1.endpoint = e.endpoint;
    r1.settings.mm_identity = KVR_MM_LEGACY;
    assert_int_equal(kvr_registry_register(f.reg, &r1, &out), KVR_REGISTRY_CREATED);
    assert_true(out.reset);
    assert_int_equal(kvr_registry_ranks(f.reg), 2);
    assert_int_equal(kvr_registry_workers(f.reg), 1);

    /* Another worker with another block size: BLOCK_SIZE_CONFLICT names it. */
    kvr_registration r2 = rg(NULL, 2, 0, e.endpoint);
    r2.settings.block_size = 8;
    assert_int_equal(kvr_registry_register(f.reg, &r2, &out), KVR_REGISTRY_BLOCK_SIZE_CONFLICT);
    assert_int_equal(out.group_block_size, BS);
    assert_string_equal(out.field, "block_size");
    assert_int_equal(kvr_registry_workers(f.reg), 1);

    th_engine_stop(&e2);
    th_engine_stop(&e);
    fx_stop(&f);
}

static void count_listeners(kvr_source *src, void *arg)
{
    *(size_t *)arg = kvr_source_count(src, NULL);
}

static void test_invalid_names_the_field_and_changes_nothing(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 0);
    char long_name[KVR_NAME_MAX + 8];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    struct {
        const char *field;
        kvr_registration r;
    } cases[24];
    size_t n = 0;
    kvr_registration base = rg(NULL, 1, 0, "tcp://127.0.0.1:5999");
    cases[n].field = "model_name", cases[n].r = base, cases[n++].r.settings.model_name = "";
    cases[n].field = "routing_group", cases[n].r = base,
    cases[n++].r.settings.routing_group = long_name;
    cases[n].field = "lora_name", cases[n].r = base, cases[n++].r.settings.lora_name = long_name;
    cases[n].field = "topic", cases[n].r = base, cases[n++].r.topic = long_name;
    cases[n].field = "block_size", cases[n].r = base, cases[n++].r.settings.block_size = 0;
    cases[n].field = "block_size", cases[n].r = base,
    cases[n++].r.settings.block_size = KVR_MAX_BLOCK_SIZE + 1;
    cases[n].field = "dp_rank", cases[n].r = base, cases[n++].r.dp_rank = KVR_MAX_DP_RANKS;
    cases[n].field = "mm_identity", cases[n].r = base,
    cases[n++].r.settings.mm_identity = (kvr_mm_identity)7;
    cases[n].field = "accepts_mm_hashes", cases[n].r = base,
    cases[n++].r.settings.accepts_mm_hashes = 2;
    cases[n].field = "engine", cases[n].r = base,
    cases[n++].r.settings.engine = (kvr_engine)KVR_ENGINE_COUNT;
    cases[n].field = "image_token_id", cases[n].r = base, cases[n].r.settings.has_image_token_id = true,
    cases[n++].r.settings.image_token_id = KVR_WIDE_SENTINEL;
    cases[n].field = "kv_events", cases[n].r = base,
    cases[n++].r.settings.kv_events = (kvr_kv_events)(KVR_KV_EVENTS_OFF + 1);
    cases[n].field = "prefill_tps", cases[n].r = base, cases[n++].r.settings.prefill_tps = -1;
    cases[n].field = "prefill_tps", cases[n].r = base, cases[n++].r.settings.prefill_tps = NAN;
    cases[n].field = "max_total_num_tokens", cases[n].r = base,
    cases[n++].r.settings.max_total_num_tokens = KVR_MAX_KV_CAPACITY_TOKENS + 1;
    cases[n].field = "endpoint", cases[n].r = base, cases[n++].r.endpoint = "http://x:1";
    cases[n].field = "endpoint", cases[n].r = base, cases[n++].r.endpoint = "tcp://127.0.0.1";
    cases[n].field = "replay_endpoint", cases[n].r = base, cases[n++].r.replay_endpoint = "bogus";
    /* No endpoint: only for an engine that publishes nothing, and then
     * with nothing else to listen to. */
    cases[n].field = "endpoint", cases[n].r = base, cases[n++].r.endpoint = NULL;
    kvr_registration silent = base;
    silent.endpoint = "";
    silent.settings.kv_events = KVR_KV_EVENTS_OFF;
    cases[n].field = "replay_endpoint", cases[n].r = silent,
    cases[n++].r.replay_endpoint = "tcp://127.0.0.1:5998";
    cases[n].field = "topic", cases[n].r = silent, cases[n++].r.topic = "kv";
    for (size_t i = 0; i < n; i++) {
        kvr_registry_reply out;
        assert_int_equal(kvr_registry_register(f.reg, &cases[i].r, &out), KVR_REGISTRY_INVALID);
        assert_non_null(out.field);
        assert_string_equal(out.field, cases[i].field);
        assert_non_null(strstr(out.error, cases[i].field));
    }
    assert_int_equal(kvr_registry_workers(f.reg), 0);
    assert_null(kvr_indexer_find(f.ix, "m", NULL, 1));
    /* ... and without them it registers, with no listener (and the
     * largest capacity is a capacity). */
    silent.settings.max_total_num_tokens = KVR_MAX_KV_CAPACITY_TOKENS;
    kvr_registry_reply out;
    assert_int_equal(kvr_registry_register(f.reg, &silent, &out), KVR_REGISTRY_CREATED);
    assert_non_null(kvr_indexer_find(f.ix, "m", NULL, 1));
    size_t listeners = 99;
    assert_int_equal(kvr_source_run(f.src, count_listeners, &listeners), 0);
    assert_int_equal(listeners, 0);
    kvr_registrations l;
    assert_int_equal(kvr_registry_list(f.reg, &l), 0);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.items[0].endpoint, "");
    assert_true(l.items[0].settings.max_total_num_tokens == KVR_MAX_KV_CAPACITY_TOKENS);
    kvr_registrations_free(&l);
    fx_stop(&f);
}

static void test_unregister_scopes(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 0);
    const char *ep = "tcp://127.0.0.1:5998";
    /* worker 1: group a ranks 0,1; group b rank 0. worker 2: group a. */
    kvr_registration regs[] = {rg("a", 1, 0, ep), rg("a", 1, 1, ep), rg("b", 1, 0, ep),
                               rg("a", 2, 0, ep)};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(kvr_registry_register(f.reg, &regs[i], NULL), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_workers(f.reg), 3);

    kvr_unregister_reply out;
    kvr_unregistration u = {.model_name = "m", .routing_group = "a", .worker_id = 1,
                            .has_rank = true, .dp_rank = 1};
    assert_int_equal(kvr_registry_unregister(f.reg, &u, &out), KVR_UNREG_REMOVED);
    assert_int_equal(out.ranks_removed, 1);
    assert_int_equal(out.listeners_stopped, 1);
    assert_int_equal(out.workers_removed, 0);
    assert_non_null(kvr_indexer_find(f.ix, "m", "a", 1));
    /* The same rank again: nothing matches. */
    assert_int_equal(kvr_registry_unregister(f.reg, &u, &out), KVR_UNREG_NOT_FOUND);

    /* No group: every group of the model, the rank ignored. */
    u.routing_group = NULL;
    u.dp_rank = 0;
    assert_int_equal(kvr_registry_unregister(f.reg, &u, &out), KVR_UNREG_REMOVED);
    assert_int_equal(out.workers_removed, 2);
    assert_null(kvr_indexer_find(f.ix, "m", "a", 1));
    assert_null(kvr_indexer_find(f.ix, "m", "b", 1));
    assert_non_null(kvr_indexer_find(f.ix, "m", "a", 2));

    /* A group and no rank: the whole instance there. */
    kvr_unregistration u2 = {.model_name = "m", .routing_group = "a", .worker_id = 2};
    assert_int_equal(kvr_registry_unregister(f.reg, &u2, &out), KVR_UNREG_REMOVED);
    assert_int_equal(out.workers_removed, 1);
    assert_int_equal(kvr_registry_workers(f.reg), 0);
    assert_int_equal(kvr_registry_ranks(f.reg), 0);
    assert_int_equal(kvr_registry_unregister(f.reg, &u2, &out), KVR_UNREG_NOT_FOUND);
    kvr_unregistration bad = {.model_name = "", .worker_id = 2};
    assert_int_equal(kvr_registry_unregister(f.reg, &bad, &out), KVR_UNREG_INVALID);
    fx_stop(&f);
}

static void test_origin_mask_removes_only_its_own(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 0);
    const char *ep = "tcp://127.0.0.1:5997";
    kvr_registration a = rg(NULL, 1, 0, ep), b = rg(NULL, 1, 1, ep);
    a.origin = KVR_ORIGIN_CONFIG;
    b.origin = KVR_ORIGIN_HTTP;
    assert_int_equal(kvr_registry_register(f.reg, &a, NULL), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_register(f.reg, &b, NULL), KVR_REGISTRY_CREATED);
    kvr_unregistration u = {.model_name = "m", .routing_group = "default", .worker_id = 1,
                            .origins = KVR_ORIGIN_BIT(KVR_ORIGIN_DISCOVERY)};
    kvr_unregister_reply out;
    assert_int_equal(kvr_registry_unregister(f.reg, &u, &out), KVR_UNREG_NOT_FOUND);
    u.origins = KVR_ORIGIN_BIT(KVR_ORIGIN_CONFIG);
    assert_int_equal(kvr_registry_unregister(f.reg, &u, &out), KVR_UNREG_REMOVED);
    assert_int_equal(out.ranks_removed, 1);
    assert_int_equal(out.workers_removed, 0);
    kvr_registrations l;
    assert_int_equal(kvr_registry_list(f.reg, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.items[0].dp_rank, 1);
    assert_int_equal(l.items[0].origin, KVR_ORIGIN_HTTP);
    kvr_registrations_free(&l);
    /* A re-registration takes the record over: the last registrant owns it. */
    b.origin = KVR_ORIGIN_CONFIG;
    assert_int_equal(kvr_registry_register(f.reg, &b, NULL), KVR_REGISTRY_UNCHANGED);
    assert_int_equal(kvr_registry_unregister(f.reg, &u, &out), KVR_UNREG_REMOVED);
    assert_int_equal(out.workers_removed, 1);
    fx_stop(&f);
}

static void test_list_shows_full_settings_in_order(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 0);
    kvr_registration a = rg(NULL, 7, 0, "tcp://127.0.0.1:5996");
    a.replay_endpoint = "tcp://127.0.0.1:5995";
    a.topic = "kv";
    a.settings.lora_name = "ad";
    a.origin = KVR_ORIGIN_CLI;
    kvr_registration b = rg("g", 8, 3, "ipc:///tmp/kvr-test-list");
    b.origin = KVR_ORIGIN_DISCOVERY;
    kvr_registration a1 = a;
    a1.dp_rank = 2;
    a1.settings.is_eagle = true; /* changes the worker: rank 0's record follows */
    assert_int_equal(kvr_registry_register(f.reg, &a, NULL), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_register(f.reg, &b, NULL), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_register(f.reg, &a1, NULL), KVR_REGISTRY_CREATED);
    kvr_registrations l;
    assert_int_equal(kvr_registry_list(f.reg, &l), 0);
    assert_int_equal(l.n, 3);
    const kvr_registration *x = &l.items[0];
    assert_int_equal(x->settings.worker_id, 7);
    assert_int_equal(x->dp_rank, 0);
    assert_string_equal(x->settings.routing_group, "default");
    assert_string_equal(x->settings.lora_name, "ad");
    assert_true(x->settings.is_eagle);
    assert_string_equal(x->replay_endpoint, "tcp://127.0.0.1:5995");
    assert_string_equal(x->topic, "kv");
    assert_int_equal(x->origin, KVR_ORIGIN_CLI);
    assert_int_equal(l.items[1].dp_rank, 2);
    assert_int_equal(l.items[1].settings.worker_id, 7);
    x = &l.items[2];
    assert_int_equal(x->settings.worker_id, 8);
    assert_int_equal(x->dp_rank, 3);
    assert_string_equal(x->settings.routing_group, "g");
    assert_string_equal(x->endpoint, "ipc:///tmp/kvr-test-list");
    assert_string_equal(x->replay_endpoint, "");
    assert_string_equal(kvr_origin_name(x->origin), "discovery");
    kvr_registrations_free(&l);
    fx_stop(&f);
}

typedef struct {
    kvr_registry *reg;
    char log[32][64];
    size_t n;
    size_t ranks_seen_in_callback;
} obs_log;

static void on_change(void *user, const kvr_reg_event *ev)
{
    obs_log *o = user;
    const char *kind = ev->kind == KVR_REG_EVENT_ADDED     ? "added"
                       : ev->kind == KVR_REG_EVENT_CHANGED ? "changed"
                                                           : "removed";
    if (o->n < 32)
        snprintf(o->log[o->n++], 64, "%s %u/%u %s", kind, (unsigned)ev->reg->settings.worker_id,
                 ev->reg->dp_rank,
                 ev->kind == KVR_REG_EVENT_REMOVED ? "-" : kvr_registry_result_name(ev->result));
    o->ranks_seen_in_callback = kvr_registry_ranks(o->reg); /* the lock is not held */
}

static void test_observer_hears_each_change_in_order(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 0);
    obs_log o = {.reg = f.reg};
    assert_int_equal(kvr_registry_observe(f.reg, on_change, &o), 0);
    const char *ep = "tcp://127.0.0.1:5994", *ep2 = "tcp://127.0.0.1:5993";
    kvr_registration r0 = rg(NULL, 1, 0, ep), r1 = rg(NULL, 1, 1, ep);
    kvr_registry_register(f.reg, &r0, NULL);
    kvr_registry_register(f.reg, &r1, NULL);
    kvr_registry_register(f.reg, &r1, NULL); /* unchanged: silent */
    r1.origin = KVR_ORIGIN_CONFIG;            /* origin only: heard */
    kvr_registry_register(f.reg, &r1, NULL);
    r0.endpoint = ep2;
    kvr_registry_register(f.reg, &r0, NULL);
    r0.settings.is_eagle = true; /* settings: both ranks change */
    kvr_registry_register(f.reg, &r0, NULL);
    kvr_registration bad = rg(NULL, 1, 0, "nope");
    kvr_registry_register(f.reg, &bad, NULL); /* failure: silent */
    kvr_unregistration u = {.model_name = "m", .worker_id = 1};
    kvr_registry_unregister(f.reg, &u, NULL);
    const char *want[] = {"added 1/0 created",   "added 1/1 created",
                          "changed 1/1 unchanged", "changed 1/0 listener_restarted",
                          "changed 1/0 reset",   "changed 1/1 reset",
                          "removed 1/0 -",       "removed 1/1 -"};
    assert_int_equal(o.n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < o.n; i++)
        assert_string_equal(o.log[i], want[i]);
    assert_int_equal(o.ranks_seen_in_callback, 0);
    kvr_registry_unobserve(f.reg, on_change, &o);
    kvr_registry_register(f.reg, &r0, NULL);
    assert_int_equal(o.n, sizeof want / sizeof want[0]);
    fx_stop(&f);
}

static void test_worker_limit_is_its_own_result(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 2);
    const char *ep = "tcp://127.0.0.1:5992";
    kvr_registration a = rg(NULL, 1, 0, ep), b = rg(NULL, 2, 0, ep), c = rg(NULL, 3, 0, ep);
    kvr_registry_reply out;
    assert_int_equal(kvr_registry_register(f.reg, &a, &out), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_register(f.reg, &b, &out), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_register(f.reg, &c, &out), KVR_REGISTRY_WORKER_LIMIT);
    assert_int_equal(out.limit, 2);
    assert_non_null(strstr(out.error, "max_workers"));
    assert_null(kvr_indexer_find(f.ix, "m", NULL, 3));
    /* A new rank of a registered worker and a re-registration still pass. */
    a.dp_rank = 1;
    assert_int_equal(kvr_registry_register(f.reg, &a, &out), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_register(f.reg, &b, &out), KVR_REGISTRY_UNCHANGED);
    kvr_registry_set_max_workers(f.reg, 0);
    assert_int_equal(kvr_registry_register(f.reg, &c, &out), KVR_REGISTRY_CREATED);
    assert_int_equal(kvr_registry_workers(f.reg), 3);
    fx_stop(&f);
}

static void test_sync_makes_one_origin_equal_to_a_list(void **state)
{
    (void)state;
    fx f;
    fx_start(&f, 0);
    const char *ep = "tcp://127.0.0.1:5991", *ep2 = "tcp://127.0.0.1:5990";
    kvr_registration http = rg(NULL, 9, 0, ep);
    assert_int_equal(kvr_registry_register(f.reg, &http, NULL), KVR_REGISTRY_CREATED);
    kvr_registration first[] = {rg(NULL, 1, 0, ep), rg(NULL, 1, 1, ep), rg("g", 2, 0, ep)};
    kvr_registry_sync_report rep;
    assert_int_equal(kvr_registry_sync(f.reg, KVR_ORIGIN_CONFIG, first, 3, NULL, &rep), 0);
    assert_int_equal(rep.created, 3);
    assert_int_equal(kvr_registry_ranks(f.reg), 4);
    /* Next version: rank 1 gone, worker 2 moved endpoint, worker 3 new and
     * bad, worker 9 (http) not listed: it stays. */
    kvr_registration second[] = {rg(NULL, 1, 0, ep), rg("g", 2, 0, ep2), rg(NULL, 3, 0, "x"),
                                 rg(NULL, 4, 0, ep)};
    kvr_registry_reply replies[4];
    assert_int_equal(kvr_registry_sync(f.reg, KVR_ORIGIN_CONFIG, second, 4, replies, &rep), 1);
    assert_int_equal(rep.removed, 1);
    assert_int_equal(rep.unchanged, 1);
    assert_int_equal(rep.changed, 1);
    assert_int_equal(rep.created, 1);
    assert_int_equal(rep.failed, 1);
    assert_int_equal(replies[1].result, KVR_REGISTRY_LISTENER_RESTARTED);
    assert_int_equal(replies[2].result, KVR_REGISTRY_INVALID);
    assert_string_equal(replies[2].field, "endpoint");
    kvr_registrations l;
    assert_int_equal(kvr_registry_list(f.reg, &l), 0);
    assert_int_equal(l.n, 4); /* 9/0 http, 1/0, 2/0, 4/0 */
    assert_int_equal(l.items[0].settings.worker_id, 9);
    assert_int_equal(l.items[0].origin, KVR_ORIGIN_HTTP);
    for (size_t i = 1; i < l.n; i++)
        assert_int_equal(l.items[i].origin, KVR_ORIGIN_CONFIG);
    kvr_registrations_free(&l);
    /* An empty list removes every config record, and only those. */
    assert_int_equal(kvr_registry_sync(f.reg, KVR_ORIGIN_CONFIG, NULL, 0, NULL, &rep), 0);
    assert_int_equal(rep.removed, 3);
    assert_int_equal(kvr_registry_workers(f.reg), 1);
    fx_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_result_and_its_condition),
        cmocka_unit_test(test_invalid_names_the_field_and_changes_nothing),
        cmocka_unit_test(test_unregister_scopes),
        cmocka_unit_test(test_origin_mask_removes_only_its_own),
        cmocka_unit_test(test_list_shows_full_settings_in_order),
        cmocka_unit_test(test_observer_hears_each_change_in_order),
        cmocka_unit_test(test_worker_limit_is_its_own_result),
        cmocka_unit_test(test_sync_makes_one_origin_equal_to_a_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
