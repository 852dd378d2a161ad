/* Request preprocessing (SPEC §5 request side): validate media spans, pick
 * each worker's routing sequence and hash profile, and hash + match every
 * distinct (sequence, profile) once per request. */
#include <stdio.h>
#include <string.h>

#include "kvrouter/hash.h"
#include "route/internal.h"

kvr_route_status route_validate(const kvr_query_request *req, char *err, size_t errlen)
{
    if (!req->model_name || !req->model_name[0]) {
        snprintf(err, errlen, "model_name: required");
        return KVR_ROUTE_BAD_REQUEST;
    }
    if (!req->token_ids || req->n_tokens == 0) {
        snprintf(err, errlen, "token_ids: must be a non-empty array");
        return KVR_ROUTE_BAD_REQUEST;
    }
    if (req->n_tokens > KVR_ROUTE_MAX_TOKENS) {
        snprintf(err, errlen, "token_ids: more than %u tokens", KVR_ROUTE_MAX_TOKENS);
        return KVR_ROUTE_BAD_REQUEST;
    }
    if (req->n_mm_items > KVR_ROUTE_MAX_MM_ITEMS || (req->n_mm_items && !req->mm_items)) {
        snprintf(err, errlen, "mm_items: more than %u items", KVR_ROUTE_MAX_MM_ITEMS);
        return KVR_ROUTE_BAD_REQUEST;
    }
    uint32_t prev_end = 0;
    for (size_t i = 0; i < req->n_mm_items; i++) {
        const kvr_mm_item *it = &req->mm_items[i];
        if (it->start >= req->n_tokens) {
            snprintf(err, errlen, "mm_items[%zu].start: %u outside the %zu tokens", i,
                     it->start, req->n_tokens);
            return KVR_ROUTE_BAD_REQUEST;
        }
        if (it->end > req->n_tokens) {
            snprintf(err, errlen, "mm_items[%zu].end: %u beyond the %zu tokens", i, it->end,
                     req->n_tokens);
            return KVR_ROUTE_BAD_REQUEST;
        }
        if (it->end <= it->start) {
            snprintf(err, errlen, "mm_items[%zu].end: %u not after start %u", i, it->end,
                     it->start);
            return KVR_ROUTE_BAD_REQUEST;
        }
        if (i > 0 && it->start < prev_end) {
            snprintf(err, errlen,
                     "mm_items[%zu].start: %u overlaps or precedes the previous item (end %u)",
                     i, it->start, prev_end);
            return KVR_ROUTE_BAD_REQUEST;
        }
        prev_end = it->end;
    }
    return KVR_ROUTE_OK;
}

/* Whether vLLM reads some item's identity differently from SGLang: only
 * then do vLLM workers need a sequence (and a hash pass) of their own. */
static bool vllm_reading_differs(const kvr_query_request *req)
{
    for (size_t i = 0; i < req->n_mm_items; i++)
        if (req->mm_items[i].has_mm_hash_vllm &&
            req->mm_items[i].mm_hash_vllm != req->mm_items[i].mm_hash)
            return true;
    return false;
}

static bool every_item_hashed(const kvr_query_request *req)
{
    for (size_t i = 0; i < req->n_mm_items; i++)
        if (!req->mm_items[i].has_mm_hash)
            return false;
    return true;
}

static kvr_str cstr(const char *s)
{
    kvr_str out = {s, s ? (uint32_t)strlen(s) : 0};
    return out;
}

int route_build_profiles(route_scratch *s, size_t n_workers, const kvr_query_request *req)
{
    if (route_grow((void **)&s->worker_profile, &s->wp_cap, n_workers ? n_workers : 1,
                   sizeof *s->worker_profile) < 0)
        return -1;
    bool has_media = req->n_mm_items > 0;
    bool all_hashed = has_media && every_item_hashed(req);
    bool req_lora = req->lora_name && req->lora_name[0];
    bool has_salt = req->cache_salt && req->cache_salt[0];
    bool vllm_differs = all_hashed && vllm_reading_differs(req);
    /* A plain request's profiles depend on the workers' caps alone (seed,
     * eagle) and its length: the same caps copy, the same profiles. */
    bool plain = !has_media && !req_lora && !has_salt;
    if (plain && s->caps_gen && s->profiles_caps_gen == s->caps_gen &&
        s->profiles_index == s->caps_index) {
        for (size_t p = 0; p < s->n_profiles; p++) {
            s->profiles[p].n_tokens = (uint32_t)req->n_tokens;
            s->profiles[p].n_matches = 0;
        }
        return 0;
    }
    s->profiles_caps_gen = 0;
    s->n_profiles = 0;
    for (size_t w = 0; w < n_workers; w++) {
        const kvr_worker_caps *info = &s->caps[w];
        /* the fields that tell profiles apart (a whole route_profile is
         * half a KB to clear per worker) */
        struct {
            uint64_t seed;
            bool eagle, vllm_ids;
            kvr_seq_kind kind;
            uint32_t n_tokens;
        } key = {0};
        if (!req_lora && !has_salt)
            key.seed = info->lora_seed;
        else
            key.seed = kvr_hash_seed(req_lora ? cstr(req->lora_name) : cstr(info->lora_name),
                                     cstr(req->cache_salt));
        key.eagle = info->is_eagle;
        if (!has_media) {
            key.kind = KVR_SEQ_PLAIN;
            key.n_tokens = (uint32_t)req->n_tokens;
        } else if (all_hashed && info->accepts_mm_hashes) {
            key.kind = KVR_SEQ_MM_PADDED;
            key.n_tokens = (uint32_t)req->n_tokens;
            key.vllm_ids = vllm_differs && info->engine == KVR_ENGINE_VLLM;
        } else {
            /* Eagle needs no special cut: the hash of a prefix of `start`
             * tokens yields only windows whose overlap token is text. */
            key.kind = KVR_SEQ_TEXT_PREFIX;
            key.n_tokens = req->mm_items[0].start;
        }
        size_t p = 0;
        while (p < s->n_profiles &&
               !(s->profiles[p].seed == key.seed && s->profiles[p].eagle == key.eagle &&
                 s->profiles[p].kind == key.kind && s->profiles[p].vllm_ids == key.vllm_ids))
            p++;
        if (p == s->n_profiles) {
            size_t old_cap = s->profiles_cap;
            if (route_grow((void **)&s->profiles, &s->profiles_cap, p + 1, sizeof *s->profiles) < 0)
                return -1;
            memset(s->profiles + old_cap, 0, (s->profiles_cap - old_cap) * sizeof *s->profiles);
            route_profile *pr = &s->profiles[p];
            pr->seed = key.seed;
            pr->eagle = key.eagle;
            pr->kind = key.kind;
            pr->vllm_ids = key.vllm_ids;
            pr->n_tokens = key.n_tokens;
            pr->n_matches = 0;
            s->n_profiles++;
        }
        s->worker_profile[w] = (uint32_t)p;
    }
    if (plain) {
        s->profiles_caps_gen = s->caps_gen;
        s->profiles_index = s->caps_index;
    }
    return 0;
}

/* The request with pad_value(identity) over each item's positions — the
 * tokens the engine hashed (legacy SGLang) or the normalizer made of a vLLM
 * store (SPEC §5). vllm: identities as vLLM reads them. */
static const uint32_t *padded_sequence(route_scratch *s, const kvr_query_request *req, bool vllm)
{
    uint32_t **out = &s->padded[vllm];
    if (route_grow((void **)out, &s->padded_cap[vllm], req->n_tokens, sizeof **out) < 0)
        return NULL;
    memcpy(*out, req->token_ids, req->n_tokens * sizeof **out);
    for (size_t i = 0; i < req->n_mm_items; i++) {
        const kvr_mm_item *it = &req->mm_items[i];
        uint32_t pad = kvr_pad_value(vllm && it->has_mm_hash_vllm ? it->mm_hash_vllm : it->mm_hash);
        for (uint32_t t = it->start; t < it->end; t++)
            (*out)[t] = pad;
    }
    return *out;
}

int route_match_profiles(route_scratch *s, kvr_index *idx, uint32_t block_size,
                         const kvr_query_request *req)
{
    const uint32_t *padded[2] = {NULL, NULL};
    for (size_t p = 0; p < s->n_profiles; p++) {
        route_profile *pr = &s->profiles[p];
        const uint32_t *seq = req->token_ids;
        if (pr->kind == KVR_SEQ_MM_PADDED) {
            bool v = pr->vllm_ids;
            if (!padded[v] && !(padded[v] = padded_sequence(s, req, v)))
                return -1;
            seq = padded[v];
        }
        size_t nb = kvr_hash_block_count(pr->n_tokens, block_size, pr->eagle);
        /* Each profile keeps its hashes: the route path books the chosen
         * worker's blocks by them without hashing the tokens again. */
        if (route_grow((void **)&pr->hashes, &pr->hashes_cap, nb ? nb : 1, sizeof *pr->hashes) < 0)
            return -1;
        kvr_hash_blocks(seq, pr->n_tokens, block_size, pr->eagle, pr->seed, pr->hashes, nb);
        pr->n_blocks = nb;
        const kvr_match_entry *m = NULL;
        size_t nm = nb ? kvr_index_match(idx, s->mctx, pr->hashes, nb, &m) : 0;
        if (route_grow((void **)&pr->matches, &pr->cap, nm ? nm : 1, sizeof *pr->matches) < 0)
            return -1;
        if (nm)
            memcpy(pr->matches, m, nm * sizeof *m);
        pr->n_matches = nm;
    }
    return 0;
}

void route_chain_profiles(route_scratch *s)
{
    for (size_t p = 0; p < s->n_profiles; p++) {
        route_profile *pr = &s->profiles[p];
        /* c0 = h0; ci = chain(c(i-1), hi): a chain hash names the whole
         * prefix, so equal chain hashes on one worker are one shared block. */
        for (size_t i = 1; i < pr->n_blocks; i++)
            pr->hashes[i] = kvr_hash_chain(pr->hashes[i - 1], pr->hashes[i]);
    }
}
