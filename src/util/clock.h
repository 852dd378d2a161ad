/* The one monotonic clock of the library (seconds as a double: every timer
 * in kvrouter is coarser than a microsecond, and a double keeps them
 * simple), and the wall clock for timestamps people read. */
#ifndef KVR_UTIL_CLOCK_H
#define KVR_UTIL_CLOCK_H

#include <time.h>

/* Seconds on any POSIX clock (CPU-time clocks too). */
static inline double kvr_clock_seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline double kvr_clock_mono(void) { return kvr_clock_seconds(CLOCK_MONOTONIC); }

/* Seconds since the Unix epoch. */
static inline double kvr_clock_wall(void) { return kvr_clock_seconds(CLOCK_REALTIME); }

#endif
