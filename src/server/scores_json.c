/* /query and /query_by_hash reply body (SPEC §7); see scores_json.h. */
#include "server/scores_json.h"

#include <inttypes.h>
#include <stdio.h>

json_t *kvr_scores_json_new(void)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    if (json_object_set_new(root, "scores", json_object()) < 0 ||
        json_object_set_new(root, "instances", json_object()) < 0) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Child object under key, created on first use. */
static json_t *child(json_t *parent, const char *key)
{
    json_t *o = json_object_get(parent, key);
    if (o)
        return o;
    o = json_object();
    if (!o || json_object_set_new(parent, key, o) < 0)
        return NULL;
    return o;
}

static int raise_max(json_t *obj, const char *key, json_int_t v)
{
    json_t *cur = json_object_get(obj, key);
    if (cur && json_integer_value(cur) >= v)
        return 0;
    return json_object_set_new(obj, key, json_integer(v));
}

int kvr_scores_json_add(json_t *root, uint64_t worker_id, uint32_t dp_rank, uint32_t gpu_blocks,
                        uint32_t cpu_blocks, uint32_t disk_blocks, uint32_t block_size)
{
    if (disk_blocks == 0)
        return 0;
    char id[24], rank[12];
    snprintf(id, sizeof id, "%" PRIu64, worker_id);
    snprintf(rank, sizeof rank, "%" PRIu32, dp_rank);
    json_int_t gpu = (json_int_t)gpu_blocks * block_size;
    json_int_t cpu = (json_int_t)cpu_blocks * block_size;
    json_int_t disk = (json_int_t)disk_blocks * block_size;

    json_t *scores = child(child(root, "scores"), id);
    json_t *inst = child(child(root, "instances"), id);
    json_t *dp = inst ? child(child(inst, "dp"), rank) : NULL;
    if (!scores || !dp)
        return -1;
    if (json_object_set_new(scores, rank, json_integer(gpu)) < 0 ||
        json_object_set_new(dp, "gpu", json_integer(gpu)) < 0 ||
        json_object_set_new(dp, "cpu", json_integer(cpu)) < 0 ||
        json_object_set_new(dp, "disk", json_integer(disk)) < 0)
        return -1;
    if (raise_max(inst, "longest_matched", disk) < 0 || raise_max(inst, "gpu", gpu) < 0 ||
        raise_max(inst, "cpu", cpu) < 0 || raise_max(inst, "disk", disk) < 0)
        return -1;
    return 0;
}

json_t *kvr_scores_json(const kvr_match_entry *m, size_t n, uint32_t block_size)
{
    json_t *root = kvr_scores_json_new();
    for (size_t i = 0; root && i < n; i++)
        if (kvr_scores_json_add(root, m[i].worker_id, m[i].dp_rank, m[i].gpu_blocks,
                                m[i].cpu_blocks, m[i].disk_blocks, block_size) < 0) {
            json_decref(root);
            root = NULL;
        }
    return root;
}
