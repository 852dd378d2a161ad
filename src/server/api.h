/* Internal contract between the HTTP core (http.c) and endpoint handlers
 * (api_*.c). A handler gets the parsed JSON body (NULL for GET) and fills a
 * reply; the core serializes it, counts latency, and owns the memory. */
#ifndef KVR_SERVER_API_H
#define KVR_SERVER_API_H

#include <jansson.h>

#include "kvrouter/indexer.h"

typedef struct kvr_server kvr_server;
struct kvr_router; /* include/kvrouter/route.h */

typedef struct {
    int status;       /* HTTP status */
    json_t *body;     /* reply JSON (core decrefs), or NULL when text is set */
    char *text;       /* malloc'd non-JSON body (e.g. /metrics), core frees */
    const char *content_type;
} kvr_api_reply;

kvr_indexer *kvr_server_indexer(kvr_server *srv);
struct kvr_router *kvr_server_router(kvr_server *srv);

/* Sets reply to {"error": msg} with the status. */
void kvr_api_error(kvr_api_reply *reply, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef void (*kvr_api_fn)(kvr_server *srv, json_t *body, kvr_api_reply *reply);

/* Route-layer endpoints (api_route.c). */
void kvr_api_query(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_route(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_prefill_done(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_free(kvr_server *srv, json_t *body, kvr_api_reply *reply);

/* Raw-body variants of POST /query and /route: the same replies, but
 * token_ids is scanned without a JSON DOM (jansson spends ~0.4 us per token,
 * most of a /route). The core may dispatch these two paths here instead of
 * parsing the body itself. */
typedef void (*kvr_api_raw_fn)(kvr_server *srv, const char *body, size_t len,
                               kvr_api_reply *reply);
void kvr_api_query_raw(kvr_server *srv, const char *body, size_t len, kvr_api_reply *reply);
void kvr_api_route_raw(kvr_server *srv, const char *body, size_t len, kvr_api_reply *reply);

#endif
