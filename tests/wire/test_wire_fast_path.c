/* The straight-line decoder of the common tagged shapes (event_fast.c) is a
 * shortcut, not a second definition: on every event it accepts it must
 * produce exactly what the general decoder (event.c) produces, and it must
 * leave alone every event the general decoder drops. Checked on random
 * tagged events that mix the shapes engines send with every other value
 * type in every position, and on the shapes the bench and SGLang send.
 * Also: the validating walk's own table of scalar sizes agrees with msgpuck's
 * parser hints, which mp_check steps with; the u32 view stops at its bound. */
#include "test_support.h"

#include <msgpuck.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/wire.h"
#include "wire/wire_internal.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

static const uint64_t uint_samples[] = {0, 5, 127, 128, 255, 256, 65535, 65536, 151935,
                                        UINT32_MAX - 1, UINT32_MAX, 1ull << 32,
                                        (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1,
                                        UINT64_MAX};

/* A non-negative integer in the shortest form or a wider one. */
static char *put_uint(char *p)
{
    uint64_t v = uint_samples[rnd(sizeof uint_samples / sizeof uint_samples[0])];
    switch (rnd(4)) {
    case 0:
        if (v <= UINT32_MAX) {
            *p++ = (char)0xce;
            return mp_store_u32(p, (uint32_t)v);
        }
        break;
    case 1:
        *p++ = (char)0xcf;
        return mp_store_u64(p, v);
    default:
        break;
    }
    return mp_encode_uint(p, v);
}

static char *put_str(char *p)
{
    static const char *const strs[] = {"GPU", "gpu", "CPU", "DISK", "cpu_pinned", "NVME",
                                       "", "weird", "adapter-a", "BlockStored"};
    const char *s = strs[rnd(sizeof strs / sizeof strs[0])];
    if (rnd(4) == 0) { /* str8 even for a short string */
        *p++ = (char)0xd9;
        *p++ = (char)strlen(s);
        memcpy(p, s, strlen(s));
        return p + strlen(s);
    }
    return mp_encode_str(p, s, (uint32_t)strlen(s));
}

/* Any value, integers and nil most often; depth bounds the nesting. */
static char *put_any(char *p, int depth)
{
    switch (rnd(depth > 1 ? 9 : 12)) {
    case 0: case 1: case 2: return put_uint(p);
    case 3: case 4: return mp_encode_nil(p);
    case 5: return put_str(p);
    case 6: return mp_encode_int(p, -1 - (int64_t)rnd(1000));
    case 7: return mp_encode_bin(p, "\x01\x02\x03\x04\x05\x06\x07\x08\x09", rnd(10));
    case 8: return mp_encode_bool(p, rnd(2));
    case 9: {
        uint32_t n = rnd(4);
        p = mp_encode_array(p, n);
        for (uint32_t i = 0; i < n; i++)
            p = put_any(p, depth + 1);
        return p;
    }
    case 10:
        p = mp_encode_map(p, 1);
        p = mp_encode_str(p, "cache_salt", 10);
        return put_any(p, depth + 1);
    default: return mp_encode_double(p, 1.5);
    }
}

/* Hashes or tokens: mostly integers, sometimes something else among them. */
static char *put_ints(char *p)
{
    uint32_t n = rnd(20);
    p = rnd(8) == 0 ? mp_store_u16(mp_store_u8(p, 0xdc), (uint16_t)n) : mp_encode_array(p, n);
    bool pure = rnd(3) != 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!pure && rnd(6) == 0) {
            if (rnd(2)) {
                p = mp_encode_array(p, 2); /* a bigram */
                p = put_uint(p);
                p = put_uint(p);
            } else {
                p = put_any(p, 1);
            }
        } else {
            p = put_uint(p);
        }
    }
    return p;
}

/* Hashes or tokens as engines send them: integers only. */
static char *put_uints(char *p)
{
    uint32_t n = rnd(20);
    p = mp_encode_array(p, n);
    for (uint32_t i = 0; i < n; i++)
        p = put_uint(p);
    return p;
}

static char *put_tag(char *p)
{
    switch (rnd(12)) {
    case 0: return mp_encode_str(p, "AllBlocksCleared", 16);
    case 1: return mp_encode_str(p, "BlockStore", 10);
    case 2: {
        *p++ = (char)0xd9;
        *p++ = 11;
        memcpy(p, "BlockStored", 11);
        return p + 11;
    }
    case 3: return mp_encode_uint(p, 1);
    case 4: case 5: case 6: return mp_encode_str(p, "BlockRemoved", 12);
    default: return mp_encode_str(p, "BlockStored", 11);
    }
}

/* One tagged event: mostly the shapes engines send, or anything. */
static char *put_event(char *p)
{
    bool typical = rnd(2);
    uint32_t n = typical ? 2 + rnd(12) : 1 + rnd(15);
    p = rnd(10) == 0 ? mp_store_u16(mp_store_u8(p, 0xdc), (uint16_t)n) : mp_encode_array(p, n);
    p = put_tag(p);
    for (uint32_t i = 1; i < n; i++) {
        if (!typical || rnd(30) == 0) {
            p = rnd(2) ? put_ints(p) : put_any(p, 1);
            continue;
        }
        /* a store's layout (a removal reads position 2 as its medium) */
        switch (i) {
        case 1: case 3: p = rnd(4) ? put_uints(p) : put_ints(p); break;
        case 2: p = rnd(2) ? mp_encode_nil(p) : put_uint(p); break;
        case 4: p = rnd(4) ? mp_encode_uint(p, 16) : put_uint(p); break;
        case 6: p = rnd(3) ? mp_encode_str(p, "GPU", 3) : put_str(p); break;
        default: p = rnd(6) ? mp_encode_nil(p) : put_any(p, 1); break;
        }
    }
    return p;
}

static void assert_str_same(kvr_str a, kvr_str b)
{
    assert_ptr_equal(a.ptr, b.ptr);
    assert_int_equal(a.len, b.len);
}

static void assert_same_event(const kvr_raw_event *f, const kvr_raw_event *g)
{
    assert_int_equal(f->type, g->type);
    assert_int_equal(f->drop_reason, g->drop_reason);
    assert_int_equal(f->tier, g->tier);
    assert_int_equal(f->has_parent, g->has_parent);
    assert_true(f->parent == g->parent);
    assert_int_equal(f->n_block_hashes, g->n_block_hashes);
    for (uint32_t i = 0; i < f->n_block_hashes; i++)
        assert_true(f->block_hashes[i] == g->block_hashes[i]);
    assert_int_equal(f->n_token_ids, g->n_token_ids);
    for (uint32_t i = 0; i < f->n_token_ids; i++)
        assert_true(f->token_ids[i] == g->token_ids[i]);
    assert_int_equal(f->eagle, g->eagle);
    assert_int_equal(f->block_size, g->block_size);
    assert_int_equal(f->has_lora_id, g->has_lora_id);
    assert_true(f->lora_id == g->lora_id);
    assert_str_same(f->lora_name, g->lora_name);
    assert_str_same(f->cache_salt, g->cache_salt);
    assert_str_same(f->session_id, g->session_id);
    assert_ptr_equal(f->extra_keys, g->extra_keys);
    assert_int_equal(f->n_extra_keys, g->n_extra_keys);
    assert_int_equal(f->has_group_idx, g->has_group_idx);
    assert_true(f->group_idx == g->group_idx);
    assert_str_same(f->kv_cache_spec_kind, g->kv_cache_spec_kind);
    assert_int_equal(f->has_sliding_window, g->has_sliding_window);
    assert_true(f->sliding_window == g->sliding_window);
    assert_str_same(f->locality, g->locality);
}

/* A store's u32 view: there exactly when it can be (a small store whose ids
 * are all below the sentinel), equal to the tokens. */
static void assert_u32_view(const kvr_raw_event *ev)
{
    bool narrowable = ev->type == KVR_EV_STORED && ev->n_token_ids > 0 &&
                      ev->n_token_ids <= KVR_WIRE_U32_VIEW_MAX;
    for (uint32_t i = 0; i < ev->n_token_ids; i++)
        narrowable = narrowable && ev->token_ids[i] < KVR_WIDE_SENTINEL;
    assert_int_equal(ev->token_ids_u32 != NULL, narrowable);
    for (uint32_t i = 0; narrowable && i < ev->n_token_ids; i++)
        assert_true(ev->token_ids_u32[i] == ev->token_ids[i]);
}

/* Decodes every event of a validated batch both ways; returns how many the
 * fast path took. */
static uint32_t compare_batch(const char *payload, size_t len, uint32_t *n_events)
{
    kvr_batch b, fast, general;
    kvr_batch_init(&b);
    kvr_batch_init(&fast);
    kvr_batch_init(&general);
    assert_int_equal(kvr_batch_decode(&b, payload, len), KVR_BATCH_OK);
    const char *cur = b.next;
    uint32_t taken = 0;
    for (uint32_t i = 0; i < b.n_events; i++) {
        const char *pf = cur, *pg = cur;
        bool ok = kvr_wire_decode_event_fast(&fast, &pf);
        kvr_wire_decode_event(&general, &pg);
        if (ok) {
            taken++;
            assert_ptr_equal(pf, pg);
            assert_same_event(&fast.ev, &general.ev);
            assert_u32_view(&fast.ev);
        } else {
            assert_ptr_equal(pf, cur); /* nothing consumed */
        }
        cur = pg;
    }
    *n_events = b.n_events;
    kvr_batch_free(&b);
    kvr_batch_free(&fast);
    kvr_batch_free(&general);
    return taken;
}

static void test_fast_path_equals_general_decoder(void **state)
{
    (void)state;
    static char buf[1 << 16];
    uint32_t taken = 0, total = 0;
    for (int round = 0; round < 4000; round++) {
        uint32_t n = 1 + rnd(8);
        char *p = mp_encode_array(buf, 3);
        p = mp_encode_double(p, 0.0);
        p = mp_encode_array(p, n);
        for (uint32_t i = 0; i < n; i++)
            p = put_event(p);
        p = mp_encode_nil(p);
        assert_true((size_t)(p - buf) < sizeof buf);
        /* an exact-size copy, so ASan sees any read past the end */
        size_t len = (size_t)(p - buf);
        char *copy = malloc(len);
        memcpy(copy, buf, len);
        uint32_t events;
        taken += compare_batch(copy, len, &events);
        total += events;
        free(copy);
    }
    print_message("fast path: %u of %u events\n", taken, total);
    /* both outcomes were exercised often */
    assert_true(taken > total / 20);
    assert_true(taken < total - total / 20);
}

/* What SGLang and the bench send: all taken by the fast path. */
static void test_common_shapes_take_the_fast_path(void **state)
{
    (void)state;
    char buf[512], *p = mp_encode_array(buf, 3);
    p = mp_encode_double(p, 0.0);
    p = mp_encode_array(p, 3);
    p = mp_encode_array(p, 8);
    p = mp_encode_str(p, "BlockStored", 11);
    p = mp_encode_array(p, 1);
    p = mp_encode_uint(p, 0xFEDCBA9876543210ull);
    p = mp_encode_uint(p, 77);
    p = mp_encode_array(p, 16);
    for (uint32_t i = 0; i < 16; i++)
        p = mp_encode_uint(p, i * 20000u + (i & 1 ? 1ull << 33 : 0));
    p = mp_encode_uint(p, 16);
    p = mp_encode_nil(p);
    p = mp_encode_str(p, "GPU", 3);
    p = mp_encode_nil(p);
    p = mp_encode_array(p, 3);
    p = mp_encode_str(p, "BlockRemoved", 12);
    p = mp_encode_array(p, 2);
    p = mp_encode_uint(p, 1);
    p = mp_encode_uint(p, 2);
    p = mp_encode_str(p, "CPU_PINNED", 10);
    p = mp_encode_array(p, 13); /* vLLM's tagged store with an unused tail */
    p = mp_encode_str(p, "BlockStored", 11);
    p = mp_encode_array(p, 0);
    p = mp_encode_nil(p);
    p = mp_encode_array(p, 0);
    p = mp_encode_uint(p, 16);
    p = mp_encode_uint(p, 3);
    p = mp_encode_str(p, "gpu", 3);
    p = mp_encode_str(p, "adapter-a", 9);
    for (int i = 0; i < 5; i++)
        p = mp_encode_nil(p);
    p = mp_encode_uint(p, 2);
    uint32_t events;
    assert_int_equal(compare_batch(buf, (size_t)(p - buf), &events), 3);
    assert_int_equal(events, 3);
}

/* The u32 view's bound (KVR_WIRE_U32_VIEW_MAX tokens): a store at the bound
 * gets its view, one token more does not (the random events above stay far
 * below it); both are still taken by the fast path and equal the general
 * decoder's event. */
static void test_u32_view_stops_at_its_bound(void **state)
{
    (void)state;
    static char buf[16384];
    for (uint32_t n = KVR_WIRE_U32_VIEW_MAX; n <= KVR_WIRE_U32_VIEW_MAX + 1; n++) {
        char *p = mp_encode_array(buf, 3);
        p = mp_encode_double(p, 0.0);
        p = mp_encode_array(p, 1);
        p = mp_encode_array(p, 5);
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 9);
        p = mp_encode_nil(p);
        p = mp_encode_array(p, n);
        for (uint32_t i = 0; i < n; i++)
            p = mp_encode_uint(p, 70000u + i);
        p = mp_encode_uint(p, n);
        p = mp_encode_nil(p);
        assert_true((size_t)(p - buf) <= sizeof buf);
        uint32_t events;
        assert_int_equal(compare_batch(buf, (size_t)(p - buf), &events), 1);

        kvr_batch b;
        kvr_batch_init(&b);
        assert_int_equal(kvr_batch_decode(&b, buf, (size_t)(p - buf)), KVR_BATCH_OK);
        const kvr_raw_event *ev = kvr_batch_next(&b);
        assert_int_equal(ev->type, KVR_EV_STORED);
        assert_int_equal(ev->n_token_ids, n);
        assert_int_equal(ev->token_ids_u32 != NULL, n <= KVR_WIRE_U32_VIEW_MAX);
        if (ev->token_ids_u32)
            assert_int_equal(ev->token_ids_u32[n - 1], 70000u + n - 1);
        kvr_batch_free(&b);
    }
}

/* The walk's table of scalar sizes says what msgpuck's parser hint says. */
static void test_scalar_table_matches_msgpuck(void **state)
{
    (void)state;
    for (unsigned c = 0; c < 256; c++) {
        int l = mp_parser_hint[c];
        bool empty_container = c == 0x80 || c == 0x90;
        unsigned want = l >= 0 && !empty_container ? 1u + (unsigned)l : 0u;
        assert_int_equal(kvr_wire_scalar_bytes[c], want);
    }
}

/* Events handed out one after another (kvr_batch_next) carry nothing of
 * the one before: the fast path clears only the fields it sets when the
 * last event was its own, so a store with every field, a removal, a bare
 * store, a map event (the general path: salt, session) and a bare store
 * again each equal what a fresh general decode of their bytes gives. */
static void test_fast_events_leave_nothing_behind(void **state)
{
    (void)state;
    char buf[1024], *p = mp_encode_array(buf, 3);
    p = mp_encode_double(p, 0.0);
    p = mp_encode_array(p, 5);
    p = mp_encode_array(p, 8); /* every field the fast path sets */
    p = mp_encode_str(p, "BlockStored", 11);
    p = mp_encode_array(p, 1);
    p = mp_encode_uint(p, 11);
    p = mp_encode_uint(p, 10);
    p = mp_encode_array(p, 16);
    for (uint32_t i = 0; i < 16; i++)
        p = mp_encode_uint(p, 70000 + i);
    p = mp_encode_uint(p, 16);
    p = mp_encode_uint(p, 7);
    p = mp_encode_str(p, "CPU", 3);
    p = mp_encode_str(p, "adapter-a", 9);
    p = mp_encode_array(p, 2);
    p = mp_encode_str(p, "BlockRemoved", 12);
    p = mp_encode_array(p, 1);
    p = mp_encode_uint(p, 11);
    for (int round = 0; round < 2; round++) {
        p = mp_encode_array(p, 5); /* a bare store */
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 12);
        p = mp_encode_nil(p);
        p = mp_encode_array(p, 2);
        p = mp_encode_uint(p, 1);
        p = mp_encode_uint(p, 2);
        p = mp_encode_uint(p, 16);
        if (round == 1)
            break;
        p = mp_encode_map(p, 5); /* the general path's fields */
        p = mp_encode_str(p, "type", 4);
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_str(p, "block_hashes", 12);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 13);
        p = mp_encode_str(p, "token_ids", 9);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 3);
        p = mp_encode_str(p, "cache_salt", 10);
        p = mp_encode_str(p, "salt", 4);
        p = mp_encode_str(p, "session_id", 10);
        p = mp_encode_str(p, "s1", 2);
    }
    p = mp_encode_nil(p);
    size_t len = (size_t)(p - buf);
    char *copy = malloc(len);
    memcpy(copy, buf, len);
    kvr_batch b, general;
    kvr_batch_init(&b);
    kvr_batch_init(&general);
    assert_int_equal(kvr_batch_decode(&b, copy, len), KVR_BATCH_OK);
    assert_int_equal(b.n_events, 5);
    const char *cur = b.next;
    const kvr_raw_event *ev;
    uint32_t n = 0, salted = 0;
    while ((ev = kvr_batch_next(&b))) {
        kvr_batch_free(&general);
        kvr_batch_init(&general);
        kvr_wire_decode_event(&general, &cur);
        assert_int_not_equal(general.ev.type, KVR_EV_DROPPED);
        assert_same_event(ev, &general.ev);
        salted += ev->cache_salt.len > 0;
        n++;
    }
    assert_int_equal(n, 5);
    assert_int_equal(salted, 1);
    kvr_batch_free(&b);
    kvr_batch_free(&general);
    free(copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_table_matches_msgpuck),
        cmocka_unit_test(test_fast_path_equals_general_decoder),
        cmocka_unit_test(test_common_shapes_take_the_fast_path),
        cmocka_unit_test(test_u32_view_stops_at_its_bound),
        cmocka_unit_test(test_fast_events_leave_nothing_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
