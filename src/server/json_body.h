/* Request bodies to jansson trees, fast for long integer arrays (see
 * json_body.c for why). */
#ifndef KVR_SERVER_JSON_BODY_H
#define KVR_SERVER_JSON_BODY_H

#include <jansson.h>

/* Same result and errors as json_loadb(buf, len, flags, err). */
json_t *kvr_json_load_body(const char *buf, size_t len, size_t flags, json_error_t *err);
/* A JSON array of integers; NULL on out of memory. */
json_t *kvr_json_int_array(const json_int_t *v, size_t n);

#endif
