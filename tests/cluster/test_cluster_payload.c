/* Every NATS payload through its one validator (src/cluster/payload.c):
 * booking batches round-trip exactly; a bad event is skipped alone and the
 * rest of its batch still reads; a bad batch (truncated, forged counts,
 * other version, too many events) is refused whole; membership records and
 * registration keys are checked field by field. */
#include "test_support.h"

#include <msgpuck.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"

#define PUB 0x1111222233334444ull
#define INC 0x99ull

static kvr_booking_event booked(const char *id, const uint64_t *chain, uint32_t n)
{
    kvr_booking_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = KVR_BOOKING_BOOKED;
    ev.request_id = id;
    ev.model_name = "kimi-k2.5";
    ev.routing_group = "g1";
    ev.worker_id = UINT64_MAX - 3;
    ev.dp_rank = 7;
    ev.prefill_tokens = 1234;
    ev.unique_blocks = 5;
    ev.chain = chain;
    ev.n_chain = n;
    return ev;
}

static kvr_booking_event op_ev(kvr_booking_op op, const char *id)
{
    kvr_booking_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = op;
    ev.request_id = id;
    return ev;
}

/* header + events into one payload */
static cl_buf batch_of(const cl_buf *events, uint32_t n)
{
    cl_buf out = {0};
    assert_int_equal(cl_batch_header(&out, PUB, INC, n), 0);
    assert_int_equal(cl_buf_append(&out, events->data, events->len), 0);
    return out;
}

static void test_batch_round_trip(void **state)
{
    (void)state;
    uint64_t chain[3] = {1, 0xfedcba9876543210ull, UINT64_MAX};
    cl_buf ev = {0};
    kvr_booking_event b = booked("req-1", chain, 3);
    assert_int_equal(cl_batch_append(&ev, &b, PUB, 4096), 0);
    kvr_booking_event p = op_ev(KVR_BOOKING_PREFILL_DONE, "req-1");
    assert_int_equal(cl_batch_append(&ev, &p, PUB, 4096), 0);
    kvr_booking_event r = op_ev(KVR_BOOKING_RELEASED, "other");
    assert_int_equal(cl_batch_append(&ev, &r, 42, 4096), 0); /* forwarded to owner 42 */
    cl_buf msg = batch_of(&ev, 3);

    cl_batch bt;
    char err[160];
    assert_int_equal(cl_batch_open(msg.data, msg.len, &bt, err, sizeof err), 0);
    assert_int_equal(bt.publisher, PUB);
    assert_int_equal(bt.incarnation, INC);
    cl_event e = {0};
    assert_int_equal(cl_batch_next(&bt, &e, err, sizeof err), 1);
    assert_int_equal(e.ev.op, KVR_BOOKING_BOOKED);
    assert_int_equal(e.ev.owner, PUB);
    assert_string_equal(e.ev.request_id, "req-1");
    assert_string_equal(e.ev.model_name, "kimi-k2.5");
    assert_string_equal(e.ev.routing_group, "g1");
    assert_true(e.ev.worker_id == UINT64_MAX - 3);
    assert_int_equal(e.ev.dp_rank, 7);
    assert_int_equal(e.ev.prefill_tokens, 1234);
    assert_int_equal(e.ev.unique_blocks, 5);
    assert_int_equal(e.ev.n_chain, 3);
    assert_memory_equal(e.ev.chain, chain, sizeof chain);
    assert_int_equal(cl_batch_next(&bt, &e, err, sizeof err), 1);
    assert_int_equal(e.ev.op, KVR_BOOKING_PREFILL_DONE);
    assert_int_equal(cl_batch_next(&bt, &e, err, sizeof err), 1);
    assert_int_equal(e.ev.op, KVR_BOOKING_RELEASED);
    assert_int_equal(e.ev.owner, 42);
    assert_string_equal(e.ev.request_id, "other");
    assert_int_equal(cl_batch_next(&bt, &e, err, sizeof err), 0);
    cl_event_free(&e);
    cl_buf_free(&ev);
    cl_buf_free(&msg);
}

static void test_long_chain_is_cut_into_unique_blocks(void **state)
{
    (void)state;
    uint64_t chain[10];
    for (int i = 0; i < 10; i++)
        chain[i] = 100 + (uint64_t)i;
    cl_buf ev = {0};
    kvr_booking_event b = booked("long", chain, 10);
    assert_int_equal(cl_batch_append(&ev, &b, PUB, 4), 0);
    cl_buf msg = batch_of(&ev, 1);
    cl_batch bt;
    char err[160];
    cl_event e = {0};
    assert_int_equal(cl_batch_open(msg.data, msg.len, &bt, err, sizeof err), 0);
    assert_int_equal(cl_batch_next(&bt, &e, err, sizeof err), 1);
    assert_int_equal(e.ev.n_chain, 4);
    assert_int_equal(e.ev.chain[3], 103);
    assert_int_equal(e.ev.unique_blocks, 5 + 6); /* the block count is kept */
    cl_event_free(&e);
    cl_buf_free(&ev);
    cl_buf_free(&msg);
}

/* One event written by hand: [op, owner, id, nil...] of n elements. */
static void raw_event(cl_buf *b, int n, uint64_t op, uint64_t owner, const char *id)
{
    char tmp[512], *p = tmp;
    p = mp_encode_array(p, (uint32_t)n);
    p = mp_encode_uint(p, op);
    p = mp_encode_uint(p, owner);
    p = mp_encode_str(p, id, (uint32_t)strlen(id));
    for (int i = 3; i < n; i++)
        p = mp_encode_nil(p);
    assert_int_equal(cl_buf_append(b, tmp, (size_t)(p - tmp)), 0);
}

static void test_bad_event_is_skipped_alone(void **state)
{
    (void)state;
    cl_buf ev = {0};
    kvr_booking_event good = op_ev(KVR_BOOKING_RELEASED, "ok-1");
    assert_int_equal(cl_batch_append(&ev, &good, PUB, 4096), 0);
    raw_event(&ev, 3, 9, PUB, "bad-op");
    raw_event(&ev, 4, KVR_BOOKING_RELEASED, PUB, "bad-arity");
    raw_event(&ev, 3, KVR_BOOKING_RELEASED, 0, "owner-zero");
    uint64_t c1[1] = {9};
    kvr_booking_event other = booked("booked-for-another", c1, 1);
    assert_int_equal(cl_batch_append(&ev, &other, 77, 4096), 0); /* owner is not the publisher */
    char big[KVR_ROUTE_MAX_ID_LEN + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    raw_event(&ev, 3, KVR_BOOKING_RELEASED, PUB, big);
    char junk[8], *q = mp_encode_str(junk, "hi", 2); /* not an array */
    cl_buf_append(&ev, junk, (size_t)(q - junk));
    /* a BOOKED whose chain is not a multiple of 8 bytes */
    uint64_t chain[2] = {5, 6};
    kvr_booking_event b = booked("odd-chain", chain, 2);
    cl_buf one = {0};
    assert_int_equal(cl_batch_append(&one, &b, PUB, 4096), 0);
    /* the bin header is 2 bytes before its 16 bytes at the end: make it 15 */
    one.data[one.len - 17] = 15;
    one.len--;
    cl_buf_append(&ev, one.data, one.len);
    kvr_booking_event good2 = op_ev(KVR_BOOKING_PREFILL_DONE, "ok-2");
    assert_int_equal(cl_batch_append(&ev, &good2, PUB, 4096), 0);
    cl_buf msg = batch_of(&ev, 9);

    cl_batch bt;
    char err[160];
    cl_event e = {0};
    assert_int_equal(cl_batch_open(msg.data, msg.len, &bt, err, sizeof err), 0);
    int rc[9];
    for (int i = 0; i < 9; i++)
        rc[i] = cl_batch_next(&bt, &e, err, sizeof err);
    assert_int_equal(rc[0], 1);
    for (int i = 1; i < 8; i++)
        if (rc[i] != -1)
            fail_msg("event %d: %d, expected -1", i, rc[i]);
    assert_int_equal(rc[8], 1);
    assert_string_equal(e.ev.request_id, "ok-2");
    assert_int_equal(cl_batch_next(&bt, &e, err, sizeof err), 0);
    cl_event_free(&e);
    cl_buf_free(&one);
    cl_buf_free(&ev);
    cl_buf_free(&msg);
}

static void test_bad_batches_are_refused(void **state)
{
    (void)state;
    char err[160];
    cl_batch bt;
    cl_buf ev = {0};
    kvr_booking_event r = op_ev(KVR_BOOKING_RELEASED, "x");
    cl_batch_append(&ev, &r, PUB, 4096);
    cl_buf msg = batch_of(&ev, 1);
    for (size_t cut = 1; cut < msg.len; cut++)
        assert_int_equal(cl_batch_open(msg.data, cut, &bt, err, sizeof err), -1);
    assert_int_equal(cl_batch_open(msg.data, 0, &bt, err, sizeof err), -1);

    char tmp[64], *p;
    /* another version */
    p = mp_encode_array(tmp, 4);
    p = mp_encode_uint(p, 2);
    p = mp_encode_uint(p, PUB);
    p = mp_encode_uint(p, INC);
    p = mp_encode_array(p, 0);
    assert_int_equal(cl_batch_open(tmp, (size_t)(p - tmp), &bt, err, sizeof err), -1);
    /* publisher 0 */
    p = mp_encode_array(tmp, 4);
    p = mp_encode_uint(p, CL_BATCH_VERSION);
    p = mp_encode_uint(p, 0);
    p = mp_encode_uint(p, INC);
    p = mp_encode_array(p, 0);
    assert_int_equal(cl_batch_open(tmp, (size_t)(p - tmp), &bt, err, sizeof err), -1);
    /* a forged event count far above the bytes there */
    p = mp_encode_array(tmp, 4);
    p = mp_encode_uint(p, CL_BATCH_VERSION);
    p = mp_encode_uint(p, PUB);
    p = mp_encode_uint(p, INC);
    p = mp_encode_array(p, 0xffffffffu);
    assert_int_equal(cl_batch_open(tmp, (size_t)(p - tmp), &bt, err, sizeof err), -1);
    /* more events than a batch may hold */
    cl_buf many = {0};
    for (uint32_t i = 0; i <= CL_MAX_BATCH_EVENTS; i++)
        cl_batch_append(&many, &r, PUB, 4096);
    cl_buf m2 = batch_of(&many, CL_MAX_BATCH_EVENTS + 1);
    assert_int_equal(cl_batch_open(m2.data, m2.len, &bt, err, sizeof err), -1);
    assert_non_null(strstr(err, "events"));
    /* trailing bytes */
    cl_buf_append(&msg, "\xc0", 1);
    assert_int_equal(cl_batch_open(msg.data, msg.len, &bt, err, sizeof err), -1);
    cl_buf_free(&many);
    cl_buf_free(&m2);
    cl_buf_free(&ev);
    cl_buf_free(&msg);
}

static void test_membership_records(void **state)
{
    (void)state;
    cl_member m = {.started_at = 1796000000.25, .ready = true, .incarnation = 0xabcdef0123456789};
    snprintf(m.url, sizeof m.url, "http://10.0.0.2:8090");
    char *text = cl_member_encode(&m);
    assert_non_null(text);
    cl_member back;
    char err[160];
    assert_int_equal(cl_member_decode(text, strlen(text), &back, err, sizeof err), 0);
    assert_string_equal(back.url, m.url);
    assert_true(back.ready);
    assert_true(back.started_at == m.started_at);
    assert_true(back.incarnation == m.incarnation);
    free(text);
    static const char *const bad[] = {
        "[]",
        "{\"url\":\"ftp://x\",\"started_at\":1,\"ready\":true,\"incarnation\":\"0000000000000001\"}",
        "{\"url\":\"http://x\",\"started_at\":-1,\"ready\":true,\"incarnation\":\"0000000000000001\"}",
        "{\"url\":\"http://x\",\"started_at\":1,\"ready\":1,\"incarnation\":\"0000000000000001\"}",
        "{\"url\":\"http://x\",\"started_at\":1,\"ready\":true,\"incarnation\":\"xyz\"}",
        "{\"url\":\"http://x\",\"started_at\":1,\"ready\":true}",
        "not json",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (cl_member_decode(bad[i], strlen(bad[i]), &back, err, sizeof err) != -1)
            fail_msg("accepted %s", bad[i]);
    /* candidates: not me; the ready ones first, each the longest running first */
    cl_member all[4] = {{.started_at = 5, .ready = true},
                        {.started_at = 1, .ready = false},
                        {.started_at = 3, .ready = true},
                        {.started_at = 2, .ready = true}};
    snprintf(all[0].url, sizeof all[0].url, "http://a");
    snprintf(all[1].url, sizeof all[1].url, "http://b");
    snprintf(all[2].url, sizeof all[2].url, "http://c");
    snprintf(all[3].url, sizeof all[3].url, "http://me");
    cl_self me;
    cl_self_init(&me, "http://me", 1, 0);
    assert_string_equal(me.key, "687474703a2f2f6d65");
    assert_int_equal(cl_member_rank(all, 4, &me), 3);
    assert_string_equal(all[0].url, "http://c");
    assert_string_equal(all[1].url, "http://a");
    assert_string_equal(all[2].url, "http://b");
}

static void test_registration_keys(void **state)
{
    (void)state;
    char key[CL_MAX_KEY], model[KVR_NAME_MAX], group[KVR_NAME_MAX];
    uint64_t w;
    uint32_t r;
    size_t n = kvr_cluster_key("m", NULL, 0x2a, 3, key, sizeof key);
    assert_int_equal(n, strlen(key));
    assert_string_equal(key, "6d.64656661756c74.000000000000002a.3");
    /* any model name, even one NATS keys forbid */
    const char *odd = "Kimi K2.5/*>é";
    assert_true(kvr_cluster_key(odd, "g.1", UINT64_MAX, KVR_MAX_DP_RANKS - 1, key, sizeof key));
    assert_null(strpbrk(key, " */>"));
    assert_true(cl_key_parse(key, model, group, &w, &r));
    assert_string_equal(model, odd);
    assert_string_equal(group, "g.1");
    assert_true(w == UINT64_MAX);
    assert_int_equal(r, KVR_MAX_DP_RANKS - 1);
    assert_int_equal(kvr_cluster_key("", "g", 1, 0, key, sizeof key), 0);
    assert_int_equal(kvr_cluster_key("m", "g", 1, 0, key, 8), 0);
    static const char *const bad[] = {
        "", "6d", "6d.67", "6d.67.2a.0", "6d.67.000000000000002a.", "6g.67.000000000000002a.0",
        "6.67.000000000000002a.0", "00.67.000000000000002a.0", "6d.67.000000000000002a.1000",
        "6d.67.000000000000002a.0.0", ".67.000000000000002a.0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (cl_key_parse(bad[i], model, group, &w, &r))
            fail_msg("parsed '%s'", bad[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_round_trip),
        cmocka_unit_test(test_long_chain_is_cut_into_unique_blocks),
        cmocka_unit_test(test_bad_event_is_skipped_alone),
        cmocka_unit_test(test_bad_batches_are_refused),
        cmocka_unit_test(test_membership_records),
        cmocka_unit_test(test_registration_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
