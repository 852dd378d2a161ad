/* malloc_trim when the index drained (trim.h). */
#include "server/trim.h"

#include <malloc.h>

#include "kvrouter/log.h"
#include "util/proc_status.h"

bool kvr_trim_due(kvr_trim_state *t, uint64_t index_bytes, uint64_t rss_bytes, double now)
{
    if (index_bytes > t->high)
        t->high = index_bytes;
    if (t->rss_floor == 0)
        t->rss_floor = rss_bytes;
    bool drained = t->high - index_bytes >= KVR_TRIM_MIN_DRAIN && index_bytes <= t->high / 2;
    uint64_t grown = rss_bytes > t->rss_floor ? rss_bytes - t->rss_floor : 0;
    bool unexplained = grown >= KVR_TRIM_MIN_DRAIN && index_bytes <= grown / 2;
    return (drained || unexplained) && (t->last == 0 || now - t->last >= KVR_TRIM_INTERVAL_S);
}

/* VmRSS in MiB; -1 when unknown. */
static double rss_mib(void)
{
    double kib;
    return kvr_proc_status_value("VmRSS", &kib) ? kib / 1024 : -1;
}

void kvr_trim_start(kvr_trim_state *t)
{
    double rss = rss_mib();
    t->rss_floor = rss > 0 ? (uint64_t)(rss * 1048576) : 0;
}

bool kvr_trim_check(kvr_trim_state *t, uint64_t index_bytes, double now)
{
    double before = rss_mib();
    if (!kvr_trim_due(t, index_bytes, before > 0 ? (uint64_t)(before * 1048576) : 0, now))
        return false;
    malloc_trim(0);
    double after = rss_mib();
    kvr_log(KVR_LOG_DEBUG,
            "index drained (%.1f of %.1f MiB): malloc_trim, RSS %.1f -> %.1f MiB",
            (double)index_bytes / 1048576, (double)t->high / 1048576, before, after);
    t->high = index_bytes;
    t->rss_floor = after > 0 ? (uint64_t)(after * 1048576) : 0;
    t->last = now;
    atomic_fetch_add(&t->trims, 1);
    return true;
}
