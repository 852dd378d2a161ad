/* `kvrouter bench --pipeline` (issue 3's figure): the bench stream as real
 * msgpack batches, one per request's events of one worker (what an SGLang
 * engine publishes after a request), applied through the library facade:
 * kvr_batch_decode -> kvr_indexer_apply (normalize -> convert/hash ->
 * index). Encoding happens before timing; the matches run through the facade
 * at the same points as in the plain replay, untimed, so the checksum must
 * equal the plain replay's. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/indexer.h"
#include "kvrouter/wire_encode.h"
#include "bench/bench.h"
#include "util/clock.h"
#include "util/grow.h"
#include "util/u64map.h"

#define PIPE_MODEL "bench"

typedef struct {
    size_t off, len;  /* batch bytes in the encoded buffer */
    size_t first, end; /* ops [first, end): one batch, or one match */
    kvr_worker *w;
    uint32_t rank;
    bool is_match;
} pipe_item;

typedef struct {
    kvr_indexer *ix;
    kvr_u64map slot_of; /* worker id -> index into workers */
    kvr_worker **workers;
    size_t n_workers, cap_workers;
    uint32_t block_size;
} pipe_reg;

static kvr_worker *worker_for(pipe_reg *g, uint64_t id)
{
    uint64_t slot;
    if (kvr_u64map_get(&g->slot_of, id, &slot))
        return g->workers[slot];
    if (kvr_grow((void **)&g->workers, &g->cap_workers, g->n_workers + 1, sizeof *g->workers,
                 1024) < 0)
        return NULL;
    kvr_worker_settings ws = {.model_name = PIPE_MODEL, .worker_id = id,
                              .block_size = g->block_size, .mm_identity = KVR_MM_LEGACY,
                              .accepts_mm_hashes = -1};
    kvr_worker *w = NULL;
    if (kvr_indexer_register(g->ix, &ws, &w) != KVR_REG_CREATED || !w ||
        kvr_u64map_put(&g->slot_of, id, g->n_workers) != 0)
        return NULL;
    g->workers[g->n_workers++] = w;
    return w;
}

/* Encodes ops [first, end) (one worker and rank, no match) as one batch. */
static int encode_batch(const kvr_bench_stream *s, size_t first, size_t end, kvr_wbuf *out,
                        kvr_raw_event **ev, size_t *ev_cap, uint64_t **tok, size_t *tok_cap)
{
    size_t n = end - first, nt = 0;
    for (size_t i = first; i < end; i++)
        if (s->ops[i].kind == KVR_BOP_STORE)
            nt += (size_t)s->ops[i].n * s->block_size;
    if (kvr_grow((void **)ev, ev_cap, n, sizeof **ev, 64) < 0 ||
        kvr_grow((void **)tok, tok_cap, nt, sizeof **tok, 1024) < 0)
        return -1;
    size_t t = 0;
    for (size_t i = first; i < end; i++) {
        const kvr_bench_op *op = &s->ops[i];
        kvr_raw_event *x = &(*ev)[i - first];
        memset(x, 0, sizeof *x);
        x->tier = (kvr_tier)op->tier;
        x->block_hashes = s->pool + op->off;
        x->n_block_hashes = op->n;
        if (op->kind == KVR_BOP_STORE) {
            size_t k = (size_t)op->n * s->block_size;
            for (size_t j = 0; j < k; j++)
                (*tok)[t + j] = s->tok[op->tok_off + j];
            x->type = KVR_EV_STORED;
            x->has_parent = op->has_parent;
            x->parent = op->parent;
            x->token_ids = *tok + t;
            x->n_token_ids = (uint32_t)k;
            x->block_size = s->block_size;
            t += k;
        } else {
            x->type = op->kind == KVR_BOP_REMOVE ? KVR_EV_REMOVED : KVR_EV_CLEARED;
        }
    }
    kvr_wire_encode_batch(out, KVR_WIRE_SGLANG, 0.0, *ev, n, true, s->ops[first].rank);
    return 0;
}

/* The timed part: decode one batch and apply it (its own function, so
 * profilers can select exactly it: valgrind --toggle-collect=ingest). */
__attribute__((noinline)) static bool ingest(kvr_indexer *ix, kvr_worker *w, uint32_t rank,
                                             kvr_batch *b, const char *payload, size_t len)
{
    if (kvr_batch_decode(b, payload, len) != KVR_BATCH_OK)
        return false;
    kvr_indexer_apply(ix, w, rank, b);
    return true;
}

static bool same_source(const kvr_bench_op *a, const kvr_bench_op *b)
{
    return a->worker == b->worker && a->rank == b->rank;
}

int kvr_bench_pipeline(const kvr_bench_stream *s, kvr_bench_pipeline_result *r)
{
    memset(r, 0, sizeof *r);
    if (!s->tok || s->block_size == 0)
        return -1; /* needs the stored blocks' tokens */
    pipe_reg g = {.ix = kvr_indexer_create(), .block_size = s->block_size};
    kvr_u64map_init(&g.slot_of);
    kvr_wbuf buf;
    kvr_wbuf_init(&buf);
    kvr_raw_event *ev = NULL;
    uint64_t *tok = NULL;
    size_t ev_cap = 0, tok_cap = 0, n_items = 0;
    pipe_item *items = malloc((s->n ? s->n : 1) * sizeof *items);
    kvr_match_ctx *ctx = kvr_match_ctx_create();
    kvr_batch b;
    kvr_batch_init(&b);
    int rc = -1;
    if (!g.ix || !items || !ctx)
        goto out;
    for (size_t i = 0; i < s->n;) {
        pipe_item *it = &items[n_items++];
        memset(it, 0, sizeof *it);
        it->first = i;
        if (s->ops[i].kind == KVR_BOP_MATCH) {
            it->is_match = true;
            it->end = ++i;
            continue;
        }
        size_t end = i + 1;
        while (end < s->n && s->ops[end].kind != KVR_BOP_MATCH &&
               same_source(&s->ops[end], &s->ops[i]) && end - i < KVR_WIRE_MAX_EVENTS)
            end++;
        it->end = end;
        it->rank = s->ops[i].rank;
        it->off = buf.len;
        if (!(it->w = worker_for(&g, s->ops[i].worker)) ||
            encode_batch(s, i, end, &buf, &ev, &ev_cap, &tok, &tok_cap) != 0)
            goto out;
        it->len = buf.len - it->off;
        r->batches++;
        r->bytes += it->len;
        for (size_t k = i; k < end; k++)
            r->blocks += s->ops[k].n;
        r->events += end - i;
        i = end;
    }
    for (size_t k = 0; k < n_items; k++) {
        const pipe_item *it = &items[k];
        if (it->is_match) {
            const kvr_bench_op *op = &s->ops[it->first];
            const kvr_match_entry *res;
            size_t m = kvr_indexer_match_hashes(g.ix, PIPE_MODEL, NULL, ctx, s->pool + op->off,
                                                op->n, &res);
            for (size_t j = 0; j < m; j++)
                r->checksum += res[j].gpu_blocks;
            r->matches++;
            continue;
        }
        double w0 = kvr_clock_seconds(CLOCK_MONOTONIC), c0 = kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
        if (!ingest(g.ix, it->w, it->rank, &b, buf.data + it->off, it->len))
            r->bad_batches++;
        r->cpu_seconds += kvr_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
        r->seconds += kvr_clock_seconds(CLOCK_MONOTONIC) - w0;
    }
    for (size_t k = 0; k < g.n_workers; k++) {
        kvr_worker_info info;
        kvr_worker_info_get(g.ix, g.workers[k], &info);
        for (uint32_t j = 0; j < info.n_ranks; j++) {
            const kvr_rank_info *ri = &info.ranks[j];
            r->events_dropped += ri->events_dropped;
            r->blocks_applied += ri->blocks_stored + ri->blocks_removed;
        }
    }
    rc = 0;
out:
    kvr_batch_free(&b);
    kvr_match_ctx_destroy(ctx);
    free(items);
    free(ev);
    free(tok);
    kvr_wbuf_free(&buf);
    free(g.workers);
    kvr_u64map_free(&g.slot_of);
    kvr_indexer_destroy(g.ix);
    return rc;
}
