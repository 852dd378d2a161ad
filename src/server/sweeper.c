/* The server's housekeeping, about once a second: booking expiry (every
 * router call already expires lazily, but a quiet router would hold a lost
 * request's load and its block sets until the next call) and the HTTP
 * request deadline (http_conns.h: connections waiting too long for their
 * request are closed); and memory given back once the index drained
 * (trim.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "server/http_conns.h"
#include "server/server_internal.h"
#include "server/trim.h"
#include "util/clock.h"

struct kvr_sweeper {
    kvr_server *srv;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
};

static void *sweep_loop(void *arg)
{
    kvr_sweeper *sw = arg;
    pthread_mutex_lock(&sw->mu);
    while (!sw->stop) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 1;
        int rc = pthread_cond_timedwait(&sw->cv, &sw->mu, &deadline);
        if (rc == ETIMEDOUT && !sw->stop) {
            pthread_mutex_unlock(&sw->mu);
            kvr_router_sweep(sw->srv->router);
            kvr_conns_sweep(sw->srv->conns, kvr_clock_mono());
            kvr_trim_check(&sw->srv->trim, kvr_indexer_heap_bytes(sw->srv->ix),
                           kvr_clock_mono());
            pthread_mutex_lock(&sw->mu);
        }
    }
    pthread_mutex_unlock(&sw->mu);
    return NULL;
}

kvr_sweeper *kvr_sweeper_start(kvr_server *srv)
{
    kvr_sweeper *sw = calloc(1, sizeof *sw);
    if (!sw)
        return NULL;
    sw->srv = srv;
    kvr_trim_start(&srv->trim); /* before the thread: the floor is the RSS at start */
    pthread_mutex_init(&sw->mu, NULL);
    pthread_cond_init(&sw->cv, NULL);
    if (pthread_create(&sw->thread, NULL, sweep_loop, sw) != 0) {
        pthread_cond_destroy(&sw->cv);
        pthread_mutex_destroy(&sw->mu);
        free(sw);
        return NULL;
    }
    return sw;
}

void kvr_sweeper_stop(kvr_sweeper *sw)
{
    if (!sw)
        return;
    pthread_mutex_lock(&sw->mu);
    sw->stop = true;
    pthread_cond_signal(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
    pthread_join(sw->thread, NULL);
    pthread_cond_destroy(&sw->cv);
    pthread_mutex_destroy(&sw->mu);
    free(sw);
}
