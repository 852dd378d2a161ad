#include "cli/args.h"

#include <stdio.h>

#include "kvrouter/options.h"

int kvr_cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    return kvr_parse_u64(s, min, max, out);
}

int kvr_cli_usage_error(const char *cmd, const char *what, const char *arg)
{
    fprintf(stderr, "kvrouter %s: %s%s%s (try --help)\n", cmd, what, arg ? ": " : "",
            arg ? arg : "");
    return 2;
}
