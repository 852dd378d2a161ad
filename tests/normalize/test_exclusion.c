/* engine_wide media exclusion (SPEC §5 rules 1-6 and 8), one test per rule. */
#include "norm_fixture.h"

#include <stdlib.h>

#define B 4u

static const uint64_t H[] = {11, 12, 13, 14};

/* Three blocks of text tokens with a wide id in block `media` (-1: none). */
static void three_blocks(uint64_t *tok, int media)
{
    text(tok, 12, 100);
    if (media >= 0)
        tok[media * (int)B + 2] = WIDE;
}

static void check_boundary(int media, uint32_t kept)
{
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12];
    three_blocks(tok, media);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, true, 99, tok, 12);
    kvr_normalize(n, &ev, &out);
    if (kept == 0) {
        assert_empty_removal(&out);
    } else {
        assert_store_of(&out, H, kept, kept * B);
        assert_true(out.has_parent);
        assert_int_equal(out.parent, 99);
        for (uint32_t i = 0; i < kept * B; i++)
            assert_int_equal(out.tokens[i], 100 + i);
    }
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_blocks_excluded, 3 - kept);
    assert_int_equal(c.mm_stores_truncated, 1);
    assert_int_equal(c.mm_excluded_ids, 3 - kept);
    /* exactly the excluded hashes were recorded: removing all three filters
     * those and lets the kept ones through */
    ev = remove_ev(H, 3);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_REMOVE);
    assert_int_equal(out.n_block_hashes, kept);
    for (uint32_t i = 0; i < kept; i++)
        assert_int_equal(out.block_hashes[i], H[i]);
    kvr_normalizer_destroy(n);
}

static void test_exclusion_at_block_0(void **state)
{
    (void)state;
    check_boundary(0, 0);
}

static void test_exclusion_at_middle_block(void **state)
{
    (void)state;
    check_boundary(1, 1);
}

static void test_exclusion_at_last_block(void **state)
{
    (void)state;
    check_boundary(2, 2);
}

static void test_text_store_untouched(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12];
    three_blocks(tok, -1);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 3, 12);
    assert_false(out.has_parent);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_stores_truncated, 0);
    assert_int_equal(c.mm_excluded_ids, 0);
    kvr_normalizer_destroy(n);
}

static void test_descendants_across_events(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12], t2[8];
    three_blocks(tok, 1); /* H[0] kept, H[1], H[2] excluded */
    text(t2, 8, 500);     /* children are pure text */
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 1, 4);

    /* child of an excluded block: excluded whole, its hashes recorded */
    const uint64_t child[] = {21, 22};
    ev = store_ev(child, 2, true, H[2], t2, 8);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    /* grandchild, under the child's last block, in a later event */
    const uint64_t grand[] = {31};
    ev = store_ev(grand, 1, true, 22, t2, 4);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_descendant_stores_excluded, 2);
    assert_int_equal(c.mm_excluded_ids, 2 + 2 + 1);
    assert_int_equal(c.mm_blocks_excluded, 2 + 2 + 1);
    assert_int_equal(c.mm_stores_truncated, 1);

    /* a child of the kept text block is indexed */
    const uint64_t sib[] = {41, 42};
    ev = store_ev(sib, 2, true, H[0], t2, 8);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, sib, 2, 8);
    assert_int_equal(out.parent, H[0]);
    kvr_normalizer_destroy(n);
}

static void test_eagle_overlap_token(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, true, 0);
    uint64_t tok[9];
    kvr_norm_event out;
    /* sentinel at position 4: block 1's first token, block 0's overlap token */
    text(tok, 9, 100);
    tok[4] = WIDE;
    kvr_raw_event ev = store_ev(H, 2, false, 0, tok, 9);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    assert_int_equal(counters(n).mm_excluded_ids, 2);

    /* sentinel in the last overlap token: block 1 goes, block 0 stays with
     * its own overlap token */
    const uint64_t h2[] = {51, 52};
    text(tok, 9, 100);
    tok[8] = WIDE;
    ev = store_ev(h2, 2, false, 0, tok, 9);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, h2, 1, 5);
    assert_int_equal(out.tokens[4], 104);
    assert_int_equal(counters(n).mm_excluded_ids, 3);
    kvr_normalizer_destroy(n);

    /* the same position 4 without Eagle only hits block 1 */
    n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    text(tok, 9, 100);
    tok[4] = WIDE;
    ev = store_ev(H, 2, false, 0, tok, 8);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 1, 4);
    kvr_normalizer_destroy(n);
}

static void test_tier_isolation(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12], t2[4];
    three_blocks(tok, 1);
    text(t2, 4, 700);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12); /* gpu: H[1], H[2] excluded */
    kvr_normalize(n, &ev, &out);
    size_t bytes_gpu_only = kvr_normalizer_bytes(n);

    /* the same hash stored on cpu (text there) is indexed */
    const uint64_t same[] = {13};
    ev = store_ev(same, 1, false, 0, t2, 4);
    ev.tier = KVR_TIER_CPU;
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, same, 1, 4);
    assert_int_equal(kvr_normalizer_bytes(n), bytes_gpu_only); /* cpu set untouched */

    /* on cpu, a child of H[2] is not a descendant of anything excluded */
    const uint64_t child[] = {61};
    ev = store_ev(child, 1, true, H[2], t2, 4);
    ev.tier = KVR_TIER_CPU;
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, child, 1, 4);
    assert_int_equal(out.tier, KVR_TIER_CPU);
    /* a cpu removal of H[1] is not filtered */
    ev = remove_ev(H + 1, 1);
    ev.tier = KVR_TIER_CPU;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.n_block_hashes, 1);
    assert_int_equal(counters(n).mm_removals_filtered, 0);
    /* the gpu one is */
    ev.tier = KVR_TIER_GPU;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.n_block_hashes, 0);
    assert_int_equal(counters(n).mm_removals_filtered, 1);
    /* and on gpu the child of H[2] is still excluded */
    ev = store_ev(child, 1, true, H[2], t2, 4);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    kvr_normalizer_destroy(n);
}

static void test_worker_and_rank_isolation(void **state)
{
    (void)state;
    /* separate normalizers are separate (worker, rank)s */
    kvr_normalizer *a = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    kvr_normalizer *b = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12], t2[4];
    three_blocks(tok, 0);
    text(t2, 4, 700);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(a, &ev, &out);
    const uint64_t child[] = {61};
    ev = store_ev(child, 1, true, H[2], t2, 4);
    kvr_normalize(b, &ev, &out);
    assert_store_of(&out, child, 1, 4);
    kvr_normalize(a, &ev, &out);
    assert_empty_removal(&out);
    assert_int_equal(counters(b).mm_excluded_ids, 0);
    kvr_normalizer_destroy(a);
    kvr_normalizer_destroy(b);
}

static void test_removal_filtering_shrinks_set(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12];
    three_blocks(tok, 1);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(counters(n).mm_excluded_ids, 2);

    const uint64_t rm[] = {11, 12, 13, 99};
    ev = remove_ev(rm, 4);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_REMOVE);
    assert_int_equal(out.n_block_hashes, 2);
    assert_int_equal(out.block_hashes[0], 11);
    assert_int_equal(out.block_hashes[1], 99);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_removals_filtered, 2);
    assert_int_equal(c.mm_excluded_ids, 0);
    /* forgotten: a second removal passes through, and a store under the
     * removed block is no longer a descendant */
    ev = remove_ev(rm + 1, 1);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.n_block_hashes, 1);
    assert_int_equal(counters(n).mm_removals_filtered, 2);
    kvr_normalizer_destroy(n);
}

static void test_clear_empties_sets(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12], t2[4];
    three_blocks(tok, 0);
    text(t2, 4, 700);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    ev.tier = KVR_TIER_DISK;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(counters(n).mm_excluded_ids, 6);
    ev = clear_ev();
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_CLEAR);
    assert_int_equal(counters(n).mm_excluded_ids, 0);
    const uint64_t child[] = {61};
    ev = store_ev(child, 1, true, H[2], t2, 4);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, child, 1, 4);
    ev.tier = KVR_TIER_DISK;
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, child, 1, 4);
    kvr_normalizer_destroy(n);
}

static void test_duplicate_ids_left_unchanged(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    uint64_t tok[12];
    three_blocks(tok, 1);
    kvr_norm_event out;
    const uint64_t rep[] = {11, 12, 11};
    kvr_raw_event ev = store_ev(rep, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, rep, 3, 12);
    assert_true(out.duplicate_ids);
    /* parent repeated inside the hashes */
    ev = store_ev(H, 3, true, H[2], tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 3, 12);
    assert_int_equal(out.parent, H[2]);
    assert_true(out.duplicate_ids);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_excluded_ids, 0);
    assert_int_equal(c.mm_stores_truncated, 0);
    /* a large store with one repeat far apart is caught too */
    enum { N = 5000 };
    uint64_t *big = malloc(N * sizeof *big);
    uint64_t *bt = malloc(N * B * sizeof *bt);
    for (uint64_t i = 0; i < N; i++)
        big[i] = 1000 + i;
    text(bt, N * B, 1);
    big[N - 1] = big[3];
    ev = store_ev(big, N, false, 0, bt, N * B);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.n_block_hashes, N);
    assert_true(out.duplicate_ids);
    big[N - 1] = 0; /* and without the repeat it is a plain store */
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.n_block_hashes, N);
    assert_false(out.duplicate_ids);
    ev.has_parent = true;
    ev.parent = 0; /* the zero id repeated through the parent */
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    assert_true(out.duplicate_ids);
    free(big);
    free(bt);
    kvr_normalizer_destroy(n);
}

static void test_capacity_fallback_small(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 4);
    uint64_t tok[12], t2[8];
    text(t2, 8, 900);
    kvr_norm_event out;
    three_blocks(tok, 0);
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12); /* 3 of 4 recorded */
    kvr_normalize(n, &ev, &out);
    assert_int_equal(counters(n).mm_excluded_ids, 3);
    assert_int_equal(counters(n).mm_fallback, 0);

    /* 2 more would pass 4: fallback; this parentless store is truncated and
     * nothing more is recorded */
    const uint64_t h2[] = {21, 22, 23};
    three_blocks(tok, 1);
    ev = store_ev(h2, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, h2, 1, 4);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_fallback, 1);
    assert_int_equal(c.mm_fallback_entries, 1);
    assert_int_equal(c.mm_excluded_ids, 3);
    assert_int_equal(kvr_normalizer_warnings(n), 1);

    /* in fallback: a store with a parent becomes an empty removal, even text */
    const uint64_t h3[] = {31, 32};
    ev = store_ev(h3, 2, true, 21, t2, 8);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    /* parentless text is accepted */
    ev = store_ev(h3, 2, false, 0, t2, 8);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, h3, 2, 8);
    /* a parentless store with media is truncated, not recorded */
    const uint64_t h4[] = {41, 42, 43};
    three_blocks(tok, 2);
    ev = store_ev(h4, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, h4, 2, 8);
    assert_int_equal(counters(n).mm_excluded_ids, 3);
    /* removals still filter against the set */
    ev = remove_ev(H, 2);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.n_block_hashes, 0);
    assert_int_equal(counters(n).mm_removals_filtered, 2);
    assert_int_equal(counters(n).mm_excluded_ids, 1);
    /* still in fallback after the set shrank; warned once only */
    ev = store_ev(h3, 2, true, 21, t2, 8);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    assert_int_equal(kvr_normalizer_warnings(n), 1);

    /* AllBlocksCleared leaves fallback */
    ev = clear_ev();
    kvr_normalize(n, &ev, &out);
    c = counters(n);
    assert_int_equal(c.mm_fallback, 0);
    assert_int_equal(c.mm_excluded_ids, 0);
    ev = store_ev(h3, 2, true, 21, t2, 8);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, h3, 2, 8);
    /* entering again counts a second entry */
    three_blocks(tok, 0);
    const uint64_t h5[] = {51, 52, 53};
    ev = store_ev(h5, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out); /* 3 recorded */
    ev = store_ev(h4, 3, true, 51, tok, 12); /* descendant: 3 more won't fit */
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    c = counters(n);
    assert_int_equal(c.mm_fallback, 1);
    assert_int_equal(c.mm_fallback_entries, 2);
    assert_int_equal(c.mm_excluded_ids, 3);
    kvr_normalizer_destroy(n);
}

static void test_capacity_default_2_20(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 0);
    /* a store of 65536 hashes whose first block is media excludes them all */
    enum { N = 65536 };
    uint64_t *h = malloc(N * sizeof *h);
    uint64_t tok[B];
    text(tok, B, 1);
    tok[0] = WIDE;
    kvr_norm_event out;
    uint64_t next = 1;
    for (int s = 0; s < 16; s++) {
        for (int i = 0; i < N; i++)
            h[i] = next++;
        kvr_raw_event ev = store_ev(h, N, false, 0, tok, B);
        kvr_normalize(n, &ev, &out);
        assert_empty_removal(&out);
    }
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_excluded_ids, 1u << 20);
    assert_int_equal(c.mm_fallback, 0);
    /* re-recording known ids takes no room */
    kvr_raw_event ev = store_ev(h, N, false, 0, tok, B);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(counters(n).mm_fallback, 0);
    /* one more id does not fit */
    const uint64_t one[] = {next};
    ev = store_ev(one, 1, false, 0, tok, B);
    kvr_normalize(n, &ev, &out);
    c = counters(n);
    assert_int_equal(c.mm_fallback, 1);
    assert_int_equal(c.mm_excluded_ids, 1u << 20);
    free(h);
    kvr_normalizer_destroy(n);
}

/* Rule 6: the capacity counts ids across tiers, not per tier: 3 on the
 * gpu and 2 more on the cpu pass 4. */
static void test_capacity_counts_across_tiers(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 4);
    uint64_t tok[12];
    three_blocks(tok, 0);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(counters(n).mm_excluded_ids, 3);
    const uint64_t h2[] = {21, 22, 23};
    three_blocks(tok, 1);
    ev = store_ev(h2, 3, false, 0, tok, 12);
    ev.tier = KVR_TIER_CPU;
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, h2, 1, 4); /* truncated as a parentless store in fallback */
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_fallback, 1);
    assert_int_equal(c.mm_fallback_entries, 1);
    assert_int_equal(c.mm_excluded_ids, 3);
    kvr_normalizer_destroy(n);
}

/* Rule 6: the (worker, rank) entering fallback is named in one warning per
 * entry, however many stores meet the full set; mk_norm is worker 7 rank 1. */
static void test_fallback_warning_names_worker_and_rank(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_ENGINE_WIDE, B, false, 2);
    uint64_t tok[12];
    three_blocks(tok, 0);
    warn_capture w;
    warn_capture_start(&w);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12); /* 3 ids do not fit in 2 */
    for (int i = 0; i < 4; i++)
        kvr_normalize(n, &ev, &out);
    unsigned first = w.n;
    warn_capture c1 = w;
    ev = clear_ev();
    kvr_normalize(n, &ev, &out);
    ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    warn_capture_stop();
    assert_int_equal(first, 1);
    assert_warned_about(&c1, 7, 1, "fallback");
    assert_int_equal(w.n, 2); /* entered again after the clear: said again */
    assert_int_equal(counters(n).mm_fallback_entries, 2);
    assert_int_equal(kvr_normalizer_warnings(n), 2);
    kvr_normalizer_destroy(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exclusion_at_block_0),
        cmocka_unit_test(test_exclusion_at_middle_block),
        cmocka_unit_test(test_exclusion_at_last_block),
        cmocka_unit_test(test_text_store_untouched),
        cmocka_unit_test(test_descendants_across_events),
        cmocka_unit_test(test_eagle_overlap_token),
        cmocka_unit_test(test_tier_isolation),
        cmocka_unit_test(test_worker_and_rank_isolation),
        cmocka_unit_test(test_removal_filtering_shrinks_set),
        cmocka_unit_test(test_clear_empties_sets),
        cmocka_unit_test(test_duplicate_ids_left_unchanged),
        cmocka_unit_test(test_capacity_fallback_small),
        cmocka_unit_test(test_capacity_default_2_20),
        cmocka_unit_test(test_capacity_counts_across_tiers),
        cmocka_unit_test(test_fallback_warning_names_worker_and_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
