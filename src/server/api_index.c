/* POST /query_by_hash, GET /health. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvrouter/version.h"
#include "server/json_util.h"
#include "server/metrics.h"
#include "server/scores_json.h"
#include "server/server_internal.h"

#define KVR_MAX_QUERY_HASHES (1u << 20)

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *p) { kvr_match_ctx_destroy(p); }
static void ctx_key_init(void) { pthread_key_create(&ctx_key, ctx_free); }

/* One match scratch per HTTP thread, freed when the thread exits. */
static kvr_match_ctx *thread_ctx(void)
{
    pthread_once(&ctx_once, ctx_key_init);
    kvr_match_ctx *c = pthread_getspecific(ctx_key);
    if (!c) {
        c = kvr_match_ctx_create();
        if (c)
            pthread_setspecific(ctx_key, c);
    }
    return c;
}

void kvr_api_query_by_hash(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    kvr_json_err e = {{0}};
    const char *model = NULL, *group = KVR_DEFAULT_ROUTING_GROUP;
    if (!kvr_json_get_str(body, "model_name", true, true, KVR_NAME_MAX, &model, &e) ||
        !kvr_json_get_str(body, "routing_group", false, true, KVR_NAME_MAX, &group, &e)) {
        kvr_api_error(reply, 400, "%s", e.msg);
        return;
    }
    json_t *salt = json_object_get(body, "cache_salt");
    if (salt && !json_is_null(salt)) {
        /* A caller sending one thinks it changes the match; it cannot. */
        kvr_api_error(reply, 400, "field 'cache_salt' is not accepted by /query_by_hash: block "
                                  "hashes are already salted (send it to /query with token_ids)");
        return;
    }
    json_t *arr = json_object_get(body, "block_hashes");
    if (!arr) {
        kvr_api_error(reply, 400, "missing field 'block_hashes'");
        return;
    }
    if (!json_is_array(arr)) {
        kvr_api_error(reply, 400, "field 'block_hashes' must be an array of u64");
        return;
    }
    size_t n = json_array_size(arr);
    if (n > KVR_MAX_QUERY_HASHES) {
        kvr_api_error(reply, 400, "field 'block_hashes' has more than %u entries",
                      KVR_MAX_QUERY_HASHES);
        return;
    }
    uint64_t *hashes = malloc((n ? n : 1) * sizeof *hashes);
    if (!hashes) {
        kvr_api_error(reply, 500, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (!kvr_json_u64(json_array_get(arr, i), true, &hashes[i])) {
            kvr_api_error(reply, 400,
                          "field 'block_hashes[%zu]' must be a 64-bit integer or decimal string",
                          i);
            free(hashes);
            return;
        }
    if (!kvr_indexer_index(srv->ix, model, group)) {
        kvr_api_error(reply, 404, "field 'model_name': unknown model '%s' (routing_group '%s')",
                      model, group);
        free(hashes);
        return;
    }
    uint32_t bs = kvr_indexer_block_size(srv->ix, model, group);
    kvr_match_ctx *ctx = thread_ctx();
    const kvr_match_entry *m = NULL;
    size_t k = ctx ? kvr_indexer_match_hashes(srv->ix, model, group, ctx, hashes, n, &m) : 0;
    free(hashes);
    /* Without a match scratch the empty scores would be a false "no match". */
    reply->text = ctx ? kvr_scores_json_from_matches(m, k, bs, NULL) : NULL;
    if (!reply->text) {
        kvr_api_error(reply, 500, "out of memory");
        return;
    }
    reply->status = 200;
    reply->content_type = "application/json";
}

void kvr_api_health(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    (void)body;
    reply->status = 200;
    reply->body = json_pack("{s:s,s:s,s:f,s:I}", "status", "ok", "version", kvr_version(),
                            "uptime_seconds", kvr_source_now() - srv->started_at, "workers",
                            (json_int_t)kvr_indexer_list(srv->ix, NULL, NULL, NULL, 0));
}
