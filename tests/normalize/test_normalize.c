/* Normalizer: SPEC §3 filters, narrowing, whole blocks, legacy and auto
 * modes. The engine_wide exclusion rules are in test_exclusion.c. */
#include "norm_fixture.h"
#include "normalize/filter.h"

#include <stddef.h>
#include <stdlib.h>

static const uint64_t H[] = {11, 12, 13, 14};

static void test_dropped_wire_event_keeps_reason(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_DROPPED;
    ev.drop_reason = KVR_DROP_UNKNOWN_TIER;
    kvr_norm_event out;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(out.drop_reason, KVR_DROP_UNKNOWN_TIER);
    ev.drop_reason = KVR_DROP_MALFORMED_EVENT;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.drop_reason, KVR_DROP_MALFORMED_EVENT);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.drops[KVR_DROP_UNKNOWN_TIER], 1);
    assert_int_equal(c.drops[KVR_DROP_MALFORMED_EVENT], 1);
    kvr_normalizer_count_drop(n, KVR_DROP_PARENT_NOT_FOUND);
    kvr_normalizer_count_drop(n, KVR_DROP_DUPLICATE_IDS);
    c = counters(n);
    assert_int_equal(c.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    assert_int_equal(c.drops[KVR_DROP_DUPLICATE_IDS], 1);
    kvr_normalizer_destroy(n);
}

static void test_create_rejects_zero_block_size(void **state)
{
    (void)state;
    kvr_normalizer_config cfg = {.block_size = 0};
    assert_null(kvr_normalizer_create(&cfg));
}

static void test_non_main_attention_kind_dropped(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[4];
    text(tok, 4, 100);
    kvr_norm_event out;
    const char *kinds_ok[] = {"full_attention", "mla_attention", "sink_full_attention"};
    for (int i = 0; i < 3; i++) {
        kvr_raw_event ev = store_ev(H, 1, false, 0, tok, 4);
        ev.kv_cache_spec_kind = S(kinds_ok[i]);
        kvr_normalize(n, &ev, &out);
        assert_int_equal(out.kind, KVR_NORM_STORE);
    }
    kvr_raw_event ev = in_group(store_ev(H, 1, false, 0, tok, 4), 0, "sliding_window");
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(out.drop_reason, KVR_DROP_NON_MAIN_ATTENTION);
    assert_int_equal(counters(n).drops[KVR_DROP_NON_MAIN_ATTENTION], 1);
    /* an event naming no group nor kind is group 0, which that store taught
     * is not main attention (the filter's inline pass must not take it) */
    kvr_raw_event plain = store_ev(H, 1, false, 0, tok, 4);
    kvr_normalize(n, &plain, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(out.drop_reason, KVR_DROP_NON_MAIN_ATTENTION);
    assert_int_equal(counters(n).drops[KVR_DROP_NON_MAIN_ATTENTION], 2);
    kvr_normalizer_destroy(n);
}

static void test_removal_uses_learned_group_kind(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[4];
    text(tok, 4, 100);
    kvr_norm_event out;
    /* group 1 learns full_attention, group 2 learns sliding_window */
    kvr_raw_event s1 = in_group(store_ev(H, 1, false, 0, tok, 4), 1, "full_attention");
    kvr_normalize(n, &s1, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    kvr_raw_event s2 = in_group(store_ev(H + 1, 1, false, 0, tok, 4), 2, "sliding_window");
    kvr_normalize(n, &s2, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);

    kvr_raw_event r1 = in_group(remove_ev(H, 1), 1, NULL);
    kvr_normalize(n, &r1, &out);
    assert_int_equal(out.kind, KVR_NORM_REMOVE);
    assert_int_equal(out.n_block_hashes, 1);
    kvr_raw_event r2 = in_group(remove_ev(H + 1, 1), 2, NULL);
    kvr_normalize(n, &r2, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(out.drop_reason, KVR_DROP_NON_MAIN_ATTENTION);
    /* a store of group 1 with only group_idx also uses the learned kind */
    kvr_raw_event s3 = in_group(store_ev(H + 2, 1, false, 0, tok, 4), 2, NULL);
    kvr_normalize(n, &s3, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(counters(n).drops[KVR_DROP_NON_MAIN_ATTENTION], 3);
    /* reset forgets learned kinds: group 1 is unlearned again */
    kvr_normalizer_reset(n);
    kvr_normalize(n, &r1, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    kvr_normalizer_destroy(n);
}

/* Learned group kinds are bounded per rank: a store naming a new group past
 * the bound is judged alone and counted; known groups still learn. */
static void test_learned_groups_bounded_and_counted(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[4];
    text(tok, 4, 100);
    kvr_norm_event out;
    kvr_raw_event s = in_group(store_ev(H, 1, false, 0, tok, 4), 0, "full_attention");
    for (uint32_t g = 1; g <= KVR_NORM_MAX_LEARNED_GROUPS; g++) {
        s.group_idx = g;
        kvr_normalize(n, &s, &out);
        assert_int_equal(out.kind, KVR_NORM_STORE);
    }
    assert_int_equal(counters(n).groups_over_limit, 0);
    /* one more group: still judged by its kind, but not learned */
    s.group_idx = KVR_NORM_MAX_LEARNED_GROUPS + 1;
    kvr_normalize(n, &s, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    assert_int_equal(counters(n).groups_over_limit, 1);
    /* a known group changes its kind without counting */
    s.group_idx = 7;
    s.kv_cache_spec_kind = S("sliding_window");
    kvr_normalize(n, &s, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(counters(n).groups_over_limit, 1);
    /* removals: the learned group 7 is now sliding, the unlearned one is
     * unknown and not group 0, so dropped; group 8 stays full attention */
    kvr_raw_event r = in_group(remove_ev(H, 1), 7, NULL);
    kvr_normalize(n, &r, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    r.group_idx = KVR_NORM_MAX_LEARNED_GROUPS + 1;
    kvr_normalize(n, &r, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    r.group_idx = 8;
    kvr_normalize(n, &r, &out);
    assert_int_equal(out.kind, KVR_NORM_REMOVE);
    kvr_normalizer_destroy(n);
}

static void test_unlearned_group_zero_vs_other(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[4];
    text(tok, 4, 100);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 1, false, 0, tok, 4);
    kvr_normalize(n, &ev, &out); /* no group_idx: group 0 */
    assert_int_equal(out.kind, KVR_NORM_STORE);
    ev.has_group_idx = true;
    ev.group_idx = 0;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    ev.group_idx = 1;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(out.drop_reason, KVR_DROP_NON_MAIN_ATTENTION);
    kvr_raw_event r = in_group(remove_ev(H, 1), 1, NULL);
    kvr_normalize(n, &r, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    r.group_idx = 0;
    kvr_normalize(n, &r, &out);
    assert_int_equal(out.kind, KVR_NORM_REMOVE);
    kvr_normalizer_destroy(n);
}

static void test_locality(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[4];
    text(tok, 4, 100);
    kvr_norm_event out;
    const char *ok[] = {NULL, "", "LOCAL", "local"};
    for (int i = 0; i < 4; i++) {
        kvr_raw_event ev = store_ev(H, 1, false, 0, tok, 4);
        ev.locality = S(ok[i]);
        kvr_normalize(n, &ev, &out);
        assert_int_equal(out.kind, KVR_NORM_STORE);
    }
    const char *bad[] = {"REMOTE", "remote", "elsewhere"};
    for (int i = 0; i < 3; i++) {
        kvr_raw_event ev = store_ev(H, 1, false, 0, tok, 4);
        ev.locality = S(bad[i]);
        kvr_normalize(n, &ev, &out);
        assert_int_equal(out.kind, KVR_NORM_DROP);
        assert_int_equal(out.drop_reason, KVR_DROP_REMOTE_LOCALITY);
    }
    kvr_raw_event r = remove_ev(H, 1);
    r.locality = S("REMOTE");
    kvr_normalize(n, &r, &out);
    assert_int_equal(out.kind, KVR_NORM_DROP);
    assert_int_equal(counters(n).drops[KVR_DROP_REMOTE_LOCALITY], 4);
    kvr_normalizer_destroy(n);
}

static void test_block_size_mismatch_counted_warned_once(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[8];
    text(tok, 8, 100);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 1, false, 0, tok, 4);
    ev.block_size = 4; /* equal: fine */
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    ev.block_size = 0; /* absent: fine */
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    assert_int_equal(kvr_normalizer_warnings(n), 0);
    for (int i = 0; i < 5; i++) {
        ev = store_ev(H, 1, false, 0, tok, 8);
        ev.block_size = 8;
        kvr_normalize(n, &ev, &out);
        assert_int_equal(out.kind, KVR_NORM_DROP);
        assert_int_equal(out.drop_reason, KVR_DROP_BLOCK_SIZE_MISMATCH);
    }
    assert_int_equal(counters(n).drops[KVR_DROP_BLOCK_SIZE_MISMATCH], 5);
    /* rate-limited: one warning for the burst */
    assert_int_equal(kvr_normalizer_warnings(n), 1);
    kvr_normalizer_destroy(n);
}

static void test_narrowing(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    /* text, legacy pad, the largest u32 below the sentinel: all stay */
    uint64_t tok[8] = {5, 999999, 1000000 + 12345, 0xFFFFFFFEull, 1, 2, 3, 4};
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 2, false, 0, tok, 8);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 2, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(out.tokens[i], (uint32_t)tok[i]);
    assert_int_equal(counters(n).wide_tokens_seen, 0);
    assert_false(kvr_normalizer_wide_seen(n));

    /* legacy truncates at the wide block, but the narrowed prefix is exact;
     * the wide value itself becomes the sentinel (checked via engine_wide
     * dup pass-through below, which keeps every token) */
    kvr_normalizer *w = mk_norm(KVR_MM_ENGINE_WIDE, 4, false, 0);
    const uint64_t dup[] = {11, 11};
    uint64_t t2[8] = {1, 2, 3, 4, WIDE, 0x1FFFFFFFFull, UINT64_MAX, 6};
    ev = store_ev(dup, 2, false, 0, t2, 8);
    kvr_normalize(w, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    assert_int_equal(out.n_tokens, 8);
    assert_int_equal(out.tokens[3], 4);
    assert_int_equal(out.tokens[4], KVR_WIDE_SENTINEL);
    assert_int_equal(out.tokens[5], KVR_WIDE_SENTINEL);
    assert_int_equal(out.tokens[6], KVR_WIDE_SENTINEL);
    assert_int_equal(out.tokens[7], 6);
    assert_int_equal(counters(w).wide_tokens_seen, 3);
    kvr_normalizer_destroy(w);
    kvr_normalizer_destroy(n);
}

static void test_whole_blocks_only(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[16];
    text(tok, 16, 100);
    kvr_norm_event out;
    /* 10 tokens give 2 whole blocks: the third hash has no tokens */
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 10);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 2, 8);
    /* more tokens than hashes: the hashes bound it */
    ev = store_ev(H, 1, false, 0, tok, 16);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 1, 4);
    /* no whole block at all: an empty removal, never a store */
    ev = store_ev(H, 1, false, 0, tok, 3);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    ev = store_ev(H, 0, false, 0, tok, 0);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    kvr_normalizer_destroy(n);
}

static void test_eagle_whole_blocks(void **state)
{
    (void)state;
    /* Eagle from the worker config, or from the event's bigram form */
    for (int from_event = 0; from_event < 2; from_event++) {
        kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, !from_event, 0);
        uint64_t tok[9];
        text(tok, 9, 100);
        kvr_norm_event out;
        kvr_raw_event ev = store_ev(H, 2, false, 0, tok, 9);
        ev.eagle = from_event;
        kvr_normalize(n, &ev, &out);
        assert_true(out.eagle);
        assert_store_of(&out, H, 2, 9); /* 2 blocks + the overlap token */
        ev.n_token_ids = 8;              /* last block lacks its overlap token */
        kvr_normalize(n, &ev, &out);
        assert_store_of(&out, H, 1, 5);
        kvr_normalizer_destroy(n);
    }
}

static void test_clear_event(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    kvr_raw_event ev = clear_ev();
    kvr_norm_event out;
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_CLEAR);
    kvr_normalizer_destroy(n);
}

static void test_legacy_truncates_tracks_nothing(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[12];
    text(tok, 12, 100);
    tok[5] = WIDE; /* block 1 */
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 1, 4);
    assert_int_equal(out.tokens[3], 103);
    kvr_normalizer_counters c = counters(n);
    assert_int_equal(c.mm_stores_truncated, 1);
    assert_int_equal(c.mm_blocks_excluded, 2);
    assert_int_equal(c.mm_excluded_ids, 0); /* nothing tracked */
    assert_int_equal(kvr_normalizer_effective_mode(n), KVR_MM_LEGACY);
    /* a child of a truncated block is not recognised as a descendant */
    const uint64_t child[] = {21};
    uint64_t t2[4];
    text(t2, 4, 200);
    ev = store_ev(child, 1, true, H[1], t2, 4);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, child, 1, 4);
    /* removals pass unfiltered */
    ev = remove_ev(H + 1, 2);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_REMOVE);
    assert_int_equal(out.n_block_hashes, 2);
    assert_int_equal(counters(n).mm_removals_filtered, 0);
    /* wide in block 0: nothing left, an empty removal */
    tok[5] = 105;
    tok[0] = WIDE;
    ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    kvr_normalizer_destroy(n);
}

static void test_legacy_wide_tokens_counted_one_warning(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    uint64_t tok[8];
    text(tok, 8, 100);
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 2, false, 0, tok, 8);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(kvr_normalizer_warnings(n), 0);
    tok[4] = WIDE;
    tok[5] = WIDE + 1;
    tok[6] = WIDE + 2;
    for (int i = 0; i < 3; i++)
        kvr_normalize(n, &ev, &out);
    assert_int_equal(counters(n).wide_tokens_seen, 9);
    assert_int_equal(kvr_normalizer_warnings(n), 1);
    assert_true(kvr_normalizer_wide_seen(n));
    /* a legacy worker stays legacy */
    assert_int_equal(kvr_normalizer_effective_mode(n), KVR_MM_LEGACY);
    assert_int_equal(counters(n).mm_excluded_ids, 0);
    kvr_normalizer_destroy(n);
}

static void test_auto_switches_on_first_wide_event(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_AUTO, 4, false, 0);
    assert_int_equal(kvr_normalizer_effective_mode(n), KVR_MM_LEGACY);
    uint64_t tok[12];
    text(tok, 12, 100);
    kvr_norm_event out;
    /* before: a text store, and a literal sentinel value (not wide) is
     * truncated the legacy way, with nothing recorded */
    kvr_raw_event ev = store_ev(H, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 3, 12);
    tok[9] = 0xFFFFFFFFull;
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, H, 2, 8);
    assert_int_equal(counters(n).mm_excluded_ids, 0);
    assert_int_equal(kvr_normalizer_effective_mode(n), KVR_MM_LEGACY);

    /* the event with the first wide id is handled as engine_wide */
    tok[9] = 109;
    tok[6] = WIDE;
    const uint64_t h2[] = {31, 32, 33};
    ev = store_ev(h2, 3, false, 0, tok, 12);
    kvr_normalize(n, &ev, &out);
    assert_store_of(&out, h2, 1, 4);
    assert_int_equal(kvr_normalizer_effective_mode(n), KVR_MM_ENGINE_WIDE);
    assert_int_equal(counters(n).mm_excluded_ids, 2);
    assert_int_equal(kvr_normalizer_warnings(n), 0); /* auto never warns about wide ids */

    /* after: descendants of the excluded blocks are excluded */
    const uint64_t child[] = {41};
    uint64_t t2[4];
    text(t2, 4, 300);
    ev = store_ev(child, 1, true, 33, t2, 4);
    kvr_normalize(n, &ev, &out);
    assert_empty_removal(&out);
    assert_int_equal(counters(n).mm_descendant_stores_excluded, 1);
    /* reset keeps the detected mode (same engine build) */
    kvr_normalizer_reset(n);
    assert_int_equal(kvr_normalizer_effective_mode(n), KVR_MM_ENGINE_WIDE);
    kvr_normalizer_destroy(n);
}

/* The X-macro list is the whole struct: a field added outside the list would
 * be neither summed nor shown in /workers and /metrics. */
static void test_counter_list_covers_struct_and_sums(void **state)
{
    (void)state;
    assert_int_equal(sizeof(kvr_normalizer_counters),
                     (kvr_normalizer_counter_count + KVR_DROP_COUNT) * sizeof(uint64_t));
    kvr_normalizer_counters a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    for (size_t k = 0; k < kvr_normalizer_counter_count; k++) {
        const kvr_counter_desc *d = &kvr_normalizer_counter_descs[k];
        assert_non_null(d->help);
        assert_true(d->kind == KVR_METRIC_COUNTER || d->kind == KVR_METRIC_GAUGE);
        *(uint64_t *)((char *)&b + d->offset) = 10 + k;
        for (size_t j = 0; j < k; j++)
            assert_true(strcmp(kvr_normalizer_counter_descs[j].name, d->name) != 0);
    }
    for (int r = 0; r < KVR_DROP_COUNT; r++)
        b.drops[r] = 100 + (uint64_t)r;
    kvr_normalizer_counters_add(&a, &b);
    kvr_normalizer_counters_add(&a, &b);
    for (size_t k = 0; k < kvr_normalizer_counter_count; k++)
        assert_int_equal(kvr_counter_value(&a, &kvr_normalizer_counter_descs[k]), 2 * (10 + k));
    for (int r = 0; r < KVR_DROP_COUNT; r++)
        assert_int_equal(a.drops[r], 2 * (100 + (uint64_t)r));
    assert_string_equal(kvr_normalizer_counter_descs[0].name, "mm_blocks_excluded");
    assert_int_equal(kvr_normalizer_counter_descs[0].offset,
                     offsetof(kvr_normalizer_counters, mm_blocks_excluded));
    /* drop reasons: one list for the enum, the names and the help */
    assert_string_equal(kvr_drop_reason_name(KVR_DROP_BLOCK_NOT_FOUND), "block_not_found");
    assert_string_equal(kvr_drop_reason_name(KVR_DROP_DUPLICATE_IDS), "duplicate_ids");
    for (int r = 0; r < KVR_DROP_COUNT; r++)
        assert_true(strlen(kvr_drop_reason_help((kvr_drop_reason)r)) > 0);
}

/* A huge store grows the token scratch to its size; trim (the indexer calls
 * it after every batch) gives it back, steady-state sizes stay. */
static void test_trim_gives_back_huge_scratch(void **state)
{
    (void)state;
    kvr_normalizer *n = mk_norm(KVR_MM_LEGACY, 4, false, 0);
    size_t base = kvr_normalizer_bytes(n);
    uint32_t nt = 1u << 20;
    uint64_t *tok = malloc(nt * sizeof *tok);
    text(tok, nt, 0);
    for (uint32_t i = 0; i < nt; i++)
        tok[i] %= 1000;
    kvr_norm_event out;
    kvr_raw_event ev = store_ev(H, 4, false, 0, tok, nt);
    kvr_normalize(n, &ev, &out);
    assert_int_equal(out.kind, KVR_NORM_STORE);
    assert_true(kvr_normalizer_bytes(n) >= base + nt * sizeof(uint32_t));
    kvr_normalizer_trim(n);
    assert_true(kvr_normalizer_bytes(n) <= base + KVR_NORM_SCRATCH_KEEP_BYTES);
    /* a small store's scratch survives a trim */
    ev = store_ev(H, 1, false, 0, tok, 4);
    kvr_normalize(n, &ev, &out);
    size_t small = kvr_normalizer_bytes(n);
    kvr_normalizer_trim(n);
    assert_int_equal(kvr_normalizer_bytes(n), small);
    free(tok);
    kvr_normalizer_destroy(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropped_wire_event_keeps_reason),
        cmocka_unit_test(test_create_rejects_zero_block_size),
        cmocka_unit_test(test_non_main_attention_kind_dropped),
        cmocka_unit_test(test_removal_uses_learned_group_kind),
        cmocka_unit_test(test_learned_groups_bounded_and_counted),
        cmocka_unit_test(test_unlearned_group_zero_vs_other),
        cmocka_unit_test(test_locality),
        cmocka_unit_test(test_block_size_mismatch_counted_warned_once),
        cmocka_unit_test(test_narrowing),
        cmocka_unit_test(test_whole_blocks_only),
        cmocka_unit_test(test_eagle_whole_blocks),
        cmocka_unit_test(test_clear_event),
        cmocka_unit_test(test_legacy_truncates_tracks_nothing),
        cmocka_unit_test(test_legacy_wide_tokens_counted_one_warning),
        cmocka_unit_test(test_auto_switches_on_first_wide_event),
        cmocka_unit_test(test_counter_list_covers_struct_and_sums),
        cmocka_unit_test(test_trim_gives_back_huge_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
