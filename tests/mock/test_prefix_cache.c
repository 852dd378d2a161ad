/* Mock engine prefix cache: LRU of leaves, parent-linked store events, and a
 * randomized comparison against a naive model. */
#include "test_support.h"

#include <stdlib.h>
#include <string.h>

#include "mock/prefix_cache.h"
#include "util/u64map.h"

typedef struct {
    uint64_t stored[256];
    size_t n_stored;
    bool has_parent;
    uint64_t parent;
    int store_calls;
    uint64_t evicted[256];
    size_t n_evicted;
} recorder;

static void on_stored(void *ud, bool has_parent, uint64_t parent, const uint64_t *keys, size_t n)
{
    recorder *r = ud;
    r->store_calls++;
    r->has_parent = has_parent;
    r->parent = parent;
    memcpy(r->stored, keys, n * sizeof *keys);
    r->n_stored = n;
}

static void on_evicted(void *ud, const uint64_t *keys, size_t n)
{
    recorder *r = ud;
    memcpy(r->evicted + r->n_evicted, keys, n * sizeof *keys);
    r->n_evicted += n;
}

static void test_store_suffix_with_parent(void **state)
{
    (void)state;
    kvr_prefix_cache *c = kvr_prefix_cache_create(10);
    recorder r = {0};
    kvr_prefix_cache_sink sink = {on_stored, on_evicted, &r};
    uint64_t a[] = {1, 2, 3}, b[] = {1, 2, 4, 5};
    assert_int_equal(kvr_prefix_cache_insert(c, a, 3, &sink), 3);
    assert_false(r.has_parent);
    assert_int_equal(r.n_stored, 3);
    assert_int_equal(kvr_prefix_cache_match(c, b, 4), 2);
    assert_int_equal(kvr_prefix_cache_insert(c, b, 4, &sink), 2);
    assert_true(r.has_parent);
    assert_int_equal(r.parent, 2);
    assert_int_equal(r.stored[0], 4);
    assert_int_equal(r.stored[1], 5);
    assert_int_equal(kvr_prefix_cache_size(c), 5);
    /* fully cached: nothing stored, no event */
    r.store_calls = 0;
    assert_int_equal(kvr_prefix_cache_insert(c, b, 4, &sink), 0);
    assert_int_equal(r.store_calls, 0);
    assert_int_equal(r.n_evicted, 0);
    kvr_prefix_cache_destroy(c);
}

static void test_lru_leaves_only(void **state)
{
    (void)state;
    kvr_prefix_cache *c = kvr_prefix_cache_create(5);
    recorder r = {0};
    kvr_prefix_cache_sink sink = {on_stored, on_evicted, &r};
    uint64_t a[] = {1, 2, 3}, b[] = {1, 4}, d[] = {9, 8};
    kvr_prefix_cache_insert(c, a, 3, &sink);
    kvr_prefix_cache_insert(c, b, 2, &sink);
    assert_int_equal(kvr_prefix_cache_size(c), 4);
    /* touch chain a: now b's leaf 4 is the LRU leaf; root block 1 is shared */
    assert_int_equal(kvr_prefix_cache_match(c, a, 3), 3);
    assert_int_equal(kvr_prefix_cache_insert(c, d, 2, &sink), 2);
    assert_int_equal(r.n_evicted, 1);
    assert_int_equal(r.evicted[0], 4);
    assert_false(kvr_prefix_cache_contains(c, 4));
    assert_true(kvr_prefix_cache_contains(c, 1));
    /* a is now LRU: its leaf goes first, then its parent (leaf after that) */
    uint64_t e[] = {9, 8, 7, 6};
    r.n_evicted = 0;
    assert_int_equal(kvr_prefix_cache_insert(c, e, 4, &sink), 2);
    assert_int_equal(r.n_evicted, 2);
    assert_int_equal(r.evicted[0], 3);
    assert_int_equal(r.evicted[1], 2);
    assert_true(kvr_prefix_cache_contains(c, 1));
    assert_int_equal(kvr_prefix_cache_size(c), 5);
    kvr_prefix_cache_destroy(c);
}

static void test_request_longer_than_capacity(void **state)
{
    (void)state;
    kvr_prefix_cache *c = kvr_prefix_cache_create(3);
    recorder r = {0};
    kvr_prefix_cache_sink sink = {on_stored, on_evicted, &r};
    uint64_t x[] = {11, 12}, a[] = {1, 2, 3, 4, 5};
    kvr_prefix_cache_insert(c, x, 2, &sink);
    assert_int_equal(kvr_prefix_cache_insert(c, a, 5, &sink), 3);
    assert_int_equal(r.n_evicted, 2);
    assert_int_equal(r.evicted[0], 12);
    assert_int_equal(r.evicted[1], 11);
    assert_int_equal(r.n_stored, 3);
    assert_int_equal(r.stored[2], 3);
    assert_int_equal(kvr_prefix_cache_match(c, a, 5), 3);
    kvr_prefix_cache_clear(c);
    assert_int_equal(kvr_prefix_cache_size(c), 0);
    assert_int_equal(kvr_prefix_cache_match(c, a, 5), 0);
    kvr_prefix_cache_destroy(c);
}

/* Naive model: linear scans over a small array. */
#define MAXN 64
typedef struct {
    uint64_t key, parent, tick;
    bool has_parent;
    int children;
} mnode;
typedef struct {
    mnode n[MAXN];
    int len;
    size_t cap;
    uint64_t tick;
} model;

static int mfind(model *m, uint64_t key)
{
    for (int i = 0; i < m->len; i++)
        if (m->n[i].key == key)
            return i;
    return -1;
}

static size_t model_insert(model *m, const uint64_t *keys, size_t n, uint64_t *ev, size_t *nev)
{
    if (n > m->cap)
        n = m->cap;
    uint64_t now = ++m->tick;
    size_t k = 0;
    for (; k < n; k++) {
        int i = mfind(m, keys[k]);
        if (i < 0)
            break;
        m->n[i].tick = now;
    }
    *nev = 0;
    while ((size_t)m->len + (n - k) > m->cap) {
        int best = -1;
        for (int i = 0; i < m->len; i++)
            if (m->n[i].children == 0 && m->n[i].tick < now &&
                (best < 0 || m->n[i].tick < m->n[best].tick))
                best = i;
        assert_true(best >= 0);
        ev[(*nev)++] = m->n[best].key;
        if (m->n[best].has_parent)
            m->n[mfind(m, m->n[best].parent)].children--;
        m->n[best] = m->n[--m->len];
    }
    for (size_t j = k; j < n; j++) {
        mnode *nd = &m->n[m->len++];
        nd->key = keys[j];
        nd->has_parent = j > 0;
        nd->parent = j > 0 ? keys[j - 1] : 0;
        nd->tick = now;
        nd->children = 0;
        if (j > 0)
            m->n[mfind(m, keys[j - 1])].children++;
    }
    return n - k;
}

static void test_random_against_model(void **state)
{
    (void)state;
    for (size_t cap = 1; cap <= 24; cap += 5) {
        kvr_prefix_cache *c = kvr_prefix_cache_create(cap);
        model m = {.cap = cap};
        recorder r = {0};
        kvr_prefix_cache_sink sink = {on_stored, on_evicted, &r};
        uint64_t rng = 99 + cap;
        for (int step = 0; step < 3000; step++) {
            uint64_t keys[12];
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t n = 1 + (rng >> 60) % 10;
            uint64_t k = 0;
            for (size_t i = 0; i < n; i++) {
                rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
                k = kvr_mix64(k * 31 + 1 + (rng >> 62)); /* 4 children per level */
                keys[i] = k;
            }
            uint64_t ev[MAXN];
            size_t nev;
            r.n_evicted = 0;
            r.n_stored = 0;
            size_t want = model_insert(&m, keys, n, ev, &nev);
            size_t got = kvr_prefix_cache_insert(c, keys, n, &sink);
            assert_int_equal(got, want);
            assert_int_equal(r.n_evicted, nev);
            assert_memory_equal(r.evicted, ev, nev * sizeof *ev);
            if (got)
                assert_memory_equal(r.stored, keys + (n < cap ? n : cap) - got,
                                    got * sizeof *keys);
            assert_int_equal(kvr_prefix_cache_size(c), (size_t)m.len);
            assert_true(kvr_prefix_cache_size(c) <= cap);
        }
        kvr_prefix_cache_destroy(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_suffix_with_parent),
        cmocka_unit_test(test_lru_leaves_only),
        cmocka_unit_test(test_request_longer_than_capacity),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
