/* Bearer-token authentication (SPEC §12). Once a token is configured
 * (auth_token_file), http.c asks kvr_auth_check before dispatching a request
 * whose endpoint's access class the scope covers: ADMIN always, QUERY from
 * `--auth query`, every endpoint with `--auth all`. The token is compared in
 * constant time and re-read on SIGHUP (a reload hook); a file that cannot be
 * read then keeps the token in use. The same module holds the token kvrouter
 * sends to its peers (peer_token_file, else its own token), so every outbound
 * fetch of a peer's /dump can authenticate against a peer protected the same
 * way.
 *
 * Threading: every function may be called from any thread; the tokens are
 * swapped under a mutex that a check holds only for the comparison. */
#ifndef KVR_SERVER_AUTH_H
#define KVR_SERVER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server_internal.h"

/* Longest token accepted from a file (bytes, after the trailing newline). */
#define KVR_AUTH_TOKEN_MAX 4096

typedef enum {
    KVR_AUTH_OK = 0,      /* the endpoint needs no token, or the right one came */
    KVR_AUTH_MISSING,     /* needed, and no "Authorization: Bearer ..." header */
    KVR_AUTH_INVALID,     /* needed, and the bearer token is not the configured one */
    KVR_AUTH_RESULT_COUNT
} kvr_auth_result;

/* "ok", "missing", "invalid": the reason label of the failure counter. */
const char *kvr_auth_result_name(kvr_auth_result r);

typedef struct kvr_auth kvr_auth;

/* From cfg's auth_token_file, auth_scope and peer_token_file. NULL with err
 * naming the file (unreadable, empty, not one line of visible ASCII, longer
 * than KVR_AUTH_TOKEN_MAX), or naming `auth` when a scope other than admin is
 * set without a token file. */
kvr_auth *kvr_auth_create(const kvr_server_config *cfg, char *err, size_t cap);
void kvr_auth_destroy(kvr_auth *a);

/* SIGHUP: reads the token files again and takes cfg's scope. Whatever fails
 * keeps what was in use (-1 with err saying what and that the old token
 * stays); removing auth_token_file does not turn authentication off until the
 * next start. */
int kvr_auth_reload(kvr_auth *a, const kvr_server_config *cfg, char *err, size_t cap);

/* A token is configured: requests are checked. */
bool kvr_auth_enabled(kvr_auth *a);
/* Whether a request to an endpoint of this class must carry the token. */
bool kvr_auth_required(kvr_auth *a, kvr_access access);
/* The request's Authorization header value (NULL when absent) against the
 * token, for an endpoint of this class; counts each failure by reason. */
kvr_auth_result kvr_auth_check(kvr_auth *a, kvr_access access, const char *authorization);
/* Failures counted so far with this result (MISSING or INVALID). */
uint64_t kvr_auth_failures(kvr_auth *a, kvr_auth_result r);

/* "Bearer <token>" for requests to peers into buf: the peer token, else the
 * server's own token. false (buf "") when there is none or it does not fit. */
bool kvr_auth_peer_authorization(kvr_auth *a, char *buf, size_t cap);

/* list with "Authorization: Bearer <token>" appended when a peer token is
 * known (kvr_auth_peer_authorization): every request kvrouter makes to a
 * peer (its /dump, replica recovery) sets this as CURLOPT_HTTPHEADER. The
 * list to free with curl_slist_free_all (NULL stays NULL without a token). */
struct curl_slist;
struct curl_slist *kvr_server_peer_headers(kvr_server *srv, struct curl_slist *list);

/* expected[0..elen) == given[0..glen), in time that depends on elen only
 * (not on where the first difference is, nor on glen beyond reading it). */
bool kvr_auth_token_equal(const char *expected, size_t elen, const char *given, size_t glen);

/* Reads a token file: its content without one trailing "\n" (or "\r\n").
 * 0 with *token malloc'd (NUL-terminated) and *len, or -1 with err naming the
 * path. */
int kvr_auth_read_token_file(const char *path, char **token, size_t *len, char *err, size_t cap);

#endif
