/* /query and /query_by_hash reply body (SPEC §7, §7.1); see scores_json.h. */
#include "server/scores_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/grow.h"

bool kvr_scores_json_init(kvr_scores_json *b, uint32_t block_size)
{
    memset(b, 0, sizeof *b);
    b->block_size = block_size;
    b->root = json_object();
    b->scores = json_object();
    b->instances = json_object();
    if (!b->root || !b->scores || !b->instances ||
        json_object_set(b->root, "scores", b->scores) < 0 ||
        json_object_set_new(b->root, "frequencies", json_array()) < 0 ||
        json_object_set(b->root, "instances", b->instances) < 0) {
        b->failed = true;
        return false;
    }
    return true;
}

void kvr_scores_json_free(kvr_scores_json *b)
{
    json_decref(b->root);
    json_decref(b->scores);
    json_decref(b->instances);
    free(b->owners_at);
    memset(b, 0, sizeof *b);
}

/* Child object under key, created on first use. */
static json_t *child(json_t *parent, const char *key)
{
    json_t *o = json_object_get(parent, key);
    if (o || !parent)
        return o;
    o = json_object();
    if (!o || json_object_set_new(parent, key, o) < 0)
        return NULL;
    return o;
}

static int set_int(json_t *obj, const char *key, json_int_t v)
{
    return obj ? json_object_set_new(obj, key, json_integer(v)) : -1;
}

static int raise_max(json_t *obj, const char *key, json_int_t v)
{
    json_t *cur = json_object_get(obj, key);
    if (cur && json_integer_value(cur) >= v)
        return 0;
    return set_int(obj, key, v);
}

static bool count_owner(kvr_scores_json *b, uint32_t gpu_blocks)
{
    if (gpu_blocks == 0)
        return true;
    size_t old = b->cap;
    if (kvr_grow((void **)&b->owners_at, &b->cap, (size_t)gpu_blocks + 1, sizeof *b->owners_at,
                 64) < 0)
        return false;
    memset(b->owners_at + old, 0, (b->cap - old) * sizeof *b->owners_at);
    b->owners_at[gpu_blocks]++;
    return true;
}

void kvr_scores_json_add(kvr_scores_json *b, uint64_t worker_id, uint32_t dp_rank,
                         uint32_t gpu_blocks, uint32_t cpu_blocks, uint32_t disk_blocks)
{
    if (b->failed || disk_blocks == 0)
        return;
    char id[24], rank[12];
    snprintf(id, sizeof id, "%" PRIu64, worker_id);
    snprintf(rank, sizeof rank, "%" PRIu32, dp_rank);
    json_int_t gpu = (json_int_t)gpu_blocks * b->block_size;
    json_int_t cpu = (json_int_t)cpu_blocks * b->block_size;
    json_int_t disk = (json_int_t)disk_blocks * b->block_size;

    json_t *inst = child(b->instances, id);
    json_t *tiers = child(child(inst, "dp_tiers"), rank);
    if (set_int(child(b->scores, id), rank, gpu) < 0 ||
        set_int(child(inst, "dp"), rank, gpu) < 0 || set_int(tiers, "gpu", gpu) < 0 ||
        set_int(tiers, "cpu", cpu) < 0 || set_int(tiers, "disk", disk) < 0 ||
        raise_max(inst, "longest_matched", disk) < 0 || raise_max(inst, "gpu", gpu) < 0 ||
        raise_max(inst, "cpu", cpu) < 0 || raise_max(inst, "disk", disk) < 0 ||
        !count_owner(b, gpu_blocks))
        b->failed = true;
}

/* frequencies[i] = owners with a gpu prefix longer than i blocks. */
static json_t *frequencies(const kvr_scores_json *b)
{
    json_t *arr = json_array();
    size_t top = b->cap;
    while (top > 0 && b->owners_at[top - 1] == 0)
        top--;
    if (!arr || top == 0)
        return arr;
    json_int_t *f = malloc(top * sizeof *f);
    if (!f) {
        json_decref(arr);
        return NULL;
    }
    json_int_t longer = 0;
    for (size_t g = top - 1; g > 0; g--) {
        longer += b->owners_at[g];
        f[g - 1] = longer;
    }
    for (size_t i = 0; i + 1 < top; i++)
        if (json_array_append_new(arr, json_integer(f[i])) < 0) {
            json_decref(arr);
            arr = NULL;
            break;
        }
    free(f);
    return arr;
}

json_t *kvr_scores_json_finish(kvr_scores_json *b)
{
    json_t *freq = b->failed ? NULL : frequencies(b);
    json_t *root = NULL;
    if (freq && json_object_set_new(b->root, "frequencies", freq) == 0) {
        root = b->root;
        b->root = NULL;
    } else {
        json_decref(freq);
    }
    kvr_scores_json_free(b);
    return root;
}

json_t *kvr_scores_json_from_matches(const kvr_match_entry *m, size_t n, uint32_t block_size)
{
    kvr_scores_json b;
    if (!kvr_scores_json_init(&b, block_size)) {
        kvr_scores_json_free(&b);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        kvr_scores_json_add(&b, m[i].worker_id, m[i].dp_rank, m[i].gpu_blocks, m[i].cpu_blocks,
                            m[i].disk_blocks);
    return kvr_scores_json_finish(&b);
}
