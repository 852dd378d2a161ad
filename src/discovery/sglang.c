/* SGLang engines: the validator of GET /server_info and GET /model_info
 * (older builds: /get_server_info, /get_model_info) and what they mean.
 *
 * /server_info is the engine's ServerArgs as a flat object plus, in builds
 * that describe their publisher, `kv_events` (SGLang's
 * describe_kv_events_publisher: {publisher, endpoint_host, endpoint_port_base,
 * topic, block_size = page_size x dcp_size, dp_size}, or null when it
 * publishes nothing). Rank r publishes on endpoint_port_base + r, as
 * SGLang's ZmqEventPublisher.offset_endpoint_port binds it. A wildcard host
 * ("*", "0.0.0.0", "::") is the engine's own host. The raw
 * `kv_events_config` (a JSON string: publisher, endpoint, replay_endpoint,
 * topic, buffer_steps, ...) gives the replay ROUTER, offset by rank the same
 * way; in builds without `kv_events` it is the only description, read the
 * same way the publisher reads it. `served_model_name` (or `model_path`)
 * names the model, `speculative_algorithm` EAGLE / EAGLE3 / NEXTN /
 * FROZEN_KV_MTP means Eagle bigram windows, `enable_hierarchical_cache`
 * HiCache tiers (host/disk events).
 *
 * /model_info gives `model_type`: Kimi models (kimi_k25, ...) get
 * mm_identity "auto" (whether a build has sglang#43043 is advertised
 * nowhere: the stream tells) and accepts_mm_hashes false (such a build fails
 * a request carrying caller hashes; omitting them never fails one). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "discovery/discovery_internal.h"

#define KV_EVENTS_CONFIG_MAX 8192

bool kvr_sglang_is_kimi(const char *model_type)
{
    return strncmp(model_type, "kimi_k", 6) == 0;
}

static bool eagle_algorithm(const char *a)
{
    static const char *const eagle[] = {"EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP"};
    for (size_t i = 0; i < sizeof eagle / sizeof eagle[0]; i++)
        if (strcasecmp(a, eagle[i]) == 0)
            return true;
    return false;
}

/* The publisher as SGLang's describe_kv_events_publisher sees it. */
typedef struct {
    char host[256];
    unsigned port;
    char topic[KVR_NAME_MAX];
    uint32_t block_size;
    uint32_t dp_size;
} publisher;

/* kv_events_config: NULL cfg when unset; -1 for a value that is not the
 * JSON object SGLang's KVEventsConfig parses. */
static int config_object(const json_t *info, json_t **cfg, char *err, size_t cap)
{
    *cfg = NULL;
    char text[KV_EVENTS_CONFIG_MAX];
    if (kvr_edge_str(info, "kv_events_config", "/server_info", text, sizeof text, err, cap) != 0)
        return -1;
    if (!text[0])
        return 0;
    *cfg = kvr_edge_json(text, strlen(text), "/server_info: kv_events_config", err, cap);
    if (*cfg && !json_is_object(*cfg)) {
        json_decref(*cfg);
        *cfg = NULL;
        snprintf(err, cap, "/server_info: kv_events_config must be a JSON object");
    }
    return *cfg ? 0 : -1;
}

/* The `kv_events` descriptor; pub->port 0 when it says "nothing". */
static int read_descriptor(const json_t *kv, publisher *pub, kvr_reading *r, char *err,
                           size_t cap)
{
    const char *doc = "/server_info: kv_events";
    char publisher_name[32];
    long long port = 0, bs = 0, dp = 1;
    bool has_port, has_bs, has_dp;
    if (!json_is_object(kv)) {
        snprintf(err, cap, "%s must be an object or null", doc);
        return -1;
    }
    if (kvr_edge_str(kv, "publisher", doc, publisher_name, sizeof publisher_name, err, cap) ||
        kvr_edge_str(kv, "endpoint_host", doc, pub->host, sizeof pub->host, err, cap) ||
        kvr_edge_int(kv, "endpoint_port_base", doc, 1, 65535, &port, &has_port, err, cap) ||
        kvr_edge_str(kv, "topic", doc, pub->topic, sizeof pub->topic, err, cap) ||
        kvr_edge_int(kv, "block_size", doc, 1, KVR_MAX_BLOCK_SIZE, &bs, &has_bs, err, cap) ||
        kvr_edge_int(kv, "dp_size", doc, 1, KVR_DISCOVERY_MAX_RANKS, &dp, &has_dp, err, cap))
        return -1;
    if (strcmp(publisher_name, "zmq") != 0) {
        snprintf(r->info.silent_reason, sizeof r->info.silent_reason,
                 "kv_events.publisher is '%s', not zmq", publisher_name);
        return 0;
    }
    if (!has_port || !has_bs) {
        snprintf(err, cap, "%s: endpoint_port_base and block_size are required", doc);
        return -1;
    }
    if (!kvr_edge_host_is_wildcard(pub->host) && !kvr_edge_host_ok(pub->host)) {
        snprintf(err, cap, "%s: endpoint_host '%s' is not a host name or address", doc,
                 pub->host);
        return -1;
    }
    pub->port = (unsigned)port;
    pub->block_size = (uint32_t)bs;
    pub->dp_size = has_dp ? (uint32_t)dp : 1;
    return 0;
}

/* Builds without `kv_events`: the publisher from kv_events_config, as
 * SGLang starts it (page_size x dcp_size, dp_size of the server args). */
static int read_config_publisher(const json_t *info, const json_t *cfg, publisher *pub,
                                 kvr_reading *r, char *err, size_t cap)
{
    const char *doc = "/server_info: kv_events_config";
    char name[32] = "", endpoint[KVR_ENDPOINT_MAX] = "";
    if (!cfg) {
        snprintf(r->info.silent_reason, sizeof r->info.silent_reason,
                 "no kv_events and no kv_events_config: the engine publishes no KV events");
        return 0;
    }
    if (kvr_edge_str(cfg, "publisher", doc, name, sizeof name, err, cap) ||
        kvr_edge_str(cfg, "endpoint", doc, endpoint, sizeof endpoint, err, cap) ||
        kvr_edge_str(cfg, "topic", doc, pub->topic, sizeof pub->topic, err, cap))
        return -1;
    if (strcmp(name, "zmq") != 0) {
        snprintf(r->info.silent_reason, sizeof r->info.silent_reason,
                 "kv_events_config.publisher is '%s', not zmq", name[0] ? name : "null");
        return 0;
    }
    if (!endpoint[0])
        snprintf(endpoint, sizeof endpoint, "tcp://*:5557"); /* SGLang's default */
    if (!kvr_edge_split_tcp(endpoint, pub->host, sizeof pub->host, &pub->port)) {
        snprintf(r->info.silent_reason, sizeof r->info.silent_reason,
                 "kv_events_config.endpoint '%.100s' is not tcp://HOST:PORT", endpoint);
        return 0;
    }
    long long page = 0, dcp = 1, dp = 1;
    bool has_page, has_dcp, has_dp;
    if (kvr_edge_int(info, "page_size", "/server_info", 1, KVR_MAX_BLOCK_SIZE, &page, &has_page,
                     err, cap) ||
        kvr_edge_int(info, "dcp_size", "/server_info", 1, 1024, &dcp, &has_dcp, err, cap) ||
        kvr_edge_int(info, "dp_size", "/server_info", 1, KVR_DISCOVERY_MAX_RANKS, &dp, &has_dp,
                     err, cap))
        return -1;
    if (!has_page || page * (has_dcp ? dcp : 1) > KVR_MAX_BLOCK_SIZE) {
        snprintf(err, cap, "/server_info: page_size (x dcp_size) must be in 1..%u",
                 KVR_MAX_BLOCK_SIZE);
        return -1;
    }
    pub->block_size = (uint32_t)(page * (has_dcp ? dcp : 1));
    pub->dp_size = has_dp ? (uint32_t)dp : 1;
    return 0;
}

/* The replay ROUTER of rank 0 (port 0: none). */
static int read_replay(const json_t *cfg, uint32_t dp_size, char *host, size_t host_cap,
                       unsigned *port, char *err, size_t cap)
{
    char endpoint[KVR_ENDPOINT_MAX] = "";
    *port = 0;
    if (!cfg)
        return 0;
    if (kvr_edge_str(cfg, "replay_endpoint", "/server_info: kv_events_config", endpoint,
                     sizeof endpoint, err, cap))
        return -1;
    if (!endpoint[0])
        return 0;
    if (!kvr_edge_split_tcp(endpoint, host, host_cap, port) || *port + dp_size - 1 > 65535) {
        snprintf(err, cap,
                 "/server_info: kv_events_config.replay_endpoint '%.100s' must be "
                 "tcp://HOST:PORT with PORT + dp_size - 1 <= 65535",
                 endpoint);
        return -1;
    }
    return 0;
}

static int build_ranks(const publisher *pub, const char *rhost, unsigned rport,
                       const char *engine_host, kvr_reading *r, char *err, size_t cap)
{
    if (pub->port + pub->dp_size - 1 > 65535) {
        snprintf(err, cap,
                 "/server_info: kv_events.endpoint_port_base %u + dp_size %u - 1 is above 65535",
                 pub->port, pub->dp_size);
        return -1;
    }
    if (!kvr_edge_ranks(r, pub->dp_size)) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    for (uint32_t k = 0; k < pub->dp_size; k++) {
        kvr_engine_rank_info *rk = &r->ranks[k];
        rk->dp_rank = k;
        memcpy(rk->topic, pub->topic, sizeof rk->topic);
        if (!kvr_edge_tcp_endpoint(rk->endpoint, sizeof rk->endpoint, pub->host, engine_host,
                                   pub->port + k) ||
            (rport && !kvr_edge_tcp_endpoint(rk->replay_endpoint, sizeof rk->replay_endpoint,
                                             rhost, engine_host, rport + k))) {
            snprintf(err, cap, "/server_info: an endpoint longer than %d bytes",
                     KVR_ENDPOINT_MAX - 1);
            return -1;
        }
    }
    r->info.publishes = true;
    r->info.block_size = pub->block_size;
    return 0;
}

static int read_publisher(const json_t *info, const char *engine_host, kvr_reading *r,
                          char *err, size_t cap)
{
    json_t *cfg = NULL;
    if (config_object(info, &cfg, err, cap) != 0)
        return -1;
    publisher pub;
    memset(&pub, 0, sizeof pub);
    json_t *kv = json_object_get(info, "kv_events");
    int rc;
    if (kv && json_is_null(kv)) {
        snprintf(r->info.silent_reason, sizeof r->info.silent_reason,
                 "kv_events is null: the engine publishes no KV events");
        rc = 0;
    } else if (kv) {
        rc = read_descriptor(kv, &pub, r, err, cap);
    } else {
        rc = read_config_publisher(info, cfg, &pub, r, err, cap);
    }
    char rhost[256] = "";
    unsigned rport = 0;
    if (rc == 0 && pub.port)
        rc = read_replay(cfg, pub.dp_size, rhost, sizeof rhost, &rport, err, cap);
    if (rc == 0 && pub.port)
        rc = build_ranks(&pub, rhost, rport, engine_host, r, err, cap);
    json_decref(cfg);
    return rc;
}

/* max_total_num_tokens: the KV cache capacity in tokens the scheduler
 * reports (its scheduler_info, merged into /server_info), the same for
 * every rank. Absent or null in some builds: unknown. Anything but an
 * integer in 1..KVR_MAX_KV_CAPACITY_TOKENS is unknown too, and flagged
 * (counted: capacities_ignored), as vLLM's num_gpu_blocks: a capacity is a
 * routing hint, and refusing the whole answer for it would cost the engine
 * its listeners and every other fact it gave. */
static void read_capacity(const json_t *j, kvr_reading *r)
{
    long long v = 0; /* left 0 when absent, null or refused */
    bool has;
    char why[1]; /* the refusal's message is not kept: the flag is counted */
    if (kvr_edge_int(j, "max_total_num_tokens", "/server_info", 1,
                     (long long)KVR_MAX_KV_CAPACITY_TOKENS, &v, &has, why, sizeof why) != 0)
        r->capacity_ignored = true;
    r->info.max_total_num_tokens = (uint64_t)v;
}

int kvr_sglang_read_server_info(const char *body, size_t len, const char *host, kvr_reading *r,
                                char *err, size_t cap)
{
    json_t *j = kvr_edge_json(body, len, "/server_info", err, cap);
    if (!j)
        return -1;
    kvr_engine_reading_info *in = &r->info;
    char model_path[KVR_NAME_MAX];
    int rc = -1;
    if (!json_is_object(j)) {
        snprintf(err, cap, "/server_info: must be a JSON object");
    } else if (kvr_edge_str(j, "served_model_name", "/server_info", in->model_name,
                            sizeof in->model_name, err, cap) == 0 &&
               kvr_edge_str(j, "model_path", "/server_info", model_path, sizeof model_path, err,
                            cap) == 0 &&
               kvr_edge_str(j, "speculative_algorithm", "/server_info",
                            in->speculative_algorithm, sizeof in->speculative_algorithm, err,
                            cap) == 0 &&
               kvr_edge_bool(j, "enable_hierarchical_cache", "/server_info", &in->hicache, err,
                             cap) == 0 &&
               kvr_edge_str(j, "version", "/server_info", in->version, sizeof in->version, err,
                            cap) == 0) {
        read_capacity(j, r);
        if (!in->model_name[0])
            memcpy(in->model_name, model_path, sizeof in->model_name);
        in->is_eagle = eagle_algorithm(in->speculative_algorithm);
        rc = read_publisher(j, host, r, err, cap);
    }
    json_decref(j);
    return rc;
}

int kvr_sglang_read_model_info(const char *body, size_t len, const char *host, kvr_reading *r,
                               char *err, size_t cap)
{
    (void)host;
    json_t *j = kvr_edge_json(body, len, "/model_info", err, cap);
    if (!j)
        return -1;
    int rc = -1;
    if (!json_is_object(j))
        snprintf(err, cap, "/model_info: must be a JSON object");
    else if (kvr_edge_str(j, "model_type", "/model_info", r->info.model_type,
                          sizeof r->info.model_type, err, cap) == 0 &&
             kvr_edge_str(j, "model_path", "/model_info", r->alt_model, sizeof r->alt_model,
                          err, cap) == 0)
        rc = 0;
    json_decref(j);
    return rc;
}

static int sglang_finish(kvr_reading *r, char *err, size_t cap)
{
    (void)err;
    (void)cap;
    if (!r->info.model_name[0])
        memcpy(r->info.model_name, r->alt_model, sizeof r->info.model_name);
    bool kimi = kvr_sglang_is_kimi(r->info.model_type);
    r->info.mm_identity = kimi ? KVR_MM_AUTO : KVR_MM_LEGACY;
    r->info.accepts_mm_hashes = kimi ? 0 : -1;
    return 0;
}

const kvr_engine_kind_def kvr_sglang_kind = {
    .kind = KVR_ENGINE_KIND_SGLANG,
    .docs = {{"/server_info", "/get_server_info", true, kvr_sglang_read_server_info},
             {"/model_info", "/get_model_info", false, kvr_sglang_read_model_info}},
    .n_docs = 2,
    .finish = sglang_finish,
};
