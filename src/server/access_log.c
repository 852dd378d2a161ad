/* Access log lines (access_log.h). Each line is built whole with jansson and
 * written with one write(2) on an O_APPEND descriptor, so lines from
 * concurrent requests never interleave; the lock only keeps a reopen from
 * closing the descriptor under a write. */
#include "server/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvrouter/log.h"
#include "util/json_text.h"

struct kvr_access_log {
    char *path;
    int fd;
    pthread_rwlock_t lock; /* writers share it; a reopen takes it alone */
};

static int open_append(const char *path, char *err, size_t err_len)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        snprintf(err, err_len, "access log %s: %s", path, strerror(errno));
    return fd;
}

kvr_access_log *kvr_access_log_open(const char *path, char *err, size_t err_len)
{
    int fd = open_append(path, err, err_len);
    if (fd < 0)
        return NULL;
    kvr_access_log *log = calloc(1, sizeof *log);
    if (!log || !(log->path = strdup(path))) {
        free(log);
        close(fd);
        snprintf(err, err_len, "access log: out of memory");
        return NULL;
    }
    log->fd = fd;
    pthread_rwlock_init(&log->lock, NULL);
    return log;
}

int kvr_access_log_reopen(kvr_access_log *log, char *err, size_t err_len)
{
    int fd = open_append(log->path, err, err_len);
    if (fd < 0)
        return -1;
    pthread_rwlock_wrlock(&log->lock);
    int old = log->fd;
    log->fd = fd;
    pthread_rwlock_unlock(&log->lock);
    close(old);
    return 0;
}

static void iso_time(double t, char *buf, size_t cap)
{
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03dZ", (int)((t - (double)secs) * 1000.0) % 1000);
}

int kvr_access_log_write(kvr_access_log *log, const kvr_access_record *r)
{
    if (!log)
        return 0;
    char when[40];
    iso_time(r->time, when, sizeof when);
    json_t *o = json_pack("{s:s,s:o,s:o,s:i,s:f,s:I,s:I,s:s}", "time", when, "method",
                          kvr_json_text_lossy(r->method ? r->method : ""), "path",
                          kvr_json_text_lossy(r->path ? r->path : ""), "status", r->status,
                          "duration_s", r->duration_s, "bytes_in", (json_int_t)r->bytes_in,
                          "bytes", (json_int_t)r->bytes_out, "remote", r->remote ? r->remote : "");
    if (o && r->trace_id &&
        json_object_set_new(o, "trace_id", kvr_json_text_lossy(r->trace_id)) != 0) {
        json_decref(o); /* a line is written whole or not at all */
        o = NULL;
    }
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text) {
        KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "access log: out of memory for a line");
        return -1;
    }
    size_t len = strlen(text);
    text[len] = '\n';
    pthread_rwlock_rdlock(&log->lock);
    ssize_t w = write(log->fd, text, len + 1);
    pthread_rwlock_unlock(&log->lock);
    int err = errno;
    free(text);
    if (w == (ssize_t)(len + 1))
        return 0;
    KVR_LOG_LIMITED(KVR_LOG_WARN, NULL, "access log %s: write failed: %s", log->path,
                    w < 0 ? strerror(err) : "short write");
    return -1;
}

void kvr_access_log_close(kvr_access_log *log)
{
    if (!log)
        return;
    close(log->fd);
    pthread_rwlock_destroy(&log->lock);
    free(log->path);
    free(log);
}
