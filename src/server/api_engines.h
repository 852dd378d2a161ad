/* GET/POST/DELETE /engines and the discovery object of /workers elements
 * (api_engines.c): the HTTP face of engine discovery (discovery.h). */
#ifndef KVR_SERVER_API_ENGINES_H
#define KVR_SERVER_API_ENGINES_H

#include "server/server_internal.h"

/* kvr_server_parse_engine with the handlers' error type. */
bool kvr_api_parse_engine(json_t *v, kvr_origin origin, kvr_engine_spec *s, kvr_json_err *e);
/* One /engines element. */
json_t *kvr_api_engine_json(const kvr_engine_info *e);
/* Adds "discovery": {url, kind, state, reason, seconds_since_valid_answer}
 * to w when the worker wi was registered by discovery (l: a snapshot);
 * returns whether it was. */
bool kvr_api_worker_discovery(json_t *w, const kvr_engine_infos *l, const kvr_worker_info *wi);

void kvr_api_engines_get(kvr_server *srv, json_t *args, kvr_api_reply *reply);
void kvr_api_engines_post(kvr_server *srv, json_t *body, kvr_api_reply *reply);
void kvr_api_engines_delete(kvr_server *srv, json_t *body, kvr_api_reply *reply);

#endif
