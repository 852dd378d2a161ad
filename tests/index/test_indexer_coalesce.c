/* Facade ingestion of per-block (SGLang) store chains: runs of one-block
 * stores in a batch reach the index as one call. Every case feeds the same
 * events to two indexers, one batch vs one batch per event (nothing to
 * coalesce), and requires equal matches and counters, plus expected values. */
#include "indexer_fixture.h"

typedef struct {
    kvr_indexer *ix;
    kvr_worker *w;
} side;

static side coal, single;

static void side_init(side *s, kvr_mm_identity mode)
{
    s->ix = kvr_indexer_create();
    assert_non_null(s->ix);
    kvr_worker_settings st = settings(1, mode);
    s->w = reg_ok(s->ix, &st, KVR_REG_CREATED);
}

static int setup_mode(kvr_mm_identity mode)
{
    side_init(&coal, mode);
    side_init(&single, mode);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return setup_mode(KVR_MM_LEGACY);
}

static int setup_wide(void **state)
{
    (void)state;
    return setup_mode(KVR_MM_ENGINE_WIDE);
}

static int teardown(void **state)
{
    (void)state;
    kvr_indexer_destroy(coal.ix);
    kvr_indexer_destroy(single.ix);
    return 0;
}

static void feed(kvr_raw_event *evs, uint32_t n)
{
    apply(coal.ix, coal.w, 0, evs, n);
    for (uint32_t i = 0; i < n; i++)
        apply(single.ix, single.w, 0, &evs[i], 1);
}

static kvr_rank_info rank_info(const side *s)
{
    kvr_worker_info *info = info_of(s->ix, s->w);
    const kvr_rank_info *r = rank_of(info, 0);
    assert_non_null(r);
    kvr_rank_info out = *r;
    free(info);
    return out;
}

/* Counters of the coalescing side, after checking the other agrees. */
static kvr_rank_info same_counters(void)
{
    kvr_rank_info a = rank_info(&coal), b = rank_info(&single);
    assert_int_equal(a.events_stored, b.events_stored);
    assert_int_equal(a.events_removed, b.events_removed);
    assert_int_equal(a.events_cleared, b.events_cleared);
    assert_int_equal(a.events_dropped, b.events_dropped);
    assert_int_equal(a.blocks_stored, b.blocks_stored);
    assert_int_equal(a.blocks_removed, b.blocks_removed);
    assert_int_equal(a.norm.mm_blocks_excluded, b.norm.mm_blocks_excluded);
    assert_int_equal(a.norm.mm_stores_truncated, b.norm.mm_stores_truncated);
    assert_int_equal(a.norm.mm_descendant_stores_excluded,
                     b.norm.mm_descendant_stores_excluded);
    assert_int_equal(a.norm.mm_excluded_ids, b.norm.mm_excluded_ids);
    for (int d = 0; d < KVR_DROP_COUNT; d++)
        assert_int_equal(a.norm.drops[d], b.norm.drops[d]);
    return a;
}

/* Reach on every tier for each whole-block prefix of req must agree;
 * returns the coalescing side's reach of all of req. */
static reach same_matches(const uint32_t *req, size_t n)
{
    reach full = {0, 0, 0};
    for (size_t k = B; k <= n; k += B) {
        reach a = match_seed(coal.ix, 1, 0, req, k, KVR_HASH_SEED);
        reach b = match_seed(single.ix, 1, 0, req, k, KVR_HASH_SEED);
        assert_int_equal(a.gpu, b.gpu);
        assert_int_equal(a.cpu, b.cpu);
        assert_int_equal(a.disk, b.disk);
        full = a;
    }
    return full;
}

/* Per-block stores of blocks [from, to): hash h[i], tokens of block i. */
static uint32_t chain(kvr_raw_event *evs, const uint64_t *h, const uint64_t *tok, uint32_t from,
                      uint32_t to)
{
    uint32_t k = 0;
    for (uint32_t i = from; i < to; i++)
        evs[k++] = store_ev(&h[i], 1, i > 0, i ? h[i - 1] : 0, tok + (size_t)i * B, B);
    return k;
}

#define LONG 150 /* more than two runs of 64 */

static void test_per_block_chain_equals_one_store(void **state)
{
    (void)state;
    static uint64_t tok[LONG * B], h[LONG];
    static uint32_t req[LONG * B];
    static kvr_raw_event evs[LONG];
    text(tok, LONG * B, 10);
    text32(req, LONG * B, 10);
    for (uint32_t i = 0; i < LONG; i++)
        h[i] = 5000 + i;
    feed(evs, chain(evs, h, tok, 0, LONG));

    side multi;
    side_init(&multi, KVR_MM_LEGACY);
    kvr_raw_event one = store_ev(h, LONG, false, 0, tok, LONG * B);
    apply(multi.ix, multi.w, 0, &one, 1);

    assert_int_equal(same_matches(req, LONG * B).gpu, LONG);
    for (size_t k = 1; k <= LONG; k += 37)
        assert_int_equal(match_gpu(multi.ix, 1, 0, req, k * B), k);
    assert_int_equal(match_gpu(coal.ix, 1, 0, req, 70 * B), 70);
    req[100 * B + 1] = 1; /* differs in block 100 */
    assert_int_equal(match_gpu(coal.ix, 1, 0, req, LONG * B), 100);
    assert_int_equal(match_gpu(multi.ix, 1, 0, req, LONG * B), 100);

    kvr_rank_info c = same_counters(), m = rank_info(&multi);
    assert_int_equal(c.events_stored, LONG);
    assert_int_equal(m.events_stored, 1);
    assert_int_equal(c.blocks_stored, LONG);
    assert_int_equal(m.blocks_stored, LONG);
    assert_int_equal(c.events_dropped, 0);

    /* removing them one per event leaves nothing on either */
    static kvr_raw_event rms[LONG];
    for (uint32_t i = 0; i < LONG; i++)
        rms[i] = remove_ev(&h[LONG - 1 - i], 1);
    feed(rms, LONG);
    text32(req, LONG * B, 10);
    assert_int_equal(same_matches(req, 8 * B).gpu, 0);
    assert_int_equal(same_counters().blocks_removed, LONG);
    kvr_indexer_destroy(multi.ix);
}

static void test_run_interrupted(void **state)
{
    (void)state;
    uint64_t tok[8 * B], btok[B], h[8] = {601, 602, 603, 604, 605, 606, 607, 608};
    uint64_t hb = 620;
    text(tok, 8 * B, 10);
    text(btok, B, 900);
    uint32_t req[8 * B];
    text32(req, 8 * B, 10);
    kvr_raw_event evs[16];
    uint32_t n = chain(evs, h, tok, 0, 3);
    evs[n++] = remove_ev(&h[2], 1);               /* a remove ends the run */
    n += chain(evs + n, h, tok, 2, 3);            /* block 2 again */
    uint32_t cpu_from = n;
    n += chain(evs + n, h, tok, 3, 6);            /* 3, 4 on cpu (another tier), 5 gpu */
    evs[cpu_from].tier = KVR_TIER_CPU;
    evs[cpu_from + 1].tier = KVR_TIER_CPU;
    evs[n++] = store_ev(&hb, 1, true, h[1], btok, B); /* another parent: a branch */
    feed(evs, n);
    reach r = same_matches(req, 6 * B);
    assert_int_equal(r.gpu, 3);
    assert_int_equal(r.cpu, 6);
    /* the branch is a third block after blocks 0 and 1 */
    uint32_t b3[3 * B];
    text32(b3, 2 * B, 10);
    text32(b3 + 2 * B, B, 900);
    assert_int_equal(same_matches(b3, 3 * B).gpu, 3);
    kvr_rank_info c = same_counters();
    assert_int_equal(c.events_stored, 8);
    assert_int_equal(c.events_removed, 1);
    assert_int_equal(c.blocks_removed, 1);
    assert_int_equal(c.blocks_stored, 8);

    /* a clear in the middle of a run: the next block's parent is gone */
    n = chain(evs, h, tok, 6, 7);
    evs[n++] = clear_ev();
    n += chain(evs + n, h, tok, 7, 8);
    n += chain(evs + n, h, tok, 0, 2);
    feed(evs, n);
    c = same_counters();
    assert_int_equal(c.events_cleared, 1);
    assert_int_equal(c.norm.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    assert_int_equal(c.events_stored, 11);
    assert_int_equal(same_matches(req, 8 * B).gpu, 2);
}

static void test_unknown_first_parent_counts_per_event(void **state)
{
    (void)state;
    uint64_t tok[5 * B], h[5] = {701, 702, 703, 704, 705};
    text(tok, 5 * B, 10);
    uint32_t req[5 * B];
    text32(req, 5 * B, 10);
    kvr_raw_event evs[5];
    uint32_t n = chain(evs, h, tok, 0, 5);
    evs[0].has_parent = true;
    evs[0].parent = 999; /* never stored */
    feed(evs, n);
    kvr_rank_info c = same_counters();
    assert_int_equal(c.norm.drops[KVR_DROP_PARENT_NOT_FOUND], 5);
    assert_int_equal(c.events_dropped, 5);
    assert_int_equal(c.events_stored, 0);
    assert_int_equal(c.blocks_stored, 0);
    assert_int_equal(same_matches(req, 5 * B).disk, 0);

    /* the first event fails, but its hash is already known (stored before
     * from the root): alone, the next ones succeed under it */
    n = chain(evs, h, tok, 0, 1);
    feed(evs, n);
    n = chain(evs, h, tok, 0, 4);
    evs[0].has_parent = true;
    evs[0].parent = 998;
    feed(evs, n);
    c = same_counters();
    assert_int_equal(c.norm.drops[KVR_DROP_PARENT_NOT_FOUND], 6);
    assert_int_equal(c.events_stored, 4);
    assert_int_equal(c.blocks_stored, 4);
    assert_int_equal(same_matches(req, 5 * B).gpu, 4);
}

static void test_hash_repeated_across_events(void **state)
{
    (void)state;
    uint64_t tok[4 * B], h[4] = {801, 802, 803, 801}; /* block 3 reuses block 0's hash */
    text(tok, 4 * B, 10);
    uint32_t req[4 * B];
    text32(req, 4 * B, 10);
    kvr_raw_event evs[8];
    uint32_t n = chain(evs, h, tok, 0, 4);
    feed(evs, n);
    /* the newest store wins: block 0 leaves, taking the chain below it,
     * so block 3 has no parent left */
    kvr_rank_info c = same_counters();
    assert_int_equal(c.norm.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    assert_int_equal(c.events_stored, 3);
    assert_int_equal(same_matches(req, 4 * B).disk, 0);

    /* a repeat of the run's own parent (known from before the batch) */
    uint64_t g[3] = {811, 812, 811};
    n = chain(evs, g, tok, 0, 1);
    feed(evs, n);
    n = chain(evs, g, tok, 1, 3);
    feed(evs, n);
    c = same_counters();
    assert_int_equal(c.norm.drops[KVR_DROP_PARENT_NOT_FOUND], 2);
    assert_int_equal(same_matches(req, 3 * B).disk, 0);

    /* the store after the failed one starts a new run from the root */
    n = chain(evs, h, tok, 0, 3);
    feed(evs, n);
    assert_int_equal(same_matches(req, 3 * B).gpu, 3);
}

static void test_engine_wide_exclusion_mid_chain(void **state)
{
    (void)state;
    uint64_t tok[6 * B], h[6] = {901, 902, 903, 904, 905, 906}, hb = 920, btok[B];
    text(tok, 6 * B, 10);
    tok[2 * B + 1] = WIDE; /* block 2 holds media */
    text(btok, B, 500);
    uint32_t req[6 * B];
    text32(req, 6 * B, 10);
    kvr_raw_event evs[8];
    uint32_t n = chain(evs, h, tok, 0, 6);
    evs[n++] = store_ev(&hb, 1, true, h[1], btok, B); /* a text sibling of block 2 */
    feed(evs, n);
    kvr_rank_info c = same_counters();
    assert_int_equal(c.events_stored, 7); /* excluded stores still count as stores */
    assert_int_equal(c.blocks_stored, 3);
    assert_int_equal(c.norm.mm_descendant_stores_excluded, 3);
    assert_int_equal(c.events_dropped, 0);
    assert_int_equal(same_matches(req, 6 * B).gpu, 2);
    uint32_t breq[3 * B];
    text32(breq, 2 * B, 10);
    text32(breq + 2 * B, B, 500);
    assert_int_equal(same_matches(breq, 3 * B).gpu, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_per_block_chain_equals_one_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_interrupted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_first_parent_counts_per_event, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hash_repeated_across_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_wide_exclusion_mid_chain, setup_wide,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
