/* Argument parsing shared by the kvrouter subcommands. */
#ifndef KVR_CLI_ARGS_H
#define KVR_CLI_ARGS_H

#include <stdint.h>

/* Strict unsigned decimal in [min, max]: no sign, spaces, junk or overflow
 * (strtoull alone would accept "-1", " 7" and "7x"). 0 on success, -1 if not. */
int kvr_cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* The one-line answer to a bad command line: "kvrouter CMD: WHAT[: ARG]
 * (try --help)" on stderr. Returns 2, the exit status for bad arguments. */
int kvr_cli_usage_error(const char *cmd, const char *what, const char *arg);

#endif
