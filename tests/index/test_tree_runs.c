/* Runs of the prefix index (src/index/tree_internal.h): a chain is one run
 * of consecutive block ids; owners joining or leaving part of it split it,
 * and the pieces merge again once their owners agree; what a store, a
 * removal or a clear leaves behind is always the same tree as the model's
 * (tests/index/test_tree_model.c checks matches) and as few runs as the
 * ownership allows. White-box: these tests read the index's layout. */
#include "test_support.h"

#include <stdlib.h>
#include <string.h>

#include "index/tree_internal.h"

#define G KVR_TIER_GPU

static uint32_t runs(kvr_index *idx) { return idx->run_ids.count - 1; /* not the root */ }

/* Chain of n blocks: local base+1.., engine eng+1.. */
static kvr_drop_reason chain(kvr_index *idx, kvr_owner o, bool hp, uint64_t parent,
                             uint64_t eng, uint64_t base, size_t n)
{
    uint64_t e[256], l[256];
    for (size_t i = 0; i < n; i++) {
        e[i] = eng + 1 + i;
        l[i] = base + 1 + i;
    }
    return kvr_index_store(idx, o, G, hp, parent, e, l, n);
}

static uint32_t gpu_of(kvr_index *idx, kvr_owner o, uint64_t base, size_t n)
{
    uint64_t l[256];
    for (size_t i = 0; i < n; i++)
        l[i] = base + 1 + i;
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    const kvr_match_entry *r;
    size_t k = kvr_index_match(idx, ctx, l, n, &r);
    uint32_t g = 0;
    for (size_t i = 0; i < k; i++)
        if (r[i].owner == o)
            g = r[i].gpu_blocks;
    kvr_match_ctx_destroy(ctx);
    return g;
}

static void test_chain_is_one_run_and_grows_in_place(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0);
    assert_int_equal(chain(idx, a, false, 0, 100, 0, 10), KVR_DROP_NONE);
    assert_int_equal(runs(idx), 1);
    const kvr_run *r = &KVR_RUN(idx, KVR_RUNOF(idx, 1));
    assert_int_equal(r->start, 1);
    assert_int_equal(r->len, 10);
    /* the continuation under the last block takes the next ids: same run */
    assert_int_equal(chain(idx, a, true, 110, 110, 10, 5), KVR_DROP_NONE);
    assert_int_equal(runs(idx), 1);
    assert_int_equal(KVR_RUN(idx, KVR_RUNOF(idx, 1)).len, 15);
    assert_int_equal(gpu_of(idx, a, 0, 15), 15);
    kvr_index_destroy(idx);
}

static void test_join_splits_and_leave_merges_back(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 0);
    chain(idx, a, false, 0, 100, 0, 10);
    kvr_index_stats base;
    kvr_index_stats_get(idx, &base);
    /* b holds the first 4: {a,b} then {a} */
    chain(idx, b, false, 0, 100, 0, 4);
    assert_int_equal(runs(idx), 2);
    assert_int_equal(KVR_RUN(idx, KVR_RUNOF(idx, 4)).len, 4);
    assert_int_equal(KVR_RUN(idx, KVR_RUNOF(idx, 5)).len, 6);
    /* and a middle block only: {a,b} {a} {a,b} {a} */
    uint64_t e6 = 106;
    assert_int_equal(kvr_index_store(idx, b, G, false, 0, (uint64_t[]){101, 102, 103, 104, 105, 106, 107},
                                     (uint64_t[]){1, 2, 3, 4, 5, 6, 7}, 7),
                     KVR_DROP_NONE);
    assert_int_equal(runs(idx), 2); /* {a,b} x7, {a} x3 */
    assert_int_equal(kvr_index_remove(idx, b, G, &e6, 1), 0);
    assert_int_equal(runs(idx), 4); /* {a,b} x5, {a} x1, {a,b} x1, {a} x3 */
    assert_int_equal(gpu_of(idx, b, 0, 10), 5);
    assert_int_equal(gpu_of(idx, a, 0, 10), 10);
    /* b leaves leaf first: every piece merges back into one run */
    uint64_t rev[] = {107, 105, 104, 103, 102, 101};
    assert_int_equal(kvr_index_remove(idx, b, G, rev, 6), 0);
    assert_int_equal(runs(idx), 1);
    kvr_index_stats st;
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.ownerships, 10);
    assert_int_equal(st.nodes, base.nodes);
    assert_int_equal(KVR_RUN(idx, KVR_RUNOF(idx, 1)).len, 10);
    kvr_index_destroy(idx);
}

static void test_branch_off_the_middle_of_a_run(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 0);
    chain(idx, a, false, 0, 100, 0, 10);
    /* b shares blocks 1..5 then goes its own way: local 60.. */
    uint64_t e[8] = {101, 102, 103, 104, 105, 206, 207, 208};
    uint64_t l[8] = {1, 2, 3, 4, 5, 60, 61, 62};
    assert_int_equal(kvr_index_store(idx, b, G, false, 0, e, l, 8), KVR_DROP_NONE);
    assert_int_equal(runs(idx), 3);
    uint32_t fork = KVR_RUNOF(idx, 5);
    const kvr_run *f = &KVR_RUN(idx, fork);
    assert_int_equal(f->start + f->len - 1, 5); /* the shared part ends at the fork */
    uint32_t kids = 0;
    for (uint32_t c = f->first_child; c; c = kvr_run_next(&KVR_RUN(idx, c)))
        kids++;
    assert_int_equal(kids, 2);
    assert_int_equal(gpu_of(idx, a, 0, 10), 10);
    uint64_t lb[8] = {1, 2, 3, 4, 5, 60, 61, 62};
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    const kvr_match_entry *r;
    size_t k = kvr_index_match(idx, ctx, lb, 8, &r);
    assert_int_equal(k, 2);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(r[i].gpu_blocks, r[i].owner == b ? 8 : 5);
    kvr_match_ctx_destroy(ctx);
    /* b goes: the fork disappears, a's chain is one run again */
    kvr_index_clear_owner(idx, b);
    assert_int_equal(runs(idx), 1);
    kvr_index_destroy(idx);
}

/* A clear walks the owner's runs through its sets while reclaiming frees
 * runs and releases their chunks: thousands of runs across several chunks
 * must all go, without touching a released chunk (ASan). */
static void test_clear_of_many_runs_across_chunks(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 0);
    kvr_index_stats base, st;
    kvr_index_stats_get(idx, &base);
    /* 3000 two-block chains under the root; b shares the first block of
     * every third, so runs and sets vary */
    for (uint64_t c = 0; c < 3000; c++) {
        chain(idx, a, false, 0, 10 * c, 10 * c, 2);
        if (c % 3 == 0)
            chain(idx, b, false, 0, 10 * c, 10 * c, 1);
    }
    assert_true(runs(idx) > 3 * KVR_CHUNK);
    kvr_index_clear_owner(idx, a);
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 1000);
    assert_int_equal(st.ownerships, 1000);
    assert_int_equal(runs(idx), 1000);
    kvr_index_clear_owner(idx, b);
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.bytes, base.bytes);
    /* a alone holds each first block and shares the second with b (which
     * dropped its first): clearing a reclaims the second blocks' runs with
     * the first ones, before the clear reaches them in its list */
    for (uint64_t c = 0; c < 3000; c++) {
        chain(idx, a, false, 0, 10 * c, 10 * c, 2);
        chain(idx, b, false, 0, 10 * c, 10 * c, 2);
        uint64_t first = 10 * c + 1;
        assert_int_equal(kvr_index_remove(idx, b, G, &first, 1), 0);
    }
    assert_true(runs(idx) > 5 * KVR_CHUNK);
    kvr_index_clear_owner(idx, a);
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.ownerships, 0);
    kvr_index_clear_owner(idx, b);
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.bytes, base.bytes);
    kvr_index_destroy(idx);
}

/* Two blocks with the same creator hash (engines that reuse hashes): the
 * index counts them, and stores then check every handle, so a's reuse of
 * b's hash for other content never takes b's block. */
static void test_duplicate_creator_hashes_are_counted(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 0);
    uint64_t h = 500, la = 1, lb = 2;
    kvr_index_store(idx, a, G, false, 0, &h, &la, 1);
    assert_int_equal(idx->engine_dups, 0);
    kvr_index_store(idx, b, G, false, 0, &h, &lb, 1);
    assert_int_equal(idx->engine_dups, 1);
    /* b joins a's block under the same hash: it must not lose its own */
    kvr_index_store(idx, b, G, false, 0, &h, &la, 1);
    kvr_index_stats st;
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 1); /* newest store wins: b left block lb, which went */
    assert_int_equal(st.ownerships, 2);
    assert_int_equal(idx->engine_dups, 0);
    assert_int_equal(gpu_of(idx, b, 0, 1), 1);
    assert_int_equal(kvr_index_remove(idx, a, G, &h, 1), 0);
    assert_int_equal(kvr_index_remove(idx, b, G, &h, 1), 0);
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 0);
    kvr_index_destroy(idx);
}

/* Removals of neighbouring blocks are applied as one range, with the
 * counts of one-by-one removal: root first, the first removal of a sole
 * owner reclaims the rest, which then count as unknown; leaf first, none
 * does; a hash twice in one event counts once as unknown. */
static void test_batched_removals_count_as_one_by_one(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 0);
    uint64_t fwd[6] = {101, 102, 103, 104, 105, 106}, rev[6] = {106, 105, 104, 103, 102, 101};
    chain(idx, a, false, 0, 100, 0, 6);
    assert_int_equal(kvr_index_remove(idx, a, G, fwd, 6), 5);
    chain(idx, a, false, 0, 100, 0, 6);
    assert_int_equal(kvr_index_remove(idx, a, G, rev, 6), 0);
    /* with another owner on the chain nothing is reclaimed: root first is fine */
    chain(idx, a, false, 0, 100, 0, 6);
    chain(idx, b, false, 0, 100, 0, 6);
    assert_int_equal(kvr_index_remove(idx, a, G, fwd, 6), 0);
    assert_int_equal(gpu_of(idx, b, 0, 6), 6);
    uint64_t twice[4] = {106, 105, 105, 104};
    assert_int_equal(kvr_index_remove(idx, b, G, twice, 4), 1);
    assert_int_equal(gpu_of(idx, b, 0, 6), 3);
    kvr_index_stats st;
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 3);
    assert_int_equal(runs(idx), 1);
    kvr_index_destroy(idx);
}

/* The one owner of a run evicting its end (leaf first) cuts the run in
 * place: the head keeps its run id, no run id is handed out, and what
 * hangs below the cut (two branches, one of them another owner's) goes
 * with it, counters too. Splitting first gave the longer tail the old id,
 * so the head came out of it under a new one. */
static void test_tail_eviction_cuts_the_run_in_place(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner a = kvr_index_owner(idx, 1, 0), b = kvr_index_owner(idx, 2, 0);
    chain(idx, a, false, 0, 100, 0, 10);
    uint32_t r = KVR_RUNOF(idx, 1);
    /* two branches under block 10: a's local 50.., and b's local 70..,
     * left there when b let go of the chain above it */
    assert_int_equal(chain(idx, a, true, 110, 200, 50, 3), KVR_DROP_NONE);
    assert_int_equal(chain(idx, b, false, 0, 100, 0, 10), KVR_DROP_NONE);
    assert_int_equal(chain(idx, b, true, 110, 300, 70, 2), KVR_DROP_NONE);
    uint64_t fwd[10] = {101, 102, 103, 104, 105, 106, 107, 108, 109, 110};
    assert_int_equal(kvr_index_remove(idx, b, G, fwd, 10), 0);
    assert_int_equal(KVR_RUNOF(idx, 1), r);
    assert_int_equal(runs(idx), 3);
    assert_int_equal(idx->owners[b].blocks, 2);
    uint32_t run_top = idx->run_ids.top;
    uint64_t rev[7] = {110, 109, 108, 107, 106, 105, 104};
    assert_int_equal(kvr_index_remove(idx, a, G, rev, 7), 0);
    assert_int_equal(KVR_RUNOF(idx, 1), r);
    assert_int_equal(KVR_RUN(idx, r).len, 3);
    assert_int_equal(KVR_RUN(idx, r).first_child, KVR_NIL);
    assert_int_equal(runs(idx), 1);
    assert_true(idx->run_ids.top <= run_top);
    kvr_index_stats st;
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 3);
    assert_int_equal(st.ownerships, 3);
    assert_int_equal(idx->owners[a].blocks, 3);
    assert_int_equal(idx->owners[b].blocks, 0);
    assert_int_equal(gpu_of(idx, a, 0, 10), 3);
    /* the freed ids are taken again by a continuation, in the same run */
    assert_int_equal(chain(idx, a, true, 103, 103, 3, 4), KVR_DROP_NONE);
    assert_int_equal(runs(idx), 1);
    assert_int_equal(KVR_RUN(idx, r).len, 7);
    assert_int_equal(gpu_of(idx, a, 0, 10), 7);
    /* the whole run by its one owner: nothing left */
    uint64_t all[7] = {107, 106, 105, 104, 103, 102, 101};
    assert_int_equal(kvr_index_remove(idx, a, G, all, 7), 0);
    kvr_index_stats_get(idx, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.ownerships, 0);
    assert_int_equal(runs(idx), 0);
    kvr_index_destroy(idx);
}

/* A run alone holding its owner set changes it in place, keeping the set
 * id (before, each change interned a new set and freed the old one), also
 * across the size where entries move out of line (3 owners) and back; the
 * entries' bytes return with them. */
static void test_sole_run_changes_its_set_in_place(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner o[3] = {kvr_index_owner(idx, 1, 0), kvr_index_owner(idx, 2, 0),
                      kvr_index_owner(idx, 3, 0)};
    chain(idx, o[0], false, 0, 100, 0, 10);
    uint32_t r = KVR_RUNOF(idx, 1), set = KVR_RUN(idx, r).set;
    size_t entry_bytes = idx->sets.entry_bytes;
    uint32_t sets = idx->sets.ids.count;
    for (int k = 1; k < 3; k++) {
        assert_int_equal(chain(idx, o[k], false, 0, 100, 0, 10), KVR_DROP_NONE);
        assert_int_equal(KVR_RUNOF(idx, 1), r);
        assert_int_equal(KVR_RUN(idx, r).set, set);
        assert_int_equal(kvr_osets_get(&idx->sets, set)->len, (uint32_t)k + 1);
        assert_int_equal(idx->sets.ids.count, sets);
    }
    assert_true(idx->sets.entry_bytes > entry_bytes);
    for (int k = 0; k < 3; k++)
        assert_int_equal(gpu_of(idx, o[k], 0, 10), 10);
    uint64_t rev[10] = {110, 109, 108, 107, 106, 105, 104, 103, 102, 101};
    assert_int_equal(kvr_index_remove(idx, o[1], G, rev, 10), 0);
    assert_int_equal(kvr_index_remove(idx, o[2], G, rev, 10), 0);
    assert_int_equal(KVR_RUN(idx, r).set, set);
    assert_int_equal(kvr_osets_get(&idx->sets, set)->len, 1);
    assert_int_equal(idx->sets.entry_bytes, entry_bytes);
    assert_int_equal(gpu_of(idx, o[0], 0, 10), 10);
    assert_int_equal(gpu_of(idx, o[1], 0, 10), 0);
    /* two runs with one set: a change of one interns a new set, the other
     * keeps the old one (changed in place, the tail would gain o[1] too) */
    chain(idx, o[1], false, 0, 100, 0, 4);
    assert_int_equal(runs(idx), 2);
    assert_int_equal(KVR_RUN(idx, KVR_RUNOF(idx, 5)).set, set);
    assert_true(KVR_RUN(idx, KVR_RUNOF(idx, 1)).set != set);
    assert_int_equal(kvr_osets_get(&idx->sets, set)->len, 1);
    assert_int_equal(gpu_of(idx, o[1], 0, 10), 4);
    assert_int_equal(gpu_of(idx, o[0], 0, 10), 10);
    assert_int_equal(kvr_index_remove(idx, o[1], G, rev + 6, 4), 0);
    assert_int_equal(runs(idx), 1);
    kvr_index_destroy(idx);
}

/* A match ctx rewrites only the counters that can differ from its last
 * result when the first set and its depth are the same: owners that
 * continued past the shared prefix last time and not now (and the other
 * way round) must still be right. */
static void test_reused_counters_follow_the_walk(void **state)
{
    (void)state;
    kvr_index *idx = kvr_index_create();
    kvr_owner o[3];
    for (int i = 0; i < 3; i++) {
        o[i] = kvr_index_owner(idx, 10 + (uint64_t)i, 0);
        chain(idx, o[i], false, 0, 100, 0, 2); /* shared prefix of 2 */
        /* owner i goes on with its own blocks 3..5 under local 1000 * (i + 1) */
        chain(idx, o[i], true, 102, 1000 * (uint64_t)(i + 1), 1000 * (uint64_t)(i + 1), 3);
    }
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    for (int round = 0; round < 4; round++)
        for (int want = 0; want < 3; want++) {
            uint64_t l[5] = {1, 2, 1000 * (uint64_t)(want + 1) + 1, 1000 * (uint64_t)(want + 1) + 2,
                             1000 * (uint64_t)(want + 1) + 3};
            const kvr_match_entry *r;
            size_t k = kvr_index_match(idx, ctx, l, round % 2 ? 5 : 4, &r);
            assert_int_equal(k, 3);
            for (size_t i = 0; i < k; i++) {
                uint32_t g = r[i].owner == o[want] ? (round % 2 ? 5 : 4) : 2;
                assert_int_equal(r[i].gpu_blocks, g);
                assert_int_equal(r[i].disk_blocks, g);
            }
        }
    kvr_match_ctx_destroy(ctx);
    kvr_index_destroy(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_is_one_run_and_grows_in_place),
        cmocka_unit_test(test_join_splits_and_leave_merges_back),
        cmocka_unit_test(test_branch_off_the_middle_of_a_run),
        cmocka_unit_test(test_clear_of_many_runs_across_chunks),
        cmocka_unit_test(test_duplicate_creator_hashes_are_counted),
        cmocka_unit_test(test_batched_removals_count_as_one_by_one),
        cmocka_unit_test(test_tail_eviction_cuts_the_run_in_place),
        cmocka_unit_test(test_sole_run_changes_its_set_in_place),
        cmocka_unit_test(test_reused_counters_follow_the_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
