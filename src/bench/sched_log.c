/* The concurrent bench's scheduler log (sched_log.h): why a reader waited. */
#include "bench/sched_log.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "util/grow.h"

/* The time on a CPU comes from the thread's CPU clock: schedstat's own
 * figure is only brought up to date at a tick or a switch (4 ms here). */
static int read_sample(int fd, uint64_t now_ns, kvr_sched_sample *s)
{
    char buf[96];
    uint64_t run_stale;
    struct timespec cpu;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0 || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) != 0)
        return -1;
    buf[n] = '\0';
    s->at_ns = now_ns;
    s->run_ns = (uint64_t)cpu.tv_sec * 1000000000u + (uint64_t)cpu.tv_nsec;
    return sscanf(buf, "%" SCNu64 " %" SCNu64, &run_stale, &s->queued_ns) == 2 ? 0 : -1;
}

void kvr_sched_log_take(kvr_sched_log *l, uint64_t now_ns, int force)
{
    if (l->fd < 0 || (!force && l->n && now_ns - l->v[l->n - 1].at_ns < l->every_ns))
        return;
    kvr_sched_sample s;
    if (read_sample(l->fd, now_ns, &s) < 0 || KVR_GROW(l->v, l->cap, l->n + 1) < 0) {
        close(l->fd); /* keeps what it has: the spans it covers stay right */
        l->fd = -1;
        return;
    }
    l->v[l->n++] = s;
}

void kvr_sched_log_open(kvr_sched_log *l, uint64_t every_ns, uint64_t now_ns)
{
    *l = (kvr_sched_log){-1, every_ns, NULL, 0, 0};
    l->fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    kvr_sched_log_take(l, now_ns, 1);
}

void kvr_sched_log_close(kvr_sched_log *l)
{
    if (l->fd >= 0)
        close(l->fd);
    free(l->v);
    *l = (kvr_sched_log){-1, 0, NULL, 0, 0};
}

/* the first sample taken at or after t (l->n when none) */
static size_t first_at_or_after(const kvr_sched_log *l, uint64_t t)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->v[mid].at_ns < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int kvr_sched_log_span(const kvr_sched_log *l, uint64_t from_ns, uint64_t to_ns,
                       kvr_sched_span *out)
{
    size_t b = first_at_or_after(l, to_ns), a = first_at_or_after(l, from_ns);
    if (a == l->n || l->v[a].at_ns > from_ns) /* none at from_ns: the one before */
        a = a ? a - 1 : l->n;
    if (from_ns > to_ns || a >= l->n || b >= l->n)
        return 0;
    const kvr_sched_sample *s0 = &l->v[a], *s1 = &l->v[b];
    *out = (kvr_sched_span){s0->at_ns, s1->at_ns, s1->run_ns - s0->run_ns,
                            s1->queued_ns - s0->queued_ns};
    return 1;
}
