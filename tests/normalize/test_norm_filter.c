/* The event filter's inline pass (kvr_norm_filter_check in filter.h, 750b092)
 * against the whole check it stands in front of (kvr_norm_filter_check_all):
 * two filters fed the same random stream, one through each, must drop the
 * same events for the same reasons and learn the same group kinds. The
 * stream mixes the plain event the inline pass takes with every field it
 * must not take (a group, a kind, a locality, another block size) and with
 * learned kinds that make a plain event a drop. */
#include "norm_fixture.h"
#include "normalize/filter.h"
#include "util/rng.h"

#include <stddef.h>

#define BS 16u

static uint64_t g_rng = 15;

static uint32_t rnd(uint32_t n) { return (uint32_t)(kvr_splitmix64(&g_rng) % n); }

/* NULL, empty, and names of every class the filter tells apart (case too) */
static const char *const kinds[] = {NULL, "", "full_attention", "FULL_ATTENTION", "mla_attention",
                                    "sink_full_attention", "sliding_window", "mamba"};
static const char *const localities[] = {NULL, "", "local", "LOCAL", "remote", "cpu"};
static const uint32_t block_sizes[] = {0, BS, 32, 1};
static const int64_t groups[] = {0, 1, 2, 7};

#define PICK(a) a[rnd(sizeof a / sizeof a[0])]

static kvr_raw_event random_event(void)
{
    static const uint64_t h[] = {1};
    kvr_raw_event ev = base_ev(rnd(2) ? KVR_EV_STORED : KVR_EV_REMOVED, h, 1);
    if (rnd(2))
        return ev; /* plain: no group, kind nor locality */
    ev.has_group_idx = rnd(2);
    ev.group_idx = ev.has_group_idx ? PICK(groups) : 0;
    ev.kv_cache_spec_kind = S(PICK(kinds));
    ev.locality = S(PICK(localities));
    ev.block_size = PICK(block_sizes);
    return ev;
}

static void test_inline_pass_agrees_with_the_whole_check(void **state)
{
    (void)state;
    kvr_norm_filter in, all;
    kvr_norm_filter_init(&in, BS);
    kvr_norm_filter_init(&all, BS);
    size_t inline_taken = 0, plain_with_learned = 0, plain_dropped = 0;
    for (int i = 0; i < 40000; i++) {
        /* forget now and then, so the empty-map state the inline pass
         * needs comes back throughout the stream */
        if (rnd(64) == 0) {
            kvr_norm_filter_reset(&in);
            kvr_norm_filter_reset(&all);
        }
        kvr_raw_event ev = random_event();
        bool plain = !ev.has_group_idx && !ev.kv_cache_spec_kind.len && !ev.locality.len &&
                     (ev.block_size == 0 || ev.block_size == BS);
        bool learned = kvr_u64map_len(&in.group_kinds) > 0;
        inline_taken += plain && !learned;
        plain_with_learned += plain && learned;
        kvr_drop_reason a = kvr_norm_filter_check(&in, &ev);
        kvr_drop_reason b = kvr_norm_filter_check_all(&all, &ev);
        plain_dropped += plain && b != KVR_DROP_NONE;
        if (a != b)
            fail_msg("event %d (type %d, group %s%lld, kind '%s', locality '%s', block %u, %zu "
                     "kinds learned): inline %d, whole check %d",
                     i, (int)ev.type, ev.has_group_idx ? "" : "none/", (long long)ev.group_idx,
                     ev.kv_cache_spec_kind.ptr ? ev.kv_cache_spec_kind.ptr : "(null)",
                     ev.locality.ptr ? ev.locality.ptr : "(null)", ev.block_size,
                     kvr_u64map_len(&all.group_kinds), (int)a, (int)b);
        assert_int_equal(kvr_u64map_len(&in.group_kinds), kvr_u64map_len(&all.group_kinds));
        assert_int_equal(in.groups_over_limit, all.groups_over_limit);
    }
    /* the stream reached both sides of the inline condition, and plain
     * events that a learned kind drops */
    assert_true(inline_taken > 1000);
    assert_true(plain_with_learned > 1000);
    assert_true(plain_dropped > 100);
    kvr_norm_filter_free(&in);
    kvr_norm_filter_free(&all);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline_pass_agrees_with_the_whole_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
