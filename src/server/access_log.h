/* The access log (--access-log FILE): one JSON object per request, one line
 * each, appended; kvr_access_log_reopen (POST /reopen_logs, SIGHUP) reopens
 * the path after a rotation renamed the file. Thread-safe: HTTP threads
 * write while another reopens. */
#ifndef KVR_SERVER_ACCESS_LOG_H
#define KVR_SERVER_ACCESS_LOG_H

#include <stddef.h>

typedef struct kvr_access_log kvr_access_log;

typedef struct {
    double time;         /* Unix seconds when the request arrived */
    const char *method;
    const char *path;
    int status;
    double duration_s;   /* arrival to reply queued */
    size_t bytes_in;     /* request body */
    size_t bytes_out;    /* reply body */
    const char *remote;  /* "addr:port", or "" */
    const char *trace_id; /* the trace header's value, or NULL */
} kvr_access_record;

/* NULL with err when the file cannot be opened for appending. */
kvr_access_log *kvr_access_log_open(const char *path, char *err, size_t err_len);
/* 0, or -1 with err (the old file stays in use). */
int kvr_access_log_reopen(kvr_access_log *log, char *err, size_t err_len);
/* 0 when the line was written (or log is NULL); -1 when it is lost: no
 * memory to build it, or the write failed or fell short (a full disk).
 * Logged, rate-limited; the caller counts it. */
int kvr_access_log_write(kvr_access_log *log, const kvr_access_record *rec);
void kvr_access_log_close(kvr_access_log *log);

#endif
