/* Text from outside (a request path, an engine's bytes quoted in a log
 * message) as a JSON string even when it is not UTF-8: jansson refuses
 * such strings, and a log line must not be lost for one bad byte. And the
 * one UTF-8 check the server's own JSON writer and its query arguments
 * share. */
#ifndef KVR_UTIL_JSON_TEXT_H
#define KVR_UTIL_JSON_TEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Length of the UTF-8 sequence at s (1..4) when it is a valid one (no
 * overlong form, no surrogate, at most U+10FFFF), else 0. */
size_t kvr_utf8_len(const unsigned char *s);
/* Whether s is valid UTF-8 as jansson takes it (json_string refuses it
 * otherwise). */
bool kvr_utf8_valid(const char *s);

/* json_string(s), or, when s is not valid UTF-8, s with every byte >= 0x80
 * written '?' (at most 4095 bytes of it). NULL only for s NULL or no memory. */
json_t *kvr_json_text_lossy(const char *s);

#endif
