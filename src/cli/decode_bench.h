/* `kvrouter decode --bench`: decoder throughput on a realistic batch. */
#ifndef KVR_CLI_DECODE_BENCH_H
#define KVR_CLI_DECODE_BENCH_H

#include <stdint.h>

/* Returns the process exit status. */
int kvr_cli_decode_bench(uint64_t iterations);

#endif
