/* The wrappers of fail_alloc.h. Each arming is one atomic claim: the call
 * that matches takes it (compare-exchange), so one failure is injected
 * however many threads allocate. */
#include "fail_alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__wrap_strdup(const char *s);

static _Atomic size_t malloc_size;           /* armed while != 0 */
static _Atomic size_t calloc_n, calloc_size; /* armed while calloc_size != 0 */
static _Atomic size_t realloc_size;          /* armed while != 0 */
static const char *_Atomic strdup_of;        /* armed while != NULL */
static _Atomic int json_left;                /* armed while > 0: the failing one's rank */
static pthread_t json_armer;                 /* its allocations do not count */
static _Atomic int failures;

void kvr_fail_malloc(size_t size) { atomic_store(&malloc_size, size); }

void kvr_fail_calloc(size_t n, size_t size)
{
    atomic_store(&calloc_n, n);
    atomic_store(&calloc_size, size);
}

void kvr_fail_realloc(size_t size) { atomic_store(&realloc_size, size); }

void kvr_fail_strdup(const char *s) { atomic_store(&strdup_of, s); }

void kvr_fail_json_nth(int k)
{
    json_armer = pthread_self();
    atomic_store(&json_left, k);
}

int kvr_fail_count(void) { return atomic_load(&failures); }

void kvr_fail_reset(void)
{
    atomic_store(&malloc_size, 0);
    atomic_store(&calloc_size, 0);
    atomic_store(&realloc_size, 0);
    atomic_store(&strdup_of, NULL);
    atomic_store(&json_left, 0);
    atomic_store(&failures, 0);
}

/* Whether this call takes the armed size want (claimed: disarmed). */
static bool take(_Atomic size_t *armed, size_t size)
{
    size_t want = size;
    if (!size || !atomic_compare_exchange_strong(armed, &want, 0))
        return false;
    atomic_fetch_add(&failures, 1);
    return true;
}

void *__wrap_malloc(size_t size)
{
    if (take(&malloc_size, size))
        return NULL;
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    size_t want_n = atomic_load(&calloc_n);
    if ((want_n == 0 || want_n == n) && take(&calloc_size, size))
        return NULL;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    if (take(&realloc_size, size))
        return NULL;
    return __real_realloc(p, size);
}

char *__wrap_strdup(const char *s)
{
    const char *want = atomic_load(&strdup_of);
    if (want && strcmp(s, want) == 0 && atomic_compare_exchange_strong(&strdup_of, &want, NULL)) {
        atomic_fetch_add(&failures, 1);
        return NULL;
    }
    return __real_strdup(s);
}

/* jansson's allocator: the armed count goes down by one per allocation of
 * another thread; the one that takes it from 1 to 0 fails. (json_armer is
 * read only once a count above 0 is seen: written before it.) */
void *kvr_fail_json_malloc(size_t size)
{
    int left = atomic_load(&json_left);
    while (left > 0 && !pthread_equal(pthread_self(), json_armer) &&
           !atomic_compare_exchange_weak(&json_left, &left, left - 1))
        ;
    if (left == 1 && !pthread_equal(pthread_self(), json_armer)) {
        atomic_fetch_add(&failures, 1);
        return NULL;
    }
    return __real_malloc(size);
}
