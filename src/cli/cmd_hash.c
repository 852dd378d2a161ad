/* `kvrouter hash`: router block hashes (SPEC §4) of a token sequence, one
 * unsigned decimal per whole block. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "kvrouter/hash.h"

static const char hash_usage[] =
    "usage: kvrouter hash --block-size N [--lora NAME] [--salt NS] [--eagle] TOKEN...\n"
    "\n"
    "Prints the router's local hash of every whole block of TOKEN... (u32 ids), one\n"
    "unsigned decimal per line: XXH3-64 over u32 little-endian tokens, seed 1337\n"
    "mixed with the LoRA name and cache salt. --eagle hashes B+1-token windows\n"
    "with stride B (Eagle workers). Tokens after the last whole block are ignored.\n";

static const char missing_value[] = "";

/* Option value of "--opt V" or "--opt=V"; advances *i past what it used.
 * Returns missing_value when "--opt" is the last argument. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        return missing_value;
    return argv[++*i];
}

int kvr_cmd_hash(int argc, char **argv)
{
    uint64_t block_size = 0;
    kvr_str lora = {NULL, 0}, salt = {NULL, 0};
    bool eagle = false;
    uint32_t *tokens = calloc((size_t)argc, sizeof *tokens);
    size_t n = 0;
    int rc = 0;
    if (!tokens)
        return 1;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i], *v;
        uint64_t tok;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(hash_usage, stdout);
            free(tokens);
            return 0;
        } else if (strcmp(a, "--eagle") == 0) {
            eagle = true;
        } else if ((v = opt_value(argc, argv, &i, "--block-size")) ||
                   (v = opt_value(argc, argv, &i, "--lora")) ||
                   (v = opt_value(argc, argv, &i, "--salt"))) {
            if (v == missing_value)
                rc = kvr_cli_usage_error("hash", "option needs a value", a);
            else if (a[2] == 'l')
                lora = (kvr_str){v, (uint32_t)strlen(v)};
            else if (a[2] == 's')
                salt = (kvr_str){v, (uint32_t)strlen(v)};
            else if (kvr_cli_parse_u64(v, 1, UINT32_MAX, &block_size))
                rc = kvr_cli_usage_error("hash", "--block-size must be an integer in 1..4294967295",
                                         v);
        } else if (a[0] == '-' && a[1] != '\0' && (a[1] < '0' || a[1] > '9')) {
            rc = kvr_cli_usage_error("hash", "unknown option", a);
        } else if (kvr_cli_parse_u64(a, 0, UINT32_MAX, &tok)) {
            rc = kvr_cli_usage_error("hash", "token is not a u32 decimal", a);
        } else {
            tokens[n++] = (uint32_t)tok;
        }
    }
    if (rc == 0 && block_size == 0)
        rc = kvr_cli_usage_error("hash", "--block-size is required", NULL);
    if (rc == 0 && n == 0)
        rc = kvr_cli_usage_error("hash", "no tokens", NULL);
    if (rc) {
        free(tokens);
        return rc;
    }
    uint64_t seed = kvr_hash_seed(lora, salt);
    size_t blocks = kvr_hash_block_count(n, (uint32_t)block_size, eagle);
    uint64_t *out = malloc((blocks ? blocks : 1) * sizeof *out);
    if (!out) {
        free(tokens);
        return 1;
    }
    kvr_hash_blocks(tokens, n, (uint32_t)block_size, eagle, seed, out, blocks);
    for (size_t i = 0; i < blocks; i++)
        printf("%" PRIu64 "\n", out[i]);
    free(out);
    free(tokens);
    return fflush(stdout) == 0 ? 0 : 1;
}
