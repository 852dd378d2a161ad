/* The one monotonic clock of the library (seconds as a double: every timer
 * in kvrouter is coarser than a microsecond, and a double keeps them
 * simple), and the wall clock for timestamps people read. */
#ifndef KVR_UTIL_CLOCK_H
#define KVR_UTIL_CLOCK_H

#include <time.h>

static inline double kvr_clock_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds since the Unix epoch. */
static inline double kvr_clock_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
