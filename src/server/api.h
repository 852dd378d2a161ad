/* Internal contract between the HTTP core (http.c) and endpoint handlers
 * (api_*.c). A handler gets the parsed JSON body (an object; for GET the
 * query arguments as a flat object of strings) and fills a reply; the core
 * serializes it, counts latency, and owns the memory. */
#ifndef KVR_SERVER_API_H
#define KVR_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>

#include "kvrouter/indexer.h"
#include "server/json_body.h"

typedef struct kvr_server kvr_server;
struct kvr_router; /* include/kvrouter/route.h */

/* A streamed body: read fills buf with up to max bytes and returns how many
 * (0 is not allowed), -1 at the end, -2 on an error (the connection is cut);
 * done is called once when the core no longer needs the stream. */
typedef struct {
    long (*read)(void *user, char *buf, size_t max);
    void (*done)(void *user);
    void *user;
} kvr_api_stream;

typedef struct {
    int status;       /* HTTP status */
    json_t *body;     /* reply JSON (core decrefs), or NULL when text is set */
    char *text;       /* malloc'd non-JSON body (e.g. /metrics), core frees */
    kvr_api_stream stream; /* set (read != NULL): the body, written as the client reads it */
    const char *content_type;
    const char *www_authenticate; /* a 401's challenge header (static text), or NULL */
} kvr_api_reply;

kvr_indexer *kvr_server_indexer(kvr_server *srv);
struct kvr_router *kvr_server_router(kvr_server *srv);

/* Sets reply to {"error": msg} with the status. */
void kvr_api_error(kvr_api_reply *reply, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef void (*kvr_api_fn)(kvr_server *srv, json_t *body, kvr_api_reply *reply);

/* Route-layer endpoints (api_route.c). */
void kvr_api_prefill_done(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_free(kvr_server *srv, json_t *body, kvr_api_reply *reply);

/* POST /query and /route take the whole parsed body: http.c parses it with
 * kvr_api_route_body_opts, which keeps token_ids out of the tree as a u32
 * vector and accepts u64 mm_hash numbers (json_body.h); a jansson node per
 * token was most of a /route. */
typedef void (*kvr_api_body_fn)(kvr_server *srv, const kvr_json_body *body,
                                kvr_api_reply *reply);
extern const kvr_json_body_opts kvr_api_route_body_opts;
void kvr_api_query(kvr_server *srv, const kvr_json_body *body, kvr_api_reply *reply);
void kvr_api_route(kvr_server *srv, const kvr_json_body *body, kvr_api_reply *reply);

#endif
