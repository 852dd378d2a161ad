/* kvrouter tap ENDPOINT [--topic T] [--count N]: subscribe to an engine's
 * KV event PUB socket and print every decoded event as a JSON line with its
 * sequence number. The first thing to run when routing shows zero overlap. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/decode_json.h"
#include "kvrouter/wire.h"
#include "source/frames.h"

static volatile sig_atomic_t tap_stop;
static void on_signal(int sig)
{
    (void)sig;
    tap_stop = 1;
}

/* The `decode` line of one event with "seq" as its first key: the shared
 * printer writes to a memory stream and the seq is spliced in after '{'. */
static void print_event(const kvr_batch *b, const kvr_raw_event *ev, uint64_t seq)
{
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    if (!m)
        return;
    kvr_decode_json_event(m, b, ev);
    fclose(m);
    if (len > 1 && line[0] == '{')
        printf("{\"seq\":%llu,%s", (unsigned long long)seq, line + 1);
    free(line);
}

/* --help; bad arguments get one line on stderr instead */
static int usage(void)
{
    printf("usage: kvrouter tap ENDPOINT [--topic T] [--count N]\n"
           "  ENDPOINT  engine KV event publisher, e.g. tcp://127.0.0.1:5557\n"
           "  --topic   subscribe to this topic prefix (default: everything)\n"
           "  --count   exit after N messages\n");
    return 0;
}

int kvr_cmd_tap(int argc, char **argv)
{
    const char *endpoint = NULL, *topic = "";
    long long count = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage();
        if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc)
            topic = argv[++i];
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            uint64_t n;
            if (kvr_cli_parse_u64(argv[++i], 0, INT64_MAX, &n) != 0) {
                fprintf(stderr, "kvrouter tap: --count needs a non-negative integer, got '%s'\n",
                        argv[i]);
                return 2;
            }
            count = (long long)n;
        } else if (argv[i][0] != '-' && !endpoint)
            endpoint = argv[i];
        else {
            fprintf(stderr, "kvrouter tap: unexpected argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (!endpoint) {
        fprintf(stderr, "kvrouter tap: give the ENDPOINT to subscribe to (try --help)\n");
        return 2;
    }
    void *ctx = zmq_ctx_new();
    void *sub = zmq_socket(ctx, ZMQ_SUB);
    int hwm = 100000, zero = 0;
    zmq_setsockopt(sub, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topic, strlen(topic)) != 0 ||
        zmq_connect(sub, endpoint) != 0) {
        fprintf(stderr, "kvrouter tap: cannot connect to '%s': %s\n", endpoint,
                zmq_strerror(zmq_errno()));
        zmq_close(sub);
        zmq_ctx_term(ctx);
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    fprintf(stderr, "kvrouter tap: subscribed to %s (topic \"%s\")\n", endpoint, topic);
    kvr_batch b;
    kvr_batch_init(&b);
    long long seen = 0;
    while (!tap_stop && (count < 0 || seen < count)) {
        zmq_pollitem_t it = {.socket = sub, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 200) <= 0)
            continue;
        zmq_msg_t f[3];
        size_t n = 0;
        if (!kvr_zmq_recv_frames(sub, 0, f, 3, &n))
            continue;
        seen++;
        uint64_t seq = 0;
        kvr_frame_error fe =
            kvr_frame_parse(n, n >= 2 ? zmq_msg_data(&f[1]) : NULL, n >= 2 ? zmq_msg_size(&f[1]) : 0,
                            &seq);
        if (fe != KVR_FRAME_OK) {
            printf("{\"error\":\"%s\",\"frames\":%zu}\n", kvr_frame_error_name(fe), n);
        } else {
            kvr_batch_error be = kvr_batch_decode(&b, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
            if (be != KVR_BATCH_OK)
                printf("{\"seq\":%llu,\"error\":\"%s\"}\n", (unsigned long long)seq,
                       kvr_batch_error_name(be));
            else
                for (const kvr_raw_event *ev; (ev = kvr_batch_next(&b));)
                    print_event(&b, ev, seq);
        }
        fflush(stdout);
        kvr_zmq_close_frames(f, 3, n);
    }
    kvr_batch_free(&b);
    zmq_close(sub);
    zmq_ctx_term(ctx);
    return 0;
}
