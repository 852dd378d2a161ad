/* Concurrent HTTP GETs for the poll thread, over libcurl's multi interface:
 * a thousand engines are polled in about the time of the slowest one, not
 * the sum. Every request has a deadline (connection included) and a body
 * limit (a larger body aborts the transfer: nothing grows with what an
 * engine sends), at most KVR_DISCOVERY_MAX_INFLIGHT run at once (the rest
 * wait their turn, so sockets stay bounded), no redirect is followed and
 * only http/https are spoken. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery_internal.h"
#include "util/grow.h"

typedef struct fetch_req {
    struct fetch_req *next, *prev; /* waiting queue, or the in-flight list */
    CURL *h;
    char url[KVR_ENGINE_URL_MAX + 64];
    char *buf;
    size_t len, cap, max_body;
    bool too_big;
    char errbuf[CURL_ERROR_SIZE];
    kvr_fetch_done done;
    void *user;
    int kind, doc;
} fetch_req;

struct kvr_fetcher {
    CURLM *multi;
    long timeout_ms;
    size_t max_body;
    fetch_req *wait_head, *wait_tail;
    fetch_req *running; /* doubly linked */
    size_t inflight;
};

kvr_fetcher *kvr_fetcher_create(double timeout_s, size_t max_body)
{
    kvr_fetcher *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->multi = curl_multi_init();
    if (!f->multi) {
        free(f);
        return NULL;
    }
    f->timeout_ms = (long)(timeout_s * 1000.0);
    if (f->timeout_ms < 1)
        f->timeout_ms = 1;
    f->max_body = max_body;
    return f;
}

static void req_free(fetch_req *r)
{
    if (r->h)
        curl_easy_cleanup(r->h);
    free(r->buf);
    free(r);
}

static void unlink_running(kvr_fetcher *f, fetch_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        f->running = r->next;
    if (r->next)
        r->next->prev = r->prev;
    f->inflight--;
}

/* Drops every request, queued or running, without calling back. */
static void abandon_all(kvr_fetcher *f)
{
    for (fetch_req *r = f->wait_head, *next; r; r = next) {
        next = r->next;
        req_free(r);
    }
    f->wait_head = f->wait_tail = NULL;
    while (f->running) {
        fetch_req *r = f->running;
        curl_multi_remove_handle(f->multi, r->h);
        unlink_running(f, r);
        req_free(r);
    }
}

void kvr_fetcher_destroy(kvr_fetcher *f)
{
    if (!f)
        return;
    abandon_all(f);
    curl_multi_cleanup(f->multi);
    free(f);
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    fetch_req *r = user;
    size_t add = size * n;
    if (r->len + add > r->max_body) {
        r->too_big = true;
        return 0; /* aborts the transfer */
    }
    if (kvr_grow((void **)&r->buf, &r->cap, r->len + add + 1, 1, 4096) != 0)
        return 0;
    memcpy(r->buf + r->len, p, add);
    r->len += add;
    r->buf[r->len] = 0;
    return add;
}

static bool setup(kvr_fetcher *f, fetch_req *r)
{
    CURL *h = r->h = curl_easy_init();
    if (!h)
        return false;
    long connect_ms = f->timeout_ms;
    curl_easy_setopt(h, CURLOPT_URL, r->url);
    curl_easy_setopt(h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, f->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->max_body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kvrouter-discovery");
    return true;
}

bool kvr_fetcher_get(kvr_fetcher *f, const char *base_url, const char *path, kvr_fetch_done done,
                     void *user, int kind, int doc)
{
    fetch_req *r = calloc(1, sizeof *r);
    if (!r)
        return false;
    snprintf(r->url, sizeof r->url, "%s%s", base_url, path);
    r->max_body = f->max_body;
    r->done = done;
    r->user = user;
    r->kind = kind;
    r->doc = doc;
    if (f->wait_tail)
        f->wait_tail->next = r;
    else
        f->wait_head = r;
    f->wait_tail = r;
    return true;
}

static void fail_now(fetch_req *r, kvr_fetcher *f, const char *why)
{
    kvr_fetch_result res = {.curl_code = CURLE_OUT_OF_MEMORY, .body = "", .error = why};
    r->done(r->user, r->kind, r->doc, &res, f);
    req_free(r);
}

/* Moves queued requests into the multi while there is room. */
static void start_waiting(kvr_fetcher *f)
{
    while (f->wait_head && f->inflight < KVR_DISCOVERY_MAX_INFLIGHT) {
        fetch_req *r = f->wait_head;
        f->wait_head = r->next;
        if (!f->wait_head)
            f->wait_tail = NULL;
        r->next = r->prev = NULL;
        if (!setup(f, r) || curl_multi_add_handle(f->multi, r->h) != CURLM_OK) {
            fail_now(r, f, "cannot start an HTTP request (out of memory)");
            continue;
        }
        r->next = f->running;
        if (f->running)
            f->running->prev = r;
        f->running = r;
        f->inflight++;
    }
}

static void finish(kvr_fetcher *f, CURLMsg *m)
{
    fetch_req *r = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    curl_multi_remove_handle(f->multi, r->h);
    unlink_running(f, r);
    kvr_fetch_result res = {.curl_code = (int)m->data.result, .body = r->buf ? r->buf : "",
                            .len = r->len, .error = ""};
    char why[CURL_ERROR_SIZE + 64];
    if (m->data.result == CURLE_OK) {
        curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &res.status);
    } else {
        if (r->too_big || m->data.result == CURLE_FILESIZE_EXCEEDED)
            snprintf(why, sizeof why, "response body larger than %zu bytes (max_response_bytes)",
                     r->max_body);
        else
            snprintf(why, sizeof why, "%s",
                     r->errbuf[0] ? r->errbuf : curl_easy_strerror(m->data.result));
        res.error = why;
    }
    r->done(r->user, r->kind, r->doc, &res, f);
    req_free(r);
}

void kvr_fetcher_run(kvr_fetcher *f, _Atomic bool *stop)
{
    start_waiting(f);
    while ((f->inflight || f->wait_head) && !atomic_load(stop)) {
        int running = 0, left = 0;
        curl_multi_perform(f->multi, &running);
        CURLMsg *m;
        while ((m = curl_multi_info_read(f->multi, &left)))
            if (m->msg == CURLMSG_DONE)
                finish(f, m); /* may queue more */
        start_waiting(f);
        if (f->inflight)
            curl_multi_poll(f->multi, NULL, 0, 200, NULL);
    }
    if (atomic_load(stop))
        abandon_all(f);
}

void kvr_fetcher_wakeup(kvr_fetcher *f)
{
    if (f)
        curl_multi_wakeup(f->multi);
}
