#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/hex.h"

const char *kvr_test_path(const char *relative)
{
    static char buf[4096];
    const char *root = getenv("KVR_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", relative);
    return buf;
}

const char *kvr_test_binary(void)
{
    const char *bin = getenv("KVR_BINARY");
    return bin ? bin : "./kvrouter";
}

char *kvr_test_run(const char *cmdline, int *status)
{
    FILE *p = popen(cmdline, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0, n;
    char *out = malloc(cap);
    assert_non_null(out);
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) {
            cap *= 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
    }
    out[len] = '\0';
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

char *kvr_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[size] = 0;
        if (len)
            *len = (size_t)size;
    }
    return buf;
}

unsigned char *kvr_test_hex(const char *hex, size_t *len)
{
    size_t n = strlen(hex);
    if (n % 2)
        return NULL;
    unsigned char *out = malloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = kvr_hex_digit(hex[2 * i]), lo = kvr_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    *len = n / 2;
    return out;
}

json_t *kvr_test_load_json(const char *relative)
{
    json_error_t err;
    json_t *j = json_load_file(kvr_test_path(relative), 0, &err);
    if (!j)
        fail_msg("cannot parse %s: %s (line %d)", relative, err.text, err.line);
    return j;
}

uint64_t kvr_test_u64(const char *decimal)
{
    return strtoull(decimal, NULL, 10);
}

json_t *kvr_test_last_line_json(const char *out)
{
    size_t len = strlen(out);
    assert_true(len > 2 && out[len - 1] == '\n');
    const char *start = out + len - 2;
    while (start > out && start[-1] != '\n')
        start--;
    json_error_t err;
    json_t *j = json_loadb(start, (size_t)(out + len - start), 0, &err);
    if (!j)
        fail_msg("last line is not JSON: %s (%s)", start, err.text);
    return j;
}

const char *kvr_test_write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/kvr_test_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

void kvr_test_replace_file(const char *path, const char *text)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
}
