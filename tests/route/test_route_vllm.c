/* Request side of SPEC §5 "vLLM media identity": a vLLM worker is scored
 * with pad_value over each item's positions, the identity read as vLLM
 * reads it (a 64-hex mm_hash by its first 16 digits; SGLang keeps the low
 * 64 bits), so a mixed fleet scores each worker with its own reading; when
 * the readings agree both kinds share one hash pass. */
#include "route_test_util.h"

#define BS 4
#define P 151655u
#define HEX64 "2f97f006c0e2eb2e00000000000000000000000000000000000000000000002a"

static kvr_worker *reg_engine(kvr_indexer *ix, uint64_t id, kvr_engine engine)
{
    kvr_worker_settings s = {0};
    s.model_name = RT_MODEL;
    s.worker_id = id;
    s.block_size = BS;
    s.accepts_mm_hashes = -1;
    s.engine = engine;
    s.has_image_token_id = engine == KVR_ENGINE_VLLM;
    s.image_token_id = P;
    kvr_worker *w = NULL;
    assert_int_equal(kvr_indexer_register(ix, &s, &w), KVR_REG_CREATED);
    return w;
}

/* The request [1, 2, P x 4, 3, 4] with the image at 2..5 hashed under pad. */
static void padded_tokens(uint64_t *t, uint32_t pad)
{
    const uint64_t v[8] = {1, 2, pad, pad, pad, pad, 3, 4};
    memcpy(t, v, sizeof v);
}

static void test_mixed_fleet_each_reading(void **state)
{
    (void)state;
    kvr_indexer *ix;
    kvr_router *r;
    rt_open(&ix, &r, 0, 3);
    kvr_worker *vllm = reg_engine(ix, 1, KVR_ENGINE_VLLM);
    kvr_worker *sglang = reg_engine(ix, 2, KVR_ENGINE_SGLANG);
    kvr_str hex = {HEX64, 64};
    uint64_t first16 = kvr_media_id(hex), low64 = 0x2a;
    uint64_t tv[8], ts[8];
    padded_tokens(tv, kvr_pad_value(first16));
    padded_tokens(ts, kvr_pad_value(low64));
    rt_store(ix, vllm, 0, BS, tv, 8, false, 100);
    rt_store(ix, sglang, 0, BS, ts, 8, false, 200);
    uint32_t req[8] = {1, 2, P, P, P, P, 3, 4};
    kvr_mm_item item = {.start = 2, .end = 6, .has_mm_hash = true, .mm_hash = low64,
                        .has_mm_hash_vllm = true, .mm_hash_vllm = first16};
    kvr_query_request q = rt_request(req, 8, &item, 1);
    kvr_query_result res;
    kvr_query_result_init(&res);
    assert_int_equal(kvr_query(r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(rt_entry(&res, 1, 0)->gpu_blocks, 2);
    assert_int_equal(rt_entry(&res, 2, 0)->gpu_blocks, 2);
    assert_int_equal(rt_entry(&res, 1, 0)->engine, KVR_ENGINE_VLLM);
    assert_int_equal(res.n_hash_passes, 2);
    /* readings that agree (a 16-hex or numeric identity): one pass, and the
     * vLLM worker's store (first16) is not this identity */
    item.has_mm_hash_vllm = false;
    assert_int_equal(kvr_query(r, &q, &res), KVR_ROUTE_OK);
    assert_int_equal(res.n_hash_passes, 1);
    assert_int_equal(rt_entry(&res, 2, 0)->gpu_blocks, 2);
    assert_int_equal(rt_entry(&res, 1, 0)->gpu_blocks, 0);
    kvr_query_result_free(&res);

    /* /route's decision carries the chosen worker's engine */
    item.has_mm_hash_vllm = true;
    kvr_route_request rq;
    memset(&rq, 0, sizeof rq);
    rq.q = q;
    rq.has_worker_id = true;
    rq.worker_id = 1;
    kvr_route_decision d;
    assert_int_equal(kvr_route(r, &rq, &d), KVR_ROUTE_OK);
    assert_int_equal(d.engine, KVR_ENGINE_VLLM);
    assert_true(d.forward_mm_hashes);
    assert_int_equal(d.overlap_tokens, 2 * BS);
    kvr_route_decision_free(&d);
    rt_close(ix, r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_fleet_each_reading),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
