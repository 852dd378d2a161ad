/* Text from outside (a request path, an engine's bytes quoted in a log
 * message) as a JSON string even when it is not UTF-8: jansson refuses
 * such strings, and a log line must not be lost for one bad byte. */
#ifndef KVR_UTIL_JSON_TEXT_H
#define KVR_UTIL_JSON_TEXT_H

#include <jansson.h>

/* json_string(s), or, when s is not valid UTF-8, s with every byte >= 0x80
 * written '?' (at most 4095 bytes of it). NULL only for s NULL or no memory. */
json_t *kvr_json_text_lossy(const char *s);

#endif
