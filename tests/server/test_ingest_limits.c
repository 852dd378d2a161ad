/* The per-message byte limit over real ZeroMQ (SPEC §12): a payload above
 * max_message_bytes is refused before decoding and counted
 * (messages_over_limit in /workers and /metrics), what was indexed stays,
 * and the next batch applies. */
#include "test_support.h"

#include "kvrouter/server.h"
#include "net_helpers.h"

#define BS 4
#define WAIT 10000
#define LIMIT 4096

static void test_message_over_limit_counted_listener_continues(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.source.max_message_bytes = LIMIT;
    char base[64];
    kvr_server *srv = th_server_start(&cfg, base, sizeof base);
    assert_non_null(srv);
    th_engine e;
    th_engine_start(&e);
    uint64_t local[1];
    assert_int_equal(th_index_one_block(base, &e, 5, local), BS);

    /* one store of 2048 tokens (each 2+ bytes): above the 4 KiB limit */
    static uint64_t big[2048];
    for (size_t i = 0; i < 2048; i++)
        big[i] = 1000 + i;
    uint64_t bh[512];
    for (size_t i = 0; i < 512; i++)
        bh[i] = 100 + i;
    kvr_raw_event huge = th_store(bh, 512, 0, big, BS);
    th_send_events(&e, 1, &huge, 1, true);
    assert_int_equal(th_wait_counter(base, 5, "m", "messages_over_limit", 1, WAIT), 1);
    assert_int_equal(th_counter(base, 5, "m", "malformed_batches"), 0);
    assert_int_equal(th_score(base, "m", local, 1, 5, 0), BS); /* state kept */

    uint64_t t2[BS] = {5, 6, 7, 8}, l2[1], h2 = 12;
    th_local_hashes(t2, BS, BS, l2, 1);
    kvr_raw_event ev = th_store(&h2, 1, 0, t2, BS);
    th_send_events(&e, 2, &ev, 1, true);
    assert_int_equal(th_wait_score(base, "m", l2, 1, 5, 0, BS, WAIT), BS);

    long st;
    char *metrics = NULL;
    char url[96];
    snprintf(url, sizeof url, "%s/metrics", base);
    st = th_http("GET", url, NULL, 0, &metrics);
    assert_int_equal(st, 200);
    assert_non_null(strstr(metrics, "kvr_source_messages_over_limit_total 1\n"));
    free(metrics);
    th_engine_stop(&e);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_over_limit_counted_listener_continues),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
