/* The server's side of the cluster layer (include/kvrouter/cluster.h): the
 * /register JSON codec the registrations bucket is written in (the same
 * parser as POST /register reads it back), the replica's URL, its
 * readiness for the membership record, and recovery from a ready replica
 * of the cluster. The cluster layer knows neither HTTP nor JSON schemas;
 * this file hands it both. */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvrouter/log.h"
#include "server/auth.h"
#include "server/json_util.h"
#include "server/server_internal.h"

static char *encode_registration(void *user, const kvr_registration *reg)
{
    (void)user;
    return kvr_api_format_registration(reg);
}

static bool decode_registration(void *user, const char *text, size_t len, kvr_registration *reg,
                                void **holder, char *err, size_t err_len)
{
    (void)user;
    json_error_t jerr;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) {
        snprintf(err, err_len, "registration value is not JSON: %s", jerr.text);
        return false;
    }
    kvr_registration defaults = {.origin = KVR_ORIGIN_CLUSTER};
    defaults.settings.accepts_mm_hashes = -1;
    if (!kvr_server_parse_registration(o, &defaults, reg, err, err_len)) {
        json_decref(o);
        return false;
    }
    *holder = o;
    return true;
}

static void release_registration(void *user, void *holder)
{
    (void)user;
    json_decref(holder);
}

static size_t discard(char *p, size_t size, size_t n, void *user)
{
    (void)p;
    (void)user;
    return size * n;
}

static bool ready_for_peers(void *user)
{
    char reason[8];
    return kvr_server_ready(user, reason, sizeof reason);
}

/* http://<addr>:<port>, with the host name for a wildcard address. */
static int default_replica_url(const kvr_server_config *cfg, char *buf, size_t cap, char *err,
                               size_t err_len)
{
    int port = cfg->port < 0 ? KVR_DEFAULT_PORT : cfg->port;
    if (port == 0) {
        snprintf(err, err_len,
                 "cluster: an ephemeral port (0) needs the replica's URL (--cluster-url)");
        return -1;
    }
    const char *addr = cfg->listen_addr ? cfg->listen_addr : KVR_DEFAULT_LISTEN_ADDR;
    char host[256];
    if (strcmp(addr, "0.0.0.0") == 0 || !addr[0]) {
        if (gethostname(host, sizeof host) != 0) {
            snprintf(err, err_len, "cluster: no host name for the replica's URL (--cluster-url)");
            return -1;
        }
        host[sizeof host - 1] = 0;
        addr = host;
    }
    snprintf(buf, cap, "http://%s:%d", addr, port);
    return 0;
}

int kvr_server_cluster_start(kvr_server *srv, const kvr_server_config *cfg, char *err,
                             size_t err_len)
{
    if (!cfg->cluster.nats_url || !cfg->cluster.nats_url[0])
        return 0;
    kvr_cluster_config cc = cfg->cluster;
    char url[512];
    if (!cc.replica_url || !cc.replica_url[0]) {
        if (default_replica_url(cfg, url, sizeof url, err, err_len) != 0)
            return -1;
        cc.replica_url = url;
    }
    cc.booking_ttl_s = cfg->router.booking_ttl_s;
    cc.codec = (kvr_cluster_codec){encode_registration, decode_registration,
                                   release_registration, NULL};
    cc.ready_fn = ready_for_peers;
    cc.ready_user = srv;
    srv->cluster = kvr_cluster_start(&cc, srv->registry, srv->router, err, err_len);
    if (!srv->cluster)
        return -1;
    kvr_log(KVR_LOG_INFO, "cluster %s: replica %s on NATS %s", cc.name, cc.replica_url,
            cc.nats_url);
    return 0;
}

/* GET base/ready answers 200 within a second (with the peer token: under
 * --auth all /ready needs it). */
static bool peer_ready(kvr_server *srv, const char *base)
{
    char url[KVR_CLUSTER_URL_MAX + 16];
    snprintf(url, sizeof url, "%s/ready", base);
    CURL *h = curl_easy_init();
    if (!h)
        return false;
    struct curl_slist *headers = kvr_server_peer_headers(srv, NULL);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOBODY, 0L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
    return code == 200;
}

bool kvr_server_recover_from_cluster(kvr_server *srv)
{
    if (!srv->cluster)
        return false;
    kvr_cluster_peer peers[8];
    size_t n = kvr_cluster_peers(srv->cluster, peers, 8);
    for (size_t i = 0; i < n; i++) {
        const char *url = peers[i].url;
        if (!peer_ready(srv, url))
            continue;
        char e[320];
        if (kvr_server_recover_from_peer(srv, url, e, sizeof e) != 0) {
            kvr_log(KVR_LOG_WARN, "cluster: peer %s: %s", url, e);
            continue;
        }
        kvr_log(KVR_LOG_INFO, "cluster: recovered %ld store records from peer %s",
                srv->peer_records, url);
        return true;
    }
    if (n)
        kvr_log(KVR_LOG_INFO, "cluster: none of %zu peers is ready: starting from the engines' "
                              "streams alone (then the static peers, if any)", n);
    return false;
}
