/* Bookings between replicas without a transport: the outbox turns the
 * router's hook into batches of at most max_events, sent by the thread whose
 * change completed one or by the flusher after max_delay;
 * the inbox applies other replicas' batches, skips this process's own,
 * adopts an earlier run's, applies a /free forwarded to this replica, and
 * gives a replayed booking only what is left of its TTL; the feed holds
 * live batches back while the stream is replayed. */
#include <time.h>

#include "../route/route_test_util.h"
#include "cluster/cluster_internal.h"

#define SELF 0x5e1fu
#define PEER 0x9ee2u
#define MY_RUN 7u

static kvr_booking_event release_of(const char *id)
{
    kvr_booking_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = KVR_BOOKING_RELEASED;
    ev.request_id = id;
    return ev;
}

/* What the outbox sent, and from which thread. */
#define SENT_MAX 64
typedef struct {
    pthread_mutex_t mu;
    uint32_t n[SENT_MAX];
    bool by_caller[SENT_MAX]; /* sent by the thread that made the change */
    size_t count;
    uint32_t events;
    pthread_t caller;
} sent_log;

static void record(void *user, const cl_buf *events, uint32_t n)
{
    sent_log *s = user;
    /* every event of the batch reads back, owned by this replica */
    cl_buf msg = {0};
    cl_batch_header(&msg, SELF, MY_RUN, n);
    cl_buf_append(&msg, events->data, events->len);
    cl_batch b;
    char err[160];
    assert_int_equal(cl_batch_open(msg.data, msg.len, &b, err, sizeof err), 0);
    cl_event e = {0};
    for (uint32_t k = 0; k < n; k++) {
        assert_int_equal(cl_batch_next(&b, &e, err, sizeof err), 1);
        assert_int_equal(e.ev.owner, SELF);
    }
    cl_event_free(&e);
    cl_buf_free(&msg);
    pthread_mutex_lock(&s->mu);
    if (s->count < SENT_MAX) {
        s->n[s->count] = n;
        s->by_caller[s->count] = pthread_equal(pthread_self(), s->caller);
    }
    s->count++;
    s->events += n;
    pthread_mutex_unlock(&s->mu);
}

static uint32_t events_sent(sent_log *s)
{
    pthread_mutex_lock(&s->mu);
    uint32_t n = s->events;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void *flusher(void *arg)
{
    cl_outbox_flusher(arg);
    return NULL;
}

static void sent_log_init(sent_log *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->caller = pthread_self();
}

/* A batch a change completes (full, or the first after a quiet spell) is
 * sent by the thread that made the change, once it calls send_due; the
 * flusher is not woken for it, and sends only what no change completed. */
static void test_outbox_batches(void **state)
{
    (void)state;
    sent_log sent;
    sent_log_init(&sent);
    cl_outbox o;
    /* A delay no test run reaches: only size and the quiet start seal. */
    cl_outbox_init(&o, SELF, 256, 1u << 20, 4096, 600.0, record, &sent);
    kvr_booking_event ev = release_of("r");
    cl_outbox_hook(&o, &ev); /* disabled: counted, not kept */
    assert_int_equal(atomic_load(&o.dropped), 1);
    cl_outbox_enable(&o, true);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flusher, &o), 0);
    for (int i = 0; i < 600; i++) {
        cl_outbox_hook(&o, &ev);
        cl_outbox_send_due(&o);
    }
    /* The first went alone, at once; then two full batches. Each was sent
     * by this thread before the next change was made. */
    pthread_mutex_lock(&sent.mu);
    assert_int_equal(sent.count, 3);
    assert_int_equal(sent.n[0], 1);
    assert_int_equal(sent.n[1], 256);
    assert_int_equal(sent.n[2], 256);
    for (size_t k = 0; k < 3; k++)
        assert_true(sent.by_caller[k]);
    pthread_mutex_unlock(&sent.mu);
    assert_int_equal(atomic_load(&o.flusher_sent), 0);
    assert_int_equal(atomic_load(&o.flusher_wakes), 0);
    /* Stop hands what is left to the flusher, which sends it and ends. */
    cl_outbox_stop(&o);
    pthread_join(th, NULL);
    assert_int_equal(sent.count, 4);
    assert_int_equal(sent.n[3], 600 - 513);
    assert_false(sent.by_caller[3]);
    assert_int_equal(atomic_load(&o.flusher_sent), 1);
    cl_outbox_hook(&o, &ev);
    assert_int_equal(atomic_load(&o.dropped), 2);
    cl_outbox_destroy(&o);
    pthread_mutex_destroy(&sent.mu);
}

/* The tail: a change no later change follows goes from the flusher once the
 * delay is over, with no call from the thread that made it. */
static void test_outbox_tail_goes_from_the_flusher(void **state)
{
    (void)state;
    sent_log sent;
    sent_log_init(&sent);
    cl_outbox o;
    cl_outbox_init(&o, SELF, 256, 1u << 20, 4096, 1.0, record, &sent);
    cl_outbox_enable(&o, true);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flusher, &o), 0);
    kvr_booking_event ev = release_of("r");
    cl_outbox_hook(&o, &ev); /* a quiet start: sealed, sent here */
    cl_outbox_send_due(&o);
    cl_outbox_hook(&o, &ev); /* waits for the delay */
    cl_outbox_hook(&o, &ev);
    for (int i = 0; i < 3000 && atomic_load(&o.flusher_sent) == 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    pthread_mutex_lock(&sent.mu);
    assert_int_equal(sent.events, 3);
    assert_true(sent.by_caller[0]);
    assert_false(sent.by_caller[sent.count - 1]);
    pthread_mutex_unlock(&sent.mu);
    assert_true(atomic_load(&o.flusher_sent) >= 1);
    /* Asleep after a quiet delay, the flusher is woken by the next change,
     * and sends the one no one seals. */
    for (int i = 0; i < 3000 && !atomic_load(&o.flusher_asleep); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_true(atomic_load(&o.flusher_asleep));
    cl_outbox_hook(&o, &ev); /* a quiet start again: sent (here or by the flusher woken) */
    cl_outbox_send_due(&o);
    cl_outbox_hook(&o, &ev);
    for (int i = 0; i < 3000 && events_sent(&sent) < 5; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_int_equal(events_sent(&sent), 5);
    assert_true(atomic_load(&o.flusher_wakes) >= 1);
    /* A caller that never calls send_due (kvr_route as a library): the
     * batch its quiet start sealed wakes the asleep flusher, which sends it. */
    for (int i = 0; i < 3000 && !atomic_load(&o.flusher_asleep); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_true(atomic_load(&o.flusher_asleep));
    uint64_t wakes = atomic_load(&o.flusher_wakes);
    cl_outbox_hook(&o, &ev);
    assert_true(atomic_load(&o.flusher_wakes) > wakes);
    for (int i = 0; i < 3000 && events_sent(&sent) < 6; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_int_equal(events_sent(&sent), 6);
    pthread_mutex_lock(&sent.mu);
    assert_false(sent.by_caller[sent.count - 1]);
    pthread_mutex_unlock(&sent.mu);
    cl_outbox_stop(&o);
    pthread_join(th, NULL);
    cl_outbox_destroy(&o);
    pthread_mutex_destroy(&sent.mu);
}

/* A sender held up (a slow write to NATS) while the filling batch falls
 * due: the flusher seals it on time without waiting for the sender, which
 * sends it right after its own, so a booking waits for no retry of the
 * flusher's (SPEC §10's bound). */
typedef struct {
    sent_log log;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, open;
    cl_outbox *o;
} gated_log;

static void record_gated(void *user, const cl_buf *events, uint32_t n)
{
    gated_log *g = user;
    pthread_mutex_lock(&g->mu);
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    record(&g->log, events, n);
}

static void *booking_thread(void *arg)
{
    gated_log *g = arg;
    g->log.caller = pthread_self();
    kvr_booking_event ev = release_of("a");
    cl_outbox_hook(g->o, &ev); /* a quiet start: sealed, sent here */
    cl_outbox_send_due(g->o);
    return NULL;
}

static void test_outbox_due_while_another_sends(void **state)
{
    (void)state;
    gated_log g;
    memset(&g, 0, sizeof g);
    sent_log_init(&g.log);
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    cl_outbox o;
    cl_outbox_init(&o, SELF, 256, 1u << 20, 4096, 1.0, record_gated, &g);
    cl_outbox_enable(&o, true);
    g.o = &o;
    pthread_t fl, booker;
    assert_int_equal(pthread_create(&fl, NULL, flusher, &o), 0);
    assert_int_equal(pthread_create(&booker, NULL, booking_thread, &g), 0);
    pthread_mutex_lock(&g.mu);
    while (!g.entered)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    kvr_booking_event ev = release_of("b");
    cl_outbox_hook(&o, &ev); /* within the pace: waits for the flusher */
    for (int i = 0; i < 500 && atomic_load(&o.n_ready) == 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    pthread_mutex_lock(&g.mu);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(booker, NULL);
    /* Both went from the booking thread, the due one right after its own. */
    pthread_mutex_lock(&g.log.mu);
    assert_int_equal(g.log.count, 2);
    assert_true(g.log.by_caller[0]);
    assert_true(g.log.by_caller[1]);
    pthread_mutex_unlock(&g.log.mu);
    assert_int_equal(atomic_load(&o.flusher_sent), 0);
    cl_outbox_stop(&o);
    pthread_join(fl, NULL);
    cl_outbox_destroy(&o);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
    pthread_mutex_destroy(&g.log.mu);
}

typedef struct {
    kvr_indexer *ix;
    kvr_router *r;
    cl_inbox in;
    uint32_t tokens[16];
    uint64_t chain[4];
} fx;

static fx *make(void)
{
    fx *f = calloc(1, sizeof *f);
    rt_open(&f->ix, &f->r, 60, 3);
    rt_register(f->ix, 1, 4, KVR_MM_LEGACY, -1, false, NULL);
    rt_register(f->ix, 2, 4, KVR_MM_LEGACY, -1, false, NULL);
    cl_inbox_init(&f->in, f->r, SELF, MY_RUN, 60);
    for (int i = 0; i < 16; i++)
        f->tokens[i] = 40 + (uint32_t)i;
    kvr_hash_blocks(f->tokens, 16, 4, false, KVR_HASH_SEED, f->chain, 4);
    return f;
}

static void destroy(fx *f)
{
    cl_inbox_destroy(&f->in);
    rt_close(f->ix, f->r);
    free(f);
}

/* A batch of one BOOKED of `id` on worker 1 and, optionally, more events. */
static cl_buf batch(fx *f, uint64_t publisher, uint64_t run, const char *id, uint64_t owner,
                    const kvr_booking_event *more, size_t n_more)
{
    cl_buf ev = {0}, msg = {0};
    uint32_t n = 0;
    if (id) {
        kvr_booking_event b;
        memset(&b, 0, sizeof b);
        b.op = KVR_BOOKING_BOOKED;
        b.request_id = id;
        b.model_name = RT_MODEL;
        b.worker_id = 1;
        b.prefill_tokens = 16;
        b.chain = f->chain;
        b.n_chain = 4;
        cl_batch_append(&ev, &b, owner, 4096);
        n++;
    }
    for (size_t i = 0; i < n_more; i++, n++)
        cl_batch_append(&ev, &more[i], owner, 4096);
    cl_batch_header(&msg, publisher, run, n);
    cl_buf_append(&msg, ev.data, ev.len);
    cl_buf_free(&ev);
    return msg;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void apply(fx *f, cl_buf *msg, int64_t age_ns)
{
    int64_t now = now_ns();
    cl_inbox_apply(&f->in, msg->data, msg->len, now - age_ns, now);
    cl_buf_free(msg);
}

static kvr_worker_load load1(fx *f)
{
    kvr_worker_load l;
    kvr_router_load(f->r, RT_MODEL, NULL, 1, 0, &l);
    return l;
}

static void test_inbox_whose_is_what(void **state)
{
    (void)state;
    fx *f = make();
    /* another replica's booking counts, as a peer's */
    cl_buf m = batch(f, PEER, 1, "p1", PEER, NULL, 0);
    apply(f, &m, 0);
    assert_int_equal(load1(f).bookings, 1);
    kvr_router_peer_stats ps;
    kvr_router_peer_stats_get(f->r, &ps);
    assert_int_equal(ps.active, 1);
    /* this process's own batch, read back: skipped */
    m = batch(f, SELF, MY_RUN, "mine", SELF, NULL, 0);
    apply(f, &m, 0);
    assert_int_equal(load1(f).bookings, 1);
    assert_int_equal(atomic_load(&f->in.own_skipped), 1);
    /* an earlier run of this replica: adopted as this router's own */
    m = batch(f, SELF, MY_RUN - 1, "before", SELF, NULL, 0);
    apply(f, &m, 0);
    assert_int_equal(load1(f).bookings, 2);
    kvr_router_stats st;
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 1);
    assert_int_equal(atomic_load(&f->in.adopted), 1);
    /* a peer forwards the /free of it to its owner, this replica */
    kvr_booking_event fw = release_of("before");
    m = batch(f, PEER, 1, NULL, SELF, &fw, 1);
    apply(f, &m, 0);
    kvr_router_stats_get(f->r, &st);
    assert_int_equal(st.bookings_active, 0);
    /* the peer releases its own */
    kvr_booking_event rel = release_of("p1");
    m = batch(f, PEER, 1, NULL, PEER, &rel, 1);
    apply(f, &m, 0);
    assert_int_equal(load1(f).bookings, 0);
    assert_int_equal(atomic_load(&f->in.applied), 4);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

static void test_inbox_replay_keeps_what_is_left_of_the_ttl(void **state)
{
    (void)state;
    fx *f = make();
    cl_buf m = batch(f, PEER, 1, "old", PEER, NULL, 0);
    apply(f, &m, 61ll * 1000000000ll); /* older than the 60 s TTL */
    assert_int_equal(load1(f).bookings, 0);
    m = batch(f, PEER, 1, "recent", PEER, NULL, 0);
    apply(f, &m, 30ll * 1000000000ll);
    assert_int_equal(load1(f).bookings, 1);
    /* garbage is counted and changes nothing */
    cl_inbox_apply(&f->in, "\x93\x01\x02", 3, now_ns(), now_ns());
    assert_int_equal(atomic_load(&f->in.invalid), 1);
    /* an unknown model is the router's to refuse */
    kvr_booking_event b;
    memset(&b, 0, sizeof b);
    b.op = KVR_BOOKING_BOOKED;
    b.request_id = "x";
    b.model_name = "elsewhere";
    m = batch(f, PEER, 1, NULL, PEER, &b, 1);
    apply(f, &m, 0);
    assert_int_equal(atomic_load(&f->in.rejected), 1);
    destroy(f);
}

static void replayed(cl_feed *feed, cl_buf *msg, uint64_t pending, bool last)
{
    assert_int_equal(cl_feed_replayed(feed, msg->data, msg->len, now_ns(), pending), last);
    cl_buf_free(msg);
}

static void live(cl_feed *feed, cl_buf *msg)
{
    cl_feed_live(feed, msg->data, msg->len);
    cl_buf_free(msg);
}

/* Live batches that arrive while the stream is replayed wait for its end
 * (a /free of a booking the replay has not reached yet would find nothing,
 * and the booking would stay), then apply in order; a later replay skips
 * an earlier run's batches, adopted once already (a booking of it released
 * since must stay released). */
static void test_feed_live_waits_for_the_replay(void **state)
{
    (void)state;
    fx *f = make();
    cl_feed feed;
    cl_feed_init(&feed, &f->in);
    cl_feed_begin_replay(&feed);
    kvr_booking_event rel = release_of("p1");
    cl_buf m = batch(f, PEER, 1, NULL, PEER, &rel, 1);
    live(&feed, &m);
    assert_int_equal(atomic_load(&f->in.batches), 0);
    m = batch(f, PEER, 1, "p1", PEER, NULL, 0);
    replayed(&feed, &m, 2, false);
    m = batch(f, SELF, MY_RUN - 1, "before", SELF, NULL, 0);
    replayed(&feed, &m, 1, false);
    assert_int_equal(load1(f).bookings, 2);
    m = batch(f, PEER, 1, "p2", PEER, NULL, 0);
    replayed(&feed, &m, 0, true); /* the last: p1's release applies now */
    assert_int_equal(load1(f).bookings, 2); /* p2 and the adopted one */
    assert_int_equal(atomic_load(&f->in.adopted), 1);
    /* live again: at once; the replay consumer's late messages are ignored */
    rel = release_of("p2");
    m = batch(f, PEER, 1, NULL, PEER, &rel, 1);
    live(&feed, &m);
    assert_int_equal(load1(f).bookings, 1);
    m = batch(f, PEER, 1, "late", PEER, NULL, 0);
    replayed(&feed, &m, 0, false);
    assert_int_equal(load1(f).bookings, 1);

    /* This run releases the adopted booking; a reconnection replays again. */
    assert_int_equal(kvr_router_release(f->r, "before"), KVR_ROUTE_OK);
    cl_feed_begin_replay(&feed);
    m = batch(f, SELF, MY_RUN - 1, "before", SELF, NULL, 0);
    replayed(&feed, &m, 0, true);
    assert_int_equal(load1(f).bookings, 0);
    assert_int_equal(atomic_load(&f->in.adopted), 1);
    cl_feed_destroy(&feed);
    rt_expect_nothing_held(f->r);
    destroy(f);
}

/* Past its bound, the oldest waiting live batch goes and is counted; the
 * rest apply at the replay's end. */
static void test_feed_drops_the_oldest_past_its_bound(void **state)
{
    (void)state;
    fx *f = make();
    cl_feed feed;
    cl_feed_init(&feed, &f->in);
    cl_buf m = batch(f, PEER, 1, "a", PEER, NULL, 0);
    feed.max_bytes = m.len + m.len / 2; /* room for one batch */
    live(&feed, &m);
    assert_int_equal(atomic_load(&feed.dropped), 0);
    m = batch(f, PEER, 1, "b", PEER, NULL, 0);
    live(&feed, &m);
    assert_int_equal(atomic_load(&feed.dropped), 1);
    cl_feed_end_replay(&feed);
    assert_int_equal(atomic_load(&f->in.batches), 1);
    assert_int_equal(load1(f).bookings, 1); /* b alone */
    assert_int_equal(atomic_load(&f->in.rejected), 0);
    cl_feed_destroy(&feed);
    destroy(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outbox_batches),
        cmocka_unit_test(test_outbox_tail_goes_from_the_flusher),
        cmocka_unit_test(test_outbox_due_while_another_sends),
        cmocka_unit_test(test_inbox_whose_is_what),
        cmocka_unit_test(test_inbox_replay_keeps_what_is_left_of_the_ttl),
        cmocka_unit_test(test_feed_live_waits_for_the_replay),
        cmocka_unit_test(test_feed_drops_the_oldest_past_its_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
