/* Test helpers: a real client holding slow HTTP connections (raw TCP
 * sockets on loopback that send part of a request and then trickle), and
 * the checks that the server closed one. Header-only. */
#ifndef KVR_TEST_SLOW_CLIENTS_H
#define KVR_TEST_SLOW_CLIENTS_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Half the slow clients stop inside their headers, half inside the body. */
static const char sc_partial_headers[] = "POST /query HTTP/1.1\r\nHost: kvrouter\r\nX-Slow: ";
static const char sc_partial_body[] =
    "POST /query HTTP/1.1\r\nHost: kvrouter\r\nContent-Type: application/json\r\n"
    "Content-Length: 100000\r\n\r\n{\"model_name\": \"m\", \"token_ids\": [1";

/* Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit. */
static inline size_t sc_raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    return rl.rlim_cur == RLIM_INFINITY ? (size_t)1 << 20 : (size_t)rl.rlim_cur;
}

/* A connected socket to 127.0.0.1:port from local address from (NULL: any),
 * non-blocking, that sent `sent`; -1 when it cannot connect within 10 s. */
static inline int sc_open(int port, const char *from, const char *sent)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (from) {
        inet_pton(AF_INET, from, &sa.sin_addr);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(fd);
            return -1;
        }
    }
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, 10000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0 || send(fd, sent, strlen(sent), MSG_NOSIGNAL) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One more byte of the request (the headers' or the body's). */
static inline void sc_trickle(int fd) { send(fd, "1", 1, MSG_NOSIGNAL | MSG_DONTWAIT); }

/* Whether the server closed fd (end of stream or reset), reading and
 * dropping whatever reply came first; waits up to timeout_ms. */
static inline bool sc_closed_by_server(int fd, int timeout_ms)
{
    char buf[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, timeout_ms);
        if (rc <= 0)
            return false;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return true;
    }
}

/* Still open now: nothing to read and no end of stream. */
static inline bool sc_open_now(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

#endif
