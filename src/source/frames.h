/* Receiving one whole ZeroMQ multipart message: shared by the sources, the
 * `tap` tool, the simulator's replay socket and the tests' engine doubles. */
#ifndef KVR_SOURCE_FRAMES_H
#define KVR_SOURCE_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <zmq.h>

/* Receives one multipart message (flags: 0 or ZMQ_DONTWAIT). Keeps its first
 * `max` frames in frames[]; *n_total counts every frame, so a caller can
 * reject a message of the wrong shape. Returns false when nothing arrived. */
bool kvr_zmq_recv_frames(void *sock, int flags, zmq_msg_t *frames, size_t max, size_t *n_total);
/* Closes the frames kvr_zmq_recv_frames kept. */
void kvr_zmq_close_frames(zmq_msg_t *frames, size_t max, size_t n_total);

#endif
