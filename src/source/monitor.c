/* ZeroMQ socket monitors, the one way a listener learns what happened to a
 * connection: the SUB's (a reconnection is never taken for continuity) and
 * a replay DEALER's (an endpoint that refuses connections fails the replay
 * before its inactivity timeout). A monitor is an inproc PAIR, watched like
 * any socket of the ingest thread; it is connected before the monitored
 * socket connects, so no event of the first connection is missed. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "source/frames.h"
#include "source/source_internal.h"

int kvr_monitor_open(kvr_source *src, kvr_watch *mon, void *sock, int events)
{
    char addr[64];
    snprintf(addr, sizeof addr, "inproc://kvr-source-monitor-%" PRIu64, ++src->mon_seq);
    void *m = zmq_socket(src->zctx, ZMQ_PAIR);
    if (!m)
        return -1;
    int zero = 0;
    zmq_setsockopt(m, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_socket_monitor(sock, addr, events) != 0)
        goto fail;
    if (zmq_connect(m, addr) != 0 || kvr_watch_open(src, mon, m) != 0) {
        zmq_socket_monitor(sock, NULL, 0);
        goto fail;
    }
    return 0;
fail:
    zmq_close(m);
    return -1;
}

void kvr_monitor_close(kvr_source *src, kvr_watch *mon, void *sock)
{
    if (sock && mon->sock)
        zmq_socket_monitor(sock, NULL, 0);
    kvr_watch_close(src, mon);
}

bool kvr_monitor_next(kvr_watch *mon, uint16_t *event)
{
    zmq_msg_t f[2];
    size_t n;
    while (mon->sock && kvr_zmq_recv_frames(mon->sock, ZMQ_DONTWAIT, f, 2, &n)) {
        /* [event u16 + value u32, endpoint]: libzmq's version 1 format */
        bool ok = n == 2 && zmq_msg_size(&f[0]) >= sizeof *event;
        if (ok)
            memcpy(event, zmq_msg_data(&f[0]), sizeof *event);
        kvr_zmq_close_frames(f, 2, n);
        if (ok)
            return true;
    }
    return false;
}
