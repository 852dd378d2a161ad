/* The registry against the registrations bucket, without a transport. Per
 * key this keeps what the local registry holds (its /register text, as the
 * codec writes it, and its origin) and what the bucket was last seen to
 * hold; a record is dirty while the bucket must be made equal to the
 * registry. The rules (cluster.h):
 * - A registry change of a shared origin (cl_origin_shared: HTTP, --workers,
 *   config) makes its key dirty (a change "of mine"). A change of origin
 *   "cluster" is the bucket's own, applied by the watch thread: nothing to
 *   write. Discovery's and a peer dump's records stay local: never written
 *   (see cl_origin_shared), and discovery's removals delete nothing.
 * - A watched value different from the registry's is applied, unless a
 *   change of mine is pending for that key: then mine is newer and wins.
 *   A delete marker removes the rank likewise.
 * - After a full read of the bucket, every local record the bucket did not
 *   show at all (not even a delete marker) is written back.
 * Comparing the codec's texts makes "equal" mean equal as /register reads
 * them, so a replica's own writes coming back change nothing. */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "kvrouter/hash.h"
#include "kvrouter/log.h"

struct cl_sync_rec {
    char *key;
    uint64_t hash;
    char *local;       /* the registry's text; NULL: not registered here */
    kvr_origin origin;
    char *bucket;      /* the bucket's text as last seen or written; NULL: none */
    uint64_t seen_pass;
    bool dirty, mine;  /* mine: the pending write is a local change */
    bool writing;      /* handed to the control thread, not yet done */
    struct cl_sync_rec *next, *dirty_next;
};

static bool same(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Origins this replica writes to the bucket: what an operator registered
 * on it (POST /register, --workers, --config). Not "discovery": every
 * replica discovers the engines itself (SPEC §11), and a discovered record
 * in the bucket would outlive its engine (the other replicas would hold
 * it with origin "cluster", which their discovery never removes). Not
 * "peer": in a cluster the peer's shared records are in the bucket
 * already, and what the peer discovered must not get there through its
 * dump. "cluster" is the bucket's own. */
bool cl_origin_shared(kvr_origin o)
{
    return o == KVR_ORIGIN_HTTP || o == KVR_ORIGIN_CLI || o == KVR_ORIGIN_CONFIG;
}

/* A local record the bucket must hold: a shared origin's, or one it gave
 * (which refills a bucket that lost it). */
static bool bucket_owes(const cl_sync_rec *r)
{
    return r->local && (cl_origin_shared(r->origin) || r->origin == KVR_ORIGIN_CLUSTER);
}

int cl_sync_init(cl_sync *s, const kvr_cluster_codec *codec)
{
    memset(s, 0, sizeof *s);
    s->codec = *codec;
    kvr_u64map_init(&s->recs);
    return pthread_mutex_init(&s->mu, NULL) == 0 ? 0 : -1;
}

static void rec_free(cl_sync_rec *r)
{
    free(r->key);
    free(r->local);
    free(r->bucket);
    free(r);
}

void cl_sync_destroy(cl_sync *s)
{
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&s->recs, &it, &k, &v))
        for (cl_sync_rec *r = (cl_sync_rec *)(uintptr_t)v; r;) {
            cl_sync_rec *next = r->next;
            rec_free(r);
            r = next;
        }
    kvr_u64map_free(&s->recs);
    pthread_mutex_destroy(&s->mu);
}

static cl_sync_rec *rec_get(cl_sync *s, const char *key, bool create)
{
    uint64_t h = kvr_hash_bytes(key, strlen(key), 0), head = 0;
    kvr_u64map_get(&s->recs, h, &head);
    for (cl_sync_rec *r = (cl_sync_rec *)(uintptr_t)head; r; r = r->next)
        if (strcmp(r->key, key) == 0)
            return r;
    if (!create)
        return NULL;
    cl_sync_rec *r = calloc(1, sizeof *r);
    if (!r || !(r->key = strdup(key))) {
        free(r);
        return NULL;
    }
    r->hash = h;
    r->next = (cl_sync_rec *)(uintptr_t)head;
    if (kvr_u64map_put(&s->recs, h, (uint64_t)(uintptr_t)r) < 0) {
        rec_free(r);
        return NULL;
    }
    s->n_recs++;
    return r;
}

/* Frees a record that holds nothing and owes nothing. */
static void rec_drop_if_empty(cl_sync *s, cl_sync_rec *r)
{
    if (r->local || r->bucket || r->dirty || r->writing)
        return;
    uint64_t v = 0;
    kvr_u64map_get(&s->recs, r->hash, &v);
    cl_sync_rec *head = (cl_sync_rec *)(uintptr_t)v, **link = &head;
    while (*link != r)
        link = &(*link)->next;
    *link = r->next;
    if (head)
        kvr_u64map_put(&s->recs, r->hash, (uint64_t)(uintptr_t)head);
    else
        kvr_u64map_del(&s->recs, r->hash, NULL);
    s->n_recs--;
    rec_free(r);
}

static void mark_dirty(cl_sync *s, cl_sync_rec *r, bool mine)
{
    r->mine = r->mine || mine;
    if (r->dirty)
        return;
    r->dirty = true;
    r->dirty_next = NULL;
    if (s->dirty_tail)
        s->dirty_tail->dirty_next = r;
    else
        s->dirty_head = r;
    s->dirty_tail = r;
    s->n_dirty++;
}

static void clear_dirty(cl_sync *s, cl_sync_rec *r)
{
    if (!r->dirty)
        return;
    cl_sync_rec **link = &s->dirty_head, *prev = NULL;
    while (*link && *link != r) {
        prev = *link;
        link = &(*link)->dirty_next;
    }
    if (*link) {
        *link = r->dirty_next;
        if (s->dirty_tail == r)
            s->dirty_tail = prev;
        s->n_dirty--;
    }
    r->dirty = r->mine = false;
}

void cl_sync_observer(void *user, const kvr_reg_event *ev)
{
    cl_sync *s = user;
    const kvr_registration *reg = ev->reg;
    char key[CL_MAX_KEY];
    if (!kvr_cluster_key(reg->settings.model_name, reg->settings.routing_group,
                         reg->settings.worker_id, reg->dp_rank, key, sizeof key))
        return;
    char *text = NULL;
    if (ev->kind != KVR_REG_EVENT_REMOVED && !(text = s->codec.encode(s->codec.user, reg))) {
        KVR_LOG_LIMITED(KVR_LOG_ERROR, NULL, "cluster: out of memory: registration not shared");
        return;
    }
    pthread_mutex_lock(&s->mu);
    cl_sync_rec *r = rec_get(s, key, true);
    if (!r) {
        pthread_mutex_unlock(&s->mu);
        free(text);
        KVR_LOG_LIMITED(KVR_LOG_ERROR, NULL, "cluster: out of memory: registration not shared");
        return;
    }
    free(r->local);
    r->local = text;
    r->origin = reg->origin;
    /* A removal is an operator's (/unregister, a reload) or the bucket's
     * own (then r->bucket is NULL already), except discovery dropping what
     * it found: that one stays local like the record. */
    if (ev->kind == KVR_REG_EVENT_REMOVED
            ? r->bucket != NULL && reg->origin != KVR_ORIGIN_DISCOVERY
            : cl_origin_shared(reg->origin) && !same(r->bucket, text))
        mark_dirty(s, r, true);
    bool due = r->dirty;
    rec_drop_if_empty(s, r);
    pthread_mutex_unlock(&s->mu);
    if (due && s->wake)
        s->wake(s->wake_user);
}

void cl_sync_begin_pass(cl_sync *s)
{
    pthread_mutex_lock(&s->mu);
    s->pass++;
    pthread_mutex_unlock(&s->mu);
}

/* t's unregistration points into t's own buffers: t is filled in place,
 * never returned by value (a copy's pointers would name the stack frame
 * that made it: a later call overwrote the model name there, and a delete
 * marker removed nothing, NOT_FOUND). */
static void unregister_todo(const char *key, cl_sync_todo *t)
{
    uint64_t worker;
    uint32_t rank;
    if (!cl_key_parse(key, t->model, t->group, &worker, &rank))
        return;
    t->action = CL_SYNC_UNREGISTER;
    t->unreg.model_name = t->model;
    t->unreg.routing_group = t->group;
    t->unreg.worker_id = worker;
    t->unreg.has_rank = true;
    t->unreg.dp_rank = rank;
}

void cl_sync_entry(cl_sync *s, const char *key, const char *val, size_t len, cl_sync_todo *t)
{
    memset(t, 0, sizeof *t);
    char *text = NULL;
    if (val) {
        char err[320];
        if (cl_reg_value_decode(&s->codec, key, val, len, &t->reg, &t->holder, err,
                                sizeof err) < 0) {
            atomic_fetch_add(&s->invalid, 1);
            KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "cluster: registration value skipped: %s", err);
            return;
        }
        if (!(text = s->codec.encode(s->codec.user, &t->reg))) {
            s->codec.release(s->codec.user, t->holder);
            t->holder = NULL;
            return;
        }
    } else if (!cl_key_parse(key, t->model, t->group, &t->unreg.worker_id,
                             &t->unreg.dp_rank)) {
        return; /* a delete of a key no replica writes */
    }
    pthread_mutex_lock(&s->mu);
    cl_sync_rec *r = rec_get(s, key, true);
    if (r) {
        r->seen_pass = s->pass;
        free(r->bucket);
        r->bucket = text;
        text = NULL;
        if (r->dirty && r->mine) {
            /* a local change is newer: it will be written over this */
        } else {
            clear_dirty(s, r);
            if (val && !same(r->local, r->bucket))
                t->action = CL_SYNC_REGISTER;
            else if (!val && r->local)
                unregister_todo(key, t);
        }
        rec_drop_if_empty(s, r);
    }
    pthread_mutex_unlock(&s->mu);
    free(text);
    if (t->action != CL_SYNC_REGISTER && t->holder) {
        s->codec.release(s->codec.user, t->holder);
        t->holder = NULL;
    }
}

void cl_sync_todo_done(cl_sync *s, cl_sync_todo *t, bool ok)
{
    if (t->action != CL_SYNC_NOTHING)
        atomic_fetch_add(ok ? &s->applied : &s->rejected, 1);
    if (t->holder)
        s->codec.release(s->codec.user, t->holder);
    t->holder = NULL;
    t->action = CL_SYNC_NOTHING;
}

void cl_sync_end_pass(cl_sync *s)
{
    pthread_mutex_lock(&s->mu);
    size_t it = 0;
    uint64_t k, v;
    while (kvr_u64map_next(&s->recs, &it, &k, &v))
        for (cl_sync_rec *r = (cl_sync_rec *)(uintptr_t)v; r; r = r->next)
            if (r->seen_pass != s->pass && bucket_owes(r)) {
                free(r->bucket);
                r->bucket = NULL;
                mark_dirty(s, r, false);
            }
    pthread_mutex_unlock(&s->mu);
}

bool cl_sync_next_write(cl_sync *s, char **key, char **val)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        cl_sync_rec *r = s->dirty_head;
        if (!r) {
            pthread_mutex_unlock(&s->mu);
            return false;
        }
        /* Equal already, or taken over by a local-only origin since it
         * was marked (discovery found an engine registered over HTTP). */
        if (same(r->local, r->bucket) || (r->local && !bucket_owes(r))) {
            clear_dirty(s, r);
            rec_drop_if_empty(s, r);
            continue;
        }
        *key = strdup(r->key);
        *val = r->local ? strdup(r->local) : NULL;
        if (!*key || (r->local && !*val)) {
            free(*key);
            free(*val);
            pthread_mutex_unlock(&s->mu);
            return false;
        }
        /* To the tail while it is written: a failed write is retried last. */
        bool mine = r->mine;
        clear_dirty(s, r);
        mark_dirty(s, r, mine);
        r->writing = true;
        pthread_mutex_unlock(&s->mu);
        return true;
    }
}

void cl_sync_write_done(cl_sync *s, const char *key, const char *val, bool ok)
{
    atomic_fetch_add(ok ? &s->written : &s->write_failures, 1);
    pthread_mutex_lock(&s->mu);
    cl_sync_rec *r = rec_get(s, key, false);
    if (r) {
        r->writing = false;
        if (ok) {
            char *copy = val ? strdup(val) : NULL;
            if (!val || copy) {
                free(r->bucket);
                r->bucket = copy;
            }
            if (same(r->local, r->bucket))
                clear_dirty(s, r); /* no newer change came meanwhile */
        }
        rec_drop_if_empty(s, r);
    }
    pthread_mutex_unlock(&s->mu);
}

size_t cl_sync_pending(cl_sync *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_dirty;
    pthread_mutex_unlock(&s->mu);
    return n;
}
