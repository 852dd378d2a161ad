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
#include "batch_collect.h"

/* The copy lives until the next call (or kvr_wire_teardown), so the
 * decoded events' borrowed strings stay readable meanwhile. */
static void *g_payload_copy;

/* Every event of the last kvr_decode_copy, read to the batch's end (so
 * b->tally is complete too). */
static kvr_test_events g_ev;

static inline kvr_batch_error kvr_decode_copy(kvr_batch *b, const void *data, size_t len)
{
    free(g_payload_copy);
    g_payload_copy = calloc(1, len ? len : 1);
    memcpy(g_payload_copy, data, len);
    kvr_batch_error err = kvr_batch_decode(b, g_payload_copy, len);
    kvr_test_collect(b, &g_ev);
    return err;
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

/* [0, [nil x n]] (heap; *len its size): the cheapest events there are. */
static inline char *kvr_nil_batch(size_t n, size_t *len)
{
    char *buf = malloc(n + 16), *p = buf;
    p = mp_encode_array(p, 2);
    p = mp_encode_uint(p, 0);
    p = mp_encode_array(p, (uint32_t)n);
    memset(p, 0xc0, n);
    *len = (size_t)(p + n - buf);
    return buf;
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
    kvr_test_events_free(&g_ev);
    free(g_payload_copy);
    g_payload_copy = NULL;
    return 0;
}

#endif
