/* Facade under concurrency: two ranks of one worker apply batches in
 * parallel while a reader matches and the main thread registers,
 * snapshots, and churns another worker. Readers must see each store or
 * removal whole (0 or all 4 blocks), and every counter must add up.
 * A long batch holds the index write lock across slices of events: a
 * reader must still see every event whole and get the lock between events,
 * so its longest wait stays far below the time of the whole batch. */
#include "indexer_fixture.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define ROUNDS 1500
#define CHAIN 4

static kvr_indexer *ix;
static kvr_worker *w1;
static atomic_bool stop;
static atomic_int torn;
static atomic_long matches;
static atomic_long seen_full; /* matches that saw a whole chain: overlap happened */
static kvr_match_ctx_stats reader_stats;

typedef struct {
    uint32_t rank;
} writer_arg;

static void *writer(void *p)
{
    uint32_t rank = ((writer_arg *)p)->rank;
    uint64_t tok[CHAIN * B], h[CHAIN], leaf_first[CHAIN];
    text(tok, CHAIN * B, 10);
    for (int i = 0; i < ROUNDS; i++) {
        for (int k = 0; k < CHAIN; k++) {
            h[k] = 1000u * rank + (uint64_t)k + 1; /* same handles every round */
            leaf_first[CHAIN - 1 - k] = h[k];
        }
        kvr_raw_event st = store_ev(h, CHAIN, false, 0, tok, CHAIN * B);
        /* engines evict leaves before their parents */
        kvr_raw_event rm = remove_ev(leaf_first, CHAIN);
        /* the rank comes from the batch (dp_rank override), socket rank 0 */
        kvr_batch b = batch_of(&st, 1);
        b.has_dp_rank = true;
        b.dp_rank = rank;
        kvr_indexer_apply(ix, w1, 0, &b);
        kvr_batch_of_events(&b, &rm, 1);
        b.has_dp_rank = true;
        b.dp_rank = rank;
        kvr_indexer_apply(ix, w1, 0, &b);
    }
    return NULL;
}

static void *reader(void *p)
{
    (void)p;
    uint32_t req[CHAIN * B];
    text32(req, CHAIN * B, 10);
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    while (!atomic_load(&stop)) {
        const kvr_match_entry *e;
        size_t n = kvr_indexer_match_tokens(ix, MODEL, NULL, ctx, req, CHAIN * B, false,
                                            KVR_HASH_SEED, &e);
        for (size_t i = 0; i < n; i++)
            if (e[i].worker_id == 1 && e[i].gpu_blocks == CHAIN)
                atomic_fetch_add(&seen_full, 1);
            else if (e[i].worker_id == 1 && e[i].gpu_blocks != 0)
                atomic_fetch_add(&torn, 1);
        atomic_fetch_add(&matches, 1);
    }
    kvr_match_ctx_stats_get(ctx, &reader_stats);
    kvr_match_ctx_destroy(ctx);
    return NULL;
}

static void test_parallel_ranks_readers_and_registry(void **state)
{
    (void)state;
    ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    w1 = reg_ok(ix, &s, KVR_REG_CREATED);
    atomic_store(&stop, false);
    atomic_store(&matches, 0);
    pthread_t wt[2], rt;
    writer_arg args[2] = {{0}, {1}};
    assert_int_equal(pthread_create(&rt, NULL, reader, NULL), 0);
    /* writers start once the reader runs, so the two overlap */
    while (atomic_load(&matches) == 0)
        sched_yield();
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&wt[i], NULL, writer, &args[i]), 0);

    /* registry traffic meanwhile: w1 re-registers (unchanged / updated),
     * worker 2 comes and goes with some state of its own */
    kvr_worker_info *info = malloc(sizeof *info);
    uint64_t tok[B], h2 = 77;
    text(tok, B, 10);
    for (int i = 0; i < 200; i++) {
        s.accepts_mm_hashes = i % 2 ? 0 : -1;
        kvr_reg_result r = kvr_indexer_register(ix, &s, NULL);
        assert_true(r == KVR_REG_UNCHANGED || r == KVR_REG_UPDATED);
        kvr_worker_settings s2 = settings(2, KVR_MM_ENGINE_WIDE);
        kvr_worker *w2 = reg_ok(ix, &s2, KVR_REG_CREATED);
        kvr_raw_event ev = store_ev(&h2, 1, false, 0, tok, B);
        apply(ix, w2, 0, &ev, 1);
        kvr_worker_info_get(ix, w1, info);
        assert_true(info->n_ranks <= 2);
        kvr_worker_caps caps[4];
        assert_int_equal(kvr_indexer_caps_list(ix, MODEL, NULL, caps, 4), 2);
        kvr_indexer_unregister(ix, w2);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(wt[i], NULL);
    atomic_store(&stop, true);
    pthread_join(rt, NULL);

    assert_int_equal(atomic_load(&torn), 0);
    assert_true(atomic_load(&matches) > 0);
    print_message("matches %ld, saw a whole chain %ld times\n", atomic_load(&matches),
                  atomic_load(&seen_full));
    kvr_worker_info_get(ix, w1, info);
    assert_int_equal(info->n_ranks, 2);
    for (uint32_t r = 0; r < 2; r++) {
        const kvr_rank_info *ri = rank_of(info, r);
        assert_non_null(ri);
        assert_int_equal(ri->batches, 2 * ROUNDS);
        assert_int_equal(ri->events_stored, ROUNDS);
        assert_int_equal(ri->events_removed, ROUNDS);
        assert_int_equal(ri->blocks_stored, (uint64_t)ROUNDS * CHAIN);
        assert_int_equal(ri->blocks_removed, (uint64_t)ROUNDS * CHAIN);
        assert_int_equal(ri->norm.drops[KVR_DROP_BLOCK_NOT_FOUND], 0);
    }
    free(info);
    kvr_index_stats st;
    kvr_index_stats_get(kvr_indexer_index(ix, MODEL, NULL), &st);
    assert_int_equal(st.ownerships, 0);
    assert_null(kvr_indexer_find(ix, MODEL, NULL, 2));
    kvr_indexer_destroy(ix);
}

#define EVENTS 10000

/* The writer holds the lock across slices of a batch and lets a waiting
 * match in between events: the reader matches while the batch applies and
 * never sees half an event. How long it waits is the benchmark's to
 * measure (kvrouter bench --threads), never a test's: on a loaded machine a
 * writer preempted while it holds the lock stalls readers for its
 * scheduler's time slice (51 ms seen under ASan with two suites at once). */
static void test_long_batch_reader_sees_whole_events(void **state)
{
    (void)state;
    ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *w = reg_ok(ix, &s, KVR_REG_CREATED);
    uint64_t tok[CHAIN * B], h[CHAIN], leaf_first[CHAIN];
    text(tok, CHAIN * B, 10);
    for (int k = 0; k < CHAIN; k++) {
        h[k] = (uint64_t)k + 1;
        leaf_first[CHAIN - 1 - k] = h[k];
    }
    /* store the chain, then evict it leaf first, EVENTS / 2 times */
    kvr_raw_event *evs = malloc(EVENTS * sizeof *evs);
    assert_non_null(evs);
    for (int i = 0; i < EVENTS; i += 2) {
        evs[i] = store_ev(h, CHAIN, false, 0, tok, CHAIN * B);
        evs[i + 1] = remove_ev(leaf_first, CHAIN);
    }
    kvr_batch b = batch_of(evs, EVENTS);

    atomic_store(&stop, false);
    atomic_store(&matches, 0);
    atomic_store(&torn, 0);
    atomic_store(&seen_full, 0);
    pthread_t rt;
    assert_int_equal(pthread_create(&rt, NULL, reader, NULL), 0);
    while (atomic_load(&matches) == 0)
        sched_yield();
    /* Repeat the batch until the reader matched while one applied (on a
     * busy machine it may not be scheduled during the first). */
    long during = 0;
    int batches = 0;
    while (during == 0 && batches < 20) {
        long before = atomic_load(&matches);
        kvr_batch_rewind(&b);
        kvr_indexer_apply(ix, w, 0, &b);
        during = atomic_load(&matches) - before;
        batches++;
    }
    atomic_store(&stop, true);
    pthread_join(rt, NULL);

    assert_true(during > 0);
    assert_int_equal(atomic_load(&torn), 0);
    print_message("batches %d, matches %ld (%ld during the last), whole chain seen %ld, "
                  "waits %lu, max wait %lu us\n",
                  batches, atomic_load(&matches), during, atomic_load(&seen_full),
                  (unsigned long)reader_stats.waits,
                  (unsigned long)(reader_stats.max_wait_ns / 1000));

    kvr_worker_info *info = info_of(ix, w);
    const kvr_rank_info *ri = rank_of(info, 0);
    assert_non_null(ri);
    assert_int_equal(ri->batches, batches);
    assert_int_equal(ri->events_stored, (uint64_t)batches * EVENTS / 2);
    assert_int_equal(ri->events_removed, (uint64_t)batches * EVENTS / 2);
    assert_int_equal(ri->blocks_removed, (uint64_t)batches * EVENTS / 2 * CHAIN);
    assert_int_equal(ri->norm.drops[KVR_DROP_BLOCK_NOT_FOUND], 0);
    free(info);
    kvr_index_stats st;
    kvr_index_stats_get(kvr_indexer_index(ix, MODEL, NULL), &st);
    assert_int_equal(st.ownerships, 0);
    free(evs);
    kvr_indexer_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_ranks_readers_and_registry),
        cmocka_unit_test(test_long_batch_reader_sees_whole_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
