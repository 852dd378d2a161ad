/* CPU time to parse a 2,000-token /route body: jansson alone, the spliced
 * tree (kvr_json_load_body), and the /query-/route path (token_ids kept as
 * a u32 vector). CPU time, not wall time, since the machine is shared.
 * Built by CMake with everything else (bench/CMakeLists.txt):
 *   BUILD/bench/bench_body [iterations] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/json_body.h"

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int it = argc > 1 ? atoi(argv[1]) : 3000;
    static char buf[40000];
    int n = sprintf(buf, "{\"model_name\":\"m\",\"request_id\":\"r1\",\"token_ids\":[");
    for (int i = 0; i < 2000; i++) /* the token values of route_bench.sh */
        n += sprintf(buf + n, "%s%d", i ? "," : "", (i * 31) % 150000 + 10);
    n += sprintf(buf + n, "]}");
    static const char *const keys[] = {"token_ids", NULL};
    static const kvr_json_body_opts opts = {keys};
    for (int round = 0; round < 3; round++) {
        double t = cpu();
        for (int i = 0; i < it; i++)
            json_decref(json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL));
        double jansson = (cpu() - t) / it * 1e6;
        t = cpu();
        for (int i = 0; i < it; i++)
            json_decref(kvr_json_load_body(buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL));
        double tree = (cpu() - t) / it * 1e6;
        t = cpu();
        for (int i = 0; i < it; i++) {
            kvr_json_body b;
            uint32_t *tok;
            size_t nt, bad;
            if (kvr_json_body_parse(buf, (size_t)n, JSON_REJECT_DUPLICATES, &opts, &b, NULL) ||
                kvr_json_body_u32(&b, "token_ids", 1u << 20, &tok, &nt, &bad) != KVR_JSON_VEC_OK ||
                nt != 2000)
                return 1;
            free(tok);
            kvr_json_body_free(&b);
        }
        double vec = (cpu() - t) / it * 1e6;
        printf("%d-byte body, CPU us/parse: json_loadb %.1f  kvr_json_load_body %.1f  "
               "token_ids as u32 vector %.1f\n", n, jansson, tree, vec);
    }
    return 0;
}
