/* Typed field access for request bodies: every failure leaves a message
 * naming the field, so handlers answer 4xx {"error": ...} uniformly. */
#ifndef KVR_SERVER_JSON_UTIL_H
#define KVR_SERVER_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* u64 from a JSON integer (up to 2^64 - 1 in the u64 fields json_body.h
 * names) or a decimal string (integers above 2^63 cannot travel as JSON
 * numbers through many clients). allow_negative: a negative
 * integer is reinterpreted as its u64 bits (engine hashes are often i64).
 * Returns false on a wrong type or value. */
bool kvr_json_u64(const json_t *v, bool allow_negative, uint64_t *out);

typedef struct {
    char msg[256];
} kvr_json_err;

/* Each returns false with err set when the field is present but wrong, or
 * absent while required. Optional absent (or null) fields keep *out. */
bool kvr_json_get_u64(json_t *obj, const char *key, bool required, uint64_t *out,
                      kvr_json_err *err);
bool kvr_json_get_uint(json_t *obj, const char *key, bool required, uint64_t min, uint64_t max,
                       uint64_t *out, kvr_json_err *err);
/* String fields: non-empty required when nonempty is set. */
bool kvr_json_get_str(json_t *obj, const char *key, bool required, bool nonempty,
                      size_t max_len, const char **out, kvr_json_err *err);
bool kvr_json_get_bool(json_t *obj, const char *key, bool *present, bool *out,
                       kvr_json_err *err);

/* A JSON integer when it fits in int64, else a decimal string: for text
 * that plain jansson reads back (the cluster's registration values). */
json_t *kvr_json_u64_num(uint64_t v);
/* A u64 in a reply: a JSON integer, above INT64_MAX a marker that the
 * reply writer (kvr_json_dumps) writes as the bare number, as Dynamo
 * writes its u64 ids. */
json_t *kvr_json_u64_reply(uint64_t v);

#endif
