/* One poll of one engine: the requests its kind needs (kvr_engine_kind_def:
 * sglang.c, vllm.c), each answer through that kind's validator as it
 * arrives, and the verdict. An engine of unknown kind is asked SGLang's
 * first document and vLLM's at once; the first valid answer decides.
 *
 * Verdicts: OK when every required document was read and the kind's
 * finish rule passed; UNREACHABLE for a transport error, a timeout or an
 * HTTP status other than 200 and 404 (what a restarting engine answers);
 * INVALID for an answer the validator refused, a required document that is
 * 404 everywhere, or nothing that looks like an engine. */
#include <stdio.h>
#include <string.h>

#include "discovery/discovery_internal.h"

const kvr_engine_kind_def *kvr_engine_kind_def_of(kvr_engine_kind k)
{
    switch (k) {
    case KVR_ENGINE_KIND_SGLANG: return &kvr_sglang_kind;
    case KVR_ENGINE_KIND_VLLM: return &kvr_vllm_kind;
    default: return NULL;
    }
}

void kvr_probe_init(kvr_probe *p, uint64_t uid, const char *url, const char *host,
                    kvr_engine_kind want)
{
    memset(p, 0, sizeof *p);
    p->uid = uid;
    snprintf(p->url, sizeof p->url, "%s", url);
    snprintf(p->host, sizeof p->host, "%s", host);
    p->want = want;
    p->kind = want;
}

void kvr_probe_free(kvr_probe *p)
{
    for (int k = 0; k < KVR_ENGINE_KIND_COUNT; k++)
        kvr_reading_free(&p->readings[k]);
}

kvr_reading *kvr_probe_reading(kvr_probe *p)
{
    return p->done && p->outcome == KVR_POLL_OK ? &p->readings[p->kind] : NULL;
}

static void on_done(void *user, int kind, int doc, const kvr_fetch_result *res,
                    kvr_fetcher *f);

static void request(kvr_probe *p, kvr_fetcher *f, kvr_engine_kind k, size_t doc)
{
    kvr_slot *s = &p->slots[k][doc];
    const kvr_engine_doc *d = &kvr_engine_kind_def_of(k)->docs[doc];
    s->st = KVR_SLOT_BUSY;
    p->requests++;
    if (!kvr_fetcher_get(f, p->url, s->on_fallback ? d->fallback : d->path, on_done, p, (int)k,
                         (int)doc)) {
        s->st = KVR_SLOT_FAILED;
        s->failure = KVR_POLL_UNREACHABLE;
        snprintf(s->err, sizeof s->err, "out of memory");
    }
}

static void request_rest(kvr_probe *p, kvr_fetcher *f, kvr_engine_kind k, size_t from)
{
    const kvr_engine_kind_def *def = kvr_engine_kind_def_of(k);
    for (size_t i = from; i < def->n_docs; i++)
        if (p->slots[k][i].st == KVR_SLOT_IDLE)
            request(p, f, k, i);
}

void kvr_probe_start(kvr_probe *p, kvr_fetcher *f)
{
    p->started = 1;
    if (p->kind != KVR_ENGINE_KIND_AUTO) {
        request_rest(p, f, p->kind, 0);
        return;
    }
    request(p, f, KVR_ENGINE_KIND_SGLANG, 0);
    request(p, f, KVR_ENGINE_KIND_VLLM, 0);
}

static void conclude(kvr_probe *p, kvr_poll_outcome o, const char *err)
{
    p->done = true;
    p->outcome = o;
    snprintf(p->err, sizeof p->err, "%s", err);
}

/* Unknown kind: the first valid first document decides. */
static void decide(kvr_probe *p, kvr_fetcher *f)
{
    static const kvr_engine_kind order[] = {KVR_ENGINE_KIND_SGLANG, KVR_ENGINE_KIND_VLLM};
    bool busy = false;
    for (size_t i = 0; i < 2; i++) {
        kvr_slot *s = &p->slots[order[i]][0];
        if (s->st == KVR_SLOT_OK) {
            p->kind = order[i];
            request_rest(p, f, p->kind, 1);
            return;
        }
        busy |= s->st == KVR_SLOT_BUSY;
    }
    if (busy)
        return;
    for (kvr_poll_outcome want = KVR_POLL_UNREACHABLE; want <= KVR_POLL_INVALID; want++)
        for (size_t i = 0; i < 2; i++) {
            kvr_slot *s = &p->slots[order[i]][0];
            if (s->st == KVR_SLOT_FAILED && s->failure == want) {
                conclude(p, want, s->err);
                return;
            }
        }
    conclude(p, KVR_POLL_INVALID,
             "not an SGLang or vLLM engine: /server_info, /get_server_info and "
             "/kv_event_sources all answer 404");
}

static void advance(kvr_probe *p, kvr_fetcher *f)
{
    if (p->done)
        return;
    if (p->kind == KVR_ENGINE_KIND_AUTO) {
        decide(p, f);
        if (p->done || p->kind == KVR_ENGINE_KIND_AUTO)
            return;
    }
    const kvr_engine_kind_def *def = kvr_engine_kind_def_of(p->kind);
    for (size_t i = 0; i < def->n_docs; i++)
        if (p->slots[p->kind][i].st == KVR_SLOT_BUSY || p->slots[p->kind][i].st == KVR_SLOT_IDLE)
            return;
    for (size_t i = 0; i < def->n_docs; i++) {
        kvr_slot *s = &p->slots[p->kind][i];
        char err[KVR_DISC_ERR];
        if (s->st == KVR_SLOT_FAILED) {
            conclude(p, s->failure, s->err);
            return;
        }
        if (s->st == KVR_SLOT_ABSENT && def->docs[i].required) {
            snprintf(err, sizeof err, "GET %s%s%s: 404 Not Found", def->docs[i].path,
                     def->docs[i].fallback ? " and " : "",
                     def->docs[i].fallback ? def->docs[i].fallback : "");
            conclude(p, KVR_POLL_INVALID, err);
            return;
        }
    }
    char err[KVR_DISC_ERR] = "";
    if (def->finish(&p->readings[p->kind], err, sizeof err) != 0) {
        p->invalid_responses++;
        conclude(p, KVR_POLL_INVALID, err);
        return;
    }
    p->readings[p->kind].info.valid = true;
    p->readings[p->kind].info.kind = p->kind;
    conclude(p, KVR_POLL_OK, "");
}

static void on_done(void *user, int kind, int doc, const kvr_fetch_result *res,
                    kvr_fetcher *f)
{
    kvr_probe *p = user;
    kvr_slot *s = &p->slots[kind][doc];
    const kvr_engine_doc *d = &kvr_engine_kind_def_of((kvr_engine_kind)kind)->docs[doc];
    const char *path = s->on_fallback ? d->fallback : d->path;
    if (res->curl_code != 0) {
        s->st = KVR_SLOT_FAILED;
        s->failure = KVR_POLL_UNREACHABLE;
        snprintf(s->err, sizeof s->err, "GET %s: %s", path, res->error);
    } else if (res->status == 404 && d->fallback && !s->on_fallback) {
        s->on_fallback = true;
        request(p, f, (kvr_engine_kind)kind, (size_t)doc);
        return;
    } else if (res->status == 404) {
        s->st = KVR_SLOT_ABSENT;
    } else if (res->status != 200) {
        s->st = KVR_SLOT_FAILED;
        s->failure = KVR_POLL_UNREACHABLE;
        snprintf(s->err, sizeof s->err, "GET %s: HTTP status %ld", path, res->status);
    } else if (d->read(res->body, res->len, p->host, &p->readings[kind], s->err,
                       sizeof s->err) != 0) {
        s->st = KVR_SLOT_FAILED;
        s->failure = KVR_POLL_INVALID;
        p->invalid_responses++;
    } else {
        s->st = KVR_SLOT_OK;
    }
    advance(p, f);
}
