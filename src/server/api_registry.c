/* POST /register and POST /unregister: the worker registry. Every change
 * runs on the ingest thread (kvr_source_run) so a worker's handle is never
 * freed or reset under a batch being applied. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/json_util.h"
#include "server/server_internal.h"

typedef struct {
    kvr_worker_settings s;
    uint64_t rank;
    const char *endpoint, *replay_endpoint, *topic;
    /* results */
    kvr_reg_result res;
    int listen_rc;
    const char *bad_field; /* endpoint that cannot be connected: nothing changed */
    kvr_worker_info info;
} reg_op;

static void do_register(kvr_source *src, void *arg)
{
    reg_op *op = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    kvr_worker *w = NULL;
    if (!kvr_source_endpoint_valid(src, op->endpoint)) {
        op->bad_field = "endpoint";
        return;
    }
    if (op->replay_endpoint[0] && !kvr_source_endpoint_valid(src, op->replay_endpoint)) {
        op->bad_field = "replay_endpoint";
        return;
    }
    kvr_worker *existed = kvr_indexer_find(ix, op->s.model_name, op->s.routing_group,
                                           op->s.worker_id);
    op->res = kvr_indexer_register(ix, &op->s, &w);
    if (!w)
        return;
    if (op->res == KVR_REG_RESET)
        kvr_source_reset_cursors(src, w);
    op->listen_rc = kvr_source_listen(src, w, op->s.worker_id, (uint32_t)op->rank, op->endpoint,
                                      op->replay_endpoint, op->topic);
    if (op->listen_rc < 0 && !existed && kvr_source_count(src, w) == 0)
        kvr_indexer_unregister(ix, w); /* nothing half-registered stays behind */
    else
        kvr_worker_info_get(ix, w, &op->info);
}

void kvr_api_register(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    reg_op op;
    memset(&op, 0, sizeof op);
    kvr_json_err e = {{0}};
    uint64_t bs = 0;
    const char *mm = NULL;
    bool accepts = false, accepts_set = false, eagle = false;
    op.s.routing_group = KVR_DEFAULT_ROUTING_GROUP;
    op.s.accepts_mm_hashes = -1;
    op.topic = "";
    op.replay_endpoint = "";
    if (!kvr_json_get_u64(body, "instance_id", true, &op.s.worker_id, &e) ||
        !kvr_json_get_str(body, "endpoint", true, true, KVR_ENDPOINT_MAX, &op.endpoint, &e) ||
        !kvr_json_get_str(body, "model_name", true, true, KVR_NAME_MAX, &op.s.model_name, &e) ||
        !kvr_json_get_uint(body, "block_size", true, 1, KVR_MAX_BLOCK_SIZE, &bs, &e) ||
        !kvr_json_get_str(body, "routing_group", false, true, KVR_NAME_MAX, &op.s.routing_group,
                          &e) ||
        !kvr_json_get_uint(body, "dp_rank", false, 0, KVR_MAX_DP_RANKS - 1, &op.rank, &e) ||
        !kvr_json_get_str(body, "replay_endpoint", false, false, KVR_ENDPOINT_MAX,
                          &op.replay_endpoint, &e) ||
        !kvr_json_get_str(body, "topic", false, false, KVR_NAME_MAX, &op.topic, &e) ||
        !kvr_json_get_str(body, "lora_name", false, false, KVR_NAME_MAX, &op.s.lora_name, &e) ||
        !kvr_json_get_str(body, "mm_identity", false, false, 64, &mm, &e) ||
        !kvr_json_get_bool(body, "accepts_mm_hashes", &accepts_set, &accepts, &e) ||
        !kvr_json_get_bool(body, "is_eagle", NULL, &eagle, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    op.s.block_size = (uint32_t)bs;
    op.s.is_eagle = eagle;
    op.s.accepts_mm_hashes = accepts_set ? (accepts ? 1 : 0) : -1;
    op.s.mm_identity = KVR_MM_LEGACY;
    if (mm && mm[0]) {
        int m = kvr_mm_identity_from_name(mm);
        if (m < 0) {
            kvr_api_error(reply, 400,
                          "field 'mm_identity' must be \"legacy\", \"engine_wide\" or \"auto\"");
            return;
        }
        op.s.mm_identity = (kvr_mm_identity)m;
    }
    if (strncmp(op.endpoint, "tcp://", 6) != 0 && strncmp(op.endpoint, "ipc://", 6) != 0 &&
        strncmp(op.endpoint, "inproc://", 9) != 0) {
        kvr_api_error(reply, 400, "field 'endpoint' must be a ZeroMQ endpoint (tcp://host:port)");
        return;
    }
    if (kvr_source_run(srv->src, do_register, &op) != 0) {
        kvr_api_error(reply, 503, "ingest thread is not running");
        return;
    }
    if (op.bad_field) {
        kvr_api_error(reply, 400, "field '%s': cannot connect a ZeroMQ socket to '%s'",
                      op.bad_field,
                      strcmp(op.bad_field, "endpoint") == 0 ? op.endpoint : op.replay_endpoint);
        return;
    }
    switch (op.res) {
    case KVR_REG_BLOCK_SIZE_CONFLICT:
        kvr_api_error(reply, 409,
                      "field 'block_size': %" PRIu64 " conflicts with block size %u already "
                      "registered for model '%s' group '%s'",
                      bs, kvr_indexer_block_size(srv->ix, op.s.model_name, op.s.routing_group),
                      op.s.model_name, op.s.routing_group);
        return;
    case KVR_REG_INVALID:
        /* Every field the facade checks was validated above with its own
         * message, so what is left is an allocation failure. */
        kvr_api_error(reply, 500, "cannot register the worker: out of memory");
        return;
    default:
        break;
    }
    if (op.listen_rc < 0) {
        kvr_api_error(reply, 400, "field 'endpoint' (or 'replay_endpoint'/'topic'): cannot "
                                  "connect a ZeroMQ socket to '%s'", op.endpoint);
        return;
    }
    bool created = op.res == KVR_REG_CREATED || op.listen_rc == 1;
    const char *status = created                     ? "created"
                         : op.res == KVR_REG_RESET   ? "reset"
                         : op.res == KVR_REG_UPDATED ? "updated"
                         : op.listen_rc == 2         ? "listener_restarted"
                                                     : "unchanged";
    reply->status = created ? 201 : 200;
    reply->body = json_pack(
        "{s:s,s:o,s:I,s:s,s:s,s:I,s:s,s:b,s:b,s:b}", "status", status, "instance_id",
        kvr_json_u64_num(op.s.worker_id), "dp_rank", (json_int_t)op.rank, "model_name",
        op.s.model_name, "routing_group", op.s.routing_group, "block_size", (json_int_t)bs,
        "mm_identity", kvr_mm_identity_name(op.info.mm_identity), "accepts_mm_hashes",
        op.info.accepts_mm_hashes, "is_eagle", op.info.is_eagle, "reset",
        op.res == KVR_REG_RESET);
    if (op.res == KVR_REG_RESET)
        json_object_set_new(reply->body, "message",
                            json_string("settings changed (block size, mm_identity, eagle or "
                                        "lora): the worker's indexed state and normalizers were "
                                        "cleared"));
    if (op.listen_rc == 2)
        json_object_set_new(reply->body, "listener_restarted", json_true());
}

typedef struct {
    const char *model, *group;
    uint64_t id;
    bool has_rank;
    uint64_t rank;
    int status; /* 200 or 404 */
    size_t stopped;
} unreg_op;

static void do_unregister(kvr_source *src, void *arg)
{
    unreg_op *op = arg;
    kvr_indexer *ix = kvr_source_indexer(src);
    kvr_worker *w = kvr_indexer_find(ix, op->model, op->group, op->id);
    op->status = 404;
    if (!w)
        return;
    if (op->has_rank) {
        op->stopped = kvr_source_unlisten(src, w, (uint32_t)op->rank);
        bool had_state = kvr_indexer_unregister_rank(ix, w, (uint32_t)op->rank);
        if (op->stopped == 0 && !had_state)
            return;
        if (kvr_source_count(src, w) == 0)
            kvr_indexer_unregister(ix, w);
    } else {
        op->stopped = kvr_source_unlisten(src, w, UINT32_MAX);
        kvr_indexer_unregister(ix, w);
    }
    op->status = 200;
}

void kvr_api_unregister(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    unreg_op op;
    memset(&op, 0, sizeof op);
    op.group = KVR_DEFAULT_ROUTING_GROUP;
    kvr_json_err e = {{0}};
    if (!kvr_json_get_u64(body, "instance_id", true, &op.id, &e) ||
        !kvr_json_get_str(body, "model_name", true, true, KVR_NAME_MAX, &op.model, &e) ||
        !kvr_json_get_str(body, "routing_group", false, true, KVR_NAME_MAX, &op.group, &e) ||
        !kvr_json_get_uint(body, "dp_rank", false, 0, KVR_MAX_DP_RANKS - 1, &op.rank, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    json_t *r = json_object_get(body, "dp_rank");
    op.has_rank = r && !json_is_null(r);
    if (kvr_source_run(srv->src, do_unregister, &op) != 0) {
        kvr_api_error(reply, 503, "ingest thread is not running");
        return;
    }
    if (op.status == 404) {
        if (op.has_rank)
            kvr_api_error(reply, 404,
                          "field 'dp_rank': rank %" PRIu64 " of instance_id %" PRIu64
                          " is not registered for model '%s' group '%s'",
                          op.rank, op.id, op.model, op.group);
        else
            kvr_api_error(reply, 404,
                          "field 'instance_id': %" PRIu64
                          " is not registered for model '%s' group '%s'",
                          op.id, op.model, op.group);
        return;
    }
    reply->status = 200;
    reply->body = json_pack("{s:s,s:o,s:I}", "status", "unregistered", "instance_id",
                            kvr_json_u64_num(op.id), "listeners_stopped",
                            (json_int_t)op.stopped);
}
