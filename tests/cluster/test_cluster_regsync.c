/* The registry mirror without a transport (src/cluster/regsync.c): what a
 * registry change writes to the bucket, what a watched entry asks of the
 * registry, and who wins when both changed. The codec here is a stand-in
 * ("model|group|worker|rank|endpoint"); the server's is /register JSON. */
#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"

static char *enc(void *user, const kvr_registration *r)
{
    (void)user;
    char *t = malloc(1024);
    snprintf(t, 1024, "%s|%s|%llu|%u|%s", r->settings.model_name,
             r->settings.routing_group ? r->settings.routing_group : "default",
             (unsigned long long)r->settings.worker_id, r->dp_rank, r->endpoint);
    return t;
}

typedef struct {
    char model[64], group[64], endpoint[128];
} held;

static bool dec(void *user, const char *text, size_t len, kvr_registration *r, void **holder,
                char *err, size_t err_len)
{
    (void)user;
    held *h = calloc(1, sizeof *h);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)len, text);
    unsigned long long w;
    unsigned rank;
    if (sscanf(buf, "%63[^|]|%63[^|]|%llu|%u|%127s", h->model, h->group, &w, &rank,
               h->endpoint) != 5) {
        snprintf(err, err_len, "bad value");
        free(h);
        return false;
    }
    memset(r, 0, sizeof *r);
    r->settings.model_name = h->model;
    r->settings.routing_group = h->group;
    r->settings.worker_id = w;
    r->dp_rank = rank;
    r->endpoint = h->endpoint;
    *holder = h;
    return true;
}

static void rel(void *user, void *holder)
{
    (void)user;
    free(holder);
}

static const kvr_cluster_codec codec = {enc, dec, rel, NULL};

typedef struct {
    cl_sync s;
    int wakes;
} fx;

static void wake(void *user) { ((fx *)user)->wakes++; }

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    assert_int_equal(cl_sync_init(&f->s, &codec), 0);
    f->s.wake = wake;
    f->s.wake_user = f;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    cl_sync_destroy(&f->s);
    free(f);
    return 0;
}

static kvr_registration reg_of(uint64_t worker, const char *endpoint, kvr_origin origin)
{
    kvr_registration r;
    memset(&r, 0, sizeof r);
    r.settings.model_name = "m";
    r.settings.routing_group = "default";
    r.settings.worker_id = worker;
    r.endpoint = endpoint;
    r.origin = origin;
    return r;
}

static void observe(fx *f, kvr_reg_event_kind kind, const kvr_registration *r)
{
    kvr_reg_event ev = {kind, KVR_REGISTRY_CREATED, r};
    cl_sync_observer(&f->s, &ev);
}

static void key_of(uint64_t worker, char *key)
{
    assert_true(kvr_cluster_key("m", "default", worker, 0, key, CL_MAX_KEY));
}

/* The one pending write, done with result ok; its value returned (malloc'd,
 * "" for a delete) or NULL when nothing was pending. */
static char *write_one(fx *f, bool ok)
{
    char *key, *val;
    if (!cl_sync_next_write(&f->s, &key, &val))
        return NULL;
    cl_sync_write_done(&f->s, key, val, ok);
    free(key);
    return val ? val : strdup("");
}

static void test_local_change_is_written_once(void **state)
{
    fx *f = *state;
    kvr_registration r = reg_of(1, "tcp://a:1", KVR_ORIGIN_HTTP);
    observe(f, KVR_REG_EVENT_ADDED, &r);
    assert_int_equal(f->wakes, 1);
    assert_int_equal(cl_sync_pending(&f->s), 1);
    char *v = write_one(f, true);
    assert_string_equal(v, "m|default|1|0|tcp://a:1");
    free(v);
    assert_null(write_one(f, true));
    /* The write coming back from the bucket asks nothing of the registry. */
    char key[CL_MAX_KEY];
    key_of(1, key);
    const char *val = "m|default|1|0|tcp://a:1";
    cl_sync_todo t;
    cl_sync_entry(&f->s, key, val, strlen(val), &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING);
    /* Unregistering deletes the key. */
    observe(f, KVR_REG_EVENT_REMOVED, &r);
    v = write_one(f, true);
    assert_string_equal(v, "");
    free(v);
    assert_null(write_one(f, true));
    assert_int_equal(f->s.n_recs, 0);
}

static void test_bucket_changes_apply_without_echo(void **state)
{
    fx *f = *state;
    char key[CL_MAX_KEY];
    key_of(2, key);
    const char *val = "m|default|2|0|tcp://b:2";
    cl_sync_begin_pass(&f->s);
    cl_sync_todo t;
    cl_sync_entry(&f->s, key, val, strlen(val), &t);
    assert_int_equal(t.action, CL_SYNC_REGISTER);
    assert_int_equal(t.reg.origin, KVR_ORIGIN_CLUSTER);
    assert_string_equal(t.reg.endpoint, "tcp://b:2");
    /* the registry applies it: its observer hears origin "cluster" */
    kvr_registration applied = t.reg;
    observe(f, KVR_REG_EVENT_ADDED, &applied);
    cl_sync_todo_done(&f->s, &t, true);
    cl_sync_end_pass(&f->s);
    assert_null(write_one(f, true));
    assert_int_equal(atomic_load(&f->s.applied), 1);

    /* A delete marker removes that rank, and the removal writes nothing. */
    cl_sync_entry(&f->s, key, NULL, 0, &t);
    assert_int_equal(t.action, CL_SYNC_UNREGISTER);
    assert_string_equal(t.unreg.model_name, "m");
    assert_string_equal(t.unreg.routing_group, "default");
    assert_int_equal(t.unreg.worker_id, 2);
    assert_true(t.unreg.has_rank);
    kvr_registration gone = reg_of(2, "tcp://b:2", KVR_ORIGIN_CLUSTER);
    observe(f, KVR_REG_EVENT_REMOVED, &gone);
    cl_sync_todo_done(&f->s, &t, true);
    assert_null(write_one(f, true));
    assert_int_equal(f->s.n_recs, 0);
}

/* Uses as much stack as the calls between a watched entry and the registry
 * call that applies it may (a contended unlock, free, the registry). */
__attribute__((noinline)) static void use_stack(void)
{
    volatile char scratch[32768];
    memset((char *)scratch, 'x', sizeof scratch);
}

/* A delete marker's unregistration names its model and group after other
 * calls ran on the watch thread's stack: its strings live in the todo the
 * caller holds (they named the dead frame of the function that built it;
 * a contended unlock or a free overwrote them and the rank stayed: replica
 * 0 kept an /unregister'ed worker in test_cluster_replicas under load). */
static void test_delete_marker_names_survive_later_calls(void **state)
{
    fx *f = *state;
    char key[CL_MAX_KEY];
    key_of(7, key);
    const char *val = "m|default|7|0|tcp://b:7";
    cl_sync_todo t;
    cl_sync_entry(&f->s, key, val, strlen(val), &t);
    assert_int_equal(t.action, CL_SYNC_REGISTER);
    kvr_registration applied = t.reg;
    observe(f, KVR_REG_EVENT_ADDED, &applied);
    cl_sync_todo_done(&f->s, &t, true);

    cl_sync_entry(&f->s, key, NULL, 0, &t);
    use_stack();
    assert_int_equal(t.action, CL_SYNC_UNREGISTER);
    assert_ptr_equal(t.unreg.model_name, t.model);
    assert_ptr_equal(t.unreg.routing_group, t.group);
    assert_string_equal(t.unreg.model_name, "m");
    assert_string_equal(t.unreg.routing_group, "default");
    assert_int_equal(t.unreg.worker_id, 7);
    kvr_registration gone = reg_of(7, "tcp://b:7", KVR_ORIGIN_CLUSTER);
    observe(f, KVR_REG_EVENT_REMOVED, &gone);
    cl_sync_todo_done(&f->s, &t, true);
    assert_int_equal(f->s.n_recs, 0);
}

static void test_pending_local_change_wins(void **state)
{
    fx *f = *state;
    char key[CL_MAX_KEY];
    key_of(3, key);
    /* registered here while the bucket was out of reach */
    kvr_registration mine = reg_of(3, "tcp://mine:3", KVR_ORIGIN_HTTP);
    observe(f, KVR_REG_EVENT_ADDED, &mine);
    /* the reconnection's read shows an older value, then its delete */
    cl_sync_begin_pass(&f->s);
    const char *old = "m|default|3|0|tcp://old:3";
    cl_sync_todo t;
    cl_sync_entry(&f->s, key, old, strlen(old), &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING);
    cl_sync_entry(&f->s, key, NULL, 0, &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING);
    cl_sync_end_pass(&f->s);
    char *v = write_one(f, true);
    assert_string_equal(v, "m|default|3|0|tcp://mine:3");
    free(v);
    assert_null(write_one(f, true));
    /* Once written, a newer value from elsewhere applies again. */
    const char *newer = "m|default|3|0|tcp://new:3";
    cl_sync_entry(&f->s, key, newer, strlen(newer), &t);
    assert_int_equal(t.action, CL_SYNC_REGISTER);
    cl_sync_todo_done(&f->s, &t, true);
}

static void test_failed_write_is_retried(void **state)
{
    fx *f = *state;
    kvr_registration r = reg_of(4, "tcp://d:4", KVR_ORIGIN_CONFIG);
    observe(f, KVR_REG_EVENT_ADDED, &r);
    char *v = write_one(f, false);
    assert_non_null(v);
    free(v);
    assert_int_equal(cl_sync_pending(&f->s), 1);
    assert_int_equal(atomic_load(&f->s.write_failures), 1);
    v = write_one(f, true);
    assert_string_equal(v, "m|default|4|0|tcp://d:4");
    free(v);
    assert_int_equal(cl_sync_pending(&f->s), 0);
}

/* A bucket that lost a record (not even a delete marker) gets it back from
 * whoever holds it, "cluster" origin included. */
static void test_full_read_refills_missing_keys(void **state)
{
    fx *f = *state;
    char k5[CL_MAX_KEY], k6[CL_MAX_KEY];
    key_of(5, k5);
    key_of(6, k6);
    kvr_registration a = reg_of(5, "tcp://e:5", KVR_ORIGIN_HTTP);
    observe(f, KVR_REG_EVENT_ADDED, &a);
    char *v = write_one(f, true);
    free(v);
    const char *val5 = "m|default|5|0|tcp://e:5", *val6 = "m|default|6|0|tcp://f:6";
    cl_sync_begin_pass(&f->s);
    cl_sync_todo t;
    cl_sync_entry(&f->s, k5, val5, strlen(val5), &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING); /* our own write */
    cl_sync_entry(&f->s, k6, val6, strlen(val6), &t);
    kvr_registration applied = t.reg;
    observe(f, KVR_REG_EVENT_ADDED, &applied);
    cl_sync_todo_done(&f->s, &t, true);
    cl_sync_end_pass(&f->s);
    assert_null(write_one(f, true));
    /* the next read finds an empty bucket */
    cl_sync_begin_pass(&f->s);
    cl_sync_end_pass(&f->s);
    assert_int_equal(cl_sync_pending(&f->s), 2);
    char *x = write_one(f, true), *y = write_one(f, true);
    assert_non_null(x);
    assert_non_null(y);
    assert_true(strstr(x, "tcp://e:5") || strstr(y, "tcp://e:5"));
    assert_true(strstr(x, "tcp://f:6") || strstr(y, "tcp://f:6"));
    free(x);
    free(y);
    assert_null(write_one(f, true));
}

static void test_bad_values_are_skipped(void **state)
{
    fx *f = *state;
    char key[CL_MAX_KEY];
    key_of(7, key);
    const char *garbage = "not a registration";
    cl_sync_todo t;
    cl_sync_entry(&f->s, key, garbage, strlen(garbage), &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING);
    const char *elsewhere = "m|default|8|0|tcp://h:8"; /* worker 8 under worker 7's key */
    cl_sync_entry(&f->s, key, elsewhere, strlen(elsewhere), &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING);
    char *big = malloc(CL_MAX_VALUE_BYTES + 2);
    memset(big, 'a', CL_MAX_VALUE_BYTES + 1);
    big[CL_MAX_VALUE_BYTES + 1] = 0;
    cl_sync_entry(&f->s, key, big, CL_MAX_VALUE_BYTES + 1, &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING);
    free(big);
    cl_sync_entry(&f->s, "no.such.key", NULL, 0, &t);
    assert_int_equal(t.action, CL_SYNC_NOTHING);
    assert_int_equal(atomic_load(&f->s.invalid), 3);
    assert_null(write_one(f, true));
}

/* Discovery's and a peer dump's records stay on this replica: every replica
 * discovers its engines itself, and a discovered record in the bucket
 * would outlive the engine on the others. Neither their registration nor
 * their removal touches the bucket, and a full read does not refill it
 * with them; an HTTP registration of the same key is shared again. */
static void test_discovered_and_peer_records_stay_local(void **state)
{
    fx *f = *state;
    assert_true(cl_origin_shared(KVR_ORIGIN_HTTP));
    assert_true(cl_origin_shared(KVR_ORIGIN_CLI));
    assert_true(cl_origin_shared(KVR_ORIGIN_CONFIG));
    assert_false(cl_origin_shared(KVR_ORIGIN_DISCOVERY));
    assert_false(cl_origin_shared(KVR_ORIGIN_PEER));
    assert_false(cl_origin_shared(KVR_ORIGIN_CLUSTER));
    kvr_registration d = reg_of(9, "tcp://disc:9", KVR_ORIGIN_DISCOVERY);
    kvr_registration p = reg_of(10, "tcp://peer:10", KVR_ORIGIN_PEER);
    observe(f, KVR_REG_EVENT_ADDED, &d);
    observe(f, KVR_REG_EVENT_ADDED, &p);
    assert_int_equal(cl_sync_pending(&f->s), 0);
    assert_int_equal(f->wakes, 0);
    cl_sync_begin_pass(&f->s);
    cl_sync_end_pass(&f->s); /* an empty bucket */
    assert_null(write_one(f, true));
    observe(f, KVR_REG_EVENT_REMOVED, &p);
    assert_null(write_one(f, true)); /* the bucket never had it */

    /* Registered over HTTP: shared; then discovery takes the record over
     * before the write: nothing is written. */
    kvr_registration h = reg_of(9, "tcp://http:9", KVR_ORIGIN_HTTP);
    observe(f, KVR_REG_EVENT_CHANGED, &h);
    assert_int_equal(cl_sync_pending(&f->s), 1);
    observe(f, KVR_REG_EVENT_CHANGED, &d);
    assert_null(write_one(f, true));
    /* Written while it was HTTP's, the bucket keeps it when discovery
     * takes it over and when discovery drops it. */
    observe(f, KVR_REG_EVENT_CHANGED, &h);
    char *v = write_one(f, true);
    assert_string_equal(v, "m|default|9|0|tcp://http:9");
    free(v);
    observe(f, KVR_REG_EVENT_CHANGED, &d);
    observe(f, KVR_REG_EVENT_REMOVED, &d);
    assert_null(write_one(f, true));
    /* A bucket value for a key only discovery holds here applies (the
     * operator's registration elsewhere wins over what this replica found). */
    kvr_registration d11 = reg_of(11, "tcp://disc:11", KVR_ORIGIN_DISCOVERY);
    observe(f, KVR_REG_EVENT_ADDED, &d11);
    char key[CL_MAX_KEY];
    key_of(11, key);
    const char *val = "m|default|11|0|tcp://http:11";
    cl_sync_todo t;
    cl_sync_entry(&f->s, key, val, strlen(val), &t);
    assert_int_equal(t.action, CL_SYNC_REGISTER);
    cl_sync_todo_done(&f->s, &t, true);
    /* An /unregister here of a record the bucket holds deletes it, whatever
     * origin the record had (the peer dump's, the bucket's). */
    kvr_registration p11 = reg_of(11, "tcp://http:11", KVR_ORIGIN_PEER);
    observe(f, KVR_REG_EVENT_CHANGED, &p11);
    assert_null(write_one(f, true));
    observe(f, KVR_REG_EVENT_REMOVED, &p11);
    v = write_one(f, true);
    assert_string_equal(v, "");
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_local_change_is_written_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bucket_changes_apply_without_echo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_marker_names_survive_later_calls, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pending_local_change_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_is_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_read_refills_missing_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values_are_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_discovered_and_peer_records_stay_local, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
