/* The process_* families every Prometheus client library exports (same
 * names, units and sources: /proc/self/stat, /proc/stat btime,
 * /proc/self/fd, RLIMIT_NOFILE), so standard dashboards and alerts work on
 * kvrouter unchanged; and kvr_build_info. Linux only, like the service. */
#include "server/metrics.h"
#include "kvrouter/version.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct {
    double utime, stime;   /* clock ticks */
    double starttime;      /* ticks after boot */
    double vsize;          /* bytes */
    double rss_pages;
} proc_stat;

/* Fields 14, 15, 22, 23, 24 of /proc/self/stat, counted after the command
 * name, which may hold spaces and parentheses (so from the last ')'). */
static bool read_proc_stat(proc_stat *ps)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return false;
    double v[24] = {0};
    int field = 2; /* the ')' ends field 2 */
    for (char *tok = strtok(p + 1, " "); tok && field < 24; tok = strtok(NULL, " "))
        v[++field - 1] = strtod(tok, NULL);
    if (field < 24)
        return false;
    ps->utime = v[13];
    ps->stime = v[14];
    ps->starttime = v[21];
    ps->vsize = v[22];
    ps->rss_pages = v[23];
    return true;
}

static double boot_time(void)
{
    char line[256];
    double bt = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "btime ", 6) == 0) {
            bt = strtod(line + 6, NULL);
            break;
        }
    fclose(f);
    return bt;
}

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void gauge(kvr_sbuf *b, const char *name, const char *type, const char *help, double v)
{
    kvr_metrics_family(b, name, type, help);
    kvr_sbuf_printf(b, "%s %.15g\n", name, v);
}

void kvr_metrics_process(kvr_sbuf *b)
{
    char version[128];
    kvr_metrics_label_value(version, sizeof version, kvr_version());
    kvr_metrics_family(b, "kvr_build_info", "gauge", "kvrouter build; the value is always 1");
    kvr_sbuf_printf(b, "kvr_build_info{version=\"%s\"} 1\n", version);

    proc_stat ps;
    double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
    if (read_proc_stat(&ps) && tick > 0) {
        gauge(b, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
              (ps.utime + ps.stime) / tick);
        gauge(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
              ps.rss_pages * page);
        gauge(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
              ps.vsize);
        gauge(b, "process_start_time_seconds", "gauge",
              "Start time of the process since unix epoch in seconds.",
              boot_time() + ps.starttime / tick);
    }
    long fds = open_fds();
    if (fds >= 0)
        gauge(b, "process_open_fds", "gauge", "Number of open file descriptors.", (double)fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        gauge(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
              (double)rl.rlim_cur);
}
