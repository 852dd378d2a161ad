/* The index against a naive reference (tree_model.h) under random event
 * streams; dump round trip; matches concurrent with stores. */
#include "test_support.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/index.h"
#include "tree_model.h"

#define OWNERS 6
#define ALPHA 3
#define MAXLEN 8

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 17;
}

/* A random path of block symbols; local = 100 + symbol (small values on
 * purpose: many equal locals at different places in the tree). Engine hash:
 * a chain over the path, differing per owner for odd owners. */
static bool collide; /* engine hashes reused for other content */
static bool leaf_first; /* removals name the blocks deepest first, as engines evict */

static size_t random_path(uint64_t *rng, int owner, uint64_t *loc, uint64_t *eng)
{
    size_t n = 1 + rng_next(rng) % MAXLEN;
    uint64_t chain = 0;
    for (size_t i = 0; i < n; i++) {
        loc[i] = 100 + rng_next(rng) % ALPHA;
        chain = kvr_mix64(chain * 7 + loc[i]);
        eng[i] = chain ^ (owner % 2 ? 0xABCDEFULL * (uint64_t)(owner + 1) : 0);
        if (collide)
            eng[i] = 1 + eng[i] % 23;
    }
    return n;
}

typedef struct {
    kvr_index *idx;
    kvr_owner ids[OWNERS];
} side;

static void compare_matches(kvr_index *idx, const kvr_owner *ids, tm_model *m,
                            kvr_match_ctx *ctx, const uint64_t *loc, size_t n)
{
    uint32_t g[TM_OWNERS], c[TM_OWNERS], d[TM_OWNERS];
    tm_match(m, loc, n, g, c, d);
    const kvr_match_entry *r;
    size_t k = kvr_index_match(idx, ctx, loc, n, &r);
    size_t want = 0;
    for (int o = 0; o < OWNERS; o++) {
        if (!d[o])
            continue;
        want++;
        size_t j = 0;
        while (j < k && r[j].owner != ids[o])
            j++;
        assert_true(j < k);
        assert_int_equal(r[j].gpu_blocks, g[o]);
        assert_int_equal(r[j].cpu_blocks, c[o]);
        assert_int_equal(r[j].disk_blocks, d[o]);
        assert_int_equal(r[j].worker_id, 1000 + (uint64_t)o / 2);
        assert_int_equal(r[j].dp_rank, (uint32_t)o % 2);
    }
    assert_int_equal(k, want);
}

static void random_ops(kvr_index *idx, const kvr_owner *ids, tm_model *m, uint64_t seed,
                       int steps)
{
    uint64_t rng = seed;
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    for (int step = 0; step < steps; step++) {
        int o = (int)(rng_next(&rng) % OWNERS);
        uint64_t loc[MAXLEN], eng[MAXLEN];
        size_t n = random_path(&rng, o, loc, eng);
        int op = (int)(rng_next(&rng) % 100);
        uint32_t tr = (uint32_t)(rng_next(&rng) % 10);
        int tier = tr < 6 ? 0 : tr < 8 ? 1 : tr < 9 ? 2 : 3;
        if (op < 50) {
            size_t k = rng_next(&rng) % n; /* store blocks k.. under block k-1 */
            kvr_drop_reason r = kvr_index_store(idx, ids[o], (kvr_tier)tier, k > 0,
                                                k ? eng[k - 1] : 0, eng + k, loc + k, n - k);
            int mr = tm_store(m, o, tier, k > 0, k ? eng[k - 1] : 0, eng + k, loc + k, n - k);
            assert_int_equal(r == KVR_DROP_NONE ? 0 : -1, mr);
        } else if (op < 85) {
            size_t k = rng_next(&rng) % n;
            if (leaf_first)
                for (size_t i = k, j = n - 1; i < j; i++, j--) {
                    uint64_t t = eng[i];
                    eng[i] = eng[j];
                    eng[j] = t;
                }
            size_t got = kvr_index_remove(idx, ids[o], (kvr_tier)tier, eng + k, n - k);
            assert_int_equal(got, tm_remove(m, o, tier, eng + k, n - k));
        } else if (op < 87) {
            kvr_index_clear_owner(idx, ids[o]);
            tm_clear(m, o);
        } else {
            compare_matches(idx, ids, m, ctx, loc, n);
        }
        kvr_index_stats st;
        kvr_index_stats_get(idx, &st);
        assert_int_equal(st.ownerships, m->ownerships);
        assert_int_equal(st.nodes, m->nodes);
    }
    kvr_match_ctx_destroy(ctx);
}

static void make_owners(kvr_index *idx, kvr_owner *ids)
{
    for (int o = 0; o < OWNERS; o++)
        ids[o] = kvr_index_owner(idx, 1000 + (uint64_t)o / 2, (uint32_t)o % 2);
}

/* Random ops against the model for each seed, then clear every owner: the
 * index must return to no nodes and its base memory. */
static void run_against_model(uint64_t first_seed, uint64_t last_seed, int ops)
{
    for (uint64_t seed = first_seed; seed <= last_seed; seed++) {
        kvr_index *idx = kvr_index_create();
        kvr_owner ids[OWNERS];
        make_owners(idx, ids);
        kvr_index_stats base, st;
        kvr_index_stats_get(idx, &base);
        tm_model m;
        tm_init(&m);
        random_ops(idx, ids, &m, seed, ops);
        for (int o = 0; o < OWNERS; o++) {
            kvr_index_clear_owner(idx, ids[o]);
            tm_clear(&m, o);
        }
        kvr_index_stats_get(idx, &st);
        assert_int_equal(st.nodes, 0);
        assert_int_equal(st.bytes, base.bytes);
        tm_free(&m);
        kvr_index_destroy(idx);
    }
}

static void test_random_against_model(void **state)
{
    (void)state;
    run_against_model(1, 6, 6000);
}

/* Engines that reuse hashes for other content (restarts without a clear,
 * buggy builds): the newest store wins, in both implementations. */
static void test_random_hash_reuse_against_model(void **state)
{
    (void)state;
    collide = true;
    run_against_model(11, 14, 4000);
    collide = false;
}

/* Leaf-first removals: a sole owner's removal of a run's end cuts the run
 * in place (tree_runs.c cut_tail), with whatever hangs below. */
static void test_random_leaf_first_removals_against_model(void **state)
{
    (void)state;
    leaf_first = true;
    run_against_model(21, 26, 6000);
    leaf_first = false;
}

typedef struct {
    kvr_index *dst;
    size_t events, blocks;
} loader;

static void load_event(void *user, const kvr_dump_store *ev)
{
    loader *l = user;
    l->blocks += ev->n;
    kvr_owner o = kvr_index_owner(l->dst, ev->worker_id, ev->dp_rank);
    assert_int_equal(kvr_index_store(l->dst, o, ev->tier, ev->has_parent, ev->parent,
                                     ev->engine_hashes, ev->local_hashes, ev->n),
                     KVR_DROP_NONE);
    l->events++;
}

static void test_dump_round_trip(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner ids[OWNERS];
    make_owners(idx, ids);
    tm_model m;
    tm_init(&m);
    random_ops(idx, ids, &m, 77, 3000);
    kvr_index *copy = kvr_index_create();
    kvr_owner cids[OWNERS];
    make_owners(copy, cids); /* same (worker, rank) -> same order of ids */
    loader l = {copy, 0, 0};
    kvr_index_dump(idx, load_event, &l);
    assert_true(l.events > 0);
    assert_true(l.events < l.blocks); /* chains are batched */
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    uint64_t rng = 5;
    for (int q = 0; q < 3000; q++) {
        uint64_t loc[MAXLEN], eng[MAXLEN];
        size_t n = random_path(&rng, 0, loc, eng);
        compare_matches(idx, ids, &m, ctx, loc, n);
        compare_matches(copy, cids, &m, ctx, loc, n);
    }
    /* handles survive the dump: the same removals keep both in step */
    for (int q = 0; q < 300; q++) {
        uint64_t loc[MAXLEN], eng[MAXLEN];
        int o = (int)(rng_next(&rng) % OWNERS);
        size_t n = random_path(&rng, o, loc, eng);
        kvr_index_remove(idx, ids[o], KVR_TIER_GPU, eng + n - 1, 1);
        kvr_index_remove(copy, cids[o], KVR_TIER_GPU, eng + n - 1, 1);
        tm_remove(&m, o, 0, eng + n - 1, 1);
        n = random_path(&rng, 0, loc, eng);
        compare_matches(idx, ids, &m, ctx, loc, n);
        compare_matches(copy, cids, &m, ctx, loc, n);
    }
    kvr_match_ctx_destroy(ctx);
    tm_free(&m);
    kvr_index_destroy(copy);
    kvr_index_destroy(idx);
}

typedef struct {
    kvr_dump_store ev[16];
    uint64_t eng[16][16];
    size_t n;
} recorder;

static void record(void *user, const kvr_dump_store *ev)
{
    recorder *r = user;
    assert_true(r->n < 16 && ev->n <= 16);
    r->ev[r->n] = *ev;
    memcpy(r->eng[r->n], ev->engine_hashes, ev->n * sizeof(uint64_t));
    r->n++;
}

static void test_dump_chains(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 3);
    uint64_t l[6] = {11, 12, 13, 14, 15, 16}, e[6] = {101, 102, 103, 104, 105, 106};
    uint64_t l2[2] = {23, 24}, e2[2] = {203, 204};
    kvr_index_store(idx, a, KVR_TIER_GPU, false, 0, e, l, 6);
    kvr_index_store(idx, b, KVR_TIER_GPU, false, 0, e, l, 2);
    kvr_index_store(idx, b, KVR_TIER_CPU, true, 102, e2, l2, 2);
    recorder r = {0};
    kvr_index_dump(idx, record, &r);
    /* a: one chain of 6; b: its gpu chain of 2, then the cpu branch under it */
    assert_int_equal(r.n, 3);
    size_t seen_b_gpu = SIZE_MAX;
    for (size_t i = 0; i < r.n; i++) {
        const kvr_dump_store *ev = &r.ev[i];
        if (ev->worker_id == 1) {
            assert_int_equal(ev->n, 6);
            assert_false(ev->has_parent);
            assert_int_equal(r.eng[i][5], 106);
        } else if (ev->tier == KVR_TIER_GPU) {
            assert_int_equal(ev->dp_rank, 3);
            assert_int_equal(ev->n, 2);
            seen_b_gpu = i;
        } else {
            assert_true(seen_b_gpu < i); /* the parent's chain comes first */
            assert_true(ev->has_parent);
            assert_int_equal(ev->parent, 102);
            assert_int_equal(ev->n, 2);
            assert_int_equal(r.eng[i][1], 204);
        }
    }
    kvr_index_destroy(idx);
}

/* A writer stores and removes whole k-block chains; readers must see each
 * chain all or nothing. */
#define CHAIN 16
typedef struct {
    kvr_index *idx;
    kvr_owner o;
    atomic_bool stop;
    atomic_long partial, full;
} conc;

static void chain_of(int c, uint64_t *loc, uint64_t *eng)
{
    for (int i = 0; i < CHAIN; i++) {
        loc[i] = 5000 + (uint64_t)c * 100 + (uint64_t)i;
        eng[i] = 90000 + (uint64_t)c * 100 + (uint64_t)i;
    }
}

static void *reader(void *arg)
{
    conc *x = arg;
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    uint64_t loc[CHAIN], eng[CHAIN];
    int c = 0;
    while (!atomic_load(&x->stop)) {
        chain_of(c++ % 4, loc, eng);
        const kvr_match_entry *r;
        size_t k = kvr_index_match(x->idx, ctx, loc, CHAIN, &r);
        if (k == 1 && r[0].gpu_blocks == CHAIN)
            atomic_fetch_add(&x->full, 1);
        else if (k != 0)
            atomic_fetch_add(&x->partial, 1);
    }
    kvr_match_ctx_destroy(ctx);
    return NULL;
}

static void test_concurrent_match_sees_whole_events(void **state)
{
    (void)state;
    conc x = {.idx = kvr_index_create()};
    x.o = kvr_index_owner(x.idx, 1, 0);
    atomic_init(&x.stop, false);
    atomic_init(&x.partial, 0);
    atomic_init(&x.full, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reader, &x), 0);
    uint64_t loc[CHAIN], eng[CHAIN];
    for (int it = 0; it < 20000 || atomic_load(&x.full) == 0; it++) {
        chain_of(it % 4, loc, eng);
        assert_int_equal(kvr_index_store(x.idx, x.o, KVR_TIER_GPU, false, 0, eng, loc, CHAIN),
                         KVR_DROP_NONE);
        /* remove leaf-first in one event, as an engine evicts */
        uint64_t rev[CHAIN];
        for (int i = 0; i < CHAIN; i++)
            rev[i] = eng[CHAIN - 1 - i];
        if (it % 2)
            assert_int_equal(kvr_index_remove(x.idx, x.o, KVR_TIER_GPU, rev, CHAIN), 0);
        else
            kvr_index_clear_owner(x.idx, x.o);
    }
    atomic_store(&x.stop, true);
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&x.partial), 0);
    assert_true(atomic_load(&x.full) > 0);
    kvr_index_destroy(x.idx);
}

/* Large child tables are rebuilt with the write lock released while
 * matches go on (kvr_tree_child_fit): a reader matching an anchor chain
 * throughout growth past the in-place limit and the shrink after a clear
 * must always find it whole, and the bulk chains all or nothing. Under
 * ASan a match reading a table freed under it fails here. */
#define BULK_CHAINS 12000
typedef struct {
    kvr_index *idx;
    atomic_bool stop;
    atomic_long anchor_ok, anchor_bad, bulk_partial, matches;
} rebuild_watch;

static void bulk_chain(int c, uint64_t *loc, uint64_t *eng)
{
    for (int i = 0; i < CHAIN; i++) {
        loc[i] = 1000000 + (uint64_t)c * CHAIN + (uint64_t)i;
        eng[i] = 5000000 + (uint64_t)c * CHAIN + (uint64_t)i;
    }
}

static void *rebuild_reader(void *arg)
{
    rebuild_watch *x = arg;
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    uint64_t anchor[CHAIN], loc[CHAIN], eng[CHAIN];
    chain_of(0, anchor, eng);
    for (int c = 0; !atomic_load(&x->stop); c++) {
        const kvr_match_entry *r;
        size_t k = kvr_index_match(x->idx, ctx, anchor, CHAIN, &r);
        if (k == 1 && r[0].worker_id == 1 && r[0].gpu_blocks == CHAIN)
            atomic_fetch_add(&x->anchor_ok, 1);
        else
            atomic_fetch_add(&x->anchor_bad, 1);
        bulk_chain(c % BULK_CHAINS, loc, eng);
        k = kvr_index_match(x->idx, ctx, loc, CHAIN, &r);
        if (k > 1 || (k == 1 && r[0].gpu_blocks != CHAIN))
            atomic_fetch_add(&x->bulk_partial, 1);
        atomic_fetch_add(&x->matches, 1);
    }
    kvr_match_ctx_destroy(ctx);
    return NULL;
}

static void test_match_during_table_rebuilds(void **state)
{
    (void)state;
    rebuild_watch x = {.idx = kvr_index_create()};
    atomic_init(&x.stop, false);
    atomic_init(&x.anchor_ok, 0);
    atomic_init(&x.anchor_bad, 0);
    atomic_init(&x.bulk_partial, 0);
    atomic_init(&x.matches, 0);
    kvr_owner a = kvr_index_owner(x.idx, 1, 0), bulk = kvr_index_owner(x.idx, 2, 0);
    uint64_t loc[CHAIN], eng[CHAIN];
    chain_of(0, loc, eng);
    assert_int_equal(kvr_index_store(x.idx, a, KVR_TIER_GPU, false, 0, eng, loc, CHAIN),
                     KVR_DROP_NONE);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, rebuild_reader, &x), 0);
    kvr_index_stats st0, st1, st2;
    kvr_index_stats_get(x.idx, &st0);
    for (int c = 0; c < BULK_CHAINS; c++) {
        bulk_chain(c, loc, eng);
        assert_int_equal(kvr_index_store(x.idx, bulk, KVR_TIER_GPU, false, 0, eng, loc, CHAIN),
                         KVR_DROP_NONE);
    }
    kvr_index_stats_get(x.idx, &st1);
    kvr_index_clear_owner(x.idx, bulk);
    /* the emptied table shrinks at the next events */
    uint64_t one_eng = 42, one_loc = 43;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kvr_index_store(x.idx, bulk, KVR_TIER_GPU, false, 0, &one_eng, &one_loc, 1),
                         KVR_DROP_NONE);
        assert_int_equal(kvr_index_remove(x.idx, bulk, KVR_TIER_GPU, &one_eng, 1), 0);
    }
    kvr_index_stats_get(x.idx, &st2);
    while (atomic_load(&x.matches) < 100)
        sched_yield();
    atomic_store(&x.stop, true);
    pthread_join(th, NULL);
    /* 192k nodes need a table of 2^18 slots: well past the in-place limit */
    assert_int_equal(st1.nodes, (uint64_t)(BULK_CHAINS + 1) * CHAIN);
    assert_true(st1.bytes > st0.bytes + ((uint64_t)1 << 18) * sizeof(uint64_t));
    assert_true(st2.bytes < st0.bytes + ((uint64_t)1 << 16) * sizeof(uint64_t));
    assert_int_equal(st2.nodes, CHAIN);
    assert_int_equal(atomic_load(&x.anchor_bad), 0);
    assert_int_equal(atomic_load(&x.bulk_partial), 0);
    assert_true(atomic_load(&x.anchor_ok) >= 100);
    kvr_index_destroy(x.idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_random_hash_reuse_against_model),
        cmocka_unit_test(test_random_leaf_first_removals_against_model),
        cmocka_unit_test(test_dump_round_trip),
        cmocka_unit_test(test_dump_chains),
        cmocka_unit_test(test_concurrent_match_sees_whole_events),
        cmocka_unit_test(test_match_during_table_rebuilds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
