/* HTTP connection accounting and limits (http_conns.h). */
#include "server/http_conns.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "kvrouter/log.h"
#include "util/clock.h"
#include "util/grow.h"
#include "util/u64map.h"

typedef struct conn_rec {
    struct conn_rec *prev, *next;
    int fd;
    uint64_t ip;          /* key in per_ip */
    double waiting_since; /* monotonic s; < 0 while a reply is being made */
    bool shut;            /* the sweep shut it down already */
} conn_rec;

/* A connection the accept policy let in whose NOTIFY_STARTED has not come
 * yet: counted against the limits from the accept on, since the pool's
 * threads accept concurrently (two checks before either start would let
 * both in). */
typedef struct {
    uint64_t ip;
    double since; /* monotonic s; dropped by the sweep if it never starts */
} pending_rec;

/* A pending connection older than this never started (libmicrohttpd
 * failed to set it up after the accept policy): its slot is given back. */
#define KVR_CONN_PENDING_MAX_S 10.0

struct kvr_conns {
    pthread_mutex_t mu;
    conn_rec *head;
    pending_rec *pending;
    size_t n_pending, cap_pending;
    kvr_u64map per_ip; /* address key -> connections open or pending from it */
    size_t max, max_per_ip;
    double timeout_s;
    kvr_conn_stats st;
};

static const char *const refusal_names[KVR_CONN_REFUSED_COUNT] = {
    "max_connections", "max_connections_per_ip", "out_of_memory"};

const char *kvr_conn_refusal_name(kvr_conn_refusal r)
{
    return r < KVR_CONN_REFUSED_COUNT ? refusal_names[r] : "unknown";
}

kvr_conns *kvr_conns_create(size_t max_connections, size_t max_per_ip, unsigned timeout_s)
{
    kvr_conns *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    kvr_u64map_init(&c->per_ip);
    c->max = max_connections;
    c->max_per_ip = max_per_ip;
    c->timeout_s = timeout_s;
    return c;
}

void kvr_conns_destroy(kvr_conns *c)
{
    if (!c)
        return;
    /* libmicrohttpd has closed every connection (NOTIFY_CLOSED) before. */
    while (c->head) {
        conn_rec *r = c->head;
        c->head = r->next;
        free(r);
    }
    free(c->pending);
    kvr_u64map_free(&c->per_ip);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

size_t kvr_conns_max(const kvr_conns *c) { return c->max; }

size_t kvr_conns_record_size(void) { return sizeof(conn_rec); }

/* One key per client address (IPv6 folded: a collision only makes two
 * addresses share a limit). */
static uint64_t address_key(const struct sockaddr *sa)
{
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET)
        return 1 + (uint64_t)((const struct sockaddr_in *)sa)->sin_addr.s_addr;
    if (sa->sa_family == AF_INET6) {
        uint64_t w[2];
        memcpy(w, &((const struct sockaddr_in6 *)sa)->sin6_addr, sizeof w);
        return kvr_mix64(w[0]) ^ w[1];
    }
    return 0;
}

static uint64_t open_from(const kvr_conns *c, uint64_t ip)
{
    uint64_t n = 0;
    kvr_u64map_get(&c->per_ip, ip, &n);
    return n;
}

enum MHD_Result kvr_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    kvr_conns *c = cls;
    uint64_t ip = address_key(addr);
    pthread_mutex_lock(&c->mu);
    int refused = -1;
    if (c->st.open + c->n_pending >= c->max)
        refused = KVR_CONN_REFUSED_MAX;
    else if (c->max_per_ip && open_from(c, ip) >= c->max_per_ip)
        refused = KVR_CONN_REFUSED_PER_IP;
    /* A connection the limits cannot count (no memory for its pending slot
     * or its address's count) is refused too: let in, it would escape both
     * limits and, its address uncounted, skew max_per_ip when it closes. */
    if (refused < 0 && (KVR_GROW(c->pending, c->cap_pending, c->n_pending + 1) != 0 ||
                        kvr_u64map_put(&c->per_ip, ip, open_from(c, ip) + 1) < 0))
        refused = KVR_CONN_REFUSED_NO_MEMORY;
    if (refused >= 0)
        c->st.refused[refused]++;
    else
        c->pending[c->n_pending++] = (pending_rec){ip, kvr_clock_mono()};
    size_t limit = refused == KVR_CONN_REFUSED_MAX ? c->max : c->max_per_ip;
    pthread_mutex_unlock(&c->mu);
    if (refused < 0)
        return MHD_YES;
    if (refused == KVR_CONN_REFUSED_NO_MEMORY)
        KVR_LOG_LIMITED(KVR_LOG_WARN, NULL,
                        "HTTP connection refused: out of memory to count it against the limits");
    else
        KVR_LOG_LIMITED(KVR_LOG_WARN, NULL,
                        "HTTP connection refused: %s (%zu) connections are open%s",
                        kvr_conn_refusal_name((kvr_conn_refusal)refused), limit,
                        refused == KVR_CONN_REFUSED_PER_IP ? " from its address" : "");
    return MHD_NO;
}

/* One connection fewer from ip. Under the mutex. */
static void uncount(kvr_conns *c, uint64_t ip)
{
    uint64_t n = open_from(c, ip);
    if (n > 1)
        kvr_u64map_put(&c->per_ip, ip, n - 1);
    else
        kvr_u64map_del(&c->per_ip, ip, NULL);
}

/* Takes the pending slot of a connection from ip; false when there is none
 * (its accept could not record it). Under the mutex. */
static bool take_pending(kvr_conns *c, uint64_t ip)
{
    for (size_t i = c->n_pending; i-- > 0;)
        if (c->pending[i].ip == ip) {
            c->pending[i] = c->pending[--c->n_pending];
            return true;
        }
    return false;
}

static void started(kvr_conns *c, struct MHD_Connection *conn, void **socket_context)
{
    const union MHD_ConnectionInfo *fd_info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr_info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    conn_rec *r = calloc(1, sizeof *r);
    uint64_t ip = address_key(addr_info ? addr_info->client_addr : NULL);
    int fd = fd_info ? fd_info->connect_fd : -1;
    pthread_mutex_lock(&c->mu);
    bool counted = take_pending(c, ip); /* per_ip holds it since the accept */
    c->st.open++; /* until its NOTIFY_CLOSED, record or not */
    if (c->st.open > c->st.peak)
        c->st.peak = c->st.open;
    if (r) {
        c->st.accepted++;
        r->fd = fd;
        r->ip = ip;
        r->waiting_since = kvr_clock_mono();
        r->next = c->head;
        if (c->head)
            c->head->prev = r;
        c->head = r;
        /* Out of memory here only loses this address's count. */
        if (!counted)
            kvr_u64map_put(&c->per_ip, ip, open_from(c, ip) + 1);
    } else {
        c->st.refused[KVR_CONN_REFUSED_NO_MEMORY]++; /* with the accept's */
        if (counted)
            uncount(c, ip); /* closed() will not know its address */
    }
    pthread_mutex_unlock(&c->mu);
    *socket_context = r;
    if (r)
        return;
    /* No record, no request deadline: closed now, as the accept closes one
     * it has no memory to count (the end of stream wakes libmicrohttpd,
     * which closes it: NOTIFY_CLOSED, open - 1; this is the connection's own
     * thread, its socket still open). libmicrohttpd always gives the fd. */
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    KVR_LOG_LIMITED(KVR_LOG_WARN, NULL,
                    "HTTP connection closed: out of memory for its request deadline");
}

static void closed(kvr_conns *c, conn_rec *r)
{
    pthread_mutex_lock(&c->mu);
    c->st.open--;
    if (r) {
        if (r->prev)
            r->prev->next = r->next;
        else
            c->head = r->next;
        if (r->next)
            r->next->prev = r->prev;
        uncount(c, r->ip);
    }
    pthread_mutex_unlock(&c->mu);
    free(r);
}

void kvr_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        started(cls, conn, socket_context);
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        closed(cls, *socket_context);
        *socket_context = NULL;
    }
}

static conn_rec *rec_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

void kvr_conns_replying(kvr_conns *c, struct MHD_Connection *conn)
{
    conn_rec *r = rec_of(conn);
    if (!r)
        return;
    pthread_mutex_lock(&c->mu);
    r->waiting_since = -1;
    pthread_mutex_unlock(&c->mu);
}

void kvr_conns_reply_done(kvr_conns *c, struct MHD_Connection *conn,
                          enum MHD_RequestTerminationCode code)
{
    conn_rec *r = rec_of(conn);
    pthread_mutex_lock(&c->mu);
    if (code == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
        c->st.timed_out++;
    if (r)
        r->waiting_since = kvr_clock_mono();
    pthread_mutex_unlock(&c->mu);
}

size_t kvr_conns_sweep(kvr_conns *c, double now)
{
    size_t n = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = c->n_pending; i-- > 0;)
        if (now - c->pending[i].since > KVR_CONN_PENDING_MAX_S) {
            uncount(c, c->pending[i].ip);
            c->pending[i] = c->pending[--c->n_pending];
        }
    for (conn_rec *r = c->head; r; r = r->next) {
        if (r->shut || r->waiting_since < 0 || now - r->waiting_since < c->timeout_s ||
            r->fd < 0)
            continue;
        /* Wakes libmicrohttpd's thread with an end of stream: it closes the
         * connection itself (the descriptor stays its own). */
        shutdown(r->fd, SHUT_RDWR);
        r->shut = true;
        n++;
    }
    c->st.timed_out += n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void kvr_conns_stats(kvr_conns *c, kvr_conn_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}
