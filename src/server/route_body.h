/* Fast parse of /query and /route bodies. token_ids (2,000+ integers, the
 * bulk of every request) costs jansson ~0.4 us per element in DOM nodes;
 * here it is scanned straight into a u32 array and only the small rest of
 * the body goes through jansson (token_ids replaced by []), so validation of
 * everything else stays jansson's. */
#ifndef KVR_SERVER_ROUTE_BODY_H
#define KVR_SERVER_ROUTE_BODY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    json_t *rest;       /* the body object, token_ids emptied */
    uint32_t *tokens;   /* malloc'd; NULL when the body has no token_ids array */
    size_t n_tokens;
    int status;         /* on failure: 400 (bad JSON / field) or 500 */
    char error[256];    /* on failure: names the field or the JSON error */
} kvr_route_body;

/* 0 on success (free with kvr_route_body_free), -1 with status/error set. */
int kvr_route_body_parse(const char *buf, size_t len, size_t max_tokens, kvr_route_body *out);
void kvr_route_body_free(kvr_route_body *b);

#endif
