/* kvrouter command dispatcher. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "kvrouter/version.h"

/* Weak so that a command still being written never breaks the others' build. */
#pragma weak kvr_cmd_hash
#pragma weak kvr_cmd_decode
#pragma weak kvr_cmd_serve
#pragma weak kvr_cmd_tap
#pragma weak kvr_cmd_bench
#pragma weak kvr_cmd_sim

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

static void usage(FILE *out, const command *cmds, size_t n)
{
    fprintf(out, "usage: kvrouter <command> [options]   (kvrouter <command> --help)\n"
                 "       kvrouter --version\n\n"
                 "KV-cache-aware router for LLM serving fleets.\n\ncommands:\n");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-8s %s%s\n", cmds[i].name, cmds[i].summary,
                cmds[i].fn ? "" : " (not built)");
}

int main(int argc, char **argv)
{
    const command cmds[] = {
        {"serve", kvr_cmd_serve, "run the router service (ZeroMQ sources + HTTP API)"},
        {"hash", kvr_cmd_hash, "print router block hashes of a token sequence"},
        {"decode", kvr_cmd_decode, "decode one msgpack KV event batch to JSON lines"},
        {"tap", kvr_cmd_tap, "subscribe to an engine and print its decoded events"},
        {"bench", kvr_cmd_bench, "replay a trace's event stream through the index"},
        {"sim", kvr_cmd_sim, "simulated SGLang fleet: kvrouter vs baseline policies"},
    };
    size_t n = sizeof cmds / sizeof cmds[0];
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout, cmds, n);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("kvrouter %s\n", kvr_version());
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[1], cmds[i].name) == 0) {
            if (!cmds[i].fn) {
                fprintf(stderr, "kvrouter: command '%s' is not built yet\n", argv[1]);
                return 2;
            }
            return cmds[i].fn(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "kvrouter: unknown command '%s' (try --help)\n", argv[1]);
    return 2;
}
