/* Builds msgpack test payloads with msgpuck's mp_format and decodes them
 * from an exact-size heap copy (so ASan sees any read past the end). */
#ifndef KVR_TEST_WIRE_BUILD_H
#define KVR_TEST_WIRE_BUILD_H

#include "test_support.h"

#include <msgpuck.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/wire.h"

/* The copy lives until the next call (or kvr_wire_teardown), so the
 * decoded events' borrowed strings stay readable meanwhile. */
static void *g_payload_copy;

static inline kvr_batch_error kvr_decode_copy(kvr_batch *b, const void *data, size_t len)
{
    free(g_payload_copy);
    g_payload_copy = calloc(1, len ? len : 1);
    memcpy(g_payload_copy, data, len);
    return kvr_batch_decode(b, g_payload_copy, len);
}

/* mp_format then decode; fails the test if the format does not fit. */
static inline kvr_batch_error kvr_decode_fmt(kvr_batch *b, const char *fmt, ...)
{
    static char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    size_t n = mp_vformat(buf, sizeof buf, fmt, ap);
    va_end(ap);
    assert_true(n <= sizeof buf);
    return kvr_decode_copy(b, buf, n);
}

/* One reusable batch per test program, as the listener would hold it. */
static kvr_batch g_b;

static inline int kvr_wire_setup(void **state)
{
    (void)state;
    kvr_batch_init(&g_b);
    return 0;
}

static inline int kvr_wire_teardown(void **state)
{
    (void)state;
    kvr_batch_free(&g_b);
    free(g_payload_copy);
    g_payload_copy = NULL;
    return 0;
}

#endif
