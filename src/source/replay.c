/* The client side of a replay (SPEC §2): a DEALER to the engine's ROUTER,
 * one request ["", start_seq], and the health of that endpoint. A failed
 * attempt backs the endpoint off (1 s, doubling up to the configured bound)
 * so an unreachable replay socket costs one failed attempt per backoff
 * period, not one per gap: a refused one (nothing listens) fails after
 * KVR_REPLAY_REFUSALS connection attempts, a silent one in the inactivity
 * timeout. /workers shows the state and the last error. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvrouter/wire_encode.h"
#include "source/source_internal.h"

#define KVR_REPLAY_BACKOFF_MIN_S 1.0

const char *kvr_replay_state_name(kvr_replay_state s)
{
    switch (s) {
    case KVR_REPLAY_NONE:
        return "none";
    case KVR_REPLAY_OK:
        return "ok";
    case KVR_REPLAY_BACKOFF:
        return "backoff";
    case KVR_REPLAY_FAILING:
        return "failing";
    default:
        return "unknown";
    }
}

bool kvr_replay_usable(kvr_source *src, const kvr_listener *l, double now)
{
    (void)src;
    return l->replay_endpoint[0] && now >= l->replay_backoff_until;
}

kvr_replay_state kvr_replay_state_of(const kvr_listener *l, double now)
{
    if (!l->replay_endpoint[0])
        return KVR_REPLAY_NONE;
    if (l->replay_failures == 0)
        return KVR_REPLAY_OK;
    return now < l->replay_backoff_until ? KVR_REPLAY_BACKOFF : KVR_REPLAY_FAILING;
}

void kvr_replay_mark_failed(kvr_source *src, kvr_listener *l, const char *why, double now)
{
    if (l->replay_failures < 64)
        l->replay_failures++;
    double backoff = KVR_REPLAY_BACKOFF_MIN_S;
    double max = src->cfg.replay_backoff_max_ms / 1000.0;
    for (uint32_t i = 1; i < l->replay_failures && backoff < max; i++)
        backoff *= 2;
    if (backoff > max)
        backoff = max;
    l->replay_backoff_until = now + backoff;
    snprintf(l->replay_error, sizeof l->replay_error, "%s", why);
}

void kvr_replay_mark_ok(kvr_listener *l)
{
    l->replay_failures = 0;
    l->replay_backoff_until = 0;
}

void kvr_replay_close(kvr_source *src, kvr_listener *l)
{
    kvr_monitor_close(src, &l->dealer_mon, l->dealer.sock);
    kvr_watch_close(src, &l->dealer);
}

static bool request_failed(kvr_source *src, kvr_listener *l, void *d, const char *what)
{
    snprintf(l->replay_error, sizeof l->replay_error, "%s: %s", what, zmq_strerror(zmq_errno()));
    kvr_monitor_close(src, &l->dealer_mon, d);
    if (d)
        zmq_close(d);
    return false;
}

bool kvr_replay_request(kvr_source *src, kvr_listener *l, uint64_t from)
{
    kvr_replay_close(src, l);
    l->replay_refusals = 0;
    void *d = zmq_socket(src->zctx, ZMQ_DEALER);
    if (!d)
        return request_failed(src, l, NULL, "cannot create the replay socket");
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_RCVHWM, &src->cfg.rcv_hwm, sizeof src->cfg.rcv_hwm);
    zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &src->cfg.max_msg_size, sizeof src->cfg.max_msg_size);
    /* Refused connections end the replay early; without the monitor it
     * still ends, in the inactivity timeout. */
    kvr_monitor_open(src, &l->dealer_mon, d, ZMQ_EVENT_CONNECT_RETRIED);
    if (zmq_connect(d, l->replay_endpoint) != 0)
        return request_failed(src, l, d, "cannot connect");
    unsigned char seq[8];
    kvr_wire_encode_seq(from, seq);
    /* The DEALER queues the request until it connects; an endpoint that
     * never answers ends in the inactivity timeout. */
    if (zmq_send(d, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(d, seq, sizeof seq, ZMQ_DONTWAIT) < 0)
        return request_failed(src, l, d, "cannot send the request");
    if (kvr_watch_open(src, &l->dealer, d) != 0)
        return request_failed(src, l, d, "cannot watch the replay socket");
    return true;
}
