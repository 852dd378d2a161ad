/* at_rest.sh's silent engines: binds N PUB sockets on ephemeral 127.0.0.1
 * ports, prints them as a `--workers` spec, then publishes nothing until
 * killed. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, zmq_ctx_get(ctx, ZMQ_SOCKET_LIMIT));
    for (int i = 1; i <= n; i++) {
        void *s = zmq_socket(ctx, ZMQ_PUB);
        if (!s || zmq_bind(s, "tcp://127.0.0.1:*") != 0) {
            fprintf(stderr, "bind: %s\n", zmq_strerror(zmq_errno()));
            return 1;
        }
        char ep[64];
        size_t sz = sizeof ep;
        zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &sz);
        printf("%s%d=%s", i > 1 ? "," : "", i, ep);
    }
    printf("\n");
    fflush(stdout);
    for (;;)
        pause();
}
