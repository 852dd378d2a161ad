/* /query and /query_by_hash reply body (SPEC §7, §7.1); see scores_json.h. */
#include "server/scores_json.h"

#include <stdlib.h>
#include <string.h>

#include "server/sbuf.h"
#include "util/grow.h"

bool kvr_scores_json_init(kvr_scores_json *b, uint32_t block_size)
{
    memset(b, 0, sizeof *b);
    b->block_size = block_size;
    return true;
}

void kvr_scores_json_free(kvr_scores_json *b)
{
    free(b->e);
    memset(b, 0, sizeof *b);
}

void kvr_scores_json_add(kvr_scores_json *b, uint64_t worker_id, uint32_t dp_rank,
                         uint32_t gpu_blocks, uint32_t cpu_blocks, uint32_t disk_blocks)
{
    if (b->failed || disk_blocks == 0)
        return;
    if (kvr_grow((void **)&b->e, &b->cap, b->n + 1, sizeof *b->e, 16) < 0) {
        b->failed = true;
        return;
    }
    b->e[b->n++] = (kvr_scores_entry){worker_id, dp_rank, gpu_blocks, cpu_blocks, disk_blocks};
}

static int by_worker_rank(const void *x, const void *y)
{
    const kvr_scores_entry *a = x, *b = y;
    if (a->worker_id != b->worker_id)
        return a->worker_id < b->worker_id ? -1 : 1;
    return (a->dp_rank > b->dp_rank) - (a->dp_rank < b->dp_rank);
}

/* Entries in (worker, rank) order; results usually come that way. */
static void sort_entries(kvr_scores_json *b)
{
    for (size_t i = 1; i < b->n; i++)
        if (by_worker_rank(&b->e[i - 1], &b->e[i]) > 0) {
            qsort(b->e, b->n, sizeof *b->e, by_worker_rank);
            return;
        }
}

/* Writes "key":tokens. */
static void member(kvr_sbuf *o, const char *key, size_t key_len, uint64_t tokens)
{
    kvr_sbuf_append(o, key, key_len);
    kvr_sbuf_u64(o, tokens);
}

#define MEMBER(o, lit, v) member((o), "" lit, sizeof(lit) - 1, (v))

static void rank_key(kvr_sbuf *o, bool first, uint32_t rank)
{
    kvr_sbuf_append(o, first ? "\"" : ",\"", first ? 1 : 2);
    kvr_sbuf_u64(o, rank);
    KVR_SBUF_LIT(o, "\":");
}

static void worker_key(kvr_sbuf *o, bool first, uint64_t worker_id)
{
    kvr_sbuf_append(o, first ? "\"" : ",\"", first ? 1 : 2);
    kvr_sbuf_u64(o, worker_id);
    KVR_SBUF_LIT(o, "\":{");
}

/* "scores": {"<id>": {"<rank>": gpu_tokens}} */
static void write_scores(kvr_sbuf *o, const kvr_scores_json *b)
{
    uint64_t bs = b->block_size;
    KVR_SBUF_LIT(o, "{\"scores\":{");
    for (size_t i = 0, j; i < b->n; i = j) {
        worker_key(o, i == 0, b->e[i].worker_id);
        for (j = i; j < b->n && b->e[j].worker_id == b->e[i].worker_id; j++) {
            rank_key(o, j == i, b->e[j].dp_rank);
            kvr_sbuf_u64(o, b->e[j].gpu * bs);
        }
        KVR_SBUF_LIT(o, "}");
    }
    KVR_SBUF_LIT(o, "}");
}

/* frequencies[i] = owners with a gpu prefix longer than i blocks: counts
 * of prefixes ending at each length, summed from the longest down. */
static bool write_frequencies(kvr_sbuf *o, const kvr_scores_json *b)
{
    uint32_t top = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->e[i].gpu > top)
            top = b->e[i].gpu;
    KVR_SBUF_LIT(o, ",\"frequencies\":[");
    if (top > 0) {
        uint64_t *ending = calloc((size_t)top + 1, sizeof *ending);
        if (!ending)
            return false;
        for (size_t i = 0; i < b->n; i++)
            ending[b->e[i].gpu]++;
        for (uint32_t g = top; g > 1; g--)
            ending[g - 1] += ending[g]; /* now: owners with a prefix of >= g-1 blocks */
        for (uint32_t i = 1; i <= top; i++) {
            if (i > 1)
                KVR_SBUF_LIT(o, ",");
            kvr_sbuf_u64(o, ending[i]);
        }
        free(ending);
    }
    KVR_SBUF_LIT(o, "]");
    return true;
}

/* "instances": {"<id>": {"dp_tiers": {...}, "dp": {...}, "longest_matched",
 * "gpu", "cpu", "disk"}}: per instance the best over its ranks. */
static void write_instances(kvr_sbuf *o, const kvr_scores_json *b)
{
    uint64_t bs = b->block_size;
    KVR_SBUF_LIT(o, ",\"instances\":{");
    for (size_t i = 0, j; i < b->n; i = j) {
        uint64_t w = b->e[i].worker_id;
        uint32_t gpu = 0, cpu = 0, disk = 0;
        worker_key(o, i == 0, w);
        KVR_SBUF_LIT(o, "\"dp_tiers\":{");
        for (j = i; j < b->n && b->e[j].worker_id == w; j++) {
            const kvr_scores_entry *e = &b->e[j];
            rank_key(o, j == i, e->dp_rank);
            MEMBER(o, "{\"gpu\":", e->gpu * bs);
            MEMBER(o, ",\"cpu\":", e->cpu * bs);
            MEMBER(o, ",\"disk\":", e->disk * bs);
            KVR_SBUF_LIT(o, "}");
            gpu = e->gpu > gpu ? e->gpu : gpu;
            cpu = e->cpu > cpu ? e->cpu : cpu;
            disk = e->disk > disk ? e->disk : disk;
        }
        KVR_SBUF_LIT(o, "},\"dp\":{");
        for (size_t k = i; k < j; k++) {
            rank_key(o, k == i, b->e[k].dp_rank);
            kvr_sbuf_u64(o, b->e[k].gpu * bs);
        }
        MEMBER(o, "},\"longest_matched\":", disk * bs);
        MEMBER(o, ",\"gpu\":", gpu * bs);
        MEMBER(o, ",\"cpu\":", cpu * bs);
        MEMBER(o, ",\"disk\":", disk * bs);
        KVR_SBUF_LIT(o, "}");
    }
    KVR_SBUF_LIT(o, "}}");
}

char *kvr_scores_json_finish(kvr_scores_json *b, size_t *len)
{
    kvr_sbuf o = {0};
    if (b->failed)
        o.failed = true;
    sort_entries(b);
    write_scores(&o, b);
    if (!write_frequencies(&o, b))
        o.failed = true;
    write_instances(&o, b);
    kvr_scores_json_free(b);
    return kvr_sbuf_take(&o, len);
}

char *kvr_scores_json_from_matches(const kvr_match_entry *m, size_t n, uint32_t block_size,
                                   size_t *len)
{
    kvr_scores_json b;
    kvr_scores_json_init(&b, block_size);
    for (size_t i = 0; i < n; i++)
        kvr_scores_json_add(&b, m[i].worker_id, m[i].dp_rank, m[i].gpu_blocks, m[i].cpu_blocks,
                            m[i].disk_blocks);
    return kvr_scores_json_finish(&b, len);
}
