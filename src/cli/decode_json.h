/* The `kvrouter decode` output format (issue 2): one JSON object per event,
 * {"type":"stored"|"removed"|"cleared"|"dropped", ...}. u64 values are
 * exact unsigned decimals, which jansson's signed json_integer cannot hold,
 * so lines are built by hand. */
#ifndef KVR_CLI_DECODE_JSON_H
#define KVR_CLI_DECODE_JSON_H

#include <stdio.h>

#include "kvrouter/wire.h"

/* Writes the event followed by '\n'; dp_rank is the batch's (or null). */
void kvr_decode_json_event(FILE *out, const kvr_batch *b, const kvr_raw_event *ev);

/* A JSON string literal for bytes from the wire; bytes that are not valid
 * UTF-8 are written as \u00XX so the line stays valid JSON. NULL -> null. */
void kvr_decode_json_str(FILE *out, kvr_str s);

#endif
