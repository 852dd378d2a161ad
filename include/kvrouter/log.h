/* The library's one log sink. Every layer logs through kvr_log / kvr_log_at;
 * nothing in the library writes to stderr itself. The default sink writes
 * one line per message to stderr, as text or as a JSON object (time, level,
 * message, and the model / worker / rank it concerns when known); an
 * embedding program sets its own sink instead.
 *
 * Thread-safety: every function may be called from any thread. Messages are
 * handed to the sink one at a time (a mutex), so lines never interleave; a
 * sink must not log itself. Rate-limited sites (KVR_LOG_LIMITED) keep a
 * static limiter each, so a message repeated by 1000 workers or every
 * millisecond appears once per interval, followed by how many were dropped. */
#ifndef KVROUTER_LOG_H
#define KVROUTER_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KVR_LOG_DEBUG = 0,
    KVR_LOG_INFO,
    KVR_LOG_WARN,
    KVR_LOG_ERROR,
    KVR_LOG_OFF /* as a threshold: nothing is logged */
} kvr_log_level;

/* "debug", "info", "warn", "error", "off". */
const char *kvr_log_level_name(kvr_log_level level);
/* Accepts the names above and "warning"; -1 for anything else. */
int kvr_log_level_from_name(const char *name);

typedef enum { KVR_LOG_TEXT = 0, KVR_LOG_JSON } kvr_log_format;
/* "text" or "json"; -1 for anything else. */
int kvr_log_format_from_name(const char *name);

/* What a message concerns; any part may be unknown. */
typedef struct {
    const char *model; /* NULL: unknown */
    bool has_worker;
    uint64_t worker_id;
    bool has_rank;
    uint32_t dp_rank;
} kvr_log_context;

#define KVR_LOG_WORKER_RANK(id, rank)                                                  \
    (&(kvr_log_context){.has_worker = true, .worker_id = (id), .has_rank = true,       \
                        .dp_rank = (rank)})

typedef struct {
    kvr_log_level level;
    double time;                /* Unix seconds */
    const char *message;        /* one line, no trailing newline */
    const kvr_log_context *ctx; /* NULL: none */
    uint64_t suppressed;        /* rate-limited site: messages dropped before this one */
} kvr_log_record;

typedef void (*kvr_log_sink_fn)(void *user, const kvr_log_record *rec);

/* NULL fn restores the default stderr writer. */
void kvr_log_set_sink(kvr_log_sink_fn fn, void *user);
/* Messages below min are dropped before formatting. Default: info. */
void kvr_log_set_level(kvr_log_level min);
kvr_log_level kvr_log_get_level(void);
/* Line format of the default writer. Default: text. */
void kvr_log_set_format(kvr_log_format format);

/* The default writer's line for rec, as it would print it (without the
 * newline), into buf; returns the length it needed (snprintf-like). */
int kvr_log_format_line(kvr_log_format format, const kvr_log_record *rec, char *buf,
                        size_t cap);

void kvr_log(kvr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kvr_log_at(kvr_log_level level, const kvr_log_context *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One per message site (KVR_LOG_LIMITED declares it). */
typedef struct {
    _Atomic int64_t next_ms;    /* monotonic ms before which the site is quiet */
    _Atomic uint64_t suppressed;
} kvr_log_limiter;

#define KVR_LOG_LIMIT_INTERVAL_S 10.0

/* At most one message per interval_s through lim; the next one that passes
 * carries the count of those dropped meanwhile. */
void kvr_log_limited(kvr_log_limiter *lim, double interval_s, kvr_log_level level,
                     const kvr_log_context *ctx, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define KVR_LOG_LIMITED(level, ctx, ...)                                                \
    do {                                                                                \
        static kvr_log_limiter kvr_log_site_;                                           \
        kvr_log_limited(&kvr_log_site_, KVR_LOG_LIMIT_INTERVAL_S, (level), (ctx),       \
                        __VA_ARGS__);                                                   \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
