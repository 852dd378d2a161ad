/* HTTP connection accounting (SPEC §12: no client can exhaust the server).
 * libmicrohttpd serves the sockets (epoll, a thread pool); this module keeps,
 * for every connection it accepted, the client address and since when the
 * connection has waited for its next request, and enforces three bounds:
 * - max_connections open at once, and max_per_ip from one client address:
 *   one more is closed as it is accepted (the accept policy below) and
 *   counted by the limit it hit (a connection counts from its accept on: the
 *   pool's threads accept at once, and each must see the others' accepts) — closing costs nothing, whereas a 503 would
 *   have to read a request from a client that may be the one attacking; one
 *   the limits have no memory to count is closed likewise (out_of_memory),
 *   and so is one whose record (its request deadline, below) cannot be made
 *   when it starts: shut down at once, counted the same, not as accepted;
 * - a request must arrive in full within timeout_s of the connection's accept
 *   or of its previous reply: kvr_conns_sweep shuts down the socket of a
 *   connection past that (a slow client trickling its headers or its body, an
 *   idle keep-alive connection), and libmicrohttpd closes it. A reply in
 *   progress is not timed here: libmicrohttpd's own inactivity timeout (the
 *   same timeout_s) covers a client that stops reading.
 *
 * Threading: the callbacks run on libmicrohttpd's threads, the sweep on the
 * server's housekeeping thread; one mutex guards the table. shutdown(2) is
 * only ever called on a socket still in the table, and libmicrohttpd removes
 * it (NOTIFY_CLOSED, which takes the mutex) before it closes the descriptor,
 * so a descriptor number reused by another socket is never touched. */
#ifndef KVR_SERVER_HTTP_CONNS_H
#define KVR_SERVER_HTTP_CONNS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct kvr_conns kvr_conns;

/* Why a connection was refused at accept. */
typedef enum {
    KVR_CONN_REFUSED_MAX = 0, /* max_connections were open */
    KVR_CONN_REFUSED_PER_IP,  /* max_per_ip were open from the address */
    KVR_CONN_REFUSED_NO_MEMORY, /* no memory to count it against the limits,
                                   or for its request deadline's record */
    KVR_CONN_REFUSED_COUNT
} kvr_conn_refusal;

/* "max_connections", "max_connections_per_ip": the limit's option name;
 * "out_of_memory". */
const char *kvr_conn_refusal_name(kvr_conn_refusal r);

typedef struct {
    uint64_t open;                            /* connections now */
    uint64_t peak;                            /* most at once */
    uint64_t accepted;                        /* since start */
    uint64_t refused[KVR_CONN_REFUSED_COUNT]; /* closed at accept, by limit
                                                 (out_of_memory: or as it started) */
    uint64_t timed_out;                       /* closed by the request deadline, or by
                                                 libmicrohttpd's inactivity timeout */
} kvr_conn_stats;

/* max_per_ip 0: no per-address limit. NULL when out of memory. */
kvr_conns *kvr_conns_create(size_t max_connections, size_t max_per_ip, unsigned timeout_s);
void kvr_conns_destroy(kvr_conns *c);
size_t kvr_conns_max(const kvr_conns *c);
/* The size of the record a started connection is kept in (its deadline):
 * calloc(1, kvr_conns_record_size()), for a test to fail it. */
size_t kvr_conns_record_size(void);

/* libmicrohttpd callbacks: MHD_OPTION_ACCEPT_POLICY's apc (cls = c) and
 * MHD_OPTION_NOTIFY_CONNECTION's (cls = c). */
enum MHD_Result kvr_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void kvr_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);

/* The connection's request arrived in full and its reply is being made: the
 * request deadline stops until kvr_conns_reply_done. */
void kvr_conns_replying(kvr_conns *c, struct MHD_Connection *conn);
/* Its reply went out or the request ended (MHD_OPTION_NOTIFY_COMPLETED with
 * the code): the next request's deadline starts now; a request
 * libmicrohttpd ended for inactivity counts as timed out. */
void kvr_conns_reply_done(kvr_conns *c, struct MHD_Connection *conn,
                          enum MHD_RequestTerminationCode code);

/* Shuts down every connection waiting for a request longer than timeout_s
 * at monotonic time now (seconds); returns how many. */
size_t kvr_conns_sweep(kvr_conns *c, double now);

void kvr_conns_stats(kvr_conns *c, kvr_conn_stats *out);

#endif
