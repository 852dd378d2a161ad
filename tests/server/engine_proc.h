/* Fault tests need an engine that can die: a real publisher process (the
 * test binary re-executed with --engine-proc) binding an XPUB and a replay
 * ROUTER, keeping a prefix cache of its own and publishing what it does as
 * real msgpack batches. The test drives it over a pipe, kills it with
 * SIGKILL and starts another on the same ports; what the engine says it
 * holds is the independent model the router's index must end equal to.
 *
 * The cache (th_cache) is also used in-process: stepping it gives the events
 * of one batch, and replaying a stream through th_cache_apply with the
 * router's rules (a store needs its parent, removals of unknown blocks are
 * ignored) gives what an index fed that stream must hold. Header-only, like
 * net_helpers.h. */
#ifndef KVR_TEST_ENGINE_PROC_H
#define KVR_TEST_ENGINE_PROC_H

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "net_helpers.h"

#define TH_PROC_BS 4
#define TH_CACHE_MAX 8192
#define TH_PROC_HISTORY 4096

/* ---------------------------------------------------------------- cache */

typedef struct {
    uint64_t hash[TH_CACHE_MAX];
    uint64_t parent[TH_CACHE_MAX]; /* 0 = root */
    bool held[TH_CACHE_MAX];
    size_t n;
    uint64_t next_hash;
    uint64_t rng;
} th_cache;

static inline void th_cache_init(th_cache *c, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->next_hash = (seed << 32) | 1;
    c->rng = seed * 0x9E3779B97F4A7C15ull + 1;
}

static inline uint64_t th_rand(th_cache *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

static inline long th_cache_find(const th_cache *c, uint64_t h)
{
    for (size_t i = c->n; i-- > 0;)
        if (c->hash[i] == h)
            return (long)i;
    return -1;
}

static inline bool th_cache_holds(const th_cache *c, uint64_t h)
{
    long i = th_cache_find(c, h);
    return i >= 0 && c->held[i];
}

/* Applies one event as an index does: a store needs its parent held. */
static inline void th_cache_apply(th_cache *c, const kvr_raw_event *ev)
{
    if (ev->type == KVR_EV_CLEARED) {
        for (size_t i = 0; i < c->n; i++)
            c->held[i] = false;
        return;
    }
    if (ev->type == KVR_EV_STORED) {
        if (ev->has_parent && !th_cache_holds(c, ev->parent))
            return;
        uint64_t p = ev->has_parent ? ev->parent : 0;
        for (uint32_t i = 0; i < ev->n_block_hashes && c->n < TH_CACHE_MAX; i++) {
            c->hash[c->n] = ev->block_hashes[i];
            c->parent[c->n] = p;
            c->held[c->n++] = true;
            p = ev->block_hashes[i];
        }
        return;
    }
    for (uint32_t i = 0; i < ev->n_block_hashes; i++) {
        long k = th_cache_find(c, ev->block_hashes[i]);
        if (k >= 0)
            c->held[k] = false;
    }
}

/* Whether h and every block above it are held: what a dump shows. */
static inline bool th_cache_visible(const th_cache *c, uint64_t h)
{
    for (int depth = 0; h != 0 && depth < TH_CACHE_MAX; depth++) {
        long k = th_cache_find(c, h);
        if (k < 0 || !c->held[k])
            return false;
        h = c->parent[k];
    }
    return true;
}

/* The visible held hashes, sorted. Returns the count. */
static inline size_t th_cache_visible_set(const th_cache *c, uint64_t *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->held[i] && th_cache_visible(c, c->hash[i]) && n < cap)
            out[n++] = c->hash[i];
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            uint64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

static inline bool th_cache_is_leaf(const th_cache *c, size_t k)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->held[i] && c->parent[i] == c->hash[k])
            return false;
    return true;
}

/* One engine step: store a chain of 1-3 blocks under a held block (or the
 * root) and, every other step, evict a held leaf, as an LRU prefix cache
 * does. Fills evs (at most 2) and the storage they point to. */
typedef struct {
    uint64_t hashes[3];
    uint64_t tokens[3 * TH_PROC_BS];
    uint64_t evicted;
    kvr_raw_event evs[2];
    size_t n;
} th_step;

static inline void th_cache_step(th_cache *c, th_step *s)
{
    memset(s, 0, sizeof *s);
    uint64_t parent = 0;
    size_t held = 0;
    for (size_t i = 0; i < c->n; i++)
        held += c->held[i];
    if (held && th_rand(c) % 4 != 0) {
        size_t pick = th_rand(c) % held;
        for (size_t i = 0; i < c->n; i++)
            if (c->held[i] && pick-- == 0) {
                parent = c->hash[i];
                break;
            }
    }
    uint32_t nb = 1 + (uint32_t)(th_rand(c) % 3);
    for (uint32_t b = 0; b < nb; b++) {
        s->hashes[b] = c->next_hash++;
        for (uint32_t t = 0; t < TH_PROC_BS; t++)
            s->tokens[b * TH_PROC_BS + t] = (s->hashes[b] * TH_PROC_BS + t) & 0x7FFFFFFF;
    }
    s->evs[s->n++] = th_store(s->hashes, nb, parent, s->tokens, TH_PROC_BS);
    if (held > 8 && th_rand(c) % 2 == 0) {
        size_t pick = th_rand(c) % c->n;
        for (size_t k = 0; k < c->n; k++) {
            size_t i = (pick + k) % c->n;
            if (c->held[i] && th_cache_is_leaf(c, i) && c->hash[i] != parent) {
                s->evicted = c->hash[i];
                s->evs[s->n++] = th_remove(&s->evicted, 1);
                break;
            }
        }
    }
    for (size_t i = 0; i < s->n; i++)
        th_cache_apply(c, &s->evs[i]);
}

/* ---------------------------------------------------------------- child */

static int th_proc_reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int th_proc_reply(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    return n;
}

typedef struct {
    uint64_t seq;
    char *data;
    size_t len;
} th_proc_hist;

static void th_proc_serve_replay(void *router, const th_proc_hist *hist, size_t n_hist)
{
    zmq_msg_t f[4];
    size_t n = 0;
    if (!kvr_zmq_recv_frames(router, ZMQ_DONTWAIT, f, 4, &n))
        return;
    if (n == 3 && zmq_msg_size(&f[2]) == 8) {
        uint64_t start = 0;
        kvr_frame_parse(3, zmq_msg_data(&f[2]), 8, &start);
        for (size_t i = 0; i < n_hist; i++) {
            if (hist[i].seq < start)
                continue;
            zmq_send(router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
            zmq_send(router, "", 0, ZMQ_SNDMORE);
            th_send_seq(router, hist[i].seq, ZMQ_SNDMORE);
            zmq_send(router, hist[i].data, hist[i].len, 0);
        }
        zmq_send(router, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE);
        zmq_send(router, "", 0, ZMQ_SNDMORE);
        th_send_seq(router, UINT64_MAX, ZMQ_SNDMORE);
        zmq_send(router, "", 0, 0);
    }
    kvr_zmq_close_frames(f, 4, n);
}

static void th_proc_print_set(const char *tag, const th_cache *c)
{
    static uint64_t vis[TH_CACHE_MAX];
    size_t n = th_cache_visible_set(c, vis, TH_CACHE_MAX);
    printf("%s %zu", tag, n);
    for (size_t i = 0; i < n; i++)
        printf(" %llu", (unsigned long long)vis[i]);
    th_proc_reply("\n");
}

/* argv: --engine-proc PUB_EP ROUTER_EP SEED. Commands on stdin, one a line:
 * "pub N [D]" (publish N steps; with D, the batch of every seq with seq % D
 * == D / 2 is kept for replay but not sent live, as a lossy link drops it;
 * "ok <next seq>"), "wait" (until a subscriber joined; "ok"), "held" ("held
 * <n> <hash>..." of the visible cache), "sent" (the same for an index fed
 * only what went out live), "quit". */
static inline int th_engine_proc_main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    static th_cache cache, sent;
    th_cache_init(&cache, strtoull(argv[4], NULL, 10));
    th_cache_init(&sent, 0);
    void *ctx = zmq_ctx_new();
    void *pub = zmq_socket(ctx, ZMQ_XPUB);
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0, hwm = 1000000;
    zmq_setsockopt(pub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    /* a ROUTER drops what does not fit: a long replay must not lose its end */
    zmq_setsockopt(router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (zmq_bind(pub, argv[2]) != 0 || zmq_bind(router, argv[3]) != 0) {
        th_proc_reply("error bind: %s\n", zmq_strerror(zmq_errno()));
        return 1;
    }
    char pe[128], re[128];
    size_t sz = sizeof pe;
    zmq_getsockopt(pub, ZMQ_LAST_ENDPOINT, pe, &sz);
    sz = sizeof re;
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, re, &sz);
    th_proc_reply("ports %s %s\n", pe, re);
    static th_proc_hist hist[TH_PROC_HISTORY];
    size_t n_hist = 0;
    uint64_t seq = 0;
    bool subscribed = false, waiting = false;
    char line[128];
    size_t line_len = 0;
    kvr_wbuf w;
    kvr_wbuf_init(&w);
    for (;;) {
        zmq_pollitem_t it[3] = {{.socket = router, .events = ZMQ_POLLIN},
                                {.socket = pub, .events = ZMQ_POLLIN},
                                {.fd = 0, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, 3, -1) < 0)
            continue;
        if (it[0].revents & ZMQ_POLLIN)
            th_proc_serve_replay(router, hist, n_hist);
        if (it[1].revents & ZMQ_POLLIN) {
            char b[256];
            int n = zmq_recv(pub, b, sizeof b, ZMQ_DONTWAIT);
            if (n >= 1 && b[0] == 1)
                subscribed = true;
        }
        if (waiting && subscribed) {
            waiting = false;
            th_proc_reply("ok\n");
        }
        if (!(it[2].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
            continue;
        char ch;
        ssize_t r = read(0, &ch, 1);
        if (r <= 0)
            break;
        if (ch != '\n') {
            if (line_len + 1 < sizeof line)
                line[line_len++] = ch;
            continue;
        }
        line[line_len] = 0;
        line_len = 0;
        if (strncmp(line, "pub ", 4) == 0) {
            char *end;
            long n = strtol(line + 4, &end, 10);
            long drop_every = strtol(end, NULL, 10);
            for (long i = 0; i < n; i++) {
                th_step s;
                th_cache_step(&cache, &s);
                kvr_wbuf_reset(&w);
                kvr_wire_encode_batch(&w, KVR_WIRE_SGLANG, (double)seq, s.evs, s.n, false, 0);
                if (n_hist < TH_PROC_HISTORY) {
                    hist[n_hist].seq = seq;
                    hist[n_hist].data = malloc(w.len);
                    memcpy(hist[n_hist].data, w.data, w.len);
                    hist[n_hist++].len = w.len;
                }
                bool drop = drop_every > 0 && (long)(seq % (uint64_t)drop_every) == drop_every / 2;
                if (!drop) {
                    zmq_send(pub, "", 0, ZMQ_SNDMORE);
                    th_send_seq(pub, seq, ZMQ_SNDMORE);
                    zmq_send(pub, w.data, w.len, 0);
                    for (size_t k = 0; k < s.n; k++)
                        th_cache_apply(&sent, &s.evs[k]);
                }
                seq++;
            }
            th_proc_reply("ok %llu\n", (unsigned long long)seq);
        } else if (strcmp(line, "wait") == 0) {
            if (subscribed)
                th_proc_reply("ok\n");
            else
                waiting = true;
        } else if (strcmp(line, "held") == 0) {
            th_proc_print_set("held", &cache);
        } else if (strcmp(line, "sent") == 0) {
            th_proc_print_set("sent", &sent);
        } else if (strcmp(line, "quit") == 0) {
            break;
        }
    }
    kvr_wbuf_free(&w);
    zmq_close(pub);
    zmq_close(router);
    zmq_ctx_term(ctx);
    return 0;
}

/* ---------------------------------------------------------------- parent */

typedef struct {
    pid_t pid;
    FILE *to, *from;
    char pub[128], router[128];
} th_proc;

/* Starts an engine process binding pub/router ("tcp://127.0.0.1:*" for any
 * port); false when it did not come up. */
static inline bool th_proc_start(th_proc *p, const char *pub, const char *router, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
        return false;
    char seed_s[24];
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    fflush(NULL);
    p->pid = fork();
    if (p->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves no engine behind */
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl("/proc/self/exe", "engine", "--engine-proc", pub, router, seed_s, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    char line[512];
    if (p->pid < 0 || !fgets(line, sizeof line, p->from) ||
        sscanf(line, "ports %127s %127s", p->pub, p->router) != 2) {
        fprintf(stderr, "engine process did not start: %s", p->pid < 0 ? "fork\n" : line);
        return false;
    }
    return true;
}

/* Sends a command; the reply line goes to *reply (malloc'd, caller frees). */
static inline bool th_proc_cmd(th_proc *p, const char *cmd, char **reply)
{
    fprintf(p->to, "%s\n", cmd);
    fflush(p->to);
    size_t cap = 0;
    char *line = NULL;
    ssize_t n = getline(&line, &cap, p->from);
    if (n <= 0) {
        free(line);
        return false;
    }
    if (reply)
        *reply = line;
    else
        free(line);
    return true;
}

static inline bool th_proc_pub(th_proc *p, long n)
{
    char cmd[32];
    snprintf(cmd, sizeof cmd, "pub %ld", n);
    return th_proc_cmd(p, cmd, NULL);
}

static inline bool th_proc_pub_dropping(th_proc *p, long n, long drop_every)
{
    char cmd[48];
    snprintf(cmd, sizeof cmd, "pub %ld %ld", n, drop_every);
    return th_proc_cmd(p, cmd, NULL);
}

/* A set the engine reports ("held": its visible cache; "sent": what an
 * index fed only its live batches holds), sorted; the count, -1 on error. */
static inline long th_proc_set(th_proc *p, const char *which, uint64_t *out, size_t cap)
{
    char *line = NULL;
    if (!th_proc_cmd(p, which, &line))
        return -1;
    char *s = line + strlen(which), *end;
    long n = strtol(s, &end, 10);
    for (long i = 0; i < n && (size_t)i < cap; i++)
        out[i] = strtoull(end, &end, 10);
    free(line);
    return n;
}

static inline long th_proc_held(th_proc *p, uint64_t *out, size_t cap)
{
    return th_proc_set(p, "held", out, cap);
}

static inline void th_proc_kill(th_proc *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        p->pid = 0;
    }
    if (p->to)
        fclose(p->to);
    if (p->from)
        fclose(p->from);
    p->to = p->from = NULL;
}

/* ---------------------------------------------------------------- router */

typedef struct {
    uint64_t worker;
    uint64_t *out;
    size_t n, cap;
} th_dump_arg;

static void th_dump_collect(void *user, const char *model, const char *group,
                            const kvr_dump_store *ev)
{
    (void)model;
    (void)group;
    th_dump_arg *a = user;
    if (ev->worker_id != a->worker)
        return;
    for (size_t i = 0; i < ev->n; i++)
        if (a->n < a->cap)
            a->out[a->n++] = ev->engine_hashes[i];
}

/* The engine hashes the index holds for worker (any rank or tier), sorted
 * and without repeats. */
static inline size_t th_index_held(kvr_indexer *ix, uint64_t worker, uint64_t *out, size_t cap)
{
    th_dump_arg a = {worker, out, 0, cap};
    kvr_indexer_dump(ix, th_dump_collect, &a);
    for (size_t i = 1; i < a.n; i++)
        for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            uint64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    size_t k = 0;
    for (size_t i = 0; i < a.n; i++)
        if (k == 0 || out[k - 1] != out[i])
            out[k++] = out[i];
    return k;
}

static inline bool th_sets_equal(const uint64_t *a, size_t na, const uint64_t *b, size_t nb)
{
    return na == nb && memcmp(a, b, na * sizeof *a) == 0;
}

#endif
