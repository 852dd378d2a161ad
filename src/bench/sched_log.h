/* What the scheduler did to one thread, sampled from Linux's
 * /proc/thread-self/schedstat while the concurrent bench runs: time on a
 * CPU and time runnable but waiting for one. A reader's long wait for the
 * write lock is either the writer working (on its CPU) or the writer off
 * its core while it holds the lock; this log tells which, per run. */
#ifndef KVR_BENCH_SCHED_LOG_H
#define KVR_BENCH_SCHED_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t at_ns;     /* kvr_index_now_ns when read */
    uint64_t run_ns;    /* its time on a CPU so far (its CPU clock) */
    uint64_t queued_ns; /* its time runnable, waiting for a CPU, so far */
} kvr_sched_sample;

typedef struct {
    int fd; /* -1: not available (not Linux, no schedstat): nothing is logged */
    uint64_t every_ns;
    kvr_sched_sample *v;
    size_t n, cap;
} kvr_sched_log;

/* Opens the calling thread's schedstat (the log must be taken by that
 * thread) and takes a first sample. Without it the log stays empty. */
void kvr_sched_log_open(kvr_sched_log *l, uint64_t every_ns, uint64_t now_ns);
/* Takes a sample if the last one is every_ns old (the two reads cost ~2-3 us);
 * force takes one anyway. Stops logging when memory runs out. */
void kvr_sched_log_take(kvr_sched_log *l, uint64_t now_ns, int force);
void kvr_sched_log_close(kvr_sched_log *l);

/* The thread's time over the samples around [from_ns, to_ns]: the last one
 * at or before from_ns, the first at or after to_ns. Wall time the thread
 * spent neither on a CPU nor queued for one was spent asleep (blocked) or
 * with its virtual CPU stopped by the host. 0 if the log does not cover
 * the span. */
typedef struct {
    uint64_t from_ns, to_ns;       /* the samples found */
    uint64_t run_ns, queued_ns;    /* over them */
} kvr_sched_span;
int kvr_sched_log_span(const kvr_sched_log *l, uint64_t from_ns, uint64_t to_ns,
                       kvr_sched_span *out);

#endif
