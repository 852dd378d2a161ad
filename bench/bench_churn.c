/* Memory after churn (SPEC §12, issue 10): does the server's RSS come back
 * once its index drains? Not a ctest: a measurement.
 *
 *   bench_churn [events] [window]
 *       one engine publishes batches of 32 stores (4 blocks x 16 tokens,
 *       new hashes each) and 32 removals of the stores `window` batches
 *       earlier, over real ZeroMQ into an in-process server, until `events`
 *       events (default 10,000,000; window 2000 batches: 256 k blocks held),
 *       then a clear (tests/server/churn.h). Prints RSS before the churn,
 *       its peak, and after the index drained (the server's housekeeping
 *       gives memory back within a few seconds), then after an explicit
 *       malloc_trim for reference, as JSON; RSS from /proc/self/status.
 *
 * Built by CMake (bench/CMakeLists.txt) as BUILD/bench/bench_churn.
 */
#include <inttypes.h>
#include <malloc.h>

#include "churn.h"
#include "kvrouter/server.h"

int main(int argc, char **argv)
{
    uint64_t events = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    uint64_t window = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000;
    curl_global_init(CURL_GLOBAL_ALL);
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    char base[64];
    kvr_server *srv = th_server_start(&cfg, base, sizeof base);
    th_engine e;
    th_engine_start(&e);
    if (!srv || !churn_register(base, &e)) {
        fprintf(stderr, "server or registration failed\n");
        return 1;
    }
    th_sleep_ms(1500);
    double before = churn_status_mib("VmRSS"), held = 0, t0 = th_now();
    uint64_t batches = events / (2 * CHURN_STORES);
    long long applied = churn_run(base, &e, batches, window, &held);
    double seconds = th_now() - t0;
    double blocks_after = th_metric(base, "kvr_index_blocks{model=\"m\",group=\"default\"}");
    /* the housekeeping runs once a second: the lowest RSS of the next 5 s */
    double after = churn_status_mib("VmRSS");
    for (int k = 0; k < 50; k++) {
        th_sleep_ms(100);
        double r = churn_status_mib("VmRSS");
        after = r < after ? r : after;
    }
    double peak = churn_status_mib("VmHWM"), trims = th_metric(base, "kvr_memory_trims_total");
    malloc_trim(0);
    double trimmed = churn_status_mib("VmRSS");
    printf("{\"bench\":\"churn\",\"events\":%" PRIu64 ",\"window_batches\":%" PRIu64
           ",\"batches_applied\":%lld,\"seconds\":%.1f,\"index_blocks_before_clear\":%.0f,"
           "\"index_blocks_after\":%.0f,\"rss_before_mib\":%.1f,\"rss_peak_mib\":%.1f,"
           "\"rss_after_mib\":%.1f,\"server_trims\":%.0f,\"rss_after_explicit_trim_mib\":%.1f}\n",
           events, window, applied, seconds, held, blocks_after, before, peak, after, trims,
           trimmed);
    th_engine_stop(&e);
    kvr_server_stop(srv);
    curl_global_cleanup();
    return 0;
}
