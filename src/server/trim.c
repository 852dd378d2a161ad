/* malloc_trim when the index drained (trim.h). */
#include "server/trim.h"

#include <malloc.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "kvrouter/log.h"

bool kvr_trim_due(kvr_trim_state *t, uint64_t index_bytes, double now)
{
    if (index_bytes > t->high)
        t->high = index_bytes;
    bool drained = t->high - index_bytes >= KVR_TRIM_MIN_DRAIN && index_bytes <= t->high / 2;
    return drained && (t->last == 0 || now - t->last >= KVR_TRIM_INTERVAL_S);
}

/* VmRSS in MiB; -1 when unknown. */
static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib / 1024;
}

bool kvr_trim_check(kvr_trim_state *t, uint64_t index_bytes, double now)
{
    if (!kvr_trim_due(t, index_bytes, now))
        return false;
    double before = rss_mib();
    malloc_trim(0);
    kvr_log(KVR_LOG_DEBUG,
            "index drained (%.1f of %.1f MiB): malloc_trim, RSS %.1f -> %.1f MiB",
            (double)index_bytes / 1048576, (double)t->high / 1048576, before, rss_mib());
    t->high = index_bytes;
    t->last = now;
    atomic_fetch_add(&t->trims, 1);
    return true;
}
