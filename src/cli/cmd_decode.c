/* `kvrouter decode`: one msgpack KV event batch (hex, file or stdin) to one
 * JSON line per event; `--bench` measures decoder throughput. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "util/grow.h"
#include "cli/decode_bench.h"
#include "cli/decode_json.h"
#include "kvrouter/wire.h"
#include "util/hex.h"

static const char decode_usage[] =
    "usage: kvrouter decode --hex HEX | --file FILE | -\n"
    "       kvrouter decode --bench [--iterations N]\n"
    "\n"
    "Decodes one msgpack KV event batch (SGLang/vLLM, SPEC §3) given as hex, as a\n"
    "file of raw payload bytes, or on stdin (-), and prints one JSON object per\n"
    "event: stored / removed / cleared, or {\"type\":\"dropped\",\"reason\":...} for\n"
    "an event that was dropped. u64 values print as exact unsigned decimals.\n"
    "Exit 0 when the batch decoded (even with dropped events), 2 when the batch\n"
    "itself is malformed (reason on stderr) or the arguments are bad.\n"
    "--bench decodes a batch of 64 stores x 4 blocks x 16 tokens N times\n"
    "(default 20000) and prints MB/s and events/s; the last line is JSON.\n";

#define DECODE_MAX_INPUT (256u << 20) /* a payload is one ZeroMQ frame */

static int decode_fail(int rc, const char *what, const char *arg)
{
    fprintf(stderr, "kvrouter decode: %s%s%s\n", what, arg ? ": " : "", arg ? arg : "");
    return rc;
}

/* Spaces between byte pairs are allowed (copied from dumps). */
static unsigned char *from_hex(const char *hex, size_t *len)
{
    unsigned char *out = malloc(strlen(hex) / 2 + 1);
    size_t n = 0;
    int hi = -1;
    if (!out)
        return NULL;
    for (const char *p = hex; *p; p++) {
        if (*p == ' ' || *p == '\n' || *p == '\t')
            continue;
        int d = kvr_hex_digit(*p);
        if (d < 0) {
            free(out);
            return NULL;
        }
        if (hi < 0) {
            hi = d;
        } else {
            out[n++] = (unsigned char)(hi << 4 | d);
            hi = -1;
        }
    }
    if (hi >= 0) {
        free(out);
        return NULL;
    }
    *len = n;
    return out;
}

static unsigned char *read_all(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        if (cap >= DECODE_MAX_INPUT) {
            free(buf);
            return NULL;
        }
        if (kvr_grow((void **)&buf, &cap, cap + 1, 1, 4096) != 0) {
            free(buf);
            return NULL;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int decode_and_print(const unsigned char *data, size_t len)
{
    kvr_batch b;
    kvr_batch_init(&b);
    kvr_batch_error err = kvr_batch_decode(&b, data, len);
    if (err != KVR_BATCH_OK) {
        kvr_batch_free(&b);
        return decode_fail(2, "malformed batch", kvr_batch_error_name(err));
    }
    for (const kvr_raw_event *ev; (ev = kvr_batch_next(&b));)
        kvr_decode_json_event(stdout, &b, ev);
    kvr_batch_free(&b);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int load_input(const char *hex, const char *file, unsigned char **data, size_t *len)
{
    if (hex) {
        *data = from_hex(hex, len);
        return *data ? 0 : decode_fail(2, "--hex is not valid hex", NULL);
    }
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    if (!f)
        return decode_fail(1, strerror(errno), file);
    *data = read_all(f, len);
    if (f != stdin)
        fclose(f);
    return *data ? 0 : decode_fail(1, "cannot read input (error, or above 256 MiB)", file);
}

int kvr_cmd_decode(int argc, char **argv)
{
    const char *hex = NULL, *file = NULL;
    bool bench = false;
    uint64_t iterations = 20000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_next = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(decode_usage, stdout);
            return 0;
        } else if (strcmp(a, "--bench") == 0) {
            bench = true;
        } else if (strcmp(a, "--iterations") == 0 && has_next) {
            const char *v = argv[++i];
            if (kvr_cli_parse_u64(v, 1, UINT64_MAX, &iterations))
                return decode_fail(2, "--iterations must be a positive integer", v);
        } else if (strcmp(a, "--hex") == 0 && has_next && !hex && !file) {
            hex = argv[++i];
        } else if (strcmp(a, "--file") == 0 && has_next && !hex && !file) {
            file = argv[++i];
        } else if (strcmp(a, "-") == 0 && !hex && !file) {
            file = "-";
        } else {
            return decode_fail(2, "bad argument (try --help)", a);
        }
    }
    if (bench)
        return hex || file ? decode_fail(2, "--bench takes no input", NULL)
                           : kvr_cli_decode_bench(iterations);
    if (!hex && !file)
        return decode_fail(2, "give --hex HEX, --file FILE or - (try --help)", NULL);
    unsigned char *data;
    size_t len;
    int rc = load_input(hex, file, &data, &len);
    if (rc)
        return rc;
    rc = decode_and_print(data, len);
    free(data);
    return rc;
}
