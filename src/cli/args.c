#include "cli/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int kvr_cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int kvr_cli_usage_error(const char *cmd, const char *what, const char *arg)
{
    fprintf(stderr, "kvrouter %s: %s%s%s (try --help)\n", cmd, what, arg ? ": " : "",
            arg ? arg : "");
    return 2;
}
