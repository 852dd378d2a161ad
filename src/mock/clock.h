/* Seconds on a POSIX clock as a double: CLOCK_MONOTONIC for wall time,
 * the CPU-time clocks for what one core did on a shared machine. */
#ifndef KVR_MOCK_CLOCK_H
#define KVR_MOCK_CLOCK_H

#include <time.h>

static inline double kvr_sim_seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
