/* The one grow-by-doubling step for dynamic arrays. Each copy of this loop
 * once had its own overflow behaviour (cap * 2 wrapping, cap * elt
 * wrapping); here both are checked once. */
#ifndef KVR_UTIL_GROW_H
#define KVR_UTIL_GROW_H

#include <stddef.h>

/* Makes *buf (elements of elt bytes, *cap of them) hold at least need
 * elements, doubling from max(*cap, min_cap). 0 on success (also when it
 * already fits); -1 when the size overflows or realloc fails, with *buf and
 * *cap untouched. */
int kvr_grow(void **buf, size_t *cap, size_t need, size_t elt, size_t min_cap);

/* Typed convenience: KVR_GROW(ptr, cap, need) for `T *ptr; size_t cap`. */
#define KVR_GROW(ptr, cap, need) \
    kvr_grow((void **)&(ptr), &(cap), (need), sizeof *(ptr), 8)

#endif
