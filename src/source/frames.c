#include "source/frames.h"

bool kvr_zmq_recv_frames(void *sock, int flags, zmq_msg_t *frames, size_t max, size_t *n_total)
{
    size_t n = 0;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, flags) < 0) {
            zmq_msg_close(&m);
            if (n == 0)
                return false;
            break; /* a multipart message arrives whole; defensive only */
        }
        int more = zmq_msg_more(&m);
        if (n < max)
            frames[n] = m;
        else
            zmq_msg_close(&m);
        n++;
        if (!more)
            break;
    }
    *n_total = n;
    return true;
}

void kvr_zmq_close_frames(zmq_msg_t *frames, size_t max, size_t n_total)
{
    for (size_t i = 0; i < n_total && i < max; i++)
        zmq_msg_close(&frames[i]);
}
