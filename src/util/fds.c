/* Descriptor accounting (fds.h). Linux: /proc/self/status (proc_status.h) and poll(2). */
#include "util/fds.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "kvrouter/log.h"
#include "util/proc_status.h"

size_t kvr_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)rl.rlim_cur;
}

int kvr_fd_raise_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        kvr_log(KVR_LOG_WARN, "descriptor limit (RLIMIT_NOFILE) cannot be read: %s",
                strerror(errno));
        return -1;
    }
    if (rl.rlim_cur >= rl.rlim_max)
        return 0;
    rlim_t soft = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        kvr_log(KVR_LOG_WARN,
                "descriptor limit (RLIMIT_NOFILE): soft %llu, hard %llu; raising the soft "
                "limit failed: %s",
                (unsigned long long)soft, (unsigned long long)rl.rlim_max, strerror(errno));
        return -1;
    }
    kvr_log(KVR_LOG_INFO,
            "descriptor limit (RLIMIT_NOFILE): soft %llu raised to the hard limit %llu",
            (unsigned long long)soft, (unsigned long long)rl.rlim_max);
    return 1;
}

/* The size of the process's descriptor table: every open descriptor is
 * below it. 0 when unknown. */
static size_t table_size(void)
{
    double n;
    return kvr_proc_status_value("FDSize", &n) && n > 0 ? (size_t)n : 0;
}

/* Descriptors open below n (poll marks the closed ones POLLNVAL); SIZE_MAX
 * when they cannot be counted. */
static size_t count_open(size_t n)
{
    struct pollfd *p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = (int)i, .events = 0};
    size_t open = SIZE_MAX;
    if (poll(p, (nfds_t)n, 0) >= 0) {
        open = 0;
        for (size_t i = 0; i < n; i++)
            open += !(p[i].revents & POLLNVAL);
    }
    free(p);
    return open;
}

bool kvr_fd_free_at_least(size_t n, size_t *open)
{
    size_t limit = kvr_fd_limit(), table = table_size();
    if (limit == SIZE_MAX) {
        *open = table;
        return true;
    }
    if (table && table <= limit && n <= limit - table) {
        *open = table; /* everything from the table's end to the limit is free */
        return true;
    }
    size_t counted = count_open(table && table < limit ? table : limit);
    *open = counted == SIZE_MAX ? limit : counted;
    return counted != SIZE_MAX && counted <= limit && n <= limit - counted;
}
