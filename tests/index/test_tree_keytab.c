/* The bare-id table of the prefix index (src/index/tree_keytab.h), which
 * holds the engine table: random streams of inserts, deletes, lookups,
 * in-place resizes and rebuilds into a new array, checked after every
 * step against a plain model (which ids are stored, each id's key). Keys
 * come from a small set so many ids share one and long clusters form, and
 * the fingerprints include values whose home is the last slot, so clusters
 * wrap around the array's end. The index (test_tree_model) then checks the
 * engine table in use; the last test here reads the index's layout to
 * check its rebuild (tree_handles.c) on both of its paths. */
#include "test_support.h"

#include <stdlib.h>
#include <string.h>

#include "index/tree_internal.h"
#include "index/tree_keytab.h"
#include "util/u64map.h"

enum { IDS = 2000 };

typedef struct {
    uint32_t fp[IDS]; /* each id's key is its fingerprint here */
    bool in[IDS];
    uint32_t live;
} model;

static uint32_t fp_of(const void *ctx, uint32_t id) { return ((const model *)ctx)->fp[id]; }

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 17;
}

/* The ids stored under fingerprint fp, probing as the index does: from
 * the home slot up to an empty one. */
static uint32_t probe(const kvr_keytab *t, uint32_t fp, const model *m, bool *seen)
{
    uint32_t n = 0;
    if (!t->cap)
        return 0;
    for (uint32_t i = kvr_keytab_home(t, fp); t->slot[i]; i = kvr_probe_next(i, t->cap))
        if (m->fp[t->slot[i]] == fp) {
            assert_false(seen[t->slot[i]]); /* stored once */
            seen[t->slot[i]] = true;
            n++;
        }
    return n;
}

/* The whole table agrees with the model: every stored id is the model's,
 * once, reachable from its home; the count is the model's. */
static void check_all(const kvr_keytab *t, const model *m)
{
    static bool seen[IDS];
    memset(seen, 0, sizeof seen);
    uint32_t occupied = 0;
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->slot[i]) {
            assert_true(t->slot[i] < IDS && m->in[t->slot[i]]);
            occupied++;
        }
    assert_int_equal(occupied, m->live);
    assert_int_equal(t->len, m->live);
    for (uint32_t id = 1; id < IDS; id++)
        if (m->in[id] && !seen[id])
            probe(t, m->fp[id], m, seen);
    for (uint32_t id = 1; id < IDS; id++)
        assert_int_equal(seen[id], m->in[id]);
}

static void insert(kvr_keytab *t, model *m, uint32_t id)
{
    assert_int_equal(kvr_keytab_room(t, 1, fp_of, m), 0);
    uint32_t i = kvr_keytab_home(t, m->fp[id]);
    while (t->slot[i]) {
        assert_int_not_equal(t->slot[i], id);
        i = kvr_probe_next(i, t->cap);
    }
    kvr_keytab_put_at(t, id, i);
    m->in[id] = true;
    m->live++;
}

static void rebuild(kvr_keytab *t, model *m, uint64_t more)
{
    uint32_t cap = kvr_keytab_fit_cap(t, m->live + more);
    assert_true(m->live == 0 || (cap && (uint64_t)m->live * 5 <= (uint64_t)cap * 2));
    if (cap == t->cap)
        return;
    uint32_t *s = kvr_keytab_rehash(t, cap, fp_of, m);
    assert_true(cap == 0 || s);
    free(kvr_keytab_install(t, s, cap));
}

static void run_stream(uint64_t seed, uint32_t keys)
{
    static model m;
    memset(&m, 0, sizeof m);
    uint64_t rng = seed;
    for (uint32_t id = 1; id < IDS; id++) {
        uint32_t k = (uint32_t)(rng_next(&rng) % keys);
        /* key 0 maps to the last slot of any table: wrapping clusters */
        m.fp[id] = k == 0 ? UINT32_MAX : (uint32_t)(kvr_mix64(k) >> 32);
    }
    kvr_keytab t;
    kvr_keytab_init(&t);
    static bool seen[IDS];
    for (int step = 0; step < 40000; step++) {
        uint32_t op = (uint32_t)(rng_next(&rng) % 100);
        /* phases of growth and of shrinking, so the table resizes both ways */
        bool growing = (step / 5000) % 2 == 0;
        uint32_t id = 1 + (uint32_t)(rng_next(&rng) % (IDS - 1));
        if (op < 55) {
            if (m.in[id] == growing) /* the op the phase wants: add or delete */
                continue;
            if (growing) {
                insert(&t, &m, id);
            } else {
                kvr_keytab_del(&t, id, m.fp[id], fp_of, &m);
                m.in[id] = false;
                m.live--;
            }
        } else if (op < 90) {
            /* lookup: exactly the model's ids under this key */
            memset(seen, 0, sizeof seen);
            uint32_t n = probe(&t, m.fp[id], &m, seen), want = 0;
            for (uint32_t x = 1; x < IDS; x++)
                if (m.in[x] && m.fp[x] == m.fp[id]) {
                    assert_true(seen[x]);
                    want++;
                }
            assert_int_equal(n, want);
        } else if (op < 95) {
            rebuild(&t, &m, rng_next(&rng) % 64);
        } else {
            assert_int_equal(kvr_keytab_reserve(&t, (uint32_t)(rng_next(&rng) % 64), fp_of, &m),
                             0);
        }
        if (step % 97 == 0)
            check_all(&t, &m);
    }
    check_all(&t, &m);
    kvr_keytab_free(&t);
}

static void test_random_streams_match_the_model(void **state)
{
    (void)state;
    run_stream(1, 7);   /* few keys: long clusters of equal fingerprints */
    run_stream(2, 300); /* clusters of different fingerprints */
    run_stream(3, 1u << 30);
}

/* The sizes: the same bytes as a fingerprint table for the same entries
 * (twice its slots), at most 2/5 full after a resize, halved back when
 * sparse; 0 slots for none; the inline "no resize" tests agree. */
static void test_sizes_follow_the_fingerprint_table(void **state)
{
    (void)state;
    kvr_keytab k;
    kvr_idtab f;
    kvr_keytab_init(&k);
    kvr_idtab_init(&f);
    for (uint64_t len = 0; len < 5000; len += 7) {
        uint32_t kc = kvr_keytab_fit_cap(&k, len), fc = kvr_idtab_fit_cap(&f, len);
        /* the inline test of "no resize" agrees with the sizing */
        assert_int_equal(kvr_keytab_fits(&k, len), kc == k.cap);
        assert_int_equal(kvr_idtab_fits(&f, len), fc == f.cap);
        assert_int_equal(kc, 2 * fc);
        assert_int_equal((size_t)kc * sizeof(uint32_t), (size_t)fc * sizeof(uint64_t));
        k.cap = kc;
        f.cap = fc;
    }
    for (uint64_t len = 5000; len > 7; len -= 7) {
        uint32_t kc = kvr_keytab_fit_cap(&k, len);
        assert_int_equal(kvr_keytab_fits(&k, len), kc == k.cap);
        assert_true(len * 5 <= (uint64_t)kc * 2 && (len * 16 >= kc || kc <= 16));
        k.cap = kc;
    }
    k.cap = 0;
    assert_int_equal(kvr_keytab_fit_cap(&k, 0), 0);
}

/* A delete at the end of the array moves the entries that wrapped to slot
 * 0 and beyond back across the end. */
static void test_delete_shifts_back_across_the_end(void **state)
{
    (void)state;
    static model m;
    memset(&m, 0, sizeof m);
    for (uint32_t id = 1; id <= 4; id++)
        m.fp[id] = UINT32_MAX;
    kvr_keytab t;
    kvr_keytab_init(&t);
    assert_int_equal(kvr_keytab_reserve(&t, 6, fp_of, &m), 0);
    uint32_t cap = t.cap;
    assert_int_equal(kvr_keytab_home(&t, UINT32_MAX), cap - 1);
    for (uint32_t id = 1; id <= 4; id++)
        insert(&t, &m, id);
    assert_int_equal(t.cap, cap);
    assert_int_equal(t.slot[cap - 1], 1);
    assert_int_equal(t.slot[0], 2);
    kvr_keytab_del(&t, 1, UINT32_MAX, fp_of, &m);
    m.in[1] = false;
    m.live--;
    assert_int_equal(t.slot[cap - 1], 2);
    assert_int_equal(t.slot[0], 3);
    assert_int_equal(t.slot[2], 0);
    check_all(&t, &m);
    for (uint32_t id = 2; id <= 4; id++) {
        kvr_keytab_del(&t, id, UINT32_MAX, fp_of, &m);
        m.in[id] = false;
        m.live--;
    }
    check_all(&t, &m);
    assert_int_equal(kvr_keytab_bytes(&t), 0);
}

/* A chain of n blocks for owner o from the root: engine hashes eng+1..,
 * local hashes loc+1.. */
static void store_chain(kvr_index *idx, kvr_owner o, uint64_t eng, uint64_t loc, size_t n)
{
    uint64_t e[200], l[200];
    for (size_t i = 0; i < n; i++) {
        e[i] = eng + 1 + i;
        l[i] = loc + 1 + i;
    }
    assert_int_equal(kvr_index_store(idx, o, KVR_TIER_GPU, false, 0, e, l, n), KVR_DROP_NONE);
}

/* An array from kvr_tree_engine_rebuild holds exactly the blocks the
 * index's engine table holds, each once and found from its home, except
 * `missing` (KVR_NIL for none). */
static void check_rebuilt(const kvr_index *idx, const uint32_t *s, uint32_t cap, uint32_t missing)
{
    uint32_t occupied = 0;
    for (uint32_t i = 0; i < cap; i++)
        if (s[i]) {
            assert_true(kvr_ids_used(&idx->block_ids, s[i]));
            assert_int_not_equal(s[i], missing);
            occupied++;
        }
    assert_int_equal(occupied, idx->engine.len);
    for (uint32_t b = 1; b < idx->block_ids.top; b++) {
        if (!kvr_ids_used(&idx->block_ids, b) || b == missing)
            continue;
        uint32_t found = 0;
        for (uint32_t i = kvr_fastrange(kvr_tree_engine_fp_of(idx, b), cap); s[i];
             i = kvr_probe_next(i, cap))
            found += s[i] == b;
        assert_int_equal(found, 1);
    }
}

/* The rebuild walks the live blocks when every block but the root is in
 * the engine table once (holes in the ids, several bitmap words, a last
 * word part used, creator hashes shared by two blocks), and copies the
 * table when one is not: the walk would then bring back a block the table
 * does not hold. */
static void test_engine_rebuild_walks_the_blocks_or_copies(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 0);
    store_chain(idx, a, 100, 0, 40);
    store_chain(idx, b, 100, 5000, 20); /* other content, the same engine hashes */
    store_chain(idx, b, 1000, 9000, 150);
    uint64_t gone[10];
    for (int i = 0; i < 10; i++)
        gone[i] = 100 + 40 - i; /* a's last 10 blocks, deepest first */
    assert_int_equal(kvr_index_remove(idx, a, KVR_TIER_GPU, gone, 10), 0);
    assert_true(idx->engine_dups > 0);
    assert_int_equal(idx->block_ids.count, 1 + 30 + 20 + 150);
    assert_true(idx->block_ids.top % 64 != 0 && idx->block_ids.top > 128);
    assert_int_equal(idx->engine.len + 1, idx->block_ids.count);
    for (uint32_t cap = idx->engine.cap / 2; cap <= 4 * idx->engine.cap; cap *= 2) {
        uint32_t *s = kvr_tree_engine_rebuild(idx, cap);
        assert_non_null(s);
        check_rebuilt(idx, s, cap, KVR_NIL);
        free(s);
    }
    /* a block with a creator hash of its own, out of the table */
    uint32_t x = idx->block_ids.top - 1;
    assert_int_equal(KVR_ENGINE(idx, x), 1000 + 150);
    uint64_t dups = idx->engine_dups;
    kvr_tree_engine_del(idx, x);
    assert_int_equal(idx->engine_dups, dups);
    uint32_t *s = kvr_tree_engine_rebuild(idx, idx->engine.cap);
    assert_non_null(s);
    check_rebuilt(idx, s, idx->engine.cap, x);
    free(s);
    kvr_tree_engine_room(idx, 1);
    assert_int_equal(kvr_tree_engine_put(idx, b, x), KVR_NIL);
    assert_int_equal(idx->engine.len + 1, idx->block_ids.count);
    kvr_index_destroy(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_streams_match_the_model),
        cmocka_unit_test(test_sizes_follow_the_fingerprint_table),
        cmocka_unit_test(test_delete_shifts_back_across_the_end),
        cmocka_unit_test(test_engine_rebuild_walks_the_blocks_or_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
