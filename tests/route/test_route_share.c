/* Bookings shared between replicas (route.h): the hook hears this router's
 * own booking changes and nothing else; a peer's booking counts in the load
 * view exactly like a local one (distinct blocks once), never collides with
 * a local booking of the same id, expires from when it was made, and a
 * /free of it reaches the hook with its owner. */
#include <math.h>
#include <time.h>

#include "route_test_util.h"

#define BS 4
#define N 16 /* 4 blocks */
#define PEER 0xabcdef01u

typedef struct {
    kvr_booking_event ev;
    char id[64];
    uint64_t chain[8];
} heard;

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    uint32_t a[N], b[N];
    heard log[16];
    size_t n_log;
} fx;

static void hook(void *user, const kvr_booking_event *ev)
{
    fx *f = user;
    assert_true(f->n_log < 16);
    heard *h = &f->log[f->n_log++];
    h->ev = *ev;
    snprintf(h->id, sizeof h->id, "%s", ev->request_id);
    for (uint32_t i = 0; i < ev->n_chain && i < 8; i++)
        h->chain[i] = ev->chain[i];
}

static fx *make(double ttl)
{
    fx *f = calloc(1, sizeof *f);
    rt_open(&f->ix, &f->r, ttl, 11);
    for (uint32_t i = 0; i < N; i++) {
        f->a[i] = 500 + i;
        f->b[i] = i < 2 * BS ? 500 + i : 900 + i; /* shares a's first 2 blocks */
    }
    rt_register(f->ix, 1, BS, KVR_MM_LEGACY, -1, false, NULL);
    rt_register(f->ix, 2, BS, KVR_MM_LEGACY, -1, false, NULL);
    kvr_router_set_booking_hook(f->r, hook, f);
    return f;
}

static void destroy(fx *f)
{
    rt_close(f->ix, f->r);
    free(f);
}

static kvr_route_decision route_on(fx *f, const uint32_t *tokens, const char *id,
                                   uint64_t worker)
{
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = rt_request(tokens, N, NULL, 0);
    rq.request_id = id;
    rq.has_worker_id = worker != 0;
    rq.worker_id = worker;
    kvr_route_decision d;
    kvr_route_status st = kvr_route(f->r, &rq, &d);
    if (st != KVR_ROUTE_OK)
        fail_msg("route failed: %d %s", st, d.error);
    return d;
}

static kvr_worker_load load_of(fx *f, uint64_t worker)
{
    kvr_worker_load l;
    kvr_router_load(f->r, RT_MODEL, NULL, worker, 0, &l);
    return l;
}

/* The booking a peer made of `tokens` on worker: the event its hook heard. */
static kvr_booking_event peer_booking(const heard *h, uint64_t owner, const char *id)
{
    kvr_booking_event ev = h->ev;
    ev.owner = owner;
    ev.request_id = id;
    ev.chain = h->chain;
    return ev;
}

static uint64_t peers_active(fx *f)
{
    kvr_router_peer_stats ps;
    kvr_router_peer_stats_get(f->r, &ps);
    return ps.active;
}

static void test_hook_hears_own_changes_only(void **state)
{
    (void)state;
    fx *f = make(0);
    kvr_route_decision d = route_on(f, f->a, "r1", 1);
    kvr_route_decision_free(&d);
    assert_int_equal(f->n_log, 1);
    const kvr_booking_event *ev = &f->log[0].ev;
    assert_int_equal(ev->op, KVR_BOOKING_BOOKED);
    assert_int_equal(ev->owner, 0);
    assert_string_equal(f->log[0].id, "r1");
    assert_string_equal(ev->model_name, RT_MODEL);
    assert_string_equal(ev->routing_group, KVR_DEFAULT_ROUTING_GROUP);
    assert_int_equal(ev->worker_id, 1);
    assert_int_equal(ev->n_chain, 4);
    assert_int_equal(ev->prefill_tokens, N);

    /* Unbooked decisions and failed calls say nothing. */
    d = route_on(f, f->a, NULL, 0);
    kvr_route_decision_free(&d);
    assert_int_equal(kvr_router_release(f->r, "nope"), KVR_ROUTE_UNKNOWN_ID);
    assert_int_equal(f->n_log, 1);

    assert_int_equal(kvr_router_prefill_done(f->r, "r1"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_release(f->r, "r1"), KVR_ROUTE_OK);
    assert_int_equal(f->n_log, 3);
    assert_int_equal(f->log[1].ev.op, KVR_BOOKING_PREFILL_DONE);
    assert_int_equal(f->log[2].ev.op, KVR_BOOKING_RELEASED);
    assert_int_equal(f->log[2].ev.owner, 0);

    /* A peer's changes are applied without an echo. */
    kvr_booking_event pe = peer_booking(&f->log[0], PEER, "p1");
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    pe.op = KVR_BOOKING_RELEASED;
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    assert_int_equal(f->n_log, 3);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

static void test_peer_booking_changes_the_choice(void **state)
{
    (void)state;
    fx *f = make(0);
    /* What a peer booked on worker 1, as its own hook heard it. */
    kvr_route_decision d = route_on(f, f->a, "seen", 1);
    kvr_route_decision_free(&d);
    kvr_booking_event pe = peer_booking(&f->log[0], PEER, "p1");
    assert_int_equal(kvr_router_release(f->r, "seen"), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).bookings, 0);

    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    kvr_worker_load l = load_of(f, 1);
    assert_int_equal(l.bookings, 1);
    assert_int_equal(l.active_prefill_tokens, N);
    assert_int_equal(l.active_decode_blocks, 4);
    assert_int_equal(peers_active(f), 1);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 0); /* local ones only */

    /* Both workers are idle here, but worker 1 is busy with the peer's
     * request: an unrelated prompt goes to worker 2, every time. */
    uint32_t other[N];
    for (uint32_t i = 0; i < N; i++)
        other[i] = 7000 + i;
    for (int k = 0; k < 8; k++) {
        d = route_on(f, other, NULL, 0);
        assert_int_equal(d.worker_id, 2);
        kvr_route_decision_free(&d);
    }
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_DUPLICATE_ID);
    pe.op = KVR_BOOKING_PREFILL_DONE;
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).active_prefill_tokens, 0);
    pe.op = KVR_BOOKING_RELEASED;
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_UNKNOWN_ID);
    assert_int_equal(peers_active(f), 0);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

static void test_shared_blocks_count_once_across_replicas(void **state)
{
    (void)state;
    fx *f = make(0);
    kvr_route_decision d = route_on(f, f->a, "mine", 1);
    assert_int_equal(d.booked_blocks, 4);
    kvr_route_decision_free(&d);
    d = route_on(f, f->b, "probe", 1);
    kvr_route_decision_free(&d);
    kvr_booking_event pe = peer_booking(&f->log[1], PEER, "theirs"); /* b on worker 1 */
    assert_int_equal(kvr_router_release(f->r, "probe"), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 4);

    /* The peer's b shares a's first 2 blocks on worker 1: 2 more, not 4. */
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 6);
    assert_int_equal(load_of(f, 1).bookings, 2);
    assert_int_equal(kvr_router_release(f->r, "mine"), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).active_decode_blocks, 4);
    pe.op = KVR_BOOKING_RELEASED;
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

static void test_same_id_on_two_replicas_is_two_bookings(void **state)
{
    (void)state;
    fx *f = make(0);
    kvr_route_decision d = route_on(f, f->a, "x", 1);
    kvr_route_decision_free(&d);
    kvr_booking_event pe = peer_booking(&f->log[0], PEER, "x");
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    pe.owner = PEER + 1;
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    assert_int_equal(load_of(f, 1).bookings, 3);
    assert_int_equal(peers_active(f), 2);

    /* /free here releases this router's own booking first ... */
    size_t before = f->n_log;
    assert_int_equal(kvr_router_release(f->r, "x"), KVR_ROUTE_OK);
    assert_int_equal(f->log[before].ev.owner, 0);
    assert_int_equal(peers_active(f), 2);
    /* ... then a peer's, which the hook forwards to that owner. */
    assert_int_equal(kvr_router_release(f->r, "x"), KVR_ROUTE_OK);
    assert_int_equal(f->n_log, before + 2);
    const kvr_booking_event *fw = &f->log[before + 1].ev;
    assert_int_equal(fw->op, KVR_BOOKING_RELEASED);
    assert_true(fw->owner == PEER || fw->owner == PEER + 1);
    assert_string_equal(f->log[before + 1].id, "x");
    assert_int_equal(peers_active(f), 1);
    assert_int_equal(kvr_router_prefill_done(f->r, "x"), KVR_ROUTE_OK);
    assert_int_equal(f->log[before + 2].ev.op, KVR_BOOKING_PREFILL_DONE);
    assert_int_equal(kvr_router_release(f->r, "x"), KVR_ROUTE_OK);
    assert_int_equal(kvr_router_release(f->r, "x"), KVR_ROUTE_UNKNOWN_ID);
    kvr_router_peer_stats ps;
    kvr_router_peer_stats_get(f->r, &ps);
    assert_int_equal(ps.forwarded, 3);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

/* A booking made 29.9 s ago on a peer has 0.1 s left of a 30 s TTL: it
 * expires first although it arrived after a fresh local booking. */
static void test_peer_booking_expires_from_when_it_was_made(void **state)
{
    (void)state;
    fx *f = make(30);
    kvr_route_decision d = route_on(f, f->a, "fresh", 1);
    kvr_route_decision_free(&d);
    kvr_booking_event pe = peer_booking(&f->log[0], PEER, "old");
    pe.age_s = 29.9;
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    pe.request_id = "dead";
    pe.age_s = 30.5; /* past its TTL already: not booked */
    assert_int_equal(kvr_router_apply_peer(f->r, &pe), KVR_ROUTE_OK);
    assert_int_equal(peers_active(f), 1);

    for (int i = 0; i < 1000 && peers_active(f) > 0; i++) {
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        kvr_router_sweep(f->r);
    }
    assert_int_equal(peers_active(f), 0);
    assert_int_equal(load_of(f, 1).bookings, 1); /* the fresh one has ~30 s left */
    assert_int_equal(kvr_router_release(f->r, "fresh"), KVR_ROUTE_OK);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

static void test_adopted_booking_is_own(void **state)
{
    (void)state;
    fx *f = make(0);
    kvr_route_decision d = route_on(f, f->a, "tmp", 2);
    kvr_route_decision_free(&d);
    /* A previous run of this replica booked "old" (owner 0 = ours). */
    kvr_booking_event ev = peer_booking(&f->log[0], 0, "old");
    ev.decode = true;
    ev.age_s = 1;
    assert_int_equal(kvr_router_release(f->r, "tmp"), KVR_ROUTE_OK);
    size_t before = f->n_log;
    assert_int_equal(kvr_router_apply_peer(f->r, &ev), KVR_ROUTE_OK);
    assert_int_equal(f->n_log, before);
    kvr_worker_load l = load_of(f, 2);
    assert_int_equal(l.bookings, 1);
    assert_int_equal(l.active_prefill_tokens, 0); /* decode already */
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 1);
    assert_int_equal(peers_active(f), 0);
    /* Its /free is this router's own: heard with owner 0. */
    assert_int_equal(kvr_router_release(f->r, "old"), KVR_ROUTE_OK);
    assert_int_equal(f->log[before].ev.owner, 0);
    assert_int_equal(f->log[before].ev.op, KVR_BOOKING_RELEASED);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

static void test_bad_peer_events_change_nothing(void **state)
{
    (void)state;
    fx *f = make(0);
    kvr_route_decision d = route_on(f, f->a, "tmp", 1);
    kvr_route_decision_free(&d);
    kvr_booking_event ev = peer_booking(&f->log[0], PEER, "p");
    assert_int_equal(kvr_router_release(f->r, "tmp"), KVR_ROUTE_OK);

    kvr_booking_event bad = ev;
    bad.model_name = "no-such-model";
    assert_int_equal(kvr_router_apply_peer(f->r, &bad), KVR_ROUTE_UNKNOWN_MODEL);
    bad = ev;
    bad.request_id = "";
    assert_int_equal(kvr_router_apply_peer(f->r, &bad), KVR_ROUTE_BAD_REQUEST);
    char long_id[KVR_ROUTE_MAX_ID_LEN + 2];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0;
    bad.request_id = long_id;
    assert_int_equal(kvr_router_apply_peer(f->r, &bad), KVR_ROUTE_BAD_REQUEST);
    bad = ev;
    bad.age_s = NAN;
    assert_int_equal(kvr_router_apply_peer(f->r, &bad), KVR_ROUTE_BAD_REQUEST);
    bad = ev;
    bad.model_name = NULL;
    assert_int_equal(kvr_router_apply_peer(f->r, &bad), KVR_ROUTE_BAD_REQUEST);
    bad = ev;
    bad.op = KVR_BOOKING_RELEASED;
    assert_int_equal(kvr_router_apply_peer(f->r, &bad), KVR_ROUTE_UNKNOWN_ID);
    kvr_router_peer_stats ps;
    kvr_router_peer_stats_get(f->r, &ps);
    assert_int_equal(ps.rejected, 6);
    assert_int_equal(ps.applied, 0);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_hears_own_changes_only),
        cmocka_unit_test(test_peer_booking_changes_the_choice),
        cmocka_unit_test(test_shared_blocks_count_once_across_replicas),
        cmocka_unit_test(test_same_id_on_two_replicas_is_two_bookings),
        cmocka_unit_test(test_peer_booking_expires_from_when_it_was_made),
        cmocka_unit_test(test_adopted_booking_is_own),
        cmocka_unit_test(test_bad_peer_events_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
