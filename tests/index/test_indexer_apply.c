/* Facade ingestion: batches through normalize -> convert -> index, checked
 * with matches on router hashes computed from tokens (kvr_hash_blocks). */
#include "indexer_fixture.h"

#include "kvrouter/wire_encode.h"

static kvr_indexer *ix;
static kvr_worker *w1, *w2;

static int setup(void **state)
{
    (void)state;
    ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    w1 = reg_ok(ix, &s, KVR_REG_CREATED);
    s = settings(2, KVR_MM_ENGINE_WIDE);
    w2 = reg_ok(ix, &s, KVR_REG_CREATED);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kvr_indexer_destroy(ix);
    return 0;
}

static const kvr_rank_info *rank_snapshot(kvr_worker *w, uint32_t rank, kvr_worker_info **keep)
{
    *keep = info_of(ix, w);
    const kvr_rank_info *r = rank_of(*keep, rank);
    assert_non_null(r);
    return r;
}

static void test_store_chain_remove_clear(void **state)
{
    (void)state;
    uint64_t tok[6 * B], h1[4] = {101, 102, 103, 104}, h2[2] = {105, 106};
    text(tok, 6 * B, 10);
    uint32_t req[6 * B];
    text32(req, 6 * B, 10);
    kvr_raw_event evs[2] = {store_ev(h1, 4, false, 0, tok, 4 * B),
                            store_ev(h2, 2, true, 104, tok + 4 * B, 2 * B)};
    apply(ix, w1, 0, evs, 2);
    assert_int_equal(match_gpu(ix, 1, 0, req, 6 * B), 6);
    assert_int_equal(match_gpu(ix, 1, 0, req, 3 * B + 2), 3); /* whole blocks only */
    /* a request differing in block 2 matches 2 blocks */
    req[2 * B + 1] = 999;
    assert_int_equal(match_gpu(ix, 1, 0, req, 6 * B), 2);
    req[2 * B + 1] = 10 + 2 * B + 1;
    /* the router hash is the SPEC §4 one: hashes given directly match too */
    uint64_t local[6];
    assert_int_equal(kvr_hash_blocks(req, 6 * B, B, false, KVR_HASH_SEED, local, 6), 6);
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    const kvr_match_entry *e;
    assert_int_equal(kvr_indexer_match_hashes(ix, MODEL, NULL, ctx, local, 6, &e), 1);
    assert_int_equal(e[0].worker_id, 1);
    assert_int_equal(e[0].gpu_blocks, 6);
    assert_int_equal(kvr_indexer_match_hashes(ix, "nope", NULL, ctx, local, 6, &e), 0);
    assert_null(e);
    kvr_match_ctx_destroy(ctx);

    kvr_raw_event rm = remove_ev(h2 + 1, 1);
    apply(ix, w1, 0, &rm, 1);
    assert_int_equal(match_gpu(ix, 1, 0, req, 6 * B), 5);
    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w1, 0, &info);
    assert_int_equal(r->batches, 2);
    assert_int_equal(r->events_stored, 2);
    assert_int_equal(r->blocks_stored, 6);
    assert_int_equal(r->events_removed, 1);
    assert_int_equal(r->blocks_removed, 1);
    free(info);

    kvr_raw_event cl = clear_ev();
    apply(ix, w1, 0, &cl, 1);
    assert_int_equal(match_gpu(ix, 1, 0, req, 6 * B), 0);
    r = rank_snapshot(w1, 0, &info);
    assert_int_equal(r->events_cleared, 1);
    free(info);
    /* after a clear the old parent is unknown: the chain cannot continue */
    apply(ix, w1, 0, &evs[1], 1);
    r = rank_snapshot(w1, 0, &info);
    assert_int_equal(r->norm.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    free(info);
}

static void test_tiers_reach(void **state)
{
    (void)state;
    uint64_t tok[4 * B], hg[2] = {201, 202}, hc[2] = {203, 204};
    text(tok, 4 * B, 10);
    uint32_t req[4 * B];
    text32(req, 4 * B, 10);
    kvr_raw_event evs[2] = {store_ev(hg, 2, false, 0, tok, 2 * B),
                            store_ev(hc, 2, true, 202, tok + 2 * B, 2 * B)};
    evs[1].tier = KVR_TIER_CPU;
    apply(ix, w1, 0, evs, 2);
    reach r = match_seed(ix, 1, 0, req, 4 * B, KVR_HASH_SEED);
    assert_int_equal(r.gpu, 2);
    assert_int_equal(r.cpu, 4);
    assert_int_equal(r.disk, 4);
}

/* The capacity estimate of a worker that registered none: the GPU blocks
 * its events held at the fullest once it had evicted; host-tier stores do
 * not count, and before any removal there is no estimate. */
static kvr_worker_caps kept[4]; /* a router's copy (kvr_indexer_caps_list_since) */
static uint64_t kept_gen;

static void peak_is(kvr_worker *w, uint64_t want)
{
    kvr_worker_caps c;
    kvr_worker_caps_get(ix, w, &c);
    assert_int_equal(c.kv_capacity_tokens, want * B);
    /* the kept copy follows the estimate (its generation moves with it) */
    size_t n = kvr_indexer_caps_list_since(ix, MODEL, NULL, kept, 4, &kept_gen);
    assert_true(n <= 4);
    size_t i = 0;
    while (i < n && kept[i].worker_id != c.worker_id)
        i++;
    assert_true(i < n);
    assert_int_equal(kept[i].kv_capacity_tokens, want * B);
}

static void test_capacity_estimate_from_events(void **state)
{
    (void)state;
    kept_gen = 0;
    uint64_t tok[8 * B], h[8] = {301, 302, 303, 304, 305, 306, 307, 308};
    text(tok, 8 * B, 40);
    kvr_raw_event evs[2] = {store_ev(h, 5, false, 0, tok, 5 * B),
                            store_ev(h + 5, 2, true, 305, tok + 5 * B, 2 * B)};
    evs[1].tier = KVR_TIER_CPU;
    apply(ix, w1, 0, evs, 2);
    peak_is(w1, 0); /* never evicted: it may have room left */
    kvr_raw_event rm = remove_ev(h + 4, 1);
    apply(ix, w1, 0, &rm, 1);
    peak_is(w1, 5); /* full at 5 GPU blocks (the 2 host blocks aside) */
    kvr_raw_event more[2] = {store_ev(h + 4, 1, true, 304, tok + 4 * B, B),
                             store_ev(h + 7, 1, true, 305, tok + 7 * B, B)};
    apply(ix, w1, 0, more, 1);
    peak_is(w1, 5);
    apply(ix, w1, 0, &more[1], 1);
    peak_is(w1, 6);
    kvr_raw_event cl = clear_ev();
    apply(ix, w1, 0, &cl, 1);
    apply(ix, w1, 0, evs, 1);
    peak_is(w1, 6); /* the largest seen stays */
    peak_is(w2, 0);
    /* a registered capacity is the capacity */
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    s.max_total_num_tokens = 12345;
    assert_true(kvr_indexer_register(ix, &s, NULL) == KVR_REG_UPDATED);
    kvr_worker_caps c;
    kvr_worker_caps_get(ix, w1, &c);
    assert_int_equal(c.kv_capacity_tokens, 12345);
}

/* SPEC §6: a store is idempotent per owner, and engines re-store blocks
 * they hold (SGLang's re-inserted prefixes, a replayed batch): the
 * occupancy grows by the ownerships a store gained, on either path (a
 * multi-block store, a run of one-block stores), and an engine restart
 * (clear_rank) starts it from zero as an AllBlocksCleared does. Counting
 * every stored block put the estimate at 23 blocks for an engine that never
 * held more than 7. */
static void test_capacity_estimate_counts_held_blocks_once(void **state)
{
    (void)state;
    kept_gen = 0;
    uint64_t tok[8 * B], h[8] = {401, 402, 403, 404, 405, 406, 407, 408};
    text(tok, 8 * B, 70);
    kvr_raw_event all = store_ev(h, 4, false, 0, tok, 4 * B);
    apply(ix, w1, 0, &all, 1);
    kvr_raw_event rm = remove_ev(h + 3, 1);
    apply(ix, w1, 0, &rm, 1);
    peak_is(w1, 4); /* full at 4; holds 3 */
    kvr_raw_event again = store_ev(h, 3, false, 0, tok, 3 * B);
    apply(ix, w1, 0, &again, 1); /* held already: multi-block path */
    peak_is(w1, 4);
    kvr_raw_event ones[3] = {store_ev(h, 1, false, 0, tok, B),
                             store_ev(h + 1, 1, true, 401, tok + B, B),
                             store_ev(h + 2, 1, true, 402, tok + 2 * B, B)};
    apply(ix, w1, 0, ones, 3); /* held already: one run of one-block stores */
    peak_is(w1, 4);
    /* held blocks with new ones: only the new ones count */
    kvr_raw_event grow = store_ev(h, 6, false, 0, tok, 6 * B);
    apply(ix, w1, 0, &grow, 1);
    peak_is(w1, 6);
    /* a block held on the host tier only is new on the GPU tier */
    kvr_raw_event host = store_ev(h + 6, 1, true, 406, tok + 6 * B, B);
    host.tier = KVR_TIER_CPU;
    apply(ix, w1, 0, &host, 1);
    peak_is(w1, 6);
    host.tier = KVR_TIER_GPU;
    apply(ix, w1, 0, &host, 1);
    peak_is(w1, 7);
    apply(ix, w1, 0, &host, 1);
    peak_is(w1, 7);
    /* the engine restarted: what it stores now is all it holds */
    kvr_indexer_clear_rank(ix, w1, 0);
    apply(ix, w1, 0, &grow, 1);
    peak_is(w1, 7);
    kvr_worker_info *info = info_of(ix, w1);
    assert_int_equal(rank_of(info, 0)->blocks_stored, 4 + 3 + 3 + 6 + 3 + 6); /* as sent */
    free(info);
}

/* w1 stores h[0..3] (tok's 4 blocks), evicts h[3] and stores h[4] (other's
 * first block) as a root: full at 4 blocks, holding 4 again. */
static void full_at_4(const uint64_t *h, uint64_t *tok, uint64_t *other)
{
    kvr_raw_event all = store_ev(h, 4, false, 0, tok, 4 * B);
    apply(ix, w1, 0, &all, 1);
    kvr_raw_event rm = remove_ev(h + 3, 1);
    apply(ix, w1, 0, &rm, 1);
    kvr_raw_event fill = store_ev(h + 4, 1, false, 0, other, B);
    apply(ix, w1, 0, &fill, 1);
    peak_is(w1, 4); /* full at 4; holds 4 again */
}

/* An engine that reuses a hash it holds for other content moves the
 * ownership (the newest store wins, kvr_index_store's store_one): the
 * block it left and the one it gained are one block held, not two. */
static void test_capacity_estimate_moved_hash_holds_no_more(void **state)
{
    (void)state;
    kept_gen = 0;
    uint64_t tok[4 * B], other[2 * B], h[5] = {501, 502, 503, 504, 505};
    text(tok, 4 * B, 90);
    text(other, 2 * B, 95);
    full_at_4(h, tok, other);
    /* 502 (under 501) again, as a root with other tokens */
    kvr_raw_event moved = store_ev(h + 1, 1, false, 0, other + B, B);
    apply(ix, w1, 0, &moved, 1);
    uint32_t req[4 * B], req_other[2 * B];
    text32(req, 4 * B, 90);
    text32(req_other, 2 * B, 95);
    assert_int_equal(match_gpu(ix, 1, 0, req, 4 * B), 1); /* 502 left */
    assert_int_equal(match_gpu(ix, 1, 0, req_other + B, B), 1); /* for this */
    peak_is(w1, 4);
    kvr_worker_info *info = info_of(ix, w1);
    assert_int_equal(rank_of(info, 0)->blocks_stored, 4 + 1 + 1); /* applied, not dropped */
    free(info);
}

/* The move onto a block the engine already holds under another hash (502
 * for 501's content): it leaves 502's block and gains nothing, one block
 * fewer held. An engine full at 4 blocks that then stores one more holds 4. */
static void test_capacity_estimate_move_onto_held_block_holds_one_less(void **state)
{
    (void)state;
    kept_gen = 0;
    uint64_t tok[4 * B], other[2 * B], h[6] = {501, 502, 503, 504, 505, 506};
    text(tok, 4 * B, 90);
    text(other, 2 * B, 95);
    full_at_4(h, tok, other);
    kvr_raw_event moved = store_ev(h + 1, 1, false, 0, tok, B); /* 501's content */
    apply(ix, w1, 0, &moved, 1);
    kvr_raw_event more = store_ev(h + 5, 1, false, 0, other + B, B);
    apply(ix, w1, 0, &more, 1);
    uint32_t req[4 * B];
    text32(req, 4 * B, 90);
    assert_int_equal(match_gpu(ix, 1, 0, req, 4 * B), 1); /* 502 left its block */
    peak_is(w1, 4);
    kvr_worker_info *info = info_of(ix, w1);
    assert_int_equal(rank_of(info, 0)->blocks_stored, 4 + 1 + 1 + 1); /* applied, not dropped */
    free(info);
}

static void test_batch_dp_rank_override_and_rank_isolation(void **state)
{
    (void)state;
    uint64_t tok[2 * B], h[2] = {301, 302};
    text(tok, 2 * B, 10);
    uint32_t req[2 * B];
    text32(req, 2 * B, 10);
    kvr_raw_event ev = store_ev(h, 2, false, 0, tok, 2 * B);
    kvr_batch b = batch_of(&ev, 1);
    b.has_dp_rank = true;
    b.dp_rank = 3;
    kvr_indexer_apply(ix, w1, 0, &b);
    assert_int_equal(match_gpu(ix, 1, 3, req, 2 * B), 2);
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 0);
    kvr_worker_info *info = info_of(ix, w1);
    assert_null(rank_of(info, 0));
    assert_int_equal(rank_of(info, 3)->batches, 1);
    free(info);

    /* rank 0 holds the same engine hashes independently */
    apply(ix, w1, 0, &ev, 1);
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 2);
    kvr_raw_event rm = remove_ev(h, 2);
    apply(ix, w1, 0, &rm, 1);
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 0);
    assert_int_equal(match_gpu(ix, 1, 3, req, 2 * B), 2);

    /* clear_rank (engine restart) touches only that rank */
    apply(ix, w1, 0, &ev, 1);
    kvr_indexer_clear_rank(ix, w1, 3);
    assert_int_equal(match_gpu(ix, 1, 3, req, 2 * B), 0);
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 2);
    /* the cleared rank starts over: parent links from before are gone */
    uint64_t h3 = 303;
    kvr_raw_event child = store_ev(&h3, 1, true, 302, tok, B);
    kvr_batch cb = batch_of(&child, 1);
    cb.has_dp_rank = true;
    cb.dp_rank = 3;
    kvr_indexer_apply(ix, w1, 9, &cb);
    info = info_of(ix, w1);
    assert_int_equal(rank_of(info, 3)->norm.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    assert_null(rank_of(info, 9));
    free(info);
}

static void test_worker_isolation(void **state)
{
    (void)state;
    uint64_t tok[2 * B], h[2] = {401, 402};
    text(tok, 2 * B, 10);
    uint32_t req[2 * B];
    text32(req, 2 * B, 10);
    kvr_raw_event ev = store_ev(h, 2, false, 0, tok, 2 * B);
    apply(ix, w1, 0, &ev, 1);
    /* w2 removes handles it never stored: counted for w2, w1 intact */
    kvr_raw_event rm = remove_ev(h, 2);
    apply(ix, w2, 0, &rm, 1);
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 2);
    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->norm.drops[KVR_DROP_BLOCK_NOT_FOUND], 2);
    assert_int_equal(r->blocks_removed, 0);
    free(info);
    /* w2 stores the same prefix; w1's clear leaves w2's copy */
    apply(ix, w2, 0, &ev, 1);
    kvr_raw_event cl = clear_ev();
    apply(ix, w1, 0, &cl, 1);
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 0);
    assert_int_equal(match_gpu(ix, 2, 0, req, 2 * B), 2);
}

static void test_parent_not_found_and_duplicates_never_clear(void **state)
{
    (void)state;
    uint64_t tok[3 * B], h[2] = {501, 502};
    text(tok, 3 * B, 10);
    uint32_t req[2 * B];
    text32(req, 2 * B, 10);
    kvr_raw_event evs[4];
    evs[0] = store_ev(h, 2, false, 0, tok, 2 * B);
    uint64_t orphan = 510;
    evs[1] = store_ev(&orphan, 1, true, 9999, tok, B); /* unknown parent */
    uint64_t dup[2] = {520, 520};
    evs[2] = store_ev(dup, 2, false, 0, tok, 2 * B); /* repeated ids */
    uint64_t dup_parent = 502;
    evs[3] = store_ev(&dup_parent, 1, true, 502, tok + 2 * B, B); /* parent repeated */
    warn_capture wc;
    warn_capture_start(&wc);
    apply(ix, w1, 0, evs, 4);
    warn_capture_stop();
    /* SPEC §5 rule 1: the repeat is said, naming the (worker, rank) */
    assert_true(wc.n >= 1);
    assert_warned_about(&wc, 1, 0, "repeated block ids");
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 2);
    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w1, 0, &info);
    assert_int_equal(r->norm.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    assert_int_equal(r->norm.drops[KVR_DROP_DUPLICATE_IDS], 2);
    assert_int_equal(r->events_stored, 1);
    assert_int_equal(r->events_dropped, 3);
    assert_int_equal(r->events_cleared, 0);
    assert_int_equal(r->blocks_stored, 2);
    free(info);
    kvr_index_stats st;
    kvr_index_stats_get(kvr_indexer_index(ix, MODEL, NULL), &st);
    assert_int_equal(st.ownerships, 2);
}

static void test_wire_drops_counted_batch_continues(void **state)
{
    (void)state;
    uint64_t tok[2 * B], h[2] = {601, 602};
    text(tok, 2 * B, 10);
    uint32_t req[2 * B];
    text32(req, 2 * B, 10);
    kvr_raw_event evs[3];
    memset(&evs[0], 0, sizeof evs[0]);
    evs[0].type = KVR_EV_DROPPED;
    evs[0].drop_reason = KVR_DROP_MALFORMED_EVENT;
    evs[1] = store_ev(h, 2, false, 0, tok, 2 * B);
    evs[1].block_size = 16; /* the classic zero-overlap mistake */
    evs[2] = store_ev(h, 2, false, 0, tok, 2 * B);
    apply(ix, w1, 0, evs, 3);
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 2);
    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w1, 0, &info);
    assert_int_equal(r->norm.drops[KVR_DROP_MALFORMED_EVENT], 1);
    assert_int_equal(r->norm.drops[KVR_DROP_BLOCK_SIZE_MISMATCH], 1);
    assert_int_equal(r->events_dropped, 2);
    assert_int_equal(r->events_stored, 1);
    free(info);
}

/* Kimi: text, then an image (wide pads), then text again. */
static void test_engine_wide_media_exclusion(void **state)
{
    (void)state;
    uint64_t tok[4 * B], h[4] = {701, 702, 703, 704};
    text(tok, 4 * B, 10);
    for (size_t i = 2 * B; i < 3 * B; i++)
        tok[i] = WIDE + (i % 4);
    uint32_t req[4 * B];
    text32(req, 4 * B, 10);
    kvr_raw_event evs[2] = {store_ev(h, 4, false, 0, tok, 4 * B), {0}};
    uint64_t child[1] = {705};
    uint64_t ctok[B];
    text(ctok, B, 50);
    evs[1] = store_ev(child, 1, true, 704, ctok, B); /* descendant of media */
    apply(ix, w2, 0, evs, 2);
    apply(ix, w1, 0, evs, 2); /* a legacy worker truncates the same store */

    /* the text prefix before the image is matchable, nothing after it */
    assert_int_equal(match_gpu(ix, 2, 0, req, 4 * B), 2);
    uint32_t narrowed[4 * B];
    memcpy(narrowed, req, sizeof narrowed);
    for (size_t i = 2 * B; i < 3 * B; i++)
        narrowed[i] = KVR_WIDE_SENTINEL;
    assert_int_equal(match_gpu(ix, 2, 0, narrowed, 4 * B), 2);
    assert_int_equal(match_gpu(ix, 1, 0, narrowed, 4 * B), 2);

    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->effective_mode, KVR_MM_ENGINE_WIDE);
    assert_int_equal(r->norm.mm_stores_truncated, 1);
    assert_int_equal(r->norm.mm_descendant_stores_excluded, 1);
    assert_int_equal(r->norm.mm_blocks_excluded, 3);
    assert_int_equal(r->norm.mm_excluded_ids, 3);
    assert_int_equal(r->norm.wide_tokens_seen, B);
    assert_int_equal(r->norm.drops[KVR_DROP_PARENT_NOT_FOUND], 0);
    assert_int_equal(r->blocks_stored, 2);
    free(info);
    /* the legacy worker cannot tell descendants: its child store is skipped
     * by the index (parent never indexed) */
    r = rank_snapshot(w1, 0, &info);
    assert_int_equal(r->norm.mm_stores_truncated, 1);
    assert_int_equal(r->norm.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    free(info);

    /* removals: excluded ids are filtered (not block_not_found), text ids
     * still evict */
    uint64_t rmh[3] = {703, 705, 702};
    kvr_raw_event rm = remove_ev(rmh, 3);
    apply(ix, w2, 0, &rm, 1);
    assert_int_equal(match_gpu(ix, 2, 0, req, 4 * B), 1);
    r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->norm.mm_removals_filtered, 2);
    assert_int_equal(r->norm.mm_excluded_ids, 1);
    assert_int_equal(r->norm.drops[KVR_DROP_BLOCK_NOT_FOUND], 0);
    assert_int_equal(r->blocks_removed, 1);
    free(info);

    /* a removal of only excluded ids becomes empty: no lookup, no count */
    uint64_t last = 704;
    rm = remove_ev(&last, 1);
    apply(ix, w2, 0, &rm, 1);
    r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->norm.mm_excluded_ids, 0);
    assert_int_equal(r->norm.drops[KVR_DROP_BLOCK_NOT_FOUND], 0);
    assert_int_equal(r->events_removed, 2);
    assert_int_equal(r->events_stored, 2); /* the excluded descendant too */
    free(info);
}

/* SPEC §5 rules 5 and 8 through the facade: each (worker, rank) has its own
 * exclusion sets. An engine hash excluded on (2, 0) is plain text on (2, 1)
 * and on another engine_wide worker, whose children index; a clear of
 * (2, 1) leaves (2, 0)'s set, which still excludes descendants until
 * (2, 0) is cleared itself. */
static void test_exclusion_sets_per_worker_and_rank(void **state)
{
    (void)state;
    kvr_worker_settings s = settings(3, KVR_MM_ENGINE_WIDE);
    kvr_worker *w3 = reg_ok(ix, &s, KVR_REG_CREATED);
    uint64_t media[2 * B], txt[2 * B], h[2] = {801, 802}, child = 803, more = 804;
    text(media, 2 * B, 10);
    media[B + 1] = WIDE; /* block 802 is media on (2, 0) */
    text(txt, 2 * B, 300);
    uint32_t req[2 * B];
    text32(req, 2 * B, 300); /* 802 as text, then its child 803 */
    kvr_raw_event e0 = store_ev(h, 2, false, 0, media, 2 * B);
    apply(ix, w2, 0, &e0, 1);
    kvr_raw_event evs[2] = {store_ev(h + 1, 1, false, 0, txt, B),
                            store_ev(&child, 1, true, 802, txt + B, B)};
    apply(ix, w2, 1, evs, 2);
    apply(ix, w3, 0, evs, 2);
    assert_int_equal(match_gpu(ix, 2, 1, req, 2 * B), 2);
    assert_int_equal(match_gpu(ix, 3, 0, req, 2 * B), 2);
    kvr_raw_event c0 = store_ev(&child, 1, true, 802, txt + B, B);
    apply(ix, w2, 0, &c0, 1); /* a descendant on (2, 0) only */
    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w2, 1, &info);
    assert_int_equal(r->norm.mm_excluded_ids, 0);
    assert_int_equal(r->norm.mm_descendant_stores_excluded, 0);
    assert_int_equal(r->blocks_stored, 2);
    free(info);
    r = rank_snapshot(w3, 0, &info);
    assert_int_equal(r->norm.mm_excluded_ids, 0);
    free(info);
    r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->norm.mm_descendant_stores_excluded, 1);
    assert_int_equal(r->norm.mm_excluded_ids, 2); /* 802 and its child 803 */
    free(info);

    /* AllBlocksCleared on (2, 1): its index and set go, (2, 0)'s stay */
    kvr_raw_event cl = clear_ev();
    apply(ix, w2, 1, &cl, 1);
    assert_int_equal(match_gpu(ix, 2, 1, req, 2 * B), 0);
    assert_int_equal(match_gpu(ix, 3, 0, req, 2 * B), 2);
    kvr_raw_event c1 = store_ev(&more, 1, true, 802, txt + B, B);
    apply(ix, w2, 0, &c1, 1);
    r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->norm.mm_descendant_stores_excluded, 2);
    assert_int_equal(r->norm.mm_excluded_ids, 3);
    assert_int_equal(r->norm.drops[KVR_DROP_PARENT_NOT_FOUND], 0);
    free(info);
    /* ... until (2, 0) is cleared: 802 is unknown there now, not excluded */
    apply(ix, w2, 0, &cl, 1);
    apply(ix, w2, 0, &c1, 1);
    r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->norm.mm_excluded_ids, 0);
    assert_int_equal(r->norm.mm_descendant_stores_excluded, 2);
    assert_int_equal(r->norm.drops[KVR_DROP_PARENT_NOT_FOUND], 1);
    free(info);
    /* an engine restart (kvr_indexer_clear_rank, SPEC §2) forgets the
     * rank's exclusions too: the restarted engine may reuse its hashes */
    apply(ix, w2, 0, &e0, 1);
    kvr_indexer_clear_rank(ix, w2, 0);
    r = rank_snapshot(w2, 0, &info);
    assert_int_equal(r->norm.mm_excluded_ids, 0);
    free(info);
    kvr_raw_event again = store_ev(h + 1, 1, false, 0, txt, B);
    apply(ix, w2, 0, &again, 1);
    apply(ix, w2, 0, &c1, 1); /* 802 is text now: its child indexes */
    assert_int_equal(match_gpu(ix, 2, 0, req, 2 * B), 2);
}

/* Real msgpack bytes (both encodings) through decode and the facade: the
 * wide Kimi ids survive decoding, the batch's dp_rank picks the rank. */
static void test_wire_bytes_end_to_end(void **state)
{
    (void)state;
    uint64_t tok[3 * B], h[3] = {1101, 1102, 1103};
    text(tok, 3 * B, 10);
    tok[2 * B] = WIDE;
    uint32_t req[2 * B];
    text32(req, 2 * B, 10);
    kvr_raw_event evs[2] = {store_ev(h, 3, false, 0, tok, 3 * B), remove_ev(h + 1, 1)};
    evs[0].block_size = B;
    for (int style = KVR_WIRE_SGLANG; style <= KVR_WIRE_VLLM; style++) {
        kvr_wbuf wb;
        kvr_wbuf_init(&wb);
        kvr_wire_encode_batch(&wb, (kvr_wire_style)style, 1.5, evs, 1, true, 2);
        kvr_batch b;
        kvr_batch_init(&b);
        assert_int_equal(kvr_batch_decode(&b, wb.data, wb.len), KVR_BATCH_OK);
        kvr_indexer_apply(ix, w2, 0, &b);
        assert_int_equal(match_gpu(ix, 2, 2, req, 2 * B), 2);
        assert_int_equal(match_gpu(ix, 2, 0, req, 2 * B), 0);
        kvr_wbuf_reset(&wb);
        kvr_wire_encode_batch(&wb, (kvr_wire_style)style, 1.6, evs + 1, 1, true, 2);
        assert_int_equal(kvr_batch_decode(&b, wb.data, wb.len), KVR_BATCH_OK);
        kvr_indexer_apply(ix, w2, 0, &b);
        assert_int_equal(match_gpu(ix, 2, 2, req, 2 * B), 1);
        kvr_batch_free(&b);
        kvr_wbuf_free(&wb);
        kvr_indexer_clear_rank(ix, w2, 2);
        assert_int_equal(match_gpu(ix, 2, 2, req, 2 * B), 0);
    }
    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w2, 2, &info);
    assert_int_equal(r->norm.wide_tokens_seen, 2);
    assert_int_equal(r->norm.mm_stores_truncated, 2);
    assert_int_equal(r->events_stored, 2);
    assert_int_equal(r->blocks_stored, 4);
    free(info);
}

static void test_lora_worker_seed(void **state)
{
    (void)state;
    kvr_worker_settings s = settings(3, KVR_MM_LEGACY);
    s.lora_name = "adapter-a";
    kvr_worker *w3 = reg_ok(ix, &s, KVR_REG_CREATED);
    uint64_t tok[2 * B], h[2] = {801, 802};
    text(tok, 2 * B, 10);
    uint32_t req[2 * B];
    text32(req, 2 * B, 10);
    kvr_raw_event ev = store_ev(h, 2, false, 0, tok, 2 * B);
    apply(ix, w3, 0, &ev, 1);
    kvr_worker_caps c;
    kvr_worker_caps_get(ix, w3, &c);
    assert_int_equal(match_seed(ix, 3, 0, req, 2 * B, c.lora_seed).gpu, 2);
    assert_int_equal(match_seed(ix, 3, 0, req, 2 * B, KVR_HASH_SEED).gpu, 0);
}


/* A salted block evicted from gpu but still held on cpu keeps its salt: a
 * later child stored without cache_salt must still hash with it. */
static void test_salt_survives_eviction_on_other_tier(void **state)
{
    (void)state;
    uint64_t tok[2 * B], h1[1] = {901}, h2[1] = {902};
    text(tok, 2 * B, 10);
    uint32_t req[2 * B];
    text32(req, 2 * B, 10);
    kvr_raw_event parent_gpu = store_ev(h1, 1, false, 0, tok, B);
    parent_gpu.cache_salt = S("tenant-a");
    kvr_raw_event parent_cpu = parent_gpu;
    parent_cpu.tier = KVR_TIER_CPU;
    kvr_raw_event evict_gpu = remove_ev(h1, 1);
    kvr_raw_event child = store_ev(h2, 1, true, 901, tok + B, B); /* no salt */
    child.tier = KVR_TIER_CPU;
    kvr_raw_event evs[4] = {parent_gpu, parent_cpu, evict_gpu, child};
    apply(ix, w1, 0, evs, 4);
    kvr_str none = {NULL, 0};
    uint64_t salted = kvr_hash_seed(none, S("tenant-a"));
    reach r = match_seed(ix, 1, 0, req, 2 * B, salted);
    assert_int_equal(r.gpu, 0);
    assert_int_equal(r.cpu, 2);
}

/* Eagle workers hash B+1 token windows; requests must use the same. */
static void test_eagle_worker_windows(void **state)
{
    (void)state;
    kvr_worker_settings s = settings(4, KVR_MM_ENGINE_WIDE);
    s.is_eagle = true;
    kvr_worker *w4 = reg_ok(ix, &s, KVR_REG_CREATED);
    uint64_t tok[2 * B + 1], h[2] = {1201, 1202};
    text(tok, 2 * B + 1, 10);
    tok[2 * B] = WIDE; /* the overlap token of block 1 is media: block 1 goes */
    kvr_raw_event ev = store_ev(h, 2, false, 0, tok, 2 * B + 1);
    apply(ix, w4, 0, &ev, 1);
    uint32_t req[2 * B + 1];
    text32(req, 2 * B + 1, 10);
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    const kvr_match_entry *e;
    size_t n = kvr_indexer_match_tokens(ix, MODEL, NULL, ctx, req, 2 * B + 1, true,
                                        KVR_HASH_SEED, &e);
    assert_int_equal(n, 1);
    assert_int_equal(e[0].worker_id, 4);
    assert_int_equal(e[0].gpu_blocks, 1);
    /* plain windows do not match Eagle blocks */
    assert_int_equal(match_gpu(ix, 4, 0, req, 2 * B + 1), 0);
    kvr_match_ctx_destroy(ctx);
    kvr_worker_info *info;
    const kvr_rank_info *r = rank_snapshot(w4, 0, &info);
    assert_int_equal(r->norm.mm_stores_truncated, 1);
    assert_int_equal(r->norm.mm_excluded_ids, 1);
    free(info);
}

typedef struct {
    char model[KVR_NAME_MAX], group[KVR_NAME_MAX];
    kvr_dump_store ev;
    uint64_t *eng, *loc;
} dumped;

typedef struct {
    dumped *v;
    size_t n, cap;
} dump_list;

static void collect(void *user, const char *model, const char *group, const kvr_dump_store *ev)
{
    dump_list *l = user;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        assert_non_null(l->v);
    }
    dumped *d = &l->v[l->n++];
    strcpy(d->model, model);
    strcpy(d->group, group);
    d->ev = *ev;
    d->eng = malloc(ev->n * sizeof(uint64_t));
    d->loc = malloc(ev->n * sizeof(uint64_t));
    memcpy(d->eng, ev->engine_hashes, ev->n * sizeof(uint64_t));
    memcpy(d->loc, ev->local_hashes, ev->n * sizeof(uint64_t));
    d->ev.engine_hashes = d->eng;
    d->ev.local_hashes = d->loc;
}

static void test_dump_load_round_trip(void **state)
{
    (void)state;
    uint64_t tok[3 * B], btok[2 * B], ha[3] = {901, 902, 903}, hb[2] = {911, 912},
                                      hc[2] = {921, 922};
    text(tok, 3 * B, 10);
    text(btok, 2 * B, 77); /* a branch after block 1 */
    kvr_raw_event evs[3] = {store_ev(ha, 3, false, 0, tok, 3 * B),
                            store_ev(hb, 2, true, 902, btok, 2 * B),
                            store_ev(hc, 2, false, 0, tok, 2 * B)};
    evs[2].tier = KVR_TIER_DISK;
    apply(ix, w1, 0, evs, 2);
    apply(ix, w2, 4, evs + 2, 1);
    kvr_worker_settings g = settings(5, KVR_MM_LEGACY);
    g.routing_group = "g2";
    kvr_worker *w5 = reg_ok(ix, &g, KVR_REG_CREATED);
    apply(ix, w5, 0, evs, 1);

    dump_list l = {0};
    kvr_indexer_dump(ix, collect, &l);
    assert_int_equal(l.n >= 4, 1);
    kvr_indexer *fresh = kvr_indexer_create();
    for (size_t i = 0; i < l.n; i++)
        assert_int_equal(kvr_indexer_load_store(fresh, l.v[i].model, l.v[i].group, &l.v[i].ev),
                         KVR_DROP_NONE);
    assert_int_equal(kvr_indexer_block_size(fresh, MODEL, NULL), 0); /* unknown until registered */

    /* the same match results for a set of requests, every group */
    kvr_match_ctx *c1 = kvr_match_ctx_create(), *c2 = kvr_match_ctx_create();
    const char *groups[2] = {NULL, "g2"};
    for (int gi = 0; gi < 2; gi++) {
        for (int q = 0; q < 4; q++) {
            uint32_t req[4 * B];
            text32(req, 4 * B, 10);
            if (q == 1)
                text32(req + 2 * B, 2 * B, 77);
            uint64_t local[4];
            size_t nb = kvr_hash_blocks(req, (size_t)(q == 3 ? 2 : 4) * B, B, false,
                                        KVR_HASH_SEED, local, 4);
            const kvr_match_entry *e1, *e2;
            size_t n1 = kvr_indexer_match_hashes(ix, MODEL, groups[gi], c1, local, nb, &e1);
            size_t n2 = kvr_indexer_match_hashes(fresh, MODEL, groups[gi], c2, local, nb, &e2);
            assert_int_equal(n1, n2);
            assert_true(n1 > 0);
            for (size_t i = 0; i < n1; i++) {
                bool found = false;
                for (size_t j = 0; j < n2; j++) {
                    if (e1[i].worker_id != e2[j].worker_id || e1[i].dp_rank != e2[j].dp_rank)
                        continue;
                    found = true;
                    assert_int_equal(e1[i].gpu_blocks, e2[j].gpu_blocks);
                    assert_int_equal(e1[i].cpu_blocks, e2[j].cpu_blocks);
                    assert_int_equal(e1[i].disk_blocks, e2[j].disk_blocks);
                }
                assert_true(found);
            }
        }
    }

    /* loaded state belongs to the worker: registering keeps it, live events
     * continue its chains, and a reset clears it */
    uint32_t req[5 * B];
    text32(req, 2 * B, 10);
    text32(req + 2 * B, 3 * B, 77);
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *f1 = reg_ok(fresh, &s, KVR_REG_CREATED);
    assert_int_equal(kvr_indexer_block_size(fresh, MODEL, NULL), B);
    assert_int_equal(match_gpu(fresh, 1, 0, req, 4 * B), 4);
    uint64_t h5 = 913, t5[B];
    text(t5, B, 77 + 2 * B);
    kvr_raw_event cont = store_ev(&h5, 1, true, 912, t5, B);
    apply(fresh, f1, 0, &cont, 1);
    assert_int_equal(match_gpu(fresh, 1, 0, req, 5 * B), 5);
    s.mm_identity = KVR_MM_ENGINE_WIDE;
    reg_ok(fresh, &s, KVR_REG_RESET);
    assert_int_equal(match_gpu(fresh, 1, 0, req, 5 * B), 0);
    /* worker 2's loaded disk blocks go with its unregister */
    kvr_worker_settings s2 = settings(2, KVR_MM_ENGINE_WIDE);
    kvr_worker *f2 = reg_ok(fresh, &s2, KVR_REG_CREATED);
    assert_int_equal(match_seed(fresh, 2, 4, req, 2 * B, KVR_HASH_SEED).disk, 2);
    kvr_indexer_unregister(fresh, f2);
    assert_int_equal(match_seed(fresh, 2, 4, req, 2 * B, KVR_HASH_SEED).disk, 0);
    (void)f1;

    /* bad load arguments */
    kvr_dump_store bad = l.v[0].ev;
    bad.n = 0;
    assert_int_equal(kvr_indexer_load_store(fresh, MODEL, NULL, &bad), KVR_DROP_MALFORMED_EVENT);
    bad = l.v[0].ev;
    bad.tier = (kvr_tier)9;
    assert_int_equal(kvr_indexer_load_store(fresh, MODEL, NULL, &bad), KVR_DROP_UNKNOWN_TIER);
    assert_int_equal(kvr_indexer_load_store(fresh, "", NULL, &l.v[0].ev), KVR_DROP_MALFORMED_EVENT);
    bad = l.v[0].ev;
    bad.has_parent = true;
    bad.parent = 123456;
    assert_int_equal(kvr_indexer_load_store(fresh, MODEL, NULL, &bad), KVR_DROP_PARENT_NOT_FOUND);

    kvr_match_ctx_destroy(c1);
    kvr_match_ctx_destroy(c2);
    for (size_t i = 0; i < l.n; i++) {
        free(l.v[i].eng);
        free(l.v[i].loc);
    }
    free(l.v);
    kvr_indexer_destroy(fresh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_store_chain_remove_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tiers_reach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capacity_estimate_from_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capacity_estimate_counts_held_blocks_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_capacity_estimate_moved_hash_holds_no_more, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_capacity_estimate_move_onto_held_block_holds_one_less,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_dp_rank_override_and_rank_isolation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_worker_isolation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parent_not_found_and_duplicates_never_clear, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wire_drops_counted_batch_continues, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_wide_media_exclusion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exclusion_sets_per_worker_and_rank, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wire_bytes_end_to_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lora_worker_seed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_salt_survives_eviction_on_other_tier, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_eagle_worker_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dump_load_round_trip, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
