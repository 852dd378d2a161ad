/* The log sink (include/kvrouter/log.h): level threshold, the default
 * stderr writer (text or JSON lines, built with jansson so every message is
 * escaped right), and per-site rate limiting. */
#include "kvrouter/log.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/json_text.h"

static pthread_mutex_t sink_mu = PTHREAD_MUTEX_INITIALIZER;
static kvr_log_sink_fn sink_fn; /* NULL: default writer; under sink_mu */
static void *sink_user;
static _Atomic int min_level = KVR_LOG_INFO;
static _Atomic int line_format = KVR_LOG_TEXT;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

const char *kvr_log_level_name(kvr_log_level level)
{
    return (unsigned)level <= KVR_LOG_OFF ? level_names[level] : "unknown";
}

int kvr_log_level_from_name(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "warning") == 0)
        return KVR_LOG_WARN;
    for (int i = 0; i <= KVR_LOG_OFF; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

int kvr_log_format_from_name(const char *name)
{
    if (name && strcmp(name, "text") == 0)
        return KVR_LOG_TEXT;
    if (name && strcmp(name, "json") == 0)
        return KVR_LOG_JSON;
    return -1;
}

void kvr_log_set_sink(kvr_log_sink_fn fn, void *user)
{
    pthread_mutex_lock(&sink_mu);
    sink_fn = fn;
    sink_user = user;
    pthread_mutex_unlock(&sink_mu);
}

void kvr_log_set_level(kvr_log_level min) { atomic_store(&min_level, (int)min); }
kvr_log_level kvr_log_get_level(void) { return (kvr_log_level)atomic_load(&min_level); }
void kvr_log_set_format(kvr_log_format format) { atomic_store(&line_format, (int)format); }

/* 2026-05-01T12:00:00.123Z */
static void iso_time(double t, char *buf, size_t cap)
{
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int ms = (int)((t - (double)secs) * 1000.0);
    snprintf(buf + n, cap - n, ".%03dZ", ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

static json_t *u64_json(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, v);
    return json_string(s);
}

static int json_line(const kvr_log_record *rec, const char *when, char *buf, size_t cap)
{
    json_t *o = json_object();
    json_object_set_new(o, "time", json_string(when));
    json_object_set_new(o, "level", json_string(kvr_log_level_name(rec->level)));
    json_object_set_new(o, "message", kvr_json_text_lossy(rec->message));
    const kvr_log_context *c = rec->ctx;
    if (c && c->model)
        json_object_set_new(o, "model", kvr_json_text_lossy(c->model));
    if (c && c->has_worker)
        json_object_set_new(o, "worker_id", u64_json(c->worker_id));
    if (c && c->has_rank)
        json_object_set_new(o, "dp_rank", json_integer(c->dp_rank));
    if (rec->suppressed)
        json_object_set_new(o, "suppressed", u64_json(rec->suppressed));
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    int n = snprintf(buf, cap, "%s", text ? text : "{\"level\":\"error\",\"message\":\"log line "
                                                   "not encodable\"}");
    free(text);
    return n;
}

int kvr_log_format_line(kvr_log_format format, const kvr_log_record *rec, char *buf, size_t cap)
{
    char when[40];
    iso_time(rec->time, when, sizeof when);
    if (format == KVR_LOG_JSON)
        return json_line(rec, when, buf, cap);
    char about[400] = "";
    const kvr_log_context *c = rec->ctx;
    size_t o = 0;
    if (c && c->model)
        o += (size_t)snprintf(about + o, sizeof about - o, "model %s ", c->model);
    if (c && c->has_worker && o < sizeof about)
        o += (size_t)snprintf(about + o, sizeof about - o, "worker %" PRIu64 " ", c->worker_id);
    if (c && c->has_rank && o < sizeof about)
        o += (size_t)snprintf(about + o, sizeof about - o, "rank %" PRIu32 " ", c->dp_rank);
    if (o > 0 && o < sizeof about)
        snprintf(about + o - 1, sizeof about - o + 1, ": ");
    char tail[64] = "";
    if (rec->suppressed)
        snprintf(tail, sizeof tail, " (%" PRIu64 " similar messages suppressed)", rec->suppressed);
    return snprintf(buf, cap, "%s %s kvrouter: %s%s%s", when, kvr_log_level_name(rec->level),
                    about, rec->message, tail);
}

static void default_writer(const kvr_log_record *rec)
{
    char line[2048];
    int n = kvr_log_format_line((kvr_log_format)atomic_load(&line_format), rec, line,
                                sizeof line);
    if (n < 0)
        return;
    fprintf(stderr, "%s\n", line);
}

static void emit(kvr_log_level level, const kvr_log_context *ctx, uint64_t suppressed,
                 const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* One line per message: a newline inside would break line-based collectors. */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    kvr_log_record rec = {level, kvr_clock_wall(), msg, ctx, suppressed};
    pthread_mutex_lock(&sink_mu);
    if (sink_fn)
        sink_fn(sink_user, &rec);
    else
        default_writer(&rec);
    pthread_mutex_unlock(&sink_mu);
}

static bool enabled(kvr_log_level level)
{
    return level < KVR_LOG_OFF && (int)level >= atomic_load(&min_level);
}

void kvr_log(kvr_log_level level, const char *fmt, ...)
{
    if (!enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, NULL, 0, fmt, ap);
    va_end(ap);
}

void kvr_log_at(kvr_log_level level, const kvr_log_context *ctx, const char *fmt, ...)
{
    if (!enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, ctx, 0, fmt, ap);
    va_end(ap);
}

void kvr_log_limited(kvr_log_limiter *lim, double interval_s, kvr_log_level level,
                     const kvr_log_context *ctx, const char *fmt, ...)
{
    if (!enabled(level))
        return;
    int64_t now = (int64_t)(kvr_clock_mono() * 1000.0);
    int64_t next = atomic_load(&lim->next_ms);
    /* One thread wins the interval; the others count themselves out. */
    if (now < next ||
        !atomic_compare_exchange_strong(&lim->next_ms, &next, now + (int64_t)(interval_s * 1000))) {
        atomic_fetch_add(&lim->suppressed, 1);
        return;
    }
    uint64_t dropped = atomic_exchange(&lim->suppressed, 0);
    va_list ap;
    va_start(ap, fmt);
    emit(level, ctx, dropped, fmt, ap);
    va_end(ap);
}
