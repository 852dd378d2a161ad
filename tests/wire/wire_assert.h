/* Field-by-field comparison of raw events, shared by the wire tests. */
#ifndef KVR_TEST_WIRE_ASSERT_H
#define KVR_TEST_WIRE_ASSERT_H

#include "test_support.h"

#include <string.h>

#include "kvrouter/wire.h"

static inline void kvr_assert_str_equal(kvr_str a, kvr_str b)
{
    assert_int_equal(a.ptr != NULL, b.ptr != NULL);
    if (a.ptr) {
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.ptr, b.ptr, a.len);
    }
}

static inline void kvr_assert_event_equal(const kvr_raw_event *got, const kvr_raw_event *want)
{
    assert_int_equal(got->type, want->type);
    assert_int_equal(got->drop_reason, want->drop_reason);
    if (want->type == KVR_EV_STORED || want->type == KVR_EV_REMOVED)
        assert_int_equal(got->tier, want->tier);
    assert_int_equal(got->has_parent, want->has_parent);
    if (want->has_parent)
        assert_int_equal(got->parent, want->parent);
    assert_int_equal(got->n_block_hashes, want->n_block_hashes);
    for (uint32_t i = 0; i < want->n_block_hashes; i++)
        assert_int_equal(got->block_hashes[i], want->block_hashes[i]);
    assert_int_equal(got->n_token_ids, want->n_token_ids);
    for (uint32_t i = 0; i < want->n_token_ids; i++)
        assert_int_equal(got->token_ids[i], want->token_ids[i]);
    assert_int_equal(got->eagle, want->eagle);
    assert_int_equal(got->block_size, want->block_size);
    assert_int_equal(got->has_lora_id, want->has_lora_id);
    if (want->has_lora_id)
        assert_int_equal(got->lora_id, want->lora_id);
    kvr_assert_str_equal(got->lora_name, want->lora_name);
    kvr_assert_str_equal(got->cache_salt, want->cache_salt);
    kvr_assert_str_equal(got->session_id, want->session_id);
    assert_int_equal(got->has_group_idx, want->has_group_idx);
    if (want->has_group_idx)
        assert_int_equal(got->group_idx, want->group_idx);
    kvr_assert_str_equal(got->kv_cache_spec_kind, want->kv_cache_spec_kind);
    assert_int_equal(got->has_sliding_window, want->has_sliding_window);
    if (want->has_sliding_window)
        assert_int_equal(got->sliding_window, want->sliding_window);
    kvr_assert_str_equal(got->locality, want->locality);
}

static inline kvr_str kvr_s(const char *c)
{
    kvr_str s = {c, c ? (uint32_t)strlen(c) : 0};
    return s;
}

#endif
