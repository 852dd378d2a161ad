/* The concurrent bench's scheduler log (src/bench/sched_log.h): a span is
 * read from the samples around it, and the log reads the thread that took
 * it, at the pace it was asked for. */
#include "test_support.h"

#include <stdlib.h>
#include <time.h>

#include "bench/sched_log.h"

/* A log of samples every 100 ns: run time +10 each, queued +1000 from the
 * third on (the thread lost its core there). */
static kvr_sched_log made_log(kvr_sched_sample *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (kvr_sched_sample){100 * (i + 1), 10 * i, i >= 2 ? 1000 * (i - 1) : 0};
    return (kvr_sched_log){-1, 100, v, n, n};
}

static void test_span_takes_the_samples_around_it(void **state)
{
    (void)state;
    kvr_sched_sample v[5]; /* at 100, 200, 300, 400, 500 */
    kvr_sched_log l = made_log(v, 5);
    kvr_sched_span sp;
    /* between samples: the one before and the one after */
    assert_int_equal(kvr_sched_log_span(&l, 150, 350, &sp), 1);
    assert_int_equal(sp.from_ns, 100);
    assert_int_equal(sp.to_ns, 400);
    assert_int_equal(sp.run_ns, 30);
    assert_int_equal(sp.queued_ns, 2000);
    /* on samples: those samples */
    assert_int_equal(kvr_sched_log_span(&l, 200, 300, &sp), 1);
    assert_int_equal(sp.from_ns, 200);
    assert_int_equal(sp.to_ns, 300);
    assert_int_equal(sp.queued_ns, 1000);
    assert_int_equal(kvr_sched_log_span(&l, 500, 500, &sp), 1);
    assert_int_equal(sp.from_ns, 500);
    assert_int_equal(sp.run_ns, 0);
    /* not covered: before the first sample, after the last, backwards */
    assert_int_equal(kvr_sched_log_span(&l, 50, 300, &sp), 0);
    assert_int_equal(kvr_sched_log_span(&l, 300, 501, &sp), 0);
    assert_int_equal(kvr_sched_log_span(&l, 300, 200, &sp), 0);
    kvr_sched_log empty = {-1, 100, NULL, 0, 0};
    assert_int_equal(kvr_sched_log_span(&empty, 100, 100, &sp), 0);
}

static uint64_t cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void test_log_reads_the_calling_thread(void **state)
{
    (void)state;
    kvr_sched_log l;
    kvr_sched_log_open(&l, 1000, 5000);
    assert_true(l.fd >= 0); /* Linux: /proc/thread-self/schedstat */
    assert_int_equal(l.n, 1);
    assert_int_equal(l.v[0].at_ns, 5000);
    /* a sample within every_ns of the last is skipped unless forced */
    kvr_sched_log_take(&l, 5999, 0);
    assert_int_equal(l.n, 1);
    /* this thread's CPU time moves between samples */
    uint64_t before = cpu_ns();
    volatile uint64_t x = 0;
    for (uint64_t i = 0; cpu_ns() - before < 2000000 && i < 4000000000u; i++)
        x += i;
    kvr_sched_log_take(&l, 6000, 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.v[1].at_ns, 6000);
    assert_true(l.v[1].run_ns >= l.v[0].run_ns + 2000000);
    assert_true(l.v[1].queued_ns >= l.v[0].queued_ns);
    kvr_sched_log_take(&l, 6001, 1);
    assert_int_equal(l.n, 3);
    kvr_sched_log_close(&l);
    assert_int_equal(l.fd, -1);
    assert_null(l.v);
    /* a closed log takes nothing */
    kvr_sched_log_take(&l, 9000, 1);
    assert_int_equal(l.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_span_takes_the_samples_around_it),
        cmocka_unit_test(test_log_reads_the_calling_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
