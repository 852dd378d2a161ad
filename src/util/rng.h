/* splitmix64: a tiny seeded generator, enough for tie-breaks, sampling and
 * reproducible simulations (not for anything an adversary may predict). */
#ifndef KVR_UTIL_RNG_H
#define KVR_UTIL_RNG_H

#include <stdint.h>

static inline uint64_t kvr_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

#endif
