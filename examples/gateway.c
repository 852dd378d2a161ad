/* A minimal gateway embedding kvrouter (libkvrouter, no HTTP): it registers
 * two SGLang workers, applies one KV event batch from each, and routes a
 * request to the worker that holds more of its prefix.
 *
 * In a real gateway the batches arrive as the payload frame of each ZeroMQ
 * message from the engines' KV event publishers; here each engine's batch is
 * encoded in place with the library's encoder, the same bytes an engine
 * sends. Build against an installed kvrouter:
 *
 *   cc -std=c11 gateway.c $(pkg-config --cflags --libs kvrouter) -o gateway
 *
 * It prints what it did and exits 0, or names what failed and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <kvrouter/indexer.h>
#include <kvrouter/route.h>
#include <kvrouter/version.h>
#include <kvrouter/wire_encode.h>

#define MODEL "demo-model"
#define BLOCK 16
#define PROMPT_TOKENS 64

static uint32_t prompt[PROMPT_TOKENS];

static int fail(const char *what)
{
    fprintf(stderr, "gateway: %s\n", what);
    return 1;
}

/* What engine `worker` publishes after caching the first n_blocks blocks of
 * the prompt: one BlockStored event, engine hashes of its own choosing. */
static int engine_batch(uint64_t worker, uint32_t n_blocks, kvr_wbuf *out)
{
    uint64_t tokens[PROMPT_TOKENS], hashes[PROMPT_TOKENS / BLOCK];
    for (uint32_t i = 0; i < n_blocks * BLOCK; i++)
        tokens[i] = prompt[i];
    for (uint32_t b = 0; b < n_blocks; b++)
        hashes[b] = (worker << 32) | (b + 1);
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVR_EV_STORED;
    ev.tier = KVR_TIER_GPU;
    ev.block_hashes = hashes;
    ev.n_block_hashes = n_blocks;
    ev.token_ids = tokens;
    ev.n_token_ids = n_blocks * BLOCK;
    ev.block_size = BLOCK;
    kvr_wbuf_reset(out);
    return kvr_wire_encode_batch(out, KVR_WIRE_SGLANG, 1.0, &ev, 1, true, 0) ? 0 : -1;
}

/* The gateway's side of one ZeroMQ message: decode the payload, apply it. */
static int on_engine_message(kvr_indexer *ix, kvr_worker *w, const kvr_wbuf *payload,
                             kvr_batch *batch)
{
    kvr_batch_error err = kvr_batch_decode(batch, payload->data, payload->len);
    if (err != KVR_BATCH_OK) {
        fprintf(stderr, "gateway: batch dropped: %s\n", kvr_batch_error_name(err));
        return -1;
    }
    kvr_indexer_apply(ix, w, 0, batch);
    return 0;
}

int main(void)
{
    printf("kvrouter library %s (headers %s)\n", kvr_version(), KVR_VERSION_STRING);
    for (uint32_t i = 0; i < PROMPT_TOKENS; i++)
        prompt[i] = 1000 + 7 * i;

    kvr_indexer *ix = kvr_indexer_create();
    if (!ix)
        return fail("out of memory");
    kvr_worker *workers[2];
    for (int i = 0; i < 2; i++) {
        kvr_worker_settings s;
        memset(&s, 0, sizeof s);
        s.model_name = MODEL;
        s.worker_id = (uint64_t)(i + 1);
        s.block_size = BLOCK;
        s.mm_identity = KVR_MM_LEGACY;
        s.accepts_mm_hashes = -1;
        if (kvr_indexer_register(ix, &s, &workers[i]) != KVR_REG_CREATED)
            return fail("register failed");
    }

    /* worker 1 caches 1 block of the prompt, worker 2 caches 3 */
    kvr_wbuf payload;
    kvr_wbuf_init(&payload);
    kvr_batch batch;
    kvr_batch_init(&batch);
    const uint32_t cached_blocks[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        if (engine_batch((uint64_t)(i + 1), cached_blocks[i], &payload) != 0 ||
            on_engine_message(ix, workers[i], &payload, &batch) != 0)
            return fail("could not apply an engine batch");
    }
    kvr_batch_free(&batch);
    kvr_wbuf_free(&payload);

    kvr_router_config cfg;
    kvr_router_config_default(&cfg);
    kvr_router *router = kvr_router_create(ix, &cfg);
    if (!router)
        return fail("out of memory");
    kvr_route_request req;
    memset(&req, 0, sizeof req);
    req.q.model_name = MODEL;
    req.q.token_ids = prompt;
    req.q.n_tokens = PROMPT_TOKENS;
    req.request_id = "req-1";
    kvr_route_decision d;
    kvr_route_status st = kvr_route(router, &req, &d);
    if (st != KVR_ROUTE_OK) {
        fprintf(stderr, "gateway: route failed (HTTP %d): %s\n", kvr_route_status_http(st), d.error);
        return 1;
    }
    printf("routed req-1 to worker %llu rank %u: %u of %u prompt tokens cached (%s)\n",
           (unsigned long long)d.worker_id, d.dp_rank, d.overlap_tokens, PROMPT_TOKENS,
           kvr_route_reason_name(d.reason));
    kvr_route_decision_free(&d);

    /* the engine finished the request: its load leaves the worker */
    if (kvr_router_release(router, "req-1") != KVR_ROUTE_OK)
        return fail("release failed");
    kvr_router_destroy(router);
    kvr_indexer_destroy(ix);
    return 0;
}
