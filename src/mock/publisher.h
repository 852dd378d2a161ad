/* The ZeroMQ side of a mock engine (SPEC §2): an XPUB socket sending
 * [topic, seq (8B BE), payload] and a ROUTER replay socket answering
 * ["", start_seq] from a ring of recent batches, served by a background
 * thread so a router can replay while the simulator is busy. */
#ifndef KVR_MOCK_PUBLISHER_H
#define KVR_MOCK_PUBLISHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kvr_sim_pub kvr_sim_pub;

/* Replay history kept per publisher, at most (the batch count is the
 * ring_cap given at creation). */
#define KVR_SIM_PUB_RING_BYTES (16u << 20)

/* pub_bind / replay_bind: ZeroMQ endpoints, e.g. "tcp://127.0.0.1:*".
 * replay_bind NULL = no replay socket. ring_cap = batches kept for replay.
 * Returns NULL with a message in err on failure (e.g. port in use). */
kvr_sim_pub *kvr_sim_pub_create(void *zctx, const char *pub_bind, const char *replay_bind,
                                size_t ring_cap, char *err, size_t errlen);
void kvr_sim_pub_destroy(kvr_sim_pub *p);

/* Resolved endpoints ("tcp://127.0.0.1:PORT"); replay is "" without one. */
const char *kvr_sim_pub_endpoint(const kvr_sim_pub *p);
const char *kvr_sim_pub_replay_endpoint(const kvr_sim_pub *p);

/* Publishes one batch with the next sequence number (first is 0); the seq
 * used goes to *seq_out. Returns 0, or -1 if ZeroMQ refused the message. */
int kvr_sim_pub_send(kvr_sim_pub *p, const void *payload, size_t len, uint64_t *seq_out);

/* Waits until a subscriber has subscribed (XPUB sees its subscription), so
 * the first batches are not lost to the slow-joiner effect. Returns whether
 * one did within timeout_ms. Remembers success. */
bool kvr_sim_pub_wait_subscriber(kvr_sim_pub *p, int timeout_ms);

/* Replay requests answered so far (tests). */
uint64_t kvr_sim_pub_replays_served(kvr_sim_pub *p);

#endif
