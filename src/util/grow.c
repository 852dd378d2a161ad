/* kvr_grow: see grow.h. */
#include "util/grow.h"

#include <stdint.h>
#include <stdlib.h>

int kvr_grow(void **buf, size_t *cap, size_t need, size_t elt, size_t min_cap)
{
    if (need <= *cap)
        return 0;
    if (elt == 0)
        return -1;
    size_t ncap = *cap > min_cap ? *cap : (min_cap ? min_cap : 1);
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            return -1;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elt)
        return -1;
    void *p = realloc(*buf, ncap * elt);
    if (!p)
        return -1;
    *buf = p;
    *cap = ncap;
    return 0;
}
