/* /proc/self/status fields (proc_status.h). */
#include "util/proc_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kvr_proc_status_value(const char *key, double *value)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return false;
    size_t klen = strlen(key);
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            *value = strtod(line + klen + 1, NULL);
            found = true;
        }
    fclose(f);
    return found;
}
