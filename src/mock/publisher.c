#include "mock/publisher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kvrouter/wire.h"
#include "kvrouter/wire_encode.h"
#include "source/frames.h"

typedef struct {
    uint64_t seq;
    void *data;
    size_t len;
} ring_entry;

struct kvr_sim_pub {
    void *pub;
    void *router;
    char endpoint[128];
    char replay_endpoint[128];
    uint64_t next_seq;
    bool subscribed;

    pthread_mutex_t mu; /* guards the ring: the replay thread reads it */
    ring_entry *ring;
    size_t ring_cap, ring_len, ring_head; /* head = oldest */
    size_t ring_bytes;

    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
    atomic_uint_fast64_t replays;
};

static int bind_resolved(void *sock, const char *bind, char *out, size_t outlen)
{
    if (zmq_bind(sock, bind) != 0)
        return -1;
    size_t len = outlen;
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, out, &len) != 0)
        return -1;
    return 0;
}

/* Answers one ["", start_seq] request: every kept batch from start_seq on,
 * then the end marker seq = -1 with an empty payload. A start older than the
 * ring's oldest batch gets what is left: the requester sees the first seq is
 * later than asked and knows history is gone. */
static void serve_replay(kvr_sim_pub *p)
{
    zmq_msg_t frames[4];
    size_t nframes = 0;
    if (!kvr_zmq_recv_frames(p->router, ZMQ_DONTWAIT, frames, 4, &nframes))
        return;
    /* [identity, "", start_seq] */
    if (nframes == 3 && zmq_msg_size(&frames[1]) == 0 && zmq_msg_size(&frames[2]) == 8) {
        uint64_t start = 0;
        kvr_frame_parse(3, zmq_msg_data(&frames[2]), 8, &start); /* 8 bytes: cannot fail */
        const void *id = zmq_msg_data(&frames[0]);
        size_t idlen = zmq_msg_size(&frames[0]);
        unsigned char seqb[8];
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < p->ring_len; i++) {
            const ring_entry *e = &p->ring[(p->ring_head + i) % p->ring_cap];
            if (e->seq < start)
                continue;
            kvr_wire_encode_seq(e->seq, seqb);
            zmq_send(p->router, id, idlen, ZMQ_SNDMORE);
            zmq_send(p->router, "", 0, ZMQ_SNDMORE);
            zmq_send(p->router, seqb, 8, ZMQ_SNDMORE);
            zmq_send(p->router, e->data, e->len, 0);
        }
        pthread_mutex_unlock(&p->mu);
        /* Counted before the end marker goes: a client that has read the
         * marker sees the replay counted (test_replay_answers read it
         * between the two, 2 times in 30 runs). */
        atomic_fetch_add(&p->replays, 1);
        memset(seqb, 0xff, sizeof seqb);
        zmq_send(p->router, id, idlen, ZMQ_SNDMORE);
        zmq_send(p->router, "", 0, ZMQ_SNDMORE);
        zmq_send(p->router, seqb, 8, ZMQ_SNDMORE);
        zmq_send(p->router, "", 0, 0);
    }
    kvr_zmq_close_frames(frames, 4, nframes);
}

static void *replay_main(void *arg)
{
    kvr_sim_pub *p = arg;
    while (!atomic_load(&p->stop)) {
        zmq_pollitem_t it = {.socket = p->router, .events = ZMQ_POLLIN};
        int rc = zmq_poll(&it, 1, 20);
        if (rc > 0 && (it.revents & ZMQ_POLLIN))
            serve_replay(p);
    }
    return NULL;
}

kvr_sim_pub *kvr_sim_pub_create(void *zctx, const char *pub_bind, const char *replay_bind,
                                size_t ring_cap, char *err, size_t errlen)
{
    kvr_sim_pub *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->ring_cap = ring_cap ? ring_cap : 1;
    p->ring = calloc(p->ring_cap, sizeof *p->ring);
    p->pub = zmq_socket(zctx, ZMQ_XPUB);
    if (!p->ring || !p->pub)
        goto fail;
    int linger = 0, hwm = 1000000;
    zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (bind_resolved(p->pub, pub_bind, p->endpoint, sizeof p->endpoint) != 0) {
        snprintf(err, errlen, "bind %s: %s", pub_bind, zmq_strerror(zmq_errno()));
        goto fail_quiet;
    }
    if (replay_bind) {
        p->router = zmq_socket(zctx, ZMQ_ROUTER);
        if (!p->router)
            goto fail;
        zmq_setsockopt(p->router, ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(p->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
        if (bind_resolved(p->router, replay_bind, p->replay_endpoint,
                          sizeof p->replay_endpoint) != 0) {
            snprintf(err, errlen, "bind %s: %s", replay_bind, zmq_strerror(zmq_errno()));
            goto fail_quiet;
        }
        if (pthread_create(&p->thread, NULL, replay_main, p) != 0)
            goto fail;
        p->thread_started = true;
    }
    return p;
fail:
    snprintf(err, errlen, "cannot create publisher: %s", zmq_strerror(zmq_errno()));
fail_quiet:
    kvr_sim_pub_destroy(p);
    return NULL;
}

void kvr_sim_pub_destroy(kvr_sim_pub *p)
{
    if (!p)
        return;
    if (p->thread_started) {
        atomic_store(&p->stop, true);
        pthread_join(p->thread, NULL);
    }
    if (p->router)
        zmq_close(p->router);
    if (p->pub)
        zmq_close(p->pub);
    if (p->ring) {
        for (size_t i = 0; i < p->ring_len; i++)
            free(p->ring[(p->ring_head + i) % p->ring_cap].data);
        free(p->ring);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const char *kvr_sim_pub_endpoint(const kvr_sim_pub *p) { return p->endpoint; }
const char *kvr_sim_pub_replay_endpoint(const kvr_sim_pub *p) { return p->replay_endpoint; }
uint64_t kvr_sim_pub_replays_served(kvr_sim_pub *p) { return atomic_load(&p->replays); }

static void ring_push(kvr_sim_pub *p, uint64_t seq, const void *payload, size_t len)
{
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return; /* the batch was published; only its replay is lost */
    memcpy(copy, payload, len);
    pthread_mutex_lock(&p->mu);
    /* Long prompts make batches of ~100 KB: bound the history by bytes too. */
    while (p->ring_len > 0 &&
           (p->ring_len == p->ring_cap || p->ring_bytes + len > KVR_SIM_PUB_RING_BYTES)) {
        p->ring_bytes -= p->ring[p->ring_head].len;
        free(p->ring[p->ring_head].data);
        p->ring_head = (p->ring_head + 1) % p->ring_cap;
        p->ring_len--;
    }
    p->ring_bytes += len;
    ring_entry *e = &p->ring[(p->ring_head + p->ring_len) % p->ring_cap];
    e->seq = seq;
    e->data = copy;
    e->len = len;
    p->ring_len++;
    pthread_mutex_unlock(&p->mu);
}

int kvr_sim_pub_send(kvr_sim_pub *p, const void *payload, size_t len, uint64_t *seq_out)
{
    uint64_t seq = p->next_seq;
    unsigned char seqb[8];
    kvr_wire_encode_seq(seq, seqb);
    /* Kept before sending: a router that sees this seq live may ask for it
     * in a replay right away. */
    if (p->router)
        ring_push(p, seq, payload, len);
    p->next_seq++;
    if (seq_out)
        *seq_out = seq;
    if (zmq_send(p->pub, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(p->pub, seqb, 8, ZMQ_SNDMORE) < 0 ||
        zmq_send(p->pub, payload, len, 0) < 0)
        return -1;
    return 0;
}

bool kvr_sim_pub_wait_subscriber(kvr_sim_pub *p, int timeout_ms)
{
    if (p->subscribed)
        return true;
    zmq_pollitem_t it = {.socket = p->pub, .events = ZMQ_POLLIN};
    while (zmq_poll(&it, 1, timeout_ms) > 0) {
        unsigned char buf[256];
        int n = zmq_recv(p->pub, buf, sizeof buf, ZMQ_DONTWAIT);
        if (n > 0 && buf[0] == 1) {
            p->subscribed = true;
            return true;
        }
    }
    return false;
}
