/* The ttft /route costs its idle candidates once, as a class
 * (src/route/idle_class.c); a decision with debug costs scores every
 * candidate one by one. Both must choose alike: two routers built the same
 * way (same seed, same clock, same events, same bookings) route the same
 * requests, one without and one with debug, over random fleets, loads,
 * learned rates and registered rates, half of them fleets where every
 * worker has been booked (recent work everywhere: the class's members are
 * told apart by it). And the class follows the router's state slots:
 * queued prefill or decodes take a worker out and their release brings it
 * back; the representative is the member with the least recent work.
 * And the fleet may change between requests (joins, leaves, registered
 * rates and capacities, events): test_class_follows_fleet_changes. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>

#include "route/internal.h"
#include "route_test_util.h"
#include "util/rng.h"

#define BS 4
#define FAMILIES 3          /* prompt families workers cache; family 3 is cold */
#define FAMILY_TOKENS 512

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
} side;

typedef struct {
    side a, b; /* a routes without debug (the class), b with it (every candidate) */
    kvr_worker *w[2][128]; /* each side's handle of worker id (test_class_follows_fleet_changes) */
    bool gone[128];        /* unregistered */
    double now;
    uint64_t rng;
    uint32_t tokens[FAMILIES + 1][FAMILY_TOKENS];
} fx;

static uint32_t below(fx *f, uint32_t n) { return (uint32_t)(kvr_splitmix64(&f->rng) % n); }

static void side_open(fx *f, side *s, uint64_t seed)
{
    s->ix = kvr_indexer_create();
    assert_non_null(s->ix);
    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    assert_int_equal(cfg.cost_model, KVR_COST_TTFT);
    cfg.rng_seed = seed;
    cfg.rank_refresh_s = 0;
    cfg.booking_ttl_s = 30;
    rt_fake_clock(&cfg, &f->now);
    s->r = kvr_router_create(s->ix, &cfg);
    assert_non_null(s->r);
}

static fx *make(uint64_t seed)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->now = 100;
    f->rng = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint32_t k = 0; k <= FAMILIES; k++)
        for (uint32_t i = 0; i < FAMILY_TOKENS; i++)
            f->tokens[k][i] = 1000 + k * 100000 + i;
    side_open(f, &f->a, seed);
    side_open(f, &f->b, seed);
    return f;
}

static void done(fx *f)
{
    rt_close(f->a.ix, f->a.r);
    rt_close(f->b.ix, f->b.r);
    free(f);
}

/* A worker's settings here: events on, a registered rate and capacity. */
static kvr_worker_settings settings_of(uint64_t id, double prefill_tps, uint64_t capacity)
{
    kvr_worker_settings ws = {0};
    ws.kv_events = KVR_KV_EVENTS_ON;
    ws.model_name = RT_MODEL;
    ws.worker_id = id;
    ws.block_size = BS;
    ws.accepts_mm_hashes = -1;
    ws.prefill_tps = prefill_tps;
    ws.max_total_num_tokens = capacity;
    return ws;
}

static kvr_worker *register_worker(side *s, uint64_t id, double prefill_tps)
{
    kvr_worker_settings ws = settings_of(id, prefill_tps, 0);
    kvr_worker *w = NULL;
    assert_int_equal(kvr_indexer_register(s->ix, &ws, &w), KVR_REG_CREATED);
    return w;
}

/* Worker id on both sides: maybe a registered rate, maybe part of a
 * family cached on rank 0 and (sometimes) on rank 1. */
static void random_worker(fx *f, uint64_t id)
{
    static const double rates[] = {0, 0, 0, 8000, 12000};
    double tps = rates[below(f, 5)];
    uint32_t ranks = 1 + (below(f, 4) == 0);
    uint32_t fam[2], blocks[2];
    for (uint32_t k = 0; k < ranks; k++) {
        fam[k] = below(f, FAMILIES);
        blocks[k] = below(f, 3) ? 0 : below(f, FAMILY_TOKENS / BS);
    }
    side *sides[] = {&f->a, &f->b};
    for (int s = 0; s < 2; s++) {
        kvr_worker *w = register_worker(sides[s], id, tps);
        if (id < 128)
            f->w[s][id] = w;
        for (uint32_t k = 0; k < ranks; k++) {
            uint64_t t[FAMILY_TOKENS];
            rt_widen(f->tokens[fam[k]], t, blocks[k] * BS);
            if (blocks[k] || k > 0) /* a rank > 0 exists once it has state */
                rt_store(sides[s]->ix, w, k, BS, t, blocks[k] * BS, false,
                         id * 1000000 + k * 100000);
        }
    }
}

static kvr_route_decision route_on(side *s, const uint32_t *tokens, size_t n, const char *id,
                                   uint64_t pin, bool debug)
{
    return rt_route_as(s->r, tokens, n, id, pin, debug);
}

typedef struct {
    size_t decisions, balanced, idle_picks, worked_idle_picks;
    uint64_t picked[128];
} tally;

/* Routes one request on both sides and checks they decide alike. */
static void route_both(fx *f, const char *id, uint64_t pin, tally *t)
{
    uint32_t fam = below(f, FAMILIES + 1);
    size_t n = 8 + below(f, FAMILY_TOKENS - 8);
    kvr_route_decision da = route_on(&f->a, f->tokens[fam], n, id, pin, false);
    kvr_route_decision db = route_on(&f->b, f->tokens[fam], n, id, pin, true);
    assert_null(da.costs);
    if (da.worker_id != db.worker_id || da.dp_rank != db.dp_rank)
        fail_msg("class picked %llu/%u, every candidate %llu/%u (%zu candidates)",
                 (unsigned long long)da.worker_id, da.dp_rank,
                 (unsigned long long)db.worker_id, db.dp_rank, db.n_costs);
    assert_int_equal(da.reason, db.reason);
    assert_true(da.cost == db.cost);
    assert_int_equal(da.booked_prefill_tokens, db.booked_prefill_tokens);
    assert_int_equal(da.booked_blocks, db.booked_blocks);
    t->decisions++;
    t->balanced += da.reason == KVR_REASON_BALANCED;
    for (size_t i = 0; i < db.n_costs; i++)
        if (db.costs[i].worker_id == db.worker_id && db.costs[i].dp_rank == db.dp_rank &&
            db.costs[i].disk_blocks == 0 && db.costs[i].queued_tokens == 0 &&
            db.costs[i].decode_factor == 1.0) {
            t->idle_picks += db.costs[i].recent_work == 0;
            t->worked_idle_picks += db.costs[i].recent_work > 0;
        }
    if (da.worker_id < 128)
        t->picked[da.worker_id]++;
    kvr_route_decision_free(&db);
}

/* Books a cold prompt on every worker and frees it, a random while
 * apart: every worker has recent work, each its own amount, and no load. */
static void book_everyone(fx *f, uint32_t workers)
{
    for (uint32_t w = 1; w <= workers; w++) {
        char id[16];
        snprintf(id, sizeof id, "warm%u", w);
        size_t n = 8 + below(f, FAMILY_TOKENS - 8);
        kvr_route_decision da = route_on(&f->a, f->tokens[FAMILIES], n, id, w, false);
        kvr_route_decision db = route_on(&f->b, f->tokens[FAMILIES], n, id, w, true);
        assert_true(da.worker_id == w && db.worker_id == w);
        kvr_route_decision_free(&db);
        assert_int_equal(kvr_router_release(f->a.r, id), KVR_ROUTE_OK);
        assert_int_equal(kvr_router_release(f->b.r, id), KVR_ROUTE_OK);
        f->now += below(f, 3) ? 0 : below(f, 60000) / 1000.0;
    }
}

/* One of the live bookings finishes its prefill on both sides; it took a
 * while (a rate sample when it was long). */
static void prefill_one(fx *f, char (*live)[16], size_t n_live)
{
    f->now += 0.02 + below(f, 1000) / 1000.0;
    const char *id = live[below(f, (uint32_t)n_live)];
    kvr_route_status sa = kvr_router_prefill_done(f->a.r, id);
    assert_int_equal(sa, kvr_router_prefill_done(f->b.r, id));
}

/* One of the live bookings is freed on both sides. */
static void release_one(fx *f, char (*live)[16], size_t *n_live)
{
    size_t k = below(f, (uint32_t)*n_live);
    kvr_route_status sa = kvr_router_release(f->a.r, live[k]);
    assert_int_equal(sa, kvr_router_release(f->b.r, live[k]));
    memcpy(live[k], live[--*n_live], sizeof live[k]);
}

/* A fleet of 2 to max + 1 random workers on both sides; with an even seed
 * every worker booked before (the class then tells its members apart by
 * recent work alone). */
static fx *random_fleet(uint64_t seed, uint32_t max, uint32_t *workers)
{
    fx *f = make(seed);
    *workers = 2 + below(f, max);
    for (uint32_t w = 1; w <= *workers; w++)
        random_worker(f, w);
    if (seed % 2 == 0)
        book_everyone(f, *workers);
    return f;
}

static void test_class_picks_as_every_candidate(void **state)
{
    (void)state;
    tally t = {0};
    for (uint64_t trial = 1; trial <= 80; trial++) {
        uint32_t workers;
        fx *f = random_fleet(trial, 90, &workers);
        char live[64][16];
        size_t n_live = 0;
        for (int step = 0; step < 120; step++) {
            uint32_t op = below(f, 10);
            if (op < 3) {
                route_both(f, NULL, 0, &t);
            } else if (op < 6 && n_live < 64) {
                snprintf(live[n_live], sizeof live[n_live], "t%d", step);
                route_both(f, live[n_live++], below(f, 4) ? 0 : 1 + below(f, workers), &t);
            } else if (op < 8 && n_live) {
                prefill_one(f, live, n_live);
            } else if (op < 9 && n_live) {
                release_one(f, live, &n_live);
            } else {
                f->now += below(f, 4000) / 1000.0; /* queues drain, bookings expire */
            }
        }
        done(f);
    }
    /* The comparison saw what the class changes: random ties among idle
     * candidates, idle picks and many distinct workers. */
    size_t distinct = 0;
    for (size_t i = 0; i < 128; i++)
        distinct += t.picked[i] > 0;
    assert_true(t.decisions > 3000);
    assert_true(t.balanced > t.decisions / 10);
    assert_true(t.idle_picks > t.decisions / 10);
    assert_true(t.worked_idle_picks > t.decisions / 10);
    assert_true(distinct > 60);
}

/* A registered worker id in 1..workers, or 0 when none is left. */
static uint64_t alive(fx *f, uint32_t workers)
{
    for (int tries = 0; tries < 64; tries++) {
        uint64_t id = 1 + below(f, workers);
        if (!f->gone[id])
            return id;
    }
    return 0;
}

/* The class changes between requests as the fleet does: besides bookings,
 * prefills done, releases and time, workers join and leave, registered
 * prefill rates and KV capacities change (the caps snapshot's generation
 * moves) and events add cached prefixes; every request still decides as
 * the loop over every candidate does. A class kept up to date by the
 * router (not rebuilt per request) must pass this with each update site. */
static void test_class_follows_fleet_changes(void **state)
{
    (void)state;
    static const double rates[] = {0, 0, 8000, 12000};
    tally t = {0};
    size_t joins = 0, leaves = 0, changes = 0, stores = 0;
    for (uint64_t trial = 1; trial <= 40; trial++) {
        uint32_t workers;
        fx *f = random_fleet(1000 + trial, 40, &workers);
        char live[64][16];
        size_t n_live = 0;
        uint32_t left = 0;
        for (int step = 0; step < 150; step++) {
            uint32_t op = below(f, 14);
            uint64_t id = alive(f, workers);
            if (op < 3 || !id) {
                route_both(f, NULL, 0, &t);
            } else if (op < 5 && n_live < 64) {
                snprintf(live[n_live], sizeof live[n_live], "f%d", step);
                route_both(f, live[n_live++], below(f, 3) ? 0 : id, &t);
            } else if (op < 6 && n_live) {
                prefill_one(f, live, n_live);
            } else if (op < 7 && n_live) {
                release_one(f, live, &n_live);
            } else if (op < 8 && workers < 127) {
                random_worker(f, ++workers); /* joins */
                joins++;
            } else if (op < 9) {
                /* its registered rate and capacity change (state kept) */
                double tps = rates[below(f, 4)];
                kvr_worker_settings ws =
                    settings_of(id, tps, below(f, 2) ? 0 : 4096 + below(f, 8) * 4096);
                kvr_worker *wa = NULL, *wb = NULL;
                kvr_reg_result sa = kvr_indexer_register(f->a.ix, &ws, &wa);
                assert_int_equal(sa, kvr_indexer_register(f->b.ix, &ws, &wb));
                assert_true(sa == KVR_REG_UPDATED || sa == KVR_REG_UNCHANGED);
                changes++;
            } else if (op < 10) {
                /* its engine reports a prefix of a family cached */
                uint32_t fam = below(f, FAMILIES);
                uint32_t blocks = 1 + below(f, FAMILY_TOKENS / BS);
                uint64_t tk[FAMILY_TOKENS];
                rt_widen(f->tokens[fam], tk, blocks * BS);
                for (int sd = 0; sd < 2; sd++)
                    rt_store(sd ? f->b.ix : f->a.ix, f->w[sd][id], 0, BS, tk, blocks * BS, false,
                             id * 1000000 + 200000 + (uint64_t)step * 1000);
                stores++;
            } else if (op < 11 && workers - left > 2) {
                kvr_indexer_unregister(f->a.ix, f->w[0][id]); /* leaves */
                kvr_indexer_unregister(f->b.ix, f->w[1][id]);
                f->gone[id] = true;
                left++;
                leaves++;
            } else {
                f->now += below(f, 4000) / 1000.0;
            }
        }
        done(f);
    }
    assert_true(t.decisions > 2000);
    assert_true(t.balanced > t.decisions / 10);
    assert_true(t.idle_picks > t.decisions / 20);
    assert_true(joins > 100 && leaves > 100 && changes > 100 && stores > 100);
}

/* The idle class of a request of n tokens, as kvr_route builds it from the
 * router's slots: member worker ids into ids, their count returned. */
static size_t idle_members(side *sd, const uint32_t *tokens, size_t n, uint64_t *ids, size_t cap,
                           uint64_t *rep)
{
    kvr_query_request rq = rt_request(tokens, n, NULL, 0);
    kvr_query_result q;
    kvr_query_result_init(&q);
    kvr_index *idx = NULL;
    route_scratch *s = NULL;
    assert_int_equal(route_query(sd->r, &rq, &q, &idx, &s), KVR_ROUTE_OK);
    size_t ne = q.n_entries;
    const route_slot **st = calloc(ne, sizeof *st);
    route_slot *tmp = calloc(ne, sizeof *tmp);
    uint32_t *split = calloc(3 * ne, sizeof *split);
    assert_true(st && tmp && split);
    pthread_mutex_lock(&sd->r->mu);
    route_slots *slots = route_slots_for(&sd->r->bk, (uintptr_t)idx, s->rank_gen, s->rank_n);
    assert_non_null(slots);
    for (size_t i = 0; i < ne; i++)
        st[i] = route_slot_get(&sd->r->bk, slots, s->entry_slot[i], (uintptr_t)idx,
                               q.entries[i].worker_id, q.entries[i].dp_rank, &tmp[i]);
    double *work = calloc(ne, sizeof *work);
    assert_non_null(work);
    route_idle_split sp = {split, split + ne, SIZE_MAX, split + 2 * ne, work, 0, -1};
    route_idle_class(&q, st, s->entry_profile, sd->r->cfg.clock(sd->r->cfg.clock_ud), &sp);
    size_t m = sp.n_members < cap ? sp.n_members : cap;
    for (size_t i = 0; i < m; i++)
        ids[i] = q.entries[sp.members[i]].worker_id;
    *rep = sp.rep != SIZE_MAX ? q.entries[sp.at[sp.rep]].worker_id : 0;
    for (size_t i = 0; i < ne; i++) /* bound slots, as kvr_route reads them */
        assert_true(st[i] != &tmp[i]);
    pthread_mutex_unlock(&sd->r->mu);
    free(st);
    free(tmp);
    free(split);
    free(work);
    route_scratch_release(sd->r, s);
    kvr_query_result_free(&q);
    return sp.n_members;
}

/* The class of the request: its members in candidate order, and the
 * representative (the least recent work). */
static void expect_members(side *sd, const uint32_t *tokens, size_t n, const uint64_t *want,
                           size_t n_want, uint64_t want_rep)
{
    uint64_t got[8], rep;
    size_t m = idle_members(sd, tokens, n, got, 8, &rep);
    assert_int_equal(m, n_want);
    for (size_t i = 0; i < n_want; i++)
        assert_int_equal(got[i], want[i]);
    assert_int_equal(rep, want_rep);
}

static void test_class_follows_slot_changes(void **state)
{
    (void)state;
    fx *f = make(7);
    side *sd = &f->a;
    /* worker 1 holds family 0 whole; 2..4 hold nothing */
    for (uint64_t id = 1; id <= 4; id++) {
        kvr_worker *w = register_worker(sd, id, 0);
        if (id == 1) {
            uint64_t t[FAMILY_TOKENS];
            rt_widen(f->tokens[0], t, FAMILY_TOKENS);
            rt_store(sd->ix, w, 0, BS, t, FAMILY_TOKENS, false, 1000000);
        }
    }
    const uint32_t *cold = f->tokens[FAMILIES]; /* cached nowhere */
    kvr_route_decision d = route_on(sd, cold, 300, NULL, 0, false); /* binds the slots */
    const uint64_t all[] = {1, 2, 3, 4}, but1[] = {2, 3, 4}, but2[] = {1, 3, 4};
    expect_members(sd, cold, 300, all, 4, 1);
    /* family 0 on worker 1 is wholly cached: its booking adds a load with
     * nothing to prefill, but pending (with decode_ahead its context slows
     * the next prefill there): 1 leaves the cold request's class ... */
    d = route_on(sd, f->tokens[0], FAMILY_TOKENS, "whole", 1, false);
    assert_int_equal(d.booked_prefill_tokens, 0);
    expect_members(sd, cold, 300, but1, 3, 2);
    /* ... and stays out once it decodes (its decodes slow the worker's
     * prefill) ... */
    assert_int_equal(kvr_router_prefill_done(sd->r, "whole"), KVR_ROUTE_OK);
    expect_members(sd, cold, 300, but1, 3, 2);
    /* ... and its release brings it back. */
    assert_int_equal(kvr_router_release(sd->r, "whole"), KVR_ROUTE_OK);
    expect_members(sd, cold, 300, all, 4, 1);
    /* Queued prefill takes 2 out; once freed its recent work keeps it in
     * the class, but never as the representative while others have less. */
    d = route_on(sd, cold, 300, "work", 2, false);
    assert_true(d.booked_prefill_tokens > 0);
    expect_members(sd, cold, 300, but2, 3, 1);
    assert_int_equal(kvr_router_release(sd->r, "work"), KVR_ROUTE_OK);
    expect_members(sd, cold, 300, all, 4, 1);
    /* 1, 3 and 4 book more than 2 did: once 1 and 3 are freed (4 still
     * queued), 2 represents 1, 2 and 3; with 4 freed too, all four. */
    const uint64_t but4[] = {1, 2, 3};
    d = route_on(sd, cold, 400, "w1", 1, false);
    d = route_on(sd, cold, 400, "w3", 3, false);
    d = route_on(sd, cold, 400, "w4", 4, false);
    assert_int_equal(d.booked_prefill_tokens, 400);
    assert_int_equal(kvr_router_release(sd->r, "w1"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_release(sd->r, "w3"), KVR_ROUTE_OK);
    expect_members(sd, cold, 300, but4, 3, 2);
    assert_int_equal(kvr_router_release(sd->r, "w4"), KVR_ROUTE_OK);
    expect_members(sd, cold, 300, all, 4, 2);
    done(f);
}

/* decode_ahead: a booking pending on worker 1 with nothing to prefill (its
 * prompt wholly cached there) slows the next prefill there by its context
 * (decode_kv_share 1e-3: x 1.512), so every candidate costs alike but 1.
 * The class must not take 1 in (as the representative, the first of
 * equals, it priced every idle worker at its 45.36 ms, where the others
 * cost 30 ms, and the draw could then pick 1): a decision without debug
 * picks and costs as the one that scores every candidate. */
static void test_pending_booking_under_decode_ahead(void **state)
{
    (void)state;
    fx *f = make(7);
    side *sides[] = {&f->a, &f->b};
    for (int k = 0; k < 2; k++) {
        kvr_router_config cfg;
        kvr_router_config_get(sides[k]->r, &cfg);
        cfg.decode_ahead = true;
        cfg.decode_kv_share = 1e-3;
        assert_int_equal(kvr_router_set_config(sides[k]->r, &cfg), 2);
        for (uint64_t id = 1; id <= 4; id++) {
            kvr_worker *w = register_worker(sides[k], id, 0);
            if (id == 1) {
                uint64_t t[FAMILY_TOKENS];
                rt_widen(f->tokens[0], t, FAMILY_TOKENS);
                rt_store(sides[k]->ix, w, 0, BS, t, FAMILY_TOKENS, false, 1000000);
            }
        }
        kvr_route_decision d =
            route_on(sides[k], f->tokens[0], FAMILY_TOKENS, "whole", 1, k == 1);
        assert_int_equal(d.booked_prefill_tokens, 0);
        kvr_route_decision_free(&d);
    }
    const uint32_t *cold = f->tokens[FAMILIES];
    for (int i = 0; i < 12; i++) {
        kvr_route_decision da = route_on(&f->a, cold, 300, NULL, 0, false);
        kvr_route_decision db = route_on(&f->b, cold, 300, NULL, 0, true);
        assert_true(fabs(rt_cost_of(&db, 1)->cost - 0.04536) < 1e-9);
        assert_true(fabs(db.cost - 0.03) < 1e-9);
        assert_int_equal(da.worker_id, db.worker_id);
        assert_true(da.cost == db.cost);
        kvr_route_decision_free(&da);
        kvr_route_decision_free(&db);
    }
    done(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_picks_as_every_candidate),
        cmocka_unit_test(test_class_follows_slot_changes),
        cmocka_unit_test(test_class_follows_fleet_changes),
        cmocka_unit_test(test_pending_booking_under_decode_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
