/* Giving freed memory back to the system (SPEC §12: RSS comes back after
 * churn). glibc keeps the pages of freed heap chunks in its arenas: after
 * 10 M store/remove events and a clear, the index's own accounting is back
 * to empty while the RSS stays several times its start. malloc_trim(0)
 * returns every arena's free pages, but it walks the arenas under their
 * locks, so it runs on the server's housekeeping thread (never on the
 * ingest or HTTP paths), only when the index drained — its heap bytes fell
 * by half, and by at least KVR_TRIM_MIN_DRAIN, from the highest point seen
 * since the last trim — and at most once every KVR_TRIM_INTERVAL_S.
 * The housekeeping samples the index once a second, so a peak that grows
 * and drains between two samples is never seen as a high mark (a fast
 * index churns 768 k blocks in under a second): the RSS says it instead.
 * The process grew by KVR_TRIM_MIN_DRAIN or more since the last trim (or
 * the start) and the index holds less than half of that growth:
 * freed pages are what glibc keeps. After a trim the floor is the RSS it
 * left, so memory held by something else (ZeroMQ queues) costs one trim,
 * not one every interval. */
#ifndef KVR_SERVER_TRIM_H
#define KVR_SERVER_TRIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define KVR_TRIM_MIN_DRAIN (8ull << 20)
#define KVR_TRIM_INTERVAL_S 5.0

typedef struct {
    uint64_t high;      /* the index's highest heap bytes since the last trim */
    double last;        /* monotonic seconds of the last trim; 0: none */
    uint64_t rss_floor; /* RSS bytes after the last trim (or at start); 0: none yet */
    _Atomic uint64_t trims; /* malloc_trim calls made (read by /metrics) */
} kvr_trim_state;

/* The housekeeping thread alone calls these two (trims may be read from
 * any thread). Whether the index at index_bytes drained enough since t->high,
 * or the process at rss_bytes (0: unknown) grew past what the index holds,
 * for a trim at monotonic time now (and updates t->high, and t->rss_floor
 * at the first sample). Pure: the decision only. */
bool kvr_trim_due(kvr_trim_state *t, uint64_t index_bytes, uint64_t rss_bytes, double now);

/* Records the RSS at start as the first floor (before the housekeeping
 * thread starts: a churn may grow and drain before its first sample). */
void kvr_trim_start(kvr_trim_state *t);

/* kvr_trim_due, and then malloc_trim(0) (logged at debug with the RSS
 * before and after). Returns whether it trimmed. */
bool kvr_trim_check(kvr_trim_state *t, uint64_t index_bytes, double now);

#endif
