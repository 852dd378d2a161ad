/* Builders for raw events and normalizers shared by the normalizer tests.
 * Events are built directly as kvr_raw_event structs (no msgpack). */
#ifndef KVR_TEST_NORM_FIXTURE_H
#define KVR_TEST_NORM_FIXTURE_H

#include "test_support.h"

#include <stdio.h>
#include <string.h>

#include "kvrouter/log.h"
#include "kvrouter/normalize.h"

/* A token id that does not fit in u32 (a Kimi wide pad). */
#define WIDE 0x100000007ULL

static inline kvr_str S(const char *s)
{
    kvr_str r = {s, s ? (uint32_t)strlen(s) : 0};
    return r;
}

static inline kvr_normalizer *mk_norm(kvr_mm_identity mode, uint32_t b, bool eagle,
                                      uint32_t capacity)
{
    kvr_normalizer_config cfg = {.block_size = b, .eagle = eagle, .mm_identity = mode,
                                 .mm_capacity = capacity, .worker_id = 7, .dp_rank = 1};
    kvr_normalizer *n = kvr_normalizer_create(&cfg);
    assert_non_null(n);
    return n;
}

/* Text tokens base, base+1, ... (all below the text limit). */
static inline void text(uint64_t *tok, size_t n, uint64_t base)
{
    for (size_t i = 0; i < n; i++)
        tok[i] = base + i;
}

static inline kvr_raw_event base_ev(kvr_event_type type, const uint64_t *hashes, uint32_t nh)
{
    kvr_raw_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.tier = KVR_TIER_GPU;
    ev.block_hashes = hashes;
    ev.n_block_hashes = nh;
    return ev;
}

static inline kvr_raw_event store_ev(const uint64_t *hashes, uint32_t nh, bool has_parent,
                                     uint64_t parent, const uint64_t *tokens, uint32_t nt)
{
    kvr_raw_event ev = base_ev(KVR_EV_STORED, hashes, nh);
    ev.has_parent = has_parent;
    ev.parent = parent;
    ev.token_ids = tokens;
    ev.n_token_ids = nt;
    return ev;
}

static inline kvr_raw_event remove_ev(const uint64_t *hashes, uint32_t nh)
{
    return base_ev(KVR_EV_REMOVED, hashes, nh);
}

static inline kvr_raw_event clear_ev(void)
{
    return base_ev(KVR_EV_CLEARED, NULL, 0);
}

/* ev naming attention group `group` and, unless kind is NULL, its kind. */
static inline kvr_raw_event in_group(kvr_raw_event ev, int64_t group, const char *kind)
{
    ev.has_group_idx = true;
    ev.group_idx = group;
    if (kind)
        ev.kv_cache_spec_kind = S(kind);
    return ev;
}

static inline kvr_normalizer_counters counters(const kvr_normalizer *n)
{
    kvr_normalizer_counters c;
    kvr_normalizer_counters_get(n, &c);
    return c;
}

/* Asserts out is an empty removal (a store the index must not see). */
static inline void assert_empty_removal(const kvr_norm_event *out)
{
    assert_int_equal(out->kind, KVR_NORM_REMOVE);
    assert_int_equal(out->n_block_hashes, 0);
}

static inline void assert_store_of(const kvr_norm_event *out, const uint64_t *hashes,
                                   uint32_t n, uint32_t n_tokens)
{
    assert_int_equal(out->kind, KVR_NORM_STORE);
    assert_int_equal(out->n_block_hashes, n);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(out->block_hashes[i], hashes[i]);
    assert_int_equal(out->n_tokens, n_tokens);
}

/* Warnings the library logs while a test runs (kvr_log_set_sink): how many,
 * and the last one's text and (worker, rank), to assert what an operator
 * reads. Start with warn_capture_start, end with warn_capture_stop. */
typedef struct {
    unsigned n;
    char last[256];
    bool has_worker, has_rank;
    uint64_t worker_id;
    uint32_t dp_rank;
} warn_capture;

static inline void warn_capture_sink_(void *user, const kvr_log_record *rec)
{
    warn_capture *c = user;
    if (rec->level != KVR_LOG_WARN)
        return;
    c->n++;
    snprintf(c->last, sizeof c->last, "%s", rec->message);
    c->has_worker = rec->ctx && rec->ctx->has_worker;
    c->has_rank = rec->ctx && rec->ctx->has_rank;
    c->worker_id = rec->ctx ? rec->ctx->worker_id : 0;
    c->dp_rank = rec->ctx ? rec->ctx->dp_rank : 0;
}

static inline void warn_capture_start(warn_capture *c)
{
    memset(c, 0, sizeof *c);
    kvr_log_set_sink(warn_capture_sink_, c);
}

static inline void warn_capture_stop(void)
{
    kvr_log_set_sink(NULL, NULL);
}

/* Asserts the last warning named (worker, rank) and contains text. */
static inline void assert_warned_about(const warn_capture *c, uint64_t worker, uint32_t rank,
                                       const char *text)
{
    assert_true(c->has_worker && c->has_rank);
    assert_int_equal(c->worker_id, worker);
    assert_int_equal(c->dp_rank, rank);
    if (!strstr(c->last, text))
        fail_msg("warning '%s' does not say '%s'", c->last, text);
}

#endif
