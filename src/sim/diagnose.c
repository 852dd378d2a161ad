#include "sim/diagnose.h"

/* Whole blocks before the first one whose hash window (B tokens, B+1 with
 * Eagle) overlaps a media position: what a non-accepting worker's routing
 * sequence keeps (SPEC §5 request side). */
static size_t visible_blocks(const kvr_sim_request *req, uint32_t B, bool eagle)
{
    size_t first = SIZE_MAX;
    for (size_t i = 0; i < req->n_items; i++)
        if (req->items[i].start < first)
            first = req->items[i].start;
    if (first == SIZE_MAX)
        return SIZE_MAX;
    size_t window = B + (eagle ? 1u : 0u);
    return first >= window ? (first - window) / B + 1 : 0;
}

static uint64_t tokens_of(size_t blocks, uint32_t B, size_t prompt)
{
    uint64_t t = (uint64_t)blocks * B;
    return t < prompt ? t : prompt;
}

void kvr_sim_diagnose_request(kvr_sim_diagnosis *d, kvr_sim_engine **eng, const bool *kimi,
                              size_t n_slots, const kvr_sim_request *req, uint32_t block_size,
                              bool eagle, size_t chosen, uint64_t chosen_reused,
                              bool first_on_slot)
{
    size_t vis_kimi = visible_blocks(req, block_size, eagle);
    uint64_t best = 0, visible = 0;
    for (size_t w = 0; w < n_slots; w++) {
        kvr_sim_hit hit;
        kvr_sim_engine_peek(eng[w], kimi[w] ? req->wide : req->legacy, req->n, &hit);
        size_t m = hit.gpu_blocks + hit.cpu_blocks;
        uint64_t t = tokens_of(m, block_size, req->n);
        if (t > best)
            best = t;
        uint64_t v = tokens_of(kimi[w] && m > vis_kimi ? vis_kimi : m, block_size, req->n);
        if (v > visible)
            visible = v;
    }
    d->requests++;
    if (req->n_items) {
        d->mm_requests++;
        d->mm_prompt_tokens += req->n;
        d->mm_reused_tokens += chosen_reused;
        d->mm_on_kimi += kimi[chosen];
    }
    d->best_tokens += best;
    d->visible_tokens += visible;
    if (chosen_reused < best) {
        d->below_best++;
        d->best_shortfall += best - chosen_reused;
        if (first_on_slot) {
            d->warmup_below_best++;
            d->warmup_shortfall += best - chosen_reused;
        }
    }
    if (chosen_reused < visible) {
        d->below_visible++;
        d->visible_shortfall += visible - chosen_reused;
    }
}

void kvr_sim_print_diagnosis(FILE *out, const char *policy, const kvr_sim_diagnosis *d,
                             uint64_t prompt_tokens, uint64_t reused_tokens)
{
    if (!prompt_tokens || !d->requests)
        return;
    double p = 100.0 / (double)prompt_tokens;
    fprintf(out,
            "diagnose %s: hit %.2f%%; best available in the fleet's caches %.2f%% (router-visible "
            "under SPEC §5: %.2f%%); below best on %llu/%llu requests (-%.2f points; %llu of them a "
            "slot's first request, -%.2f points of warm-up), below the visible best on %llu (-%.2f "
            "points)\n",
            policy, reused_tokens * p, d->best_tokens * p, d->visible_tokens * p,
            (unsigned long long)d->below_best, (unsigned long long)d->requests,
            d->best_shortfall * p, (unsigned long long)d->warmup_below_best,
            d->warmup_shortfall * p, (unsigned long long)d->below_visible,
            d->visible_shortfall * p);
    if (d->mm_requests)
        fprintf(out,
                "diagnose %s: %llu requests carry media (%.1f%% of prompt tokens), %llu of them "
                "routed to Kimi engine_wide slots; their hit %.2f%%\n",
                policy, (unsigned long long)d->mm_requests, d->mm_prompt_tokens * p,
                (unsigned long long)d->mm_on_kimi, 100.0 * d->mm_reused_tokens / d->mm_prompt_tokens);
}
