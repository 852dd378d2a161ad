/* POST /register_peer {url} (201), POST /deregister_peer {url} (200 / 404)
 * and GET /peers (an array of URLs), as Dynamo's indexer answers them: the
 * list of peers recovery tries in order (peer_sync.c), seeded by --peers.
 * Bounded: KVR_MAX_PEERS URLs of at most KVR_PEER_URL_MAX bytes. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"
#include "util/grow.h"

#define KVR_MAX_PEERS 64
#define KVR_PEER_URL_MAX 2048

static bool url_ok(const char *url)
{
    return url && strlen(url) < KVR_PEER_URL_MAX &&
           (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0) &&
           url[strcspn(url, " \t\r\n")] == 0;
}

static long find_peer(kvr_server *srv, const char *url)
{
    for (size_t i = 0; i < srv->n_peers; i++)
        if (strcmp(srv->peers[i], url) == 0)
            return (long)i;
    return -1;
}

kvr_peer_result kvr_server_add_peer(kvr_server *srv, const char *url)
{
    if (!url_ok(url))
        return KVR_PEER_INVALID;
    kvr_peer_result r = KVR_PEER_ADDED;
    pthread_mutex_lock(&srv->peers_mu);
    if (find_peer(srv, url) >= 0) {
        r = KVR_PEER_KNOWN;
    } else if (srv->n_peers == KVR_MAX_PEERS) {
        r = KVR_PEER_FULL;
    } else {
        char *copy = strdup(url);
        if (!copy || KVR_GROW(srv->peers, srv->cap_peers, srv->n_peers + 1) != 0) {
            free(copy);
            r = KVR_PEER_NO_MEMORY;
        } else {
            srv->peers[srv->n_peers++] = copy;
        }
    }
    pthread_mutex_unlock(&srv->peers_mu);
    return r;
}

bool kvr_server_remove_peer(kvr_server *srv, const char *url)
{
    pthread_mutex_lock(&srv->peers_mu);
    long i = url ? find_peer(srv, url) : -1;
    if (i >= 0) {
        free(srv->peers[i]);
        memmove(srv->peers + i, srv->peers + i + 1, (srv->n_peers - (size_t)i - 1) * sizeof(char *));
        srv->n_peers--;
    }
    pthread_mutex_unlock(&srv->peers_mu);
    return i >= 0;
}

char **kvr_server_peer_list(kvr_server *srv, size_t *n)
{
    pthread_mutex_lock(&srv->peers_mu);
    char **out = calloc(srv->n_peers + 1, sizeof *out);
    *n = 0;
    for (size_t i = 0; out && i < srv->n_peers; i++)
        if (!(out[(*n)++] = strdup(srv->peers[i]))) {
            kvr_server_free_peer_list(out, *n); /* all or none: no peer left out unsaid */
            out = NULL;
            *n = 0;
        }
    pthread_mutex_unlock(&srv->peers_mu);
    return out;
}

void kvr_server_free_peer_list(char **list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        free(list[i]);
    free(list);
}

static const char *url_arg(json_t *body, kvr_api_reply *reply)
{
    json_t *u = json_object_get(body, "url");
    if (!json_is_string(u) || !url_ok(json_string_value(u))) {
        kvr_api_error(reply, 400,
                      "field 'url' must be an http:// or https:// URL shorter than %d bytes",
                      KVR_PEER_URL_MAX);
        return NULL;
    }
    return json_string_value(u);
}

void kvr_api_register_peer(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    const char *url = url_arg(body, reply);
    if (!url)
        return;
    switch (kvr_server_add_peer(srv, url)) {
    case KVR_PEER_ADDED:
    case KVR_PEER_KNOWN:
        reply->status = 201;
        reply->body = json_pack("{s:s}", "status", "ok");
        return;
    case KVR_PEER_FULL:
        kvr_api_error(reply, 503, "%d peers are registered already (limit max_peers)",
                      KVR_MAX_PEERS);
        json_object_set_new(reply->body, "limit", json_string("max_peers"));
        return;
    case KVR_PEER_INVALID:
    case KVR_PEER_NO_MEMORY:
        break;
    }
    kvr_api_error(reply, 500, "out of memory");
}

void kvr_api_deregister_peer(kvr_server *srv, json_t *body, kvr_api_reply *reply)
{
    const char *url = url_arg(body, reply);
    if (!url)
        return;
    if (!kvr_server_remove_peer(srv, url)) {
        kvr_api_error(reply, 404, "peer not found");
        return;
    }
    reply->status = 200;
    reply->body = json_pack("{s:s}", "status", "ok");
}

void kvr_api_peers(kvr_server *srv, json_t *args, kvr_api_reply *reply)
{
    (void)args;
    size_t n;
    char **list = kvr_server_peer_list(srv, &n);
    json_t *arr = list ? json_array() : NULL;
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_string(list[i]));
    kvr_server_free_peer_list(list, n);
    if (!arr) {
        kvr_api_error(reply, 500, "out of memory");
        return;
    }
    reply->status = 200;
    reply->body = arr;
}
