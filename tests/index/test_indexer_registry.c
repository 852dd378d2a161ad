/* Facade registry: register results, effective settings, resets, the
 * accepts_mm_hashes rules of SPEC §5, unregister and listings. */
#include "indexer_fixture.h"

static void test_register_created_unchanged_updated(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *w = reg_ok(ix, &s, KVR_REG_CREATED);
    assert_ptr_equal(kvr_indexer_find(ix, MODEL, NULL, 1), w);
    assert_ptr_equal(kvr_indexer_find(ix, MODEL, "default", 1), w);
    assert_null(kvr_indexer_find(ix, MODEL, "other", 1));
    assert_null(kvr_indexer_find(ix, "nope", NULL, 1));
    assert_int_equal(kvr_indexer_block_size(ix, MODEL, NULL), B);

    /* omitted and explicit defaults are the same setting */
    kvr_worker_settings e = s;
    e.routing_group = "default";
    e.lora_name = "";
    e.accepts_mm_hashes = 1;
    e.mm_capacity = KVR_MM_DEFAULT_CAPACITY;
    assert_ptr_equal(reg_ok(ix, &e, KVR_REG_UNCHANGED), w);
    assert_ptr_equal(reg_ok(ix, &s, KVR_REG_UNCHANGED), w);

    /* only accepts changes: updated in place, no reset */
    e.accepts_mm_hashes = 0;
    assert_ptr_equal(reg_ok(ix, &e, KVR_REG_UPDATED), w);
    kvr_worker_info *info = info_of(ix, w);
    assert_false(info->accepts_mm_hashes);
    assert_true(info->accepts_mm_hashes_explicit);
    assert_int_equal(info->resets, 0);
    free(info);
    assert_string_equal(kvr_reg_result_name(KVR_REG_UPDATED), "updated");
    assert_string_equal(kvr_reg_result_name(KVR_REG_BLOCK_SIZE_CONFLICT), "block_size_conflict");
    kvr_indexer_destroy(ix);
}

static void test_register_engine_wide_defaults_equal(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_ENGINE_WIDE);
    kvr_worker *w = reg_ok(ix, &s, KVR_REG_CREATED);
    s.accepts_mm_hashes = 0; /* the engine_wide default made explicit */
    assert_ptr_equal(reg_ok(ix, &s, KVR_REG_UNCHANGED), w);
    s.accepts_mm_hashes = 1;
    assert_ptr_equal(reg_ok(ix, &s, KVR_REG_UPDATED), w);
    /* auto: unset is dynamic, so an explicit true is a different setting */
    kvr_worker_settings a = settings(2, KVR_MM_AUTO);
    kvr_worker *wa = reg_ok(ix, &a, KVR_REG_CREATED);
    a.accepts_mm_hashes = 1;
    assert_ptr_equal(reg_ok(ix, &a, KVR_REG_UPDATED), wa);
    kvr_indexer_destroy(ix);
}

static void test_register_invalid(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    char longname[KVR_NAME_MAX + 8];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    char maxname[KVR_NAME_MAX];
    memset(maxname, 'y', sizeof maxname - 1);
    maxname[sizeof maxname - 1] = 0;

    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *w = (kvr_worker *)&s; /* must be overwritten with NULL */
    s.block_size = 0;
    assert_int_equal(kvr_indexer_register(ix, &s, &w), KVR_REG_INVALID);
    assert_null(w);
    s.block_size = KVR_MAX_BLOCK_SIZE + 1;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s = settings(1, KVR_MM_LEGACY);
    s.model_name = "";
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s.model_name = NULL;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s.model_name = longname;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s = settings(1, KVR_MM_LEGACY);
    s.routing_group = longname;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s.routing_group = NULL;
    s.lora_name = longname;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s.lora_name = NULL;
    s.mm_identity = (kvr_mm_identity)3;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s.mm_identity = KVR_MM_LEGACY;
    s.accepts_mm_hashes = 2;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s.accepts_mm_hashes = -2;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    s.accepts_mm_hashes = -1;
    s.max_total_num_tokens = KVR_MAX_KV_CAPACITY_TOKENS + 1;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_INVALID);
    assert_int_equal(kvr_indexer_register(ix, NULL, NULL), KVR_REG_INVALID);
    /* nothing was registered by the failures */
    assert_int_equal(kvr_indexer_list(ix, NULL, NULL, NULL, 0), 0);

    /* the longest allowed names and block size are fine */
    s = settings(1, KVR_MM_LEGACY);
    s.model_name = maxname;
    s.routing_group = maxname;
    s.lora_name = maxname;
    s.block_size = KVR_MAX_BLOCK_SIZE;
    s.max_total_num_tokens = KVR_MAX_KV_CAPACITY_TOKENS;
    assert_int_equal(kvr_indexer_register(ix, &s, NULL), KVR_REG_CREATED);
    kvr_indexer_destroy(ix);
}

static void test_block_size_conflict(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s1 = settings(1, KVR_MM_LEGACY);
    kvr_worker *w1 = reg_ok(ix, &s1, KVR_REG_CREATED);
    kvr_worker_settings s2 = settings(2, KVR_MM_LEGACY);
    s2.block_size = 16;
    kvr_worker *w = (kvr_worker *)&s2;
    assert_int_equal(kvr_indexer_register(ix, &s2, &w), KVR_REG_BLOCK_SIZE_CONFLICT);
    assert_null(w);
    assert_null(kvr_indexer_find(ix, MODEL, NULL, 2));
    /* a re-registration of w1 with another size conflicts once w2 exists */
    s2.block_size = B;
    reg_ok(ix, &s2, KVR_REG_CREATED);
    s1.block_size = 16;
    assert_int_equal(kvr_indexer_register(ix, &s1, NULL), KVR_REG_BLOCK_SIZE_CONFLICT);
    kvr_worker_info *info = info_of(ix, w1);
    assert_int_equal(info->block_size, B);
    free(info);
    assert_int_equal(kvr_indexer_block_size(ix, MODEL, NULL), B);

    /* other groups and models keep their own size */
    kvr_worker_settings g = settings(3, KVR_MM_LEGACY);
    g.routing_group = "long";
    g.block_size = 64;
    reg_ok(ix, &g, KVR_REG_CREATED);
    g.model_name = "m2";
    reg_ok(ix, &g, KVR_REG_CREATED);
    assert_int_equal(kvr_indexer_block_size(ix, MODEL, "long"), 64);
    assert_int_equal(kvr_indexer_block_size(ix, "m2", "long"), 64);
    assert_int_equal(kvr_indexer_block_size(ix, MODEL, NULL), B);
    assert_int_equal(kvr_indexer_block_size(ix, "m3", NULL), 0);
    kvr_indexer_destroy(ix);
}

static void test_sole_worker_changes_block_size(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *w = reg_ok(ix, &s, KVR_REG_CREATED);
    s.block_size = 8;
    assert_ptr_equal(reg_ok(ix, &s, KVR_REG_RESET), w);
    assert_int_equal(kvr_indexer_block_size(ix, MODEL, NULL), 8);
    /* after the last worker leaves, the next registration sets the size */
    kvr_indexer_unregister(ix, w);
    s.block_size = 32;
    reg_ok(ix, &s, KVR_REG_CREATED);
    assert_int_equal(kvr_indexer_block_size(ix, MODEL, NULL), 32);
    kvr_indexer_destroy(ix);
}

/* Stores one 2-block text prefix for (w, rank) and checks it matches. */
static void store_prefix(kvr_indexer *ix, kvr_worker *w, uint64_t id, uint32_t rank,
                         const uint32_t *req)
{
    uint64_t tok[2 * B], hashes[2] = {id * 100 + 1, id * 100 + 2};
    text(tok, 2 * B, 10);
    kvr_raw_event ev = store_ev(hashes, 2, false, 0, tok, 2 * B);
    apply(ix, w, rank, &ev, 1);
    assert_int_equal(match_gpu(ix, id, rank, req, 2 * B), 2);
}

/* Workers 1 and 2 (legacy) and the request matching store_prefix. */
static kvr_indexer *two_legacy_workers(kvr_worker **w1, kvr_worker **w2, uint32_t *req)
{
    kvr_indexer *ix = kvr_indexer_create();
    text32(req, 2 * B, 10);
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    *w1 = reg_ok(ix, &s, KVR_REG_CREATED);
    s = settings(2, KVR_MM_LEGACY);
    *w2 = reg_ok(ix, &s, KVR_REG_CREATED);
    return ix;
}

static void test_reset_on_changed_settings_clears_worker(void **state)
{
    (void)state;
    uint32_t req[2 * B];
    kvr_worker *w, *w2;
    kvr_indexer *ix = two_legacy_workers(&w, &w2, req);
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    store_prefix(ix, w2, 2, 0, req);

    /* every reset-class setting: mm_identity, eagle, lora, capacity */
    for (int change = 0; change < 4; change++) {
        store_prefix(ix, w, 1, 0, req);
        store_prefix(ix, w, 1, 5, req);
        assert_ptr_equal(reg_ok(ix, &s, KVR_REG_UNCHANGED), w);
        assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 2); /* unchanged keeps state */
        if (change == 0)
            s.mm_identity = KVR_MM_ENGINE_WIDE;
        else if (change == 1)
            s.is_eagle = !s.is_eagle;
        else if (change == 2)
            s.lora_name = "adapter-a";
        else
            s.mm_capacity = 16;
        assert_ptr_equal(reg_ok(ix, &s, KVR_REG_RESET), w);
        assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 0);
        assert_int_equal(match_gpu(ix, 1, 5, req, 2 * B), 0);
        kvr_worker_info *info = info_of(ix, w);
        assert_int_equal(info->n_ranks, 0);
        assert_int_equal(info->resets, 2 * change + 1); /* + the way back */
        free(info);
        /* other workers are untouched */
        assert_int_equal(match_gpu(ix, 2, 0, req, 2 * B), 2);
        /* back to the plain settings for the next round */
        s = settings(1, KVR_MM_LEGACY);
        assert_ptr_equal(reg_ok(ix, &s, KVR_REG_RESET), w);
    }
    kvr_indexer_destroy(ix);
}

static void test_accepts_mm_hashes_defaults(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings l = settings(1, KVR_MM_LEGACY), e = settings(2, KVR_MM_ENGINE_WIDE),
                        a = settings(3, KVR_MM_AUTO), ax = settings(4, KVR_MM_AUTO);
    ax.accepts_mm_hashes = 1;
    kvr_worker *wl = reg_ok(ix, &l, KVR_REG_CREATED), *we = reg_ok(ix, &e, KVR_REG_CREATED),
               *wa = reg_ok(ix, &a, KVR_REG_CREATED), *wx = reg_ok(ix, &ax, KVR_REG_CREATED);
    kvr_worker_caps c;
    kvr_worker_caps_get(ix, wl, &c);
    assert_true(c.accepts_mm_hashes);
    kvr_worker_caps_get(ix, we, &c);
    assert_false(c.accepts_mm_hashes);
    kvr_worker_caps_get(ix, wa, &c);
    assert_true(c.accepts_mm_hashes);

    /* text only: auto stays legacy and keeps accepting */
    uint64_t tok[3 * B], h[3] = {11, 12, 13};
    text(tok, 3 * B, 10);
    kvr_raw_event ev = store_ev(h, 3, false, 0, tok, 3 * B);
    apply(ix, wa, 0, &ev, 1);
    apply(ix, wx, 0, &ev, 1);
    apply(ix, wl, 0, &ev, 1);
    kvr_worker_caps_get(ix, wa, &c);
    assert_true(c.accepts_mm_hashes);

    /* a wide id on rank 2 flips auto (unless explicit) on every rank */
    tok[2 * B + 1] = WIDE;
    uint64_t h2[3] = {21, 22, 23};
    ev = store_ev(h2, 3, false, 0, tok, 3 * B);
    apply(ix, wa, 2, &ev, 1);
    apply(ix, wx, 2, &ev, 1);
    apply(ix, wl, 2, &ev, 1);
    kvr_worker_caps_get(ix, wa, &c);
    assert_false(c.accepts_mm_hashes);
    kvr_worker_caps_get(ix, wx, &c);
    assert_true(c.accepts_mm_hashes);
    kvr_worker_caps_get(ix, wl, &c);
    assert_true(c.accepts_mm_hashes); /* legacy stays a legacy worker */

    kvr_worker_info *info = info_of(ix, wa);
    assert_true(info->wide_seen);
    assert_false(info->accepts_mm_hashes);
    assert_false(info->accepts_mm_hashes_explicit);
    assert_int_equal(info->n_ranks, 2);
    assert_int_equal(rank_of(info, 0)->effective_mode, KVR_MM_LEGACY);
    assert_int_equal(rank_of(info, 2)->effective_mode, KVR_MM_ENGINE_WIDE);
    assert_int_equal(rank_of(info, 2)->norm.wide_tokens_seen, 1);
    free(info);
    info = info_of(ix, wl);
    assert_int_equal(rank_of(info, 2)->effective_mode, KVR_MM_LEGACY);
    assert_int_equal(rank_of(info, 2)->norm.mm_stores_truncated, 1);
    free(info);

    /* clearing a rank keeps the detection (same engine build) */
    kvr_indexer_clear_rank(ix, wa, 2);
    kvr_worker_caps_get(ix, wa, &c);
    assert_false(c.accepts_mm_hashes);
    /* a reset (changed mode) forgets it */
    a.mm_identity = KVR_MM_LEGACY;
    reg_ok(ix, &a, KVR_REG_RESET);
    a.mm_identity = KVR_MM_AUTO;
    reg_ok(ix, &a, KVR_REG_RESET);
    kvr_worker_caps_get(ix, wa, &c);
    assert_true(c.accepts_mm_hashes);
    kvr_indexer_destroy(ix);
}

static void test_caps_and_list(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(7, KVR_MM_ENGINE_WIDE);
    s.lora_name = "adapter-a";
    s.is_eagle = true;
    reg_ok(ix, &s, KVR_REG_CREATED);
    kvr_worker_settings t = settings(8, KVR_MM_LEGACY);
    reg_ok(ix, &t, KVR_REG_CREATED);
    kvr_worker_settings u = settings(9, KVR_MM_LEGACY);
    u.routing_group = "g2";
    reg_ok(ix, &u, KVR_REG_CREATED);
    u.model_name = "other";
    reg_ok(ix, &u, KVR_REG_CREATED);

    kvr_worker_caps caps[4];
    assert_int_equal(kvr_indexer_caps_list(ix, MODEL, NULL, caps, 4), 2);
    assert_int_equal(caps[0].worker_id, 7);
    assert_true(caps[0].is_eagle);
    assert_string_equal(caps[0].lora_name, "adapter-a");
    kvr_str lora = {"adapter-a", 9}, none = {NULL, 0};
    assert_int_equal(caps[0].lora_seed, kvr_hash_seed(lora, none));
    assert_int_equal(caps[0].lora_seed, 8842669519798868182ULL); /* SPEC §4 vector */
    assert_int_equal(caps[1].worker_id, 8);
    assert_int_equal(caps[1].lora_seed, KVR_HASH_SEED);
    assert_string_equal(caps[1].lora_name, "");
    assert_int_equal(kvr_indexer_caps_list(ix, "nope", NULL, caps, 4), 0);
    assert_true(caps[0].rank_bits == 0 && !caps[0].wide_ranks);

    /* ranks appear once a batch applied: bits below KVR_CAPS_RANKS, one
     * flag for any above */
    kvr_worker *w8 = kvr_indexer_find(ix, MODEL, NULL, 8);
    kvr_batch empty = batch_of(NULL, 0);
    for (uint32_t r = 0; r < KVR_CAPS_RANKS; r++)
        kvr_indexer_apply(ix, w8, KVR_CAPS_RANKS - 1 - r, &empty);
    kvr_worker_caps_get(ix, w8, &caps[1]);
    assert_true(caps[1].rank_bits == UINT64_MAX && !caps[1].wide_ranks);
    kvr_indexer_apply(ix, w8, KVR_CAPS_RANKS + 7, &empty);
    kvr_worker_caps_get(ix, w8, &caps[1]);
    assert_true(caps[1].rank_bits == UINT64_MAX && caps[1].wide_ranks);
    kvr_worker *w7 = kvr_indexer_find(ix, MODEL, NULL, 7);
    kvr_indexer_apply(ix, w7, 5, &empty);
    kvr_indexer_apply(ix, w7, 2, &empty);
    assert_int_equal(kvr_indexer_caps_list(ix, MODEL, NULL, caps, 4), 2);
    assert_true(caps[0].rank_bits == (1u << 2 | 1u << 5));
    /* removing a rank keeps the others */
    kvr_indexer_apply(ix, w7, 3, &empty);
    assert_true(kvr_indexer_unregister_rank(ix, w7, 2));
    kvr_worker_caps_get(ix, w7, &caps[0]);
    assert_true(caps[0].rank_bits == (1u << 3 | 1u << 5) && !caps[0].wide_ranks);

    assert_int_equal(kvr_indexer_list(ix, NULL, NULL, NULL, 0), 4);
    assert_int_equal(kvr_indexer_list(ix, MODEL, NULL, NULL, 0), 3);
    kvr_worker_info *infos = calloc(4, sizeof *infos);
    assert_int_equal(kvr_indexer_list(ix, MODEL, "default", infos, 1), 2); /* cap 1 */
    assert_int_equal(infos[0].worker_id, 7);
    assert_int_equal(kvr_indexer_list(ix, MODEL, "g2", infos, 4), 1);
    assert_int_equal(infos[0].worker_id, 9);
    assert_string_equal(infos[0].model_name, MODEL);
    assert_string_equal(infos[0].routing_group, "g2");
    free(infos);
    kvr_indexer_destroy(ix);
}

/* caps_list_since copies again exactly when something a caps entry reads
 * changed: a sentinel written into the copy survives every call between. */
static bool copied(kvr_indexer *ix, kvr_worker_caps *caps, size_t cap, uint64_t *gen, size_t n)
{
    caps[0].worker_id = 999;
    assert_int_equal(kvr_indexer_caps_list_since(ix, MODEL, NULL, caps, cap, gen), n);
    return caps[0].worker_id != 999;
}

static void test_caps_list_since_copies_on_change(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(7, KVR_MM_LEGACY);
    reg_ok(ix, &s, KVR_REG_CREATED);
    kvr_worker_caps caps[4];
    uint64_t gen = 0;
    assert_true(copied(ix, caps, 4, &gen, 1));
    assert_true(gen != 0);
    assert_int_equal(caps[0].worker_id, 7);
    assert_false(copied(ix, caps, 4, &gen, 1));
    /* a rank's first batch changes rank_bits; more batches change nothing */
    kvr_worker *w7 = kvr_indexer_find(ix, MODEL, NULL, 7);
    kvr_batch empty = batch_of(NULL, 0);
    kvr_indexer_apply(ix, w7, 3, &empty);
    assert_true(copied(ix, caps, 4, &gen, 1));
    assert_true(caps[0].rank_bits == 1u << 3);
    kvr_indexer_apply(ix, w7, 3, &empty);
    assert_false(copied(ix, caps, 4, &gen, 1));
    /* a registration that changes nothing, one that changes a hint */
    reg_ok(ix, &s, KVR_REG_UNCHANGED);
    assert_false(copied(ix, caps, 4, &gen, 1));
    s.prefill_tps = 5000;
    reg_ok(ix, &s, KVR_REG_UPDATED);
    assert_true(copied(ix, caps, 4, &gen, 1));
    assert_true(caps[0].prefill_tps == 5000);
    assert_true(kvr_indexer_unregister_rank(ix, w7, 3));
    assert_true(copied(ix, caps, 4, &gen, 1));
    assert_true(caps[0].rank_bits == 0);
    /* workers in and out */
    kvr_worker_settings t = settings(8, KVR_MM_LEGACY);
    reg_ok(ix, &t, KVR_REG_CREATED);
    assert_true(copied(ix, caps, 4, &gen, 2));
    assert_int_equal(caps[1].worker_id, 8);
    /* too small a buffer: the count, and no generation to keep */
    assert_int_equal(kvr_indexer_caps_list_since(ix, MODEL, NULL, caps, 1, &gen), 2);
    assert_true(gen == 0);
    assert_true(copied(ix, caps, 4, &gen, 2));
    kvr_indexer_unregister(ix, kvr_indexer_find(ix, MODEL, NULL, 7));
    assert_true(copied(ix, caps, 4, &gen, 1));
    assert_int_equal(caps[0].worker_id, 8);
    assert_int_equal(kvr_indexer_caps_list_since(ix, "nope", NULL, caps, 4, &gen), 0);
    kvr_indexer_destroy(ix);
}

static void test_unregister_removes_everything(void **state)
{
    (void)state;
    uint32_t req[2 * B];
    kvr_worker *w, *w2;
    kvr_indexer *ix = two_legacy_workers(&w, &w2, req);
    store_prefix(ix, w, 1, 0, req);
    store_prefix(ix, w, 1, 3, req);
    store_prefix(ix, w2, 2, 0, req);
    kvr_index_stats st;
    kvr_index_stats_get(kvr_indexer_index(ix, MODEL, NULL), &st);
    assert_int_equal(st.ownerships, 6);

    kvr_indexer_unregister(ix, w);
    assert_null(kvr_indexer_find(ix, MODEL, NULL, 1));
    assert_int_equal(match_gpu(ix, 1, 0, req, 2 * B), 0);
    assert_int_equal(match_gpu(ix, 1, 3, req, 2 * B), 0);
    assert_int_equal(match_gpu(ix, 2, 0, req, 2 * B), 2);
    kvr_index_stats_get(kvr_indexer_index(ix, MODEL, NULL), &st);
    assert_int_equal(st.ownerships, 2);
    assert_int_equal(kvr_indexer_list(ix, NULL, NULL, NULL, 0), 1);

    /* per-rank removal keeps the worker */
    store_prefix(ix, w2, 2, 1, req);
    assert_true(kvr_indexer_unregister_rank(ix, w2, 1));
    assert_false(kvr_indexer_unregister_rank(ix, w2, 1));
    assert_int_equal(match_gpu(ix, 2, 1, req, 2 * B), 0);
    assert_int_equal(match_gpu(ix, 2, 0, req, 2 * B), 2);
    kvr_worker_info *info = info_of(ix, w2);
    assert_int_equal(info->n_ranks, 1);
    free(info);
    kvr_indexer_destroy(ix);
}

/* A bad dp_rank field cannot grow a worker's state without bound. */
static void test_rank_count_bounded(void **state)
{
    (void)state;
    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker_settings s = settings(1, KVR_MM_LEGACY);
    kvr_worker *w = reg_ok(ix, &s, KVR_REG_CREATED);
    kvr_batch b = batch_of(NULL, 0);
    b.has_dp_rank = true;
    for (uint32_t r = 0; r < KVR_MAX_DP_RANKS + 5; r++) {
        b.dp_rank = r * 7919u;
        kvr_indexer_apply(ix, w, 0, &b);
    }
    b.dp_rank = 0; /* known ranks still apply */
    kvr_indexer_apply(ix, w, 0, &b);
    kvr_worker_info *info = info_of(ix, w);
    assert_int_equal(info->n_ranks_total, KVR_MAX_DP_RANKS);
    assert_int_equal(info->n_ranks, KVR_MAX_RANKS_INFO);
    assert_int_equal(info->batches_rejected, 5);
    assert_int_equal(info->ranks[0].dp_rank, 0);
    assert_int_equal(info->ranks[0].batches, 2);
    assert_int_equal(info->ranks[1].dp_rank, 7919u);
    free(info);
    kvr_indexer_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_created_unchanged_updated),
        cmocka_unit_test(test_register_engine_wide_defaults_equal),
        cmocka_unit_test(test_register_invalid),
        cmocka_unit_test(test_block_size_conflict),
        cmocka_unit_test(test_sole_worker_changes_block_size),
        cmocka_unit_test(test_reset_on_changed_settings_clears_worker),
        cmocka_unit_test(test_accepts_mm_hashes_defaults),
        cmocka_unit_test(test_caps_and_list),
        cmocka_unit_test(test_caps_list_since_copies_on_change),
        cmocka_unit_test(test_unregister_removes_everything),
        cmocka_unit_test(test_rank_count_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
