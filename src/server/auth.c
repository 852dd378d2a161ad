/* Bearer tokens (auth.h): read from files, compared in constant time,
 * swapped on reload, sent to peers. */
#include "server/auth.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "kvrouter/log.h"

typedef struct {
    char *text; /* NULL: none */
    size_t len;
} token;

struct kvr_auth {
    pthread_mutex_t mu; /* guards the tokens */
    token own, peer;
    bool peer_from_file;
    _Atomic int scope; /* kvr_auth_scope */
    _Atomic uint64_t failures[KVR_AUTH_RESULT_COUNT];
};

static const char *const result_names[KVR_AUTH_RESULT_COUNT] = {"ok", "missing", "invalid"};

const char *kvr_auth_result_name(kvr_auth_result r)
{
    return r < KVR_AUTH_RESULT_COUNT ? result_names[r] : "unknown";
}

bool kvr_auth_token_equal(const char *expected, size_t elen, const char *given, size_t glen)
{
    /* Every byte of the expected token is read and folded in whatever the
     * guess, so the time says nothing about how much of it was right. */
    volatile unsigned char diff = elen != glen;
    for (size_t i = 0; i < elen; i++) {
        unsigned char g = i < glen ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)((unsigned char)expected[i] ^ g);
    }
    return diff == 0;
}

_Static_assert(KVR_AUTH_TOKEN_MAX == 4096, "the message in kvr_auth_read_token_file says 4096");

static bool visible_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return false;
    return true;
}

int kvr_auth_read_token_file(const char *path, char **out, size_t *len, char *err, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = malloc(KVR_AUTH_TOKEN_MAX + 3);
    size_t n = buf ? fread(buf, 1, KVR_AUTH_TOKEN_MAX + 3, f) : 0;
    bool read_error = ferror(f);
    struct stat st;
    bool shared = fstat(fileno(f), &st) == 0 && (st.st_mode & 077);
    fclose(f);
    if (!buf) {
        snprintf(err, cap, "%s: out of memory", path);
        return -1;
    }
    if (n && buf[n - 1] == '\n')
        n -= 1 + (n > 1 && buf[n - 2] == '\r');
    const char *why = read_error               ? "cannot be read"
                      : n == 0                 ? "holds no token"
                      : n > KVR_AUTH_TOKEN_MAX ? "holds a token longer than 4096 bytes"
                      : !visible_ascii(buf, n) ? "must hold one token of visible ASCII "
                                                 "characters (no spaces) on one line"
                                               : NULL;
    if (why) {
        snprintf(err, cap, "%s %s", path, why);
        free(buf);
        return -1;
    }
    if (shared)
        kvr_log(KVR_LOG_WARN, "token file %s can be read by other users (mode %03o); chmod 600 it",
                path, (unsigned)(st.st_mode & 0777));
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

static bool set(const char *p) { return p && p[0]; }

/* Reads path into t (replacing it) or leaves t as it was. */
static int load_token(token *t, const char *path, pthread_mutex_t *mu, char *err, size_t cap)
{
    char *text;
    size_t len;
    if (kvr_auth_read_token_file(path, &text, &len, err, cap) != 0)
        return -1;
    if (mu)
        pthread_mutex_lock(mu);
    char *old = t->text;
    t->text = text;
    t->len = len;
    if (mu)
        pthread_mutex_unlock(mu);
    free(old);
    return 0;
}

static int check_scope(const kvr_server_config *cfg, char *err, size_t cap)
{
    if (cfg->auth_scope < KVR_AUTH_SCOPE_ADMIN || cfg->auth_scope > KVR_AUTH_SCOPE_ALL) {
        snprintf(err, cap, "auth: unknown scope %d", cfg->auth_scope);
        return -1;
    }
    if (cfg->auth_scope != KVR_AUTH_SCOPE_ADMIN && !set(cfg->auth_token_file)) {
        snprintf(err, cap, "auth: a scope other than 'admin' needs auth_token_file");
        return -1;
    }
    return 0;
}

kvr_auth *kvr_auth_create(const kvr_server_config *cfg, char *err, size_t cap)
{
    if (check_scope(cfg, err, cap) != 0)
        return NULL;
    kvr_auth *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&a->mu, NULL);
    atomic_init(&a->scope, cfg->auth_scope);
    char e[300];
    if (set(cfg->auth_token_file) && load_token(&a->own, cfg->auth_token_file, NULL, e, sizeof e)) {
        snprintf(err, cap, "auth_token_file %s", e);
        kvr_auth_destroy(a);
        return NULL;
    }
    if (set(cfg->peer_token_file)) {
        if (load_token(&a->peer, cfg->peer_token_file, NULL, e, sizeof e) != 0) {
            snprintf(err, cap, "peer_token_file %s", e);
            kvr_auth_destroy(a);
            return NULL;
        }
        a->peer_from_file = true;
    }
    return a;
}

void kvr_auth_destroy(kvr_auth *a)
{
    if (!a)
        return;
    free(a->own.text);
    free(a->peer.text);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

int kvr_auth_reload(kvr_auth *a, const kvr_server_config *cfg, char *err, size_t cap)
{
    char e[300];
    int rc = 0;
    if (check_scope(cfg, e, sizeof e) != 0) {
        snprintf(err, cap, "%s; authentication keeps its scope", e);
        rc = -1;
    } else {
        atomic_store(&a->scope, cfg->auth_scope);
    }
    if (set(cfg->auth_token_file)) {
        if (load_token(&a->own, cfg->auth_token_file, &a->mu, e, sizeof e) != 0) {
            snprintf(err, cap, "auth_token_file %s; the token in use stays", e);
            rc = -1;
        } else {
            kvr_log(KVR_LOG_INFO, "reload: auth token read from %s", cfg->auth_token_file);
        }
    } else if (kvr_auth_enabled(a)) {
        snprintf(err, cap, "auth_token_file is no longer set; authentication stays on with the "
                           "token in use until the next start");
        rc = -1;
    }
    if (set(cfg->peer_token_file)) {
        if (load_token(&a->peer, cfg->peer_token_file, &a->mu, e, sizeof e) != 0) {
            snprintf(err, cap, "peer_token_file %s; the peer token in use stays", e);
            rc = -1;
        } else {
            a->peer_from_file = true;
        }
    }
    return rc;
}

bool kvr_auth_enabled(kvr_auth *a)
{
    pthread_mutex_lock(&a->mu);
    bool on = a->own.text != NULL;
    pthread_mutex_unlock(&a->mu);
    return on;
}

bool kvr_auth_required(kvr_auth *a, kvr_access access)
{
    if (!kvr_auth_enabled(a))
        return false;
    switch ((kvr_auth_scope)atomic_load(&a->scope)) {
    case KVR_AUTH_SCOPE_ALL: return true;
    case KVR_AUTH_SCOPE_QUERY: return access != KVR_ACCESS_OPEN;
    case KVR_AUTH_SCOPE_ADMIN: break;
    }
    return access == KVR_ACCESS_ADMIN;
}

/* The credentials of "Bearer <token>" (scheme case-insensitive, RFC 6750),
 * or NULL. */
static const char *bearer_token(const char *h, size_t *len)
{
    if (!h)
        return NULL;
    while (*h == ' ' || *h == '\t')
        h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return NULL;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t'))
        n--;
    *len = n;
    return n ? h : NULL;
}

kvr_auth_result kvr_auth_check(kvr_auth *a, kvr_access access, const char *authorization)
{
    if (!kvr_auth_required(a, access))
        return KVR_AUTH_OK;
    size_t glen = 0;
    const char *given = bearer_token(authorization, &glen);
    kvr_auth_result r = KVR_AUTH_MISSING;
    if (given) {
        pthread_mutex_lock(&a->mu);
        bool ok = kvr_auth_token_equal(a->own.text, a->own.len, given, glen);
        pthread_mutex_unlock(&a->mu);
        r = ok ? KVR_AUTH_OK : KVR_AUTH_INVALID;
    }
    if (r != KVR_AUTH_OK)
        atomic_fetch_add_explicit(&a->failures[r], 1, memory_order_relaxed);
    return r;
}

uint64_t kvr_auth_failures(kvr_auth *a, kvr_auth_result r)
{
    return r < KVR_AUTH_RESULT_COUNT ? atomic_load(&a->failures[r]) : 0;
}

bool kvr_auth_peer_authorization(kvr_auth *a, char *buf, size_t cap)
{
    pthread_mutex_lock(&a->mu);
    const token *t = a->peer_from_file ? &a->peer : &a->own;
    bool ok = t->text && snprintf(buf, cap, "Bearer %s", t->text) < (int)cap;
    pthread_mutex_unlock(&a->mu);
    if (!ok && cap)
        buf[0] = 0;
    return ok;
}

struct curl_slist *kvr_server_peer_headers(kvr_server *srv, struct curl_slist *list)
{
    char h[KVR_AUTH_TOKEN_MAX + 32] = "Authorization: ";
    size_t pre = strlen(h);
    if (!kvr_auth_peer_authorization(srv->auth, h + pre, sizeof h - pre))
        return list;
    struct curl_slist *l = curl_slist_append(list, h);
    explicit_bzero(h, sizeof h);
    return l ? l : list;
}
