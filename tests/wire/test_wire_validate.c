/* The payload validator (kvr_msgpack_validate: the wire layer's bounded
 * walk, then mp_check) against an independent recursive reference, over
 * random msgpack trees of every item kind near the depth bound, truncated,
 * byte-flipped and with forged container counts. The walk steps over flat
 * arrays (scalars, arrays of scalars: the events, hashes and tokens of a
 * batch) without its general loop; a count it trusted there without
 * finding its elements inside the payload shows up here as a forged count
 * accepted (or read past: the payloads are exact-size heap copies). */
#include "test_support.h"

#include <msgpuck.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvrouter/wire.h"

typedef struct {
    const char *end;
    kvr_batch_error err; /* the first error in document order */
} ref_state;

static uint64_t load_be(const char *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v = v << 8 | (unsigned char)p[i];
    return v;
}

/* One item at p whose containers would open level `level` + 1: the end of
 * the item, or NULL with s->err set. */
static const char *ref_item(ref_state *s, const char *p, unsigned level)
{
    if (p >= s->end) {
        s->err = KVR_BATCH_INVALID_MSGPACK;
        return NULL;
    }
    unsigned char c = (unsigned char)*p++;
    size_t left = (size_t)(s->end - p);
    uint64_t count = 0;
    bool container = false, map = false;
    unsigned len_bytes = 0, fixed = 0;
    bool ext = false;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
        fixed = 0;
    } else if (c >= 0x80 && c <= 0x8f) {
        container = map = true;
        count = c & 0x0f;
    } else if (c >= 0x90 && c <= 0x9f) {
        container = true;
        count = c & 0x0f;
    } else if (c >= 0xa0 && c <= 0xbf) {
        fixed = c & 0x1f;
    } else {
        switch (c) {
        case 0xc1: fixed = 0; break; /* never used: msgpuck steps it as one byte */
        case 0xc4: case 0xd9: len_bytes = 1; break;
        case 0xc5: case 0xda: len_bytes = 2; break;
        case 0xc6: case 0xdb: len_bytes = 4; break;
        case 0xc7: len_bytes = 1; ext = true; break;
        case 0xc8: len_bytes = 2; ext = true; break;
        case 0xc9: len_bytes = 4; ext = true; break;
        case 0xca: fixed = 4; break;
        case 0xcb: fixed = 8; break;
        case 0xcc: case 0xd0: fixed = 1; break;
        case 0xcd: case 0xd1: fixed = 2; break;
        case 0xce: case 0xd2: fixed = 4; break;
        case 0xcf: case 0xd3: fixed = 8; break;
        case 0xd4: fixed = 2; break;
        case 0xd5: fixed = 3; break;
        case 0xd6: fixed = 5; break;
        case 0xd7: fixed = 9; break;
        case 0xd8: fixed = 17; break;
        case 0xdc: container = true; len_bytes = 2; break;
        case 0xdd: container = true; len_bytes = 4; break;
        case 0xde: container = map = true; len_bytes = 2; break;
        case 0xdf: container = map = true; len_bytes = 4; break;
        default: fail();
        }
    }
    if (!container) {
        if (len_bytes) {
            if (len_bytes + ext > left) {
                s->err = KVR_BATCH_INVALID_MSGPACK;
                return NULL;
            }
            uint64_t n = load_be(p, len_bytes);
            p += len_bytes + ext;
            left -= len_bytes + ext;
            if (n > left) {
                s->err = KVR_BATCH_INVALID_MSGPACK;
                return NULL;
            }
            return p + n;
        }
        if (fixed > left) {
            s->err = KVR_BATCH_INVALID_MSGPACK;
            return NULL;
        }
        return p + fixed;
    }
    if (len_bytes) {
        if (len_bytes > left) {
            s->err = KVR_BATCH_INVALID_MSGPACK;
            return NULL;
        }
        count = load_be(p, len_bytes);
        p += len_bytes;
        left -= len_bytes;
    }
    if (map)
        count *= 2;
    if (count > left) { /* every element takes a byte at least */
        s->err = KVR_BATCH_INVALID_MSGPACK;
        return NULL;
    }
    if (level + 1 > KVR_WIRE_MAX_DEPTH) {
        s->err = KVR_BATCH_TOO_LARGE;
        return NULL;
    }
    for (uint64_t i = 0; i < count; i++)
        if (!(p = ref_item(s, p, level + 1)))
            return NULL;
    return p;
}

static kvr_batch_error ref_validate(const char *p, size_t len)
{
    if (len == 0)
        return KVR_BATCH_INVALID_MSGPACK;
    ref_state s = {.end = p + len, .err = KVR_BATCH_OK};
    const char *q = ref_item(&s, p, 0);
    if (!q)
        return s.err;
    return q == s.end ? KVR_BATCH_OK : KVR_BATCH_INVALID_MSGPACK;
}

/* A random tree: containers mostly arrays of a few scalars or of arrays of
 * scalars (the shapes the walk's flat steps take), deep chains now and
 * then so the depth bound falls inside them. */
static char *gen_item(char *p, char *limit, unsigned depth, unsigned max_depth)
{
    if (limit - p < 64)
        return mp_encode_nil(p);
    unsigned r = (unsigned)rand() % 16;
    if (depth < max_depth && r < 6) {
        uint32_t n = (uint32_t)rand() % (r < 2 ? 20 : 5);
        bool is_map = r == 5;
        unsigned form = (unsigned)rand() % 4; /* fix, 16, 32 (when they fit) */
        if (is_map) {
            n = n > 4 ? 4 : n;
            p = form == 1 ? (*p = (char)0xde, mp_store_u16(p + 1, (uint16_t)n))
                : form == 2 ? (*p = (char)0xdf, mp_store_u32(p + 1, n))
                            : mp_encode_map(p, n);
            n *= 2;
        } else {
            p = form == 1 ? (*p = (char)0xdc, mp_store_u16(p + 1, (uint16_t)n))
                : form == 2 ? (*p = (char)0xdd, mp_store_u32(p + 1, n))
                            : mp_encode_array(p, n);
        }
        for (uint32_t i = 0; i < n; i++)
            p = gen_item(p, limit, depth + 1, max_depth);
        return p;
    }
    switch ((unsigned)rand() % 12) {
    case 0: return mp_encode_uint(p, (uint64_t)rand() % 200);
    case 1: return mp_encode_uint(p, 0xce00u + (uint64_t)rand());
    case 2: return mp_encode_uint(p, (uint64_t)rand() << 33);
    case 3: return mp_encode_int(p, -(int64_t)(rand() % 100000) - 1);
    case 4: return mp_encode_double(p, 1.5);
    case 5: return mp_encode_float(p, 2.5f);
    case 6: return mp_encode_str(p, "BlockStored", 11);
    case 7: {
        static char text[300];
        uint32_t n = (uint32_t)rand() % 300;
        memset(text, 0xdd, n); /* bytes that read as array32 headers */
        return mp_encode_str(p, text, n);
    }
    case 8: return mp_encode_bin(p, "\x9f\xdf\xdc", 3);
    case 9: return mp_encode_bool(p, rand() % 2);
    case 10: /* ext 8 of 2 bytes, type 7, and fixext 2: data that reads as arrays */
        if (rand() % 2) {
            memcpy(p, "\xc7\x02\x07\x91\x90", 5);
            return p + 5;
        }
        memcpy(p, "\xd5\x07\x9f\xdd", 4);
        return p + 4;
    default: return mp_encode_nil(p);
    }
}

/* Overwrites one container count in buf with a forged one (larger than
 * what follows, a wrap of msgpuck's int counter, or zero). */
static void forge_count(char *buf, size_t len)
{
    for (int tries = 0; tries < 64; tries++) {
        size_t at = (size_t)rand() % len;
        unsigned char c = (unsigned char)buf[at];
        uint32_t forged[] = {0xffffffffu, 0x7fffffffu, 0x80000001u, 0x3ffffffdu,
                             (uint32_t)len, (uint32_t)rand() % 64, 0};
        uint32_t v = forged[(unsigned)rand() % (sizeof forged / sizeof *forged)];
        if ((c == 0xdd || c == 0xdf) && at + 5 <= len) {
            mp_store_u32(buf + at + 1, v);
            return;
        }
        if ((c == 0xdc || c == 0xde) && at + 3 <= len) {
            mp_store_u16(buf + at + 1, (uint16_t)v);
            return;
        }
        if ((c & 0xe0) == 0x80) { /* fixarray / fixmap */
            buf[at] = (char)((c & 0xf0) | (v & 0x0f));
            return;
        }
    }
}

static kvr_batch_error validate_copy(const char *data, size_t len)
{
    char *copy = malloc(len ? len : 1);
    memcpy(copy, data, len);
    kvr_batch_error err = kvr_msgpack_validate(copy, len);
    free(copy);
    return err;
}

static void test_walk_equals_reference(void **state)
{
    (void)state;
    srand(14);
    enum { CAP = 1 << 16 };
    char *buf = malloc(CAP);
    unsigned forged = 0, forged_refused = 0, deep = 0, ok = 0;
    for (int round = 0; round < 20000; round++) {
        /* the bound inside the tree: depth 30 to 34 from a chain on top */
        unsigned chain = (unsigned)rand() % 3 == 0 ? KVR_WIRE_MAX_DEPTH - 4 + (unsigned)rand() % 5 : 0;
        char *p = buf;
        for (unsigned i = 0; i < chain; i++)
            p = mp_encode_array(p, 1);
        p = gen_item(p, buf + CAP, chain, chain + 6);
        size_t len = (size_t)(p - buf);
        unsigned mutation = (unsigned)rand() % 4;
        if (mutation == 1) {
            forge_count(buf, len);
            forged++;
        } else if (mutation == 2) {
            buf[(size_t)rand() % len] ^= (char)(1u << (rand() % 8));
        } else if (mutation == 3) {
            len = (size_t)rand() % len;
        }
        kvr_batch_error want = ref_validate(buf, len);
        kvr_batch_error got = validate_copy(buf, len);
        if (got != want)
            fail_msg("round %d (mutation %u, %zu bytes): walk %s, reference %s", round, mutation, len,
                     kvr_batch_error_name(got), kvr_batch_error_name(want));
        forged_refused += mutation == 1 && want != KVR_BATCH_OK;
        deep += want == KVR_BATCH_TOO_LARGE;
        ok += want == KVR_BATCH_OK;
    }
    free(buf);
    /* the rounds reached every outcome */
    assert_true(forged > 4000);
    assert_true(forged_refused > 1500);
    assert_true(deep > 500);
    assert_true(ok > 5000);
}

/* Forged counts in the arrays the flat steps take: an event's token array
 * (array 16) and hash array (fixarray) claiming more elements than follow,
 * inside a batch whose events array is honest. */
static void test_forged_counts_in_flat_arrays(void **state)
{
    (void)state;
    char buf[512], *p = buf;
    p = mp_encode_array(p, 2);
    p = mp_encode_double(p, 1.0);
    p = mp_encode_array(p, 2);
    for (int e = 0; e < 2; e++) {
        p = mp_encode_array(p, 5);
        p = mp_encode_str(p, "BlockStored", 11);
        p = mp_encode_array(p, 1);
        p = mp_encode_uint(p, 1ull << 40);
        p = mp_encode_nil(p);
        p = mp_encode_array(p, 16);
        for (int t = 0; t < 16; t++)
            p = mp_encode_uint(p, 100000u + (unsigned)t);
        p = mp_encode_uint(p, 16);
    }
    size_t len = (size_t)(p - buf);
    assert_int_equal(validate_copy(buf, len), KVR_BATCH_OK);
    /* the second event's token count: one more than follow, then the most */
    char *tokens = memchr(buf + len / 2, 0xdc, len / 2);
    assert_non_null(tokens);
    mp_store_u16(tokens + 1, 17);
    assert_int_equal(validate_copy(buf, len), KVR_BATCH_INVALID_MSGPACK);
    mp_store_u16(tokens + 1, 0xffff);
    assert_int_equal(validate_copy(buf, len), KVR_BATCH_INVALID_MSGPACK);
    /* one fewer: the event's last field is left over, its count short */
    mp_store_u16(tokens + 1, 15);
    assert_int_equal(validate_copy(buf, len), KVR_BATCH_INVALID_MSGPACK);
    mp_store_u16(tokens + 1, 16);
    /* the first event's hash array claims two */
    char *hashes = memchr(buf, 0x91, len);
    assert_non_null(hashes);
    *hashes = (char)0x92;
    assert_int_equal(validate_copy(buf, len), KVR_BATCH_INVALID_MSGPACK);
    *hashes = (char)0x91;
    assert_int_equal(validate_copy(buf, len), KVR_BATCH_OK);
    /* the last event cut short anywhere */
    for (size_t cut = len / 2; cut < len; cut++)
        assert_int_equal(validate_copy(buf, cut), KVR_BATCH_INVALID_MSGPACK);
}

/* Flat arrays right at the depth bound: the flat steps open levels too. */
static void test_flat_arrays_at_the_depth_bound(void **state)
{
    (void)state;
    for (unsigned chain = KVR_WIRE_MAX_DEPTH - 4; chain <= KVR_WIRE_MAX_DEPTH; chain++) {
        char buf[256], *p = buf;
        for (unsigned i = 0; i < chain; i++)
            p = mp_encode_array(p, 1);
        /* [[1, [2, 3]], 4]: levels chain + 1 .. chain + 3 */
        p = mp_encode_array(p, 2);
        p = mp_encode_array(p, 2);
        p = mp_encode_uint(p, 1);
        p = mp_encode_array(p, 2);
        p = mp_encode_uint(p, 2);
        p = mp_encode_uint(p, 3);
        p = mp_encode_uint(p, 4);
        size_t len = (size_t)(p - buf);
        kvr_batch_error want = chain + 3 <= KVR_WIRE_MAX_DEPTH ? KVR_BATCH_OK : KVR_BATCH_TOO_LARGE;
        assert_int_equal(ref_validate(buf, len), want);
        assert_int_equal(validate_copy(buf, len), want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_equals_reference),
        cmocka_unit_test(test_forged_counts_in_flat_arrays),
        cmocka_unit_test(test_flat_arrays_at_the_depth_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
