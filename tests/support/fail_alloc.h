/* Out of memory on demand, for the tests of paths that must go on (or
 * answer an error value) without the memory: one armed malloc, calloc,
 * realloc or strdup fails once, every other call passes through. A test
 * gets it by being listed in KVR_FAIL_ALLOC_TESTS (CMakeLists.txt), which
 * links it with tests/support/fail_alloc.c and -Wl,--wrap=malloc,
 * --wrap=calloc,--wrap=realloc,--wrap=strdup; only the project's own
 * objects are wrapped, not the shared libraries. jansson allocates inside
 * its own library: a test that needs its allocations to fail hands
 * kvr_fail_json_malloc to json_set_alloc_funcs. Safe from several threads
 * (a server test's HTTP threads allocate too). */
#ifndef KVR_TEST_FAIL_ALLOC_H
#define KVR_TEST_FAIL_ALLOC_H

#include <stddef.h>

/* The next malloc(size) fails (0: none). */
void kvr_fail_malloc(size_t size);
/* The next calloc(n, size) fails; n 0: of any count of elements of size. */
void kvr_fail_calloc(size_t n, size_t size);
/* The next realloc to size bytes fails (0: none). */
void kvr_fail_realloc(size_t size);
/* The next strdup of a string equal to s fails (s must outlive it). */
void kvr_fail_strdup(const char *s);
/* The k-th jansson allocation from now (k 1: the next) made on a thread
 * other than the caller's fails (0: none): the server's threads, not the
 * test's client, which parses the replies with jansson too. Takes effect
 * with json_set_alloc_funcs(kvr_fail_json_malloc, free). */
void kvr_fail_json_nth(int k);
void *kvr_fail_json_malloc(size_t size);
/* Failures injected since the last kvr_fail_reset (or the start). */
int kvr_fail_count(void);
/* Nothing armed, count 0. */
void kvr_fail_reset(void);

#endif
