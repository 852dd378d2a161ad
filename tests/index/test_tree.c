/* Prefix index semantics (SPEC §6), one rule per test. */
#include "test_support.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvrouter/index.h"

#define G KVR_TIER_GPU
#define C KVR_TIER_CPU
#define D KVR_TIER_DISK

/* Chain of n blocks with local hashes base+1.. and engine hashes eng+1.. */
static kvr_drop_reason store(kvr_index *idx, kvr_owner o, kvr_tier t, bool hp, uint64_t parent,
                             uint64_t eng, uint64_t base, size_t n)
{
    uint64_t e[64], l[64];
    for (size_t i = 0; i < n; i++) {
        e[i] = eng + 1 + i;
        l[i] = base + 1 + i;
    }
    return kvr_index_store(idx, o, t, hp, parent, e, l, n);
}

/* Match result of one owner: -1 if absent, else g*10000 + c*100 + d. */
static long result(kvr_index *idx, kvr_match_ctx *ctx, kvr_owner o, uint64_t base, size_t n)
{
    uint64_t l[64];
    for (size_t i = 0; i < n; i++)
        l[i] = base + 1 + i;
    const kvr_match_entry *r;
    size_t k = kvr_index_match(idx, ctx, l, n, &r);
    for (size_t i = 0; i < k; i++)
        if (r[i].owner == o) {
            assert_true(r[i].gpu_blocks <= r[i].cpu_blocks && r[i].cpu_blocks <= r[i].disk_blocks);
            assert_true(r[i].disk_blocks > 0);
            return (long)r[i].gpu_blocks * 10000 + r[i].cpu_blocks * 100 + r[i].disk_blocks;
        }
    return -1;
}

typedef struct {
    kvr_index *idx;
    kvr_match_ctx *ctx;
    kvr_owner a, b;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->idx = kvr_index_create();
    f->ctx = kvr_match_ctx_create();
    f->a = kvr_index_owner(f->idx, 7, 0);
    f->b = kvr_index_owner(f->idx, 8, 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    kvr_match_ctx_destroy(f->ctx);
    kvr_index_destroy(f->idx);
    free(f);
    return 0;
}

static void test_owner_ids(void **state)
{
    fx *f = *state;
    assert_int_equal(kvr_index_owner(f->idx, 7, 0), f->a);
    assert_int_not_equal(f->a, f->b);
    kvr_owner r1 = kvr_index_owner(f->idx, 7, 1);
    assert_int_not_equal(r1, f->a);
    assert_int_equal(kvr_index_find_owner(f->idx, 7, 1), r1);
    assert_int_equal(kvr_index_find_owner(f->idx, 7, 2), KVR_OWNER_NONE);
    assert_int_equal(kvr_index_find_owner(f->idx, 99, 0), KVR_OWNER_NONE);
}

static void test_store_and_match_prefix(void **state)
{
    fx *f = *state;
    assert_int_equal(store(f->idx, f->a, G, false, 0, 100, 0, 4), KVR_DROP_NONE);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 4), 40404);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 2), 20202);
    /* request longer than the cached chain */
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 9), 40404);
    /* continue the chain under its last block (engine hash 104) */
    assert_int_equal(store(f->idx, f->a, G, true, 104, 104, 4, 2), KVR_DROP_NONE);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 9), 60606);
    /* a different first block matches nothing */
    assert_int_equal(result(f->idx, f->ctx, f->a, 1000, 3), -1);
    kvr_index_stats st;
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 6);
    assert_int_equal(st.ownerships, 6);
}

static void test_unknown_parent_applies_nothing(void **state)
{
    fx *f = *state;
    assert_int_equal(store(f->idx, f->a, G, true, 555, 100, 0, 3), KVR_DROP_PARENT_NOT_FOUND);
    kvr_index_stats st;
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 0);
    /* a parent known only to another owner is unknown too */
    store(f->idx, f->b, G, false, 0, 100, 0, 2);
    assert_int_equal(store(f->idx, f->a, G, true, 102, 200, 2, 2), KVR_DROP_PARENT_NOT_FOUND);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 4), -1);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 4), 20202);
}

static void test_unknown_removal_counted(void **state)
{
    fx *f = *state;
    store(f->idx, f->a, G, false, 0, 100, 0, 3);
    uint64_t rm[] = {103, 999, 102, 103};
    assert_int_equal(kvr_index_remove(f->idx, f->a, G, rm, 4), 2); /* 999 and the repeat */
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), 10101);
    /* removing a tier the block is not held on counts as not found */
    uint64_t one = 101;
    assert_int_equal(kvr_index_remove(f->idx, f->a, C, &one, 1), 1);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), 10101);
    /* another owner cannot remove a's handle */
    assert_int_equal(kvr_index_remove(f->idx, f->b, G, &one, 1), 1);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), 10101);
}

static void test_tier_reach(void **state)
{
    fx *f = *state;
    /* blocks 1-2 gpu, 3 cpu, 4 gpu, 5 disk, 6 cpu, 7 external */
    store(f->idx, f->a, G, false, 0, 100, 0, 2);
    store(f->idx, f->a, C, true, 102, 102, 2, 1);
    store(f->idx, f->a, G, true, 103, 103, 3, 1);
    store(f->idx, f->a, D, true, 104, 104, 4, 1);
    store(f->idx, f->a, C, true, 105, 105, 5, 1);
    store(f->idx, f->a, KVR_TIER_EXTERNAL, true, 106, 106, 6, 1);
    /* gpu run 2; cpu continues through 3 and the gpu block 4; disk through 5 and 6 */
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 7), 20406);
    /* the block on cpu also cached on gpu: gpu run extends */
    store(f->idx, f->a, G, true, 102, 102, 2, 1);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 7), 40406);
    /* a gpu copy removed leaves the cpu copy: ownership is per tier */
    uint64_t h = 103;
    assert_int_equal(kvr_index_remove(f->idx, f->a, G, &h, 1), 0);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 7), 20406);
    /* only disk for the first block: gpu 0, cpu 0, disk reach */
    store(f->idx, f->b, D, false, 0, 100, 0, 1);
    store(f->idx, f->b, G, true, 101, 101, 1, 2);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 7), 3);
}

/* Owners of the first block on no tier a match counts (external only) are
 * left out of the result, whether or not the walk gave anyone explicit
 * counters (a later block with other owners). */
static void test_external_only_owner_left_out(void **state)
{
    fx *f = *state;
    kvr_owner c = kvr_index_owner(f->idx, 9, 0);
    store(f->idx, f->a, KVR_TIER_EXTERNAL, false, 0, 100, 0, 3);
    store(f->idx, f->b, G, false, 0, 200, 0, 3);
    store(f->idx, c, C, false, 0, 300, 0, 2);
    const kvr_match_entry *r;
    uint64_t l[] = {1, 2, 3};
    /* blocks 1-2: the same owners (implicit counters only) */
    size_t k = kvr_index_match(f->idx, f->ctx, l, 2, &r);
    assert_int_equal(k, 2);
    for (size_t i = 0; i < k; i++) {
        assert_int_not_equal(r[i].owner, f->a);
        assert_int_equal(r[i].disk_blocks, 2);
        assert_int_equal(r[i].gpu_blocks, r[i].owner == f->b ? 2 : 0);
    }
    /* block 3 without c: b and c get explicit counters */
    k = kvr_index_match(f->idx, f->ctx, l, 3, &r);
    assert_int_equal(k, 2);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 3), 30303);
    assert_int_equal(result(f->idx, f->ctx, c, 0, 3), 202);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), -1);
}

/* The walk tries node id x + 1 as the child of node x before the child
 * table: a freed node keeping its old parent and hash, a live node x + 1
 * under another parent, and a chain whose ids are not consecutive must all
 * give the same result as the table. */
static void test_walk_next_id_guess(void **state)
{
    fx *f = *state;
    /* a: locals 1,2,3 as ids 1,2,3; then 2 and 3 evicted (ids freed, stale) */
    store(f->idx, f->a, G, false, 0, 100, 0, 3);
    uint64_t ev[] = {103, 102};
    assert_int_equal(kvr_index_remove(f->idx, f->a, G, ev, 2), 0);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), 10101);
    /* b: locals 7,8 under the root take ids 2,3: id 2 is live, parent root */
    store(f->idx, f->b, G, false, 0, 200, 6, 2);
    uint64_t l17[] = {1, 7};
    const kvr_match_entry *r;
    size_t k = kvr_index_match(f->idx, f->ctx, l17, 2, &r);
    assert_int_equal(k, 1);
    assert_int_equal(r[0].owner, f->a);
    assert_int_equal(r[0].gpu_blocks, 1);
    /* a's 2,3 again: ids 4,5, not next to id 1 */
    store(f->idx, f->a, G, true, 101, 101, 1, 2);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), 30303);
    assert_int_equal(result(f->idx, f->ctx, f->b, 6, 2), 20202);
}

/* A match ctx keeps the owner/worker/rank part of its last result when the
 * next match starts from the same first-block owners: it must not carry
 * it over to another index with the same shape, nor past a change of the
 * first block's owners, nor past a result that dropped an owner. */
static void test_reused_result_follows_index_and_owners(void **state)
{
    fx *f = *state;
    kvr_index *other = kvr_index_create();
    kvr_owner x = kvr_index_owner(other, 70, 3), y = kvr_index_owner(other, 80, 4);
    store(f->idx, f->a, G, false, 0, 100, 0, 2);
    store(f->idx, f->b, G, false, 0, 200, 0, 1);
    store(other, x, G, false, 0, 100, 0, 2);
    store(other, y, G, false, 0, 200, 0, 1);
    uint64_t l[] = {1, 2};
    const kvr_match_entry *r;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(kvr_index_match(f->idx, f->ctx, l, 2, &r), 2);
        assert_int_equal(r[0].worker_id, 7);
        assert_int_equal(r[0].gpu_blocks, 2);
        assert_int_equal(r[1].worker_id, 8);
        assert_int_equal(r[1].gpu_blocks, 1);
        assert_int_equal(kvr_index_match(other, f->ctx, l, 2, &r), 2);
        assert_int_equal(r[0].worker_id, 70);
        assert_int_equal(r[0].dp_rank, 3);
        assert_int_equal(r[1].worker_id, 80);
        assert_int_equal(r[1].dp_rank, 4);
    }
    /* a third owner joins the first block: three entries, in owner order */
    kvr_owner c = kvr_index_owner(f->idx, 9, 5);
    store(f->idx, c, C, false, 0, 300, 0, 1);
    assert_int_equal(kvr_index_match(f->idx, f->ctx, l, 2, &r), 3);
    assert_int_equal(r[2].worker_id, 9);
    assert_int_equal(r[2].dp_rank, 5);
    assert_int_equal(r[2].cpu_blocks, 1);
    /* b's gpu copy goes and an external-only copy stays: b is left out, then back */
    uint64_t h = 401; /* the external store named the block anew */
    store(f->idx, f->b, KVR_TIER_EXTERNAL, false, 0, 400, 0, 1);
    assert_int_equal(kvr_index_remove(f->idx, f->b, G, &h, 1), 0);
    assert_int_equal(kvr_index_match(f->idx, f->ctx, l, 2, &r), 2);
    assert_int_equal(r[0].worker_id, 7);
    assert_int_equal(r[1].worker_id, 9);
    store(f->idx, f->b, G, false, 0, 200, 0, 1);
    assert_int_equal(kvr_index_match(f->idx, f->ctx, l, 2, &r), 3);
    assert_int_equal(r[1].worker_id, 8);
    assert_int_equal(r[1].gpu_blocks, 1);
    kvr_index_destroy(other);
}

static void test_owner_and_rank_isolation(void **state)
{
    fx *f = *state;
    kvr_owner a1 = kvr_index_owner(f->idx, 7, 1);
    store(f->idx, f->a, G, false, 0, 100, 0, 5);
    store(f->idx, a1, G, false, 0, 100, 0, 2);
    store(f->idx, f->b, C, false, 0, 500, 0, 3);
    const kvr_match_entry *r;
    uint64_t l[] = {1, 2, 3, 4, 5};
    size_t k = kvr_index_match(f->idx, f->ctx, l, 5, &r);
    assert_int_equal(k, 3);
    for (size_t i = 0; i < k; i++) {
        if (r[i].owner == f->a) {
            assert_int_equal(r[i].worker_id, 7);
            assert_int_equal(r[i].dp_rank, 0);
            assert_int_equal(r[i].gpu_blocks, 5);
        } else if (r[i].owner == a1) {
            assert_int_equal(r[i].dp_rank, 1);
            assert_int_equal(r[i].gpu_blocks, 2);
        } else {
            assert_int_equal(r[i].owner, f->b);
            assert_int_equal(r[i].gpu_blocks, 0);
            assert_int_equal(r[i].cpu_blocks, 3);
        }
    }
    /* rank 1 removing its copy does not touch rank 0's */
    uint64_t h = 101;
    assert_int_equal(kvr_index_remove(f->idx, a1, G, &h, 1), 0);
    assert_int_equal(result(f->idx, f->ctx, a1, 0, 5), -1);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 5), 50505);
    kvr_index_clear_owner(f->idx, f->b);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 5), 50505);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 5), -1);
}

static void test_gap_stops_prefix(void **state)
{
    fx *f = *state;
    store(f->idx, f->a, G, false, 0, 100, 0, 6);
    store(f->idx, f->b, G, false, 0, 100, 0, 6);
    /* a loses block 3 (engine 103) while keeping its children */
    uint64_t h = 103;
    kvr_index_remove(f->idx, f->a, G, &h, 1);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 6), 20202);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 6), 60606);
    /* early exit: once nobody continues, deeper blocks are not consulted */
    kvr_index_remove(f->idx, f->b, G, &h, 1);
    kvr_index_stats st;
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 2); /* block 3 had no owner: its subtree went */
    assert_int_equal(st.ownerships, 4);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 6), 20202);
    /* handles into the reclaimed subtree are gone: using one as parent fails */
    assert_int_equal(store(f->idx, f->b, G, true, 105, 900, 50, 1), KVR_DROP_PARENT_NOT_FOUND);
    uint64_t h6 = 106;
    assert_int_equal(kvr_index_remove(f->idx, f->a, G, &h6, 1), 1);
}

static void test_subtree_reclaim_and_memory_baseline(void **state)
{
    fx *f = *state;
    kvr_index_stats base, st;
    kvr_index_stats_get(f->idx, &base);
    for (int round = 0; round < 3; round++) {
        /* a shared trunk with per-owner branches of different lengths */
        store(f->idx, f->a, G, false, 0, 100, 0, 40);
        store(f->idx, f->b, G, false, 0, 100, 0, 10);
        store(f->idx, f->b, C, true, 110, 5000, 500, 30);
        store(f->idx, f->a, D, true, 120, 7000, 700, 20);
        kvr_index_stats_get(f->idx, &st);
        assert_int_equal(st.nodes, 40 + 30 + 20);
        assert_int_equal(st.ownerships, 40 + 10 + 30 + 20);
        assert_true(st.bytes > base.bytes);
        /* the root block loses both owners: everything below goes */
        uint64_t h = 101;
        kvr_index_remove(f->idx, f->a, G, &h, 1);
        kvr_index_remove(f->idx, f->b, G, &h, 1);
        kvr_index_stats_get(f->idx, &st);
        assert_int_equal(st.nodes, 0);
        assert_int_equal(st.ownerships, 0);
        assert_int_equal(st.bytes, base.bytes);
    }
    /* leaf-first churn of many chains also returns to the baseline */
    for (uint64_t c = 0; c < 200; c++)
        store(f->idx, c % 2 ? f->a : f->b, G, false, 0, 10000 * (c + 1), 10000 * (c + 1), 30);
    for (uint64_t c = 0; c < 200; c++)
        for (int i = 30; i >= 1; i--) {
            uint64_t h = 10000 * (c + 1) + (uint64_t)i;
            assert_int_equal(kvr_index_remove(f->idx, c % 2 ? f->a : f->b, G, &h, 1), 0);
        }
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.bytes, base.bytes);
    /* large enough to grow every structure many times (100k nodes) */
    static uint64_t e[1000], l[1000];
    for (uint64_t c = 0; c < 100; c++) {
        for (int i = 0; i < 1000; i++) {
            e[i] = (c + 1) * 1000000 + (uint64_t)i;
            l[i] = (c + 1) * 7000000 + (uint64_t)i;
        }
        assert_int_equal(kvr_index_store(f->idx, c % 2 ? f->a : f->b, G, false, 0, e, l, 1000),
                         KVR_DROP_NONE);
    }
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 100000);
    kvr_index_clear_owner(f->idx, f->a);
    kvr_index_clear_owner(f->idx, f->b);
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.bytes, base.bytes);
}

static void test_clear_owner(void **state)
{
    fx *f = *state;
    kvr_index_stats base, st;
    kvr_index_stats_get(f->idx, &base);
    store(f->idx, f->a, G, false, 0, 100, 0, 8);
    store(f->idx, f->a, C, true, 108, 200, 8, 4);
    store(f->idx, f->b, G, false, 0, 100, 0, 3);
    kvr_index_clear_owner(f->idx, f->a);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 12), -1);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 12), 30303);
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 3);
    assert_int_equal(st.ownerships, 3);
    /* its handles are gone */
    assert_int_equal(store(f->idx, f->a, G, true, 104, 300, 4, 1), KVR_DROP_PARENT_NOT_FOUND);
    kvr_index_clear_owner(f->idx, f->b);
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.bytes, base.bytes);
    /* the owner can store again after a clear */
    assert_int_equal(store(f->idx, f->a, G, false, 0, 100, 0, 2), KVR_DROP_NONE);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 2), 20202);
}

/* A clear of an index with more owner sets than a clear scans under its
 * write lock (the scan then runs under a read lock) takes exactly the
 * owner's blocks. One block per subset of 13 owners: 5000 sets. */
static void test_clear_owner_among_many_sets(void **state)
{
    fx *f = *state;
    enum { OWNERS = 13, MASKS = 5000 };
    kvr_owner o[OWNERS];
    for (int k = 0; k < OWNERS; k++)
        o[k] = kvr_index_owner(f->idx, 1000 + (uint64_t)k, 0);
    uint64_t total = 0, of_first = 0;
    for (uint64_t m = 1; m <= MASKS; m++)
        for (int k = 0; k < OWNERS; k++)
            if (m >> k & 1) {
                assert_int_equal(store(f->idx, o[k], G, false, 0, 10 * m, 10 * m, 1), KVR_DROP_NONE);
                total++;
                of_first += k == 0;
            }
    kvr_index_clear_owner(f->idx, o[0]);
    kvr_index_stats st;
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.ownerships, total - of_first);
    for (uint64_t m = 1; m <= MASKS; m++) {
        uint64_t l = 10 * m + 1;
        const kvr_match_entry *r;
        size_t n = kvr_index_match(f->idx, f->ctx, &l, 1, &r);
        uint64_t seen = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(r[i].owner >= o[0] && r[i].owner <= o[OWNERS - 1]);
            seen |= 1ull << (r[i].owner - o[0]);
        }
        assert_int_equal(seen, m & ~1ull);
    }
}

static void test_restore_and_handle_reuse(void **state)
{
    fx *f = *state;
    store(f->idx, f->a, G, false, 0, 100, 0, 3);
    /* re-storing the same blocks is idempotent */
    store(f->idx, f->a, G, false, 0, 100, 0, 3);
    kvr_index_stats st;
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.ownerships, 3);
    /* same blocks under new engine hashes: the new handles replace the old */
    store(f->idx, f->a, G, false, 0, 300, 0, 3);
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.ownerships, 3);
    uint64_t old = 102, neu = 302;
    assert_int_equal(kvr_index_remove(f->idx, f->a, G, &old, 1), 1);
    assert_int_equal(kvr_index_remove(f->idx, f->a, G, &neu, 1), 0);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), 10101);
    /* an engine hash reused for other content moves: the newest store wins */
    uint64_t e = 301, l = 77;
    store(f->idx, f->b, G, false, 0, 100, 0, 1);
    assert_int_equal(kvr_index_store(f->idx, f->a, G, false, 0, &e, &l, 1), KVR_DROP_NONE);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 3), -1);
    assert_int_equal(result(f->idx, f->ctx, f->a, 76, 1), 10101);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 3), 10101);
}

static void test_engine_hash_differs_per_owner(void **state)
{
    fx *f = *state;
    kvr_index_stats base, st;
    kvr_index_stats_get(f->idx, &base);
    /* same blocks, different engine hashes (vLLM with per-process seeds) */
    store(f->idx, f->a, G, false, 0, 100, 0, 4);
    store(f->idx, f->b, G, false, 0, 900, 0, 4);
    assert_int_equal(store(f->idx, f->b, G, true, 904, 904, 4, 1), KVR_DROP_NONE);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 5), 50505);
    uint64_t h = 103;
    assert_int_equal(kvr_index_remove(f->idx, f->b, G, &h, 1), 1);
    h = 903;
    assert_int_equal(kvr_index_remove(f->idx, f->b, G, &h, 1), 0);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 5), 20202);
    assert_int_equal(result(f->idx, f->ctx, f->a, 0, 5), 40404);
    /* a leaves block 1: b's blocks and handles survive, the node stays */
    h = 101;
    kvr_index_remove(f->idx, f->a, G, &h, 1);
    assert_int_equal(result(f->idx, f->ctx, f->b, 0, 5), 20202);
    kvr_index_clear_owner(f->idx, f->a);
    kvr_index_clear_owner(f->idx, f->b);
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.ownerships, 0);
    assert_int_equal(st.bytes, base.bytes);
}

static void test_repeated_hashes_stay_consistent(void **state)
{
    fx *f = *state;
    kvr_index_stats base, st;
    kvr_index_stats_get(f->idx, &base);
    /* the converter rejects these; the index must still stay consistent */
    uint64_t e[] = {5, 5, 5}, l[] = {1, 2, 3};
    kvr_index_store(f->idx, f->a, G, false, 0, e, l, 3);
    kvr_index_stats_get(f->idx, &st);
    assert_true(st.ownerships <= 1);
    /* a parent that is also one of the stored hashes */
    store(f->idx, f->b, G, false, 0, 100, 0, 3);
    uint64_t e2[] = {103, 200}, l2[] = {4, 5};
    kvr_index_store(f->idx, f->b, G, true, 103, e2, l2, 2);
    kvr_index_stats_get(f->idx, &st);
    assert_true(st.nodes <= 6);
    uint64_t rm[] = {5, 103, 200, 101, 102};
    kvr_index_remove(f->idx, f->a, G, rm, 5);
    kvr_index_remove(f->idx, f->b, G, rm, 5);
    kvr_index_clear_owner(f->idx, f->a);
    kvr_index_clear_owner(f->idx, f->b);
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.ownerships, 0);
    assert_int_equal(st.bytes, base.bytes);
}

static void test_bad_arguments(void **state)
{
    fx *f = *state;
    assert_int_equal(store(f->idx, 12345, G, false, 0, 100, 0, 2), KVR_DROP_PARENT_NOT_FOUND);
    assert_int_equal(store(f->idx, f->a, (kvr_tier)9, false, 0, 100, 0, 2),
                     KVR_DROP_UNKNOWN_TIER);
    uint64_t h = 1;
    assert_int_equal(kvr_index_remove(f->idx, 12345, G, &h, 1), 1);
    kvr_index_clear_owner(f->idx, 12345);
    const kvr_match_entry *r;
    assert_int_equal(kvr_index_match(f->idx, f->ctx, &h, 0, &r), 0);
    assert_int_equal(store(f->idx, f->a, G, false, 0, 100, 0, 0), KVR_DROP_NONE);
}

/* A table past 64 KiB is rebuilt under a read lock (matches keep going on
 * the old one): counted in the stats, and nothing is lost on the way. */
static void test_large_tables_rebuilt_under_read_lock(void **state)
{
    fx *f = *state;
    kvr_index_stats st;
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.table_rebuilds, 0);
    enum { CHAINS = 200, LEN = 64 }; /* 12,800 blocks: an engine table of > 8192 slots */
    for (uint64_t c = 0; c < CHAINS; c++)
        assert_int_equal(store(f->idx, f->a, G, false, 0, 100000 * (c + 1), 100000 * (c + 1), LEN),
                         KVR_DROP_NONE);
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, CHAINS * LEN);
    assert_true(st.table_rebuilds >= 1);
    for (uint64_t c = 0; c < CHAINS; c++)
        assert_int_equal(result(f->idx, f->ctx, f->a, 100000 * (c + 1), LEN), LEN * 10101);
    /* every block is still found by its engine hash */
    for (uint64_t c = 0; c < CHAINS; c++) {
        uint64_t h = 100000 * (c + 1) + 1;
        assert_int_equal(kvr_index_remove(f->idx, f->a, G, &h, 1), 0);
    }
    kvr_index_stats_get(f->idx, &st);
    assert_int_equal(st.nodes, 0);
}

static void *match_once(void *p)
{
    fx *f = p;
    uint64_t l = 1;
    const kvr_match_entry *out;
    kvr_index_match(f->idx, f->ctx, &l, 1, &out);
    return NULL;
}

/* A match that had to wait for the writer tells when its wait ended (the
 * bench lines it up with what the writer was doing): after the writer let
 * go, before the match returned, and it began before the writer let go. */
static void test_match_wait_tells_when_it_ended(void **state)
{
    fx *f = *state;
    kvr_index_write_begin(f->idx);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, match_once, f), 0);
    /* the writer is due to let a match in once one waits */
    for (int i = 0; i < 30000 && !kvr_index_write_yield_due(f->idx, 0); i++)
        usleep(1000);
    uint64_t released = kvr_index_now_ns();
    kvr_index_write_end(f->idx);
    pthread_join(t, NULL);
    uint64_t returned = kvr_index_now_ns();
    kvr_match_ctx_stats st;
    kvr_match_ctx_stats_get(f->ctx, &st);
    assert_int_equal(st.waits, 1);
    assert_true(st.max_wait_end_ns >= released);
    assert_true(st.max_wait_end_ns <= returned);
    assert_true(st.max_wait_end_ns - st.max_wait_ns <= released);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_owner_ids),
        T(test_match_wait_tells_when_it_ended),
        T(test_store_and_match_prefix),
        T(test_unknown_parent_applies_nothing),
        T(test_unknown_removal_counted),
        T(test_tier_reach),
        T(test_external_only_owner_left_out),
        T(test_walk_next_id_guess),
        T(test_reused_result_follows_index_and_owners),
        T(test_owner_and_rank_isolation),
        T(test_gap_stops_prefix),
        T(test_subtree_reclaim_and_memory_baseline),
        T(test_clear_owner),
        T(test_clear_owner_among_many_sets),
        T(test_restore_and_handle_reuse),
        T(test_engine_hash_differs_per_owner),
        T(test_repeated_hashes_stay_consistent),
        T(test_bad_arguments),
        T(test_large_tables_rebuilt_under_read_lock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
