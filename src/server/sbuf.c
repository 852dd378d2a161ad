/* kvr_sbuf: see sbuf.h. */
#include "server/sbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/grow.h"
#include "util/json_text.h"

void kvr_sbuf_append_grow(kvr_sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (n > SIZE_MAX - b->len - 1 ||
        kvr_grow((void **)&b->data, &b->cap, b->len + n + 1, 1, 4096) != 0) {
        b->failed = true;
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void kvr_sbuf_printf(kvr_sbuf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        kvr_sbuf_append(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    kvr_sbuf_append(b, big, (size_t)n);
    free(big);
}

void kvr_sbuf_u64(kvr_sbuf *b, uint64_t v)
{
    char d[20];
    size_t i = sizeof d;
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    kvr_sbuf_append(b, d + i, sizeof d - i);
}

void kvr_sbuf_json_str(kvr_sbuf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    KVR_SBUF_LIT(b, "\"");
    const unsigned char *p = (const unsigned char *)s, *run = p;
    while (*p && !b->failed) {
        unsigned c = *p;
        if (c >= 0x20 && c != '"' && c != '\\') {
            size_t n = kvr_utf8_len(p);
            if (n == 0)
                b->failed = true;
            p += n;
            continue;
        }
        kvr_sbuf_append(b, (const char *)run, (size_t)(p - run));
        char esc[6] = {'\\', (char)c, 0, 0, 0, 0};
        size_t len = 2;
        switch (c) {
        case '"': case '\\': break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            len = 6;
        }
        kvr_sbuf_append(b, esc, len);
        run = ++p;
    }
    kvr_sbuf_append(b, (const char *)run, (size_t)(p - run));
    KVR_SBUF_LIT(b, "\"");
}

void kvr_sbuf_json_real(kvr_sbuf *b, double v)
{
    if (!isfinite(v)) {
        KVR_SBUF_LIT(b, "null");
        return;
    }
    char t[40];
    int n = snprintf(t, sizeof t, "%.17g", v);
    if (n < 0 || (size_t)n >= sizeof t) {
        b->failed = true;
        return;
    }
    char *e = strchr(t, 'e');
    if (!e && !strchr(t, '.')) {
        kvr_sbuf_append(b, t, (size_t)n);
        KVR_SBUF_LIT(b, ".0");
        return;
    }
    if (!e) {
        kvr_sbuf_append(b, t, (size_t)n);
        return;
    }
    /* "1e+300" -> "1e300", "1e-05" -> "1e-5" */
    kvr_sbuf_append(b, t, (size_t)(e - t) + 1);
    const char *x = e + 1;
    if (*x == '+')
        x++;
    else if (*x == '-')
        kvr_sbuf_append(b, x++, 1);
    while (*x == '0' && x[1])
        x++;
    kvr_sbuf_append(b, x, strlen(x));
}

char *kvr_sbuf_take(kvr_sbuf *b, size_t *len)
{
    char *t = b->failed ? NULL : b->data;
    if (len)
        *len = t ? b->len : 0;
    if (!t)
        free(b->data);
    memset(b, 0, sizeof *b);
    return t;
}
