/* libFuzzer target: one ZeroMQ payload through everything an engine's bytes
 * reach — wire decode, then normalize, convert and index for four workers of
 * one group (legacy; engine_wide with an exclusion capacity of 4, so the
 * fallback is reached; auto + Eagle; vLLM with image_token_id 7, a token the
 * fuzzer writes often, so media runs are common), a match, a dump loaded
 * into a second index, and the unregistrations. Beyond "no crash and no
 * sanitizer report" it checks what must hold whatever the bytes:
 * - a batch that decodes hands out exactly n_events events;
 * - a match reports no more blocks than it was asked about, gpu <= cpu <= disk;
 * - the dump loads back into an empty index record by record, holds what
 *   was dumped and never more than the index, and gives the same matches for
 *   every dumped root chain;
 * - once every worker is unregistered the index holds no ownership. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/hash.h"
#include "kvrouter/indexer.h"
#include "kvrouter/log.h"

#define B 4u
#define N_WORKERS 4

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_wire: invariant broken: %s\n", what);
        abort();
    }
}

static kvr_worker *reg(kvr_indexer *ix, uint64_t id, kvr_mm_identity mode, bool eagle,
                       uint32_t capacity, kvr_engine engine)
{
    kvr_worker_settings s;
    memset(&s, 0, sizeof s);
    s.model_name = "m";
    s.worker_id = id;
    s.block_size = B;
    s.mm_identity = mode;
    s.accepts_mm_hashes = -1;
    s.is_eagle = eagle;
    s.mm_capacity = capacity;
    s.engine = engine;
    s.has_image_token_id = engine == KVR_ENGINE_VLLM;
    s.image_token_id = 7;
    kvr_worker *w = NULL;
    check(kvr_indexer_register(ix, &s, &w) == KVR_REG_CREATED && w, "registration");
    return w;
}

typedef struct {
    kvr_indexer *copy;
    uint64_t ownerships;
    kvr_match_ctx *ctx_a, *ctx_b;
    kvr_indexer *orig;
    uint64_t *roots; /* the dumped root chains' local hashes, back to back */
    size_t *root_len, n_roots, n_root_hashes;
} dump_ctx;

static void same_matches(dump_ctx *d, const uint64_t *local, size_t n)
{
    const kvr_match_entry *a, *b;
    size_t na = kvr_indexer_match_hashes(d->orig, "m", NULL, d->ctx_a, local, n, &a);
    size_t nb = kvr_indexer_match_hashes(d->copy, "m", NULL, d->ctx_b, local, n, &b);
    check(na == nb, "a loaded dump matches as many owners");
    for (size_t i = 0; i < na; i++) {
        bool found = false;
        for (size_t j = 0; j < nb && !found; j++)
            found = a[i].worker_id == b[j].worker_id && a[i].dp_rank == b[j].dp_rank &&
                    a[i].gpu_blocks == b[j].gpu_blocks && a[i].cpu_blocks == b[j].cpu_blocks &&
                    a[i].disk_blocks == b[j].disk_blocks;
        check(found, "a loaded dump matches the same blocks");
    }
}

/* Loads each record into the copy and keeps the root chains for matching
 * afterwards (not from inside the dump, which holds the index). */
static void on_dump(void *user, const char *model, const char *group, const kvr_dump_store *ev)
{
    dump_ctx *d = user;
    check(ev->n > 0, "a dumped store names blocks");
    check(kvr_indexer_load_store(d->copy, model, group, ev) == KVR_DROP_NONE,
          "a dump loads back record by record");
    d->ownerships += ev->n;
    if (ev->has_parent || d->n_roots == 64)
        return;
    d->roots = realloc(d->roots, (d->n_root_hashes + ev->n) * sizeof *d->roots);
    d->root_len = realloc(d->root_len, (d->n_roots + 1) * sizeof *d->root_len);
    memcpy(d->roots + d->n_root_hashes, ev->local_hashes, ev->n * sizeof *d->roots);
    d->n_root_hashes += ev->n;
    d->root_len[d->n_roots++] = ev->n;
}

static void match_prefix(kvr_indexer *ix, kvr_match_ctx *ctx, const uint8_t *data, size_t size)
{
    uint32_t tokens[64];
    size_t n = size / 4 < 64 ? size / 4 : 64;
    memcpy(tokens, data, n * 4);
    const kvr_match_entry *e;
    size_t k = kvr_indexer_match_tokens(ix, "m", NULL, ctx, tokens, n, false, KVR_HASH_SEED, &e);
    for (size_t i = 0; i < k; i++)
        check(e[i].gpu_blocks <= e[i].cpu_blocks && e[i].cpu_blocks <= e[i].disk_blocks &&
                  e[i].disk_blocks <= n / B,
              "match reach within the request, gpu <= cpu <= disk");
}

/* Warnings (wide ids on a legacy worker, fallback, size mismatches) are
 * the point of many inputs: counted by the library, not printed here. */
static void quiet(void *user, const kvr_log_record *rec)
{
    (void)user;
    (void)rec;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    kvr_log_set_sink(quiet, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvr_batch b;
    kvr_batch_init(&b);
    if (kvr_batch_decode(&b, data, size) != KVR_BATCH_OK) {
        check(kvr_batch_next(&b) == NULL && b.n_events == 0, "a bad batch hands out nothing");
        kvr_batch_free(&b);
        return 0;
    }
    uint32_t seen = 0;
    while (kvr_batch_next(&b))
        seen++;
    check(seen == b.n_events, "a good batch hands out n_events events");

    kvr_indexer *ix = kvr_indexer_create();
    kvr_worker *w[N_WORKERS] = {
        reg(ix, 1, KVR_MM_LEGACY, false, 0, KVR_ENGINE_SGLANG),
        reg(ix, 2, KVR_MM_ENGINE_WIDE, false, 4, KVR_ENGINE_SGLANG),
        reg(ix, 3, KVR_MM_AUTO, true, 0, KVR_ENGINE_SGLANG),
        reg(ix, 4, KVR_MM_LEGACY, false, 0, KVR_ENGINE_VLLM),
    };
    for (int i = 0; i < N_WORKERS; i++) {
        kvr_batch_rewind(&b);
        kvr_indexer_apply(ix, w[i], 0, &b);
    }
    kvr_batch_rewind(&b); /* again: removals and exclusions meet their stores */
    kvr_indexer_apply(ix, w[1], 0, &b);

    kvr_match_ctx *ctx = kvr_match_ctx_create(), *ctx2 = kvr_match_ctx_create();
    match_prefix(ix, ctx, data, size);

    dump_ctx d = {.copy = kvr_indexer_create(), .ctx_a = ctx, .ctx_b = ctx2, .orig = ix};
    kvr_indexer_dump(ix, on_dump, &d);
    kvr_index *orig = kvr_indexer_index(ix, "m", NULL), *copy = kvr_indexer_index(d.copy, "m", NULL);
    kvr_index_stats so, sc;
    kvr_index_stats_get(orig, &so);
    if (copy) {
        kvr_index_stats_get(copy, &sc);
        /* Ownerships whose owner lost the block above them (an engine may
         * evict a parent before its child) reach no match, and the dump,
         * which promises the same matches, leaves them out. */
        check(sc.ownerships == d.ownerships && sc.ownerships <= so.ownerships,
              "a loaded dump holds what was dumped, never more than the index");
    } else {
        check(so.ownerships == 0, "nothing dumped means nothing held");
    }
    for (size_t i = 0, at = 0; i < d.n_roots; at += d.root_len[i++])
        same_matches(&d, d.roots + at, d.root_len[i]);
    free(d.roots);
    free(d.root_len);

    for (int i = 0; i < N_WORKERS; i++)
        kvr_indexer_unregister(ix, w[i]);
    kvr_index_stats_get(orig, &so);
    check(so.ownerships == 0, "no ownership survives its workers");

    kvr_match_ctx_destroy(ctx);
    kvr_match_ctx_destroy(ctx2);
    kvr_indexer_destroy(d.copy);
    kvr_indexer_destroy(ix);
    kvr_batch_free(&b);
    return 0;
}
