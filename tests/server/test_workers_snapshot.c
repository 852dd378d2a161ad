/* The workers snapshot behind /workers and /metrics (workers_snapshot.h)
 * pairs each worker with exactly its listeners, taken in one pass over the
 * source's listeners: also when listeners were created out of worker order
 * and one instance id is registered in two groups. */
#include "test_support.h"

#include "kvrouter/server.h"
#include "net_helpers.h"
#include "server/server_internal.h"
#include "server/workers_snapshot.h"

static void reg(const char *base, uint64_t id, uint32_t rank, const char *group, int port)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"instance_id\": %llu, \"dp_rank\": %u, \"endpoint\": \"tcp://127.0.0.1:%d\", "
             "\"model_name\": \"m\", \"routing_group\": \"%s\", \"block_size\": 4}",
             (unsigned long long)id, rank, port, group);
    assert_int_equal(th_register(base, body, NULL), 201);
}

static void test_each_worker_gets_its_own_listeners(void **state)
{
    (void)state;
    char base[64];
    kvr_server *srv = th_server_start_default(base, sizeof base);
    assert_non_null(srv);
    /* listener order: (5, g1, 0) (5, g2, 0) (7, g1, 0) (5, g1, 1) (5, g2, 3);
     * nothing listens on these ports */
    reg(base, 5, 0, "g1", 1);
    reg(base, 5, 0, "g2", 2);
    reg(base, 7, 0, "g1", 3);
    reg(base, 5, 1, "g1", 4);
    reg(base, 5, 3, "g2", 5);
    kvr_workers_snapshot s;
    assert_int_equal(kvr_workers_snapshot_take(srv, &s), 0);
    assert_int_equal(s.n_workers, 3);
    assert_int_equal(s.n_listeners, 5);
    size_t seen = 0;
    for (size_t i = 0; i < s.n_workers; i++) {
        const kvr_worker_info *w = &s.workers[i];
        /* ports by (worker, group, rank) as registered above */
        int want[4] = {0, 0, 0, 0};
        if (w->worker_id == 5 && strcmp(w->routing_group, "g1") == 0) {
            want[0] = 1;
            want[1] = 4;
        } else if (w->worker_id == 5) {
            want[0] = 2;
            want[3] = 5;
        } else {
            assert_int_equal(w->worker_id, 7);
            want[0] = 3;
        }
        size_t n = s.first[i + 1] - s.first[i];
        size_t expect = 0;
        for (int r = 0; r < 4; r++)
            expect += want[r] != 0;
        assert_int_equal(n, expect);
        for (size_t k = s.first[i]; k < s.first[i + 1]; k++) {
            const kvr_listener_info *l = &s.listeners[k];
            assert_ptr_equal(l->worker, w->worker);
            assert_int_equal(l->worker_id, w->worker_id);
            assert_true(l->dp_rank < 4 && want[l->dp_rank] != 0);
            char ep[64];
            snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", want[l->dp_rank]);
            assert_string_equal(l->endpoint, ep);
            want[l->dp_rank] = 0; /* once */
            seen++;
        }
    }
    assert_int_equal(seen, 5);
    kvr_workers_snapshot_free(&s);
    kvr_server_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_worker_gets_its_own_listeners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
