/* One reader of /proc/self/status for the figures the kernel keeps there
 * and nowhere cheaper: the descriptor table's size (fds.c bounds what is
 * open with it) and the resident set (the server's malloc_trim decides on
 * it). Linux only, like the service. */
#ifndef KVR_UTIL_PROC_STATUS_H
#define KVR_UTIL_PROC_STATUS_H

#include <stdbool.h>

/* The number after "key:" in /proc/self/status (e.g. "FDSize", "VmRSS",
 * which the kernel gives in kB), in *value. false when the file or the key
 * is missing. */
bool kvr_proc_status_value(const char *key, double *value);

#endif
