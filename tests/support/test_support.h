/* Helpers shared by the cmocka tests: fixture paths, files, hex. */
#ifndef KVR_TEST_SUPPORT_H
#define KVR_TEST_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>

/* Absolute path of a repository file (KVR_SOURCE_DIR is set by ctest). */
const char *kvr_test_path(const char *relative);
/* Whole file into a malloc'd buffer; NULL on error. */
char *kvr_test_read_file(const char *path, size_t *len);
/* Hex string -> malloc'd bytes; NULL if not valid hex. */
unsigned char *kvr_test_hex(const char *hex, size_t *len);
/* Parses a repository JSON file; fails the test if it cannot. */
json_t *kvr_test_load_json(const char *relative);
/* u64 from a decimal string (fixtures keep u64 as strings). */
uint64_t kvr_test_u64(const char *decimal);
/* Path of the built kvrouter binary (KVR_BINARY, set by ctest). */
const char *kvr_test_binary(void);
/* Runs a shell command line; returns its whole stdout (malloc'd, NUL
 * terminated) and sets *status to its exit status (-1 if it did not exit). */
char *kvr_test_run(const char *cmdline, int *status);
/* The last line of a command's output (which must end in a newline) parsed as
 * JSON; fails the test if it is not. */
json_t *kvr_test_last_line_json(const char *out);

/* Writes text to a new temporary file; returns its path (a static buffer,
 * valid until the next call). The caller unlinks it. */
const char *kvr_test_write_tmp(const char *text);

/* Replaces the file at path whole (write path.new, rename), so a reader
 * (a reloading server) never sees half of it; fails the test if it cannot. */
void kvr_test_replace_file(const char *path, const char *text);

#endif
