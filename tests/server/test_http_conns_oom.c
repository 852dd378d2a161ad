/* Out of memory at a connection's accept (http_conns.c kvr_conns_accept):
 * a connection the limits cannot count (no memory for its pending slot or
 * its address's entry in the per-address map) is refused and counted,
 * kvr_http_connections_refused_total{limit="out_of_memory"}, where it was
 * let in uncounted (escaping max_connections_per_ip, and skewing its
 * address's count when it closed). The per-address map's first slot array
 * is made to fail (tests/support/fail_alloc.h: the armed calloc). Out of
 * memory as it starts (started(): the record that times its requests) it
 * is closed and counted the same. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>

#include "kvrouter/server.h"
#include "server/http_conns.h"
#include "util/u64map.h"
#include "net_helpers.h"
#include "fail_alloc.h"

#define REFUSED_OOM "kvr_http_connections_refused_total{limit=\"out_of_memory\"}"

static long get_health(const char *base)
{
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "%s/health", base);
    long st = th_http("GET", url, NULL, 0, &out);
    free(out);
    return st;
}

static void test_connection_without_memory_to_count_is_refused(void **state)
{
    (void)state;
    kvr_server_config cfg;
    kvr_server_config_default(&cfg);
    cfg.port = 0;
    cfg.max_connections_per_ip = 8; /* counted per address (a closed one is uncounted late) */
    char base[64];
    kvr_server *srv = th_server_start(&cfg, base, sizeof base);
    assert_non_null(srv);

    kvr_fail_reset();
    kvr_fail_calloc(0, sizeof(kvr_u64map_slot)); /* the first connection's address entry */
    assert_int_equal(get_health(base), 0);       /* closed at accept; before: 200 */
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(get_health(base), 200);
    assert_int_equal(th_metric(base, REFUSED_OOM), 1);
    assert_int_equal(
        th_metric(base, "kvr_http_connections_refused_total{limit=\"max_connections_per_ip\"}"), 0);
    kvr_server_stop(srv);
}

/* A connection let in whose record (its request deadline) cannot be made is
 * closed as it starts and counted with the accept's: kept open untracked it
 * would escape the request deadline (only libmicrohttpd's inactivity
 * timeout, reset by every byte, covered it). */
static void test_connection_without_memory_for_its_deadline_is_closed(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);

    kvr_fail_reset();
    kvr_fail_calloc(1, kvr_conns_record_size()); /* the next connection's record */
    assert_int_equal(get_health(base), 0);         /* closed as it starts; before: 200 */
    assert_int_equal(kvr_fail_count(), 1);
    assert_int_equal(get_health(base), 200);
    assert_int_equal(th_metric(base, REFUSED_OOM), 1);
    /* The closed one is not counted as accepted: the 200's connection, the
     * first scrape's and this one's are. */
    assert_int_equal(th_metric(base, "kvr_http_connections_accepted_total"), 3);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connection_without_memory_to_count_is_refused),
        cmocka_unit_test(test_connection_without_memory_for_its_deadline_is_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
