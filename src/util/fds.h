/* The process's file descriptors: the soft limit (RLIMIT_NOFILE) and
 * whether a number of them are still free, checked cheaply enough to run
 * before every new listener (SPEC §12: running out of descriptors must be a
 * clear refusal, never a half-opened worker or an HTTP server that cannot
 * accept). */
#ifndef KVR_UTIL_FDS_H
#define KVR_UTIL_FDS_H

#include <stdbool.h>
#include <stddef.h>

/* The soft RLIMIT_NOFILE; SIZE_MAX when unlimited or unknown. */
size_t kvr_fd_limit(void);

/* Raises the soft RLIMIT_NOFILE to the hard limit (what the operator
 * allows: every HTTP connection and engine listener holds descriptors, and
 * a soft limit of 1024 is common). Logs both limits when it raises or fails;
 * silent when they are equal already. 1 raised, 0 nothing to raise, -1 the
 * limit cannot be read or set. */
int kvr_fd_raise_limit(void);

/* Whether at least n descriptors can still be opened (limit minus those
 * open). *open gets the number open when it was counted, else an upper
 * bound. Cheap far from the limit (the kernel's descriptor table size bounds
 * what is open: one read of /proc/self/status); near it, one poll(2) over
 * the table counts exactly (about 3 ms for 10,000 descriptors). */
bool kvr_fd_free_at_least(size_t n, size_t *open);

#endif
