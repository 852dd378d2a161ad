/* /route reply body; see route_json.h. */
#include "server/route_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/sbuf.h"

#define KEY(o, lit) KVR_SBUF_LIT((o), lit)

static void write_costs(kvr_sbuf *o, const kvr_route_decision *d)
{
    KEY(o, ",\"costs\":[");
    for (size_t i = 0; i < d->n_costs; i++) {
        const kvr_route_cost *c = &d->costs[i];
        KEY(o, "{\"worker_id\":");
        kvr_sbuf_u64(o, c->worker_id);
        KEY(o, ",\"dp_rank\":");
        kvr_sbuf_u64(o, c->dp_rank);
        KEY(o, ",\"gpu_blocks\":");
        kvr_sbuf_u64(o, c->gpu_blocks);
        KEY(o, ",\"cpu_blocks\":");
        kvr_sbuf_u64(o, c->cpu_blocks);
        KEY(o, ",\"disk_blocks\":");
        kvr_sbuf_u64(o, c->disk_blocks);
        KEY(o, ",\"routing_tokens\":");
        kvr_sbuf_u64(o, c->routing_tokens);
        KEY(o, ",\"active_prefill_tokens\":");
        kvr_sbuf_u64(o, c->active_prefill_tokens);
        KEY(o, ",\"active_decode_blocks\":");
        kvr_sbuf_u64(o, c->active_decode_blocks);
        KEY(o, ",\"new_blocks\":");
        kvr_sbuf_u64(o, c->new_blocks);
        KEY(o, ",\"credit\":");
        kvr_sbuf_json_real(o, c->credit);
        KEY(o, ",\"cost\":");
        kvr_sbuf_json_real(o, c->cost);
        KEY(o, ",\"probability\":");
        kvr_sbuf_json_real(o, c->probability);
        KEY(o, "}");
        if (i + 1 < d->n_costs)
            KEY(o, ",");
    }
    KEY(o, "]");
}

/* SGLang takes mm_hashes (16 hex digits); vLLM multi_modal_uuids, each the
 * 16 digits and 48 zeros: it publishes that back as the identifier, whose
 * first 16 digits are the identity routed on. */
static void write_mm_hashes(kvr_sbuf *o, const kvr_route_request *rq, const kvr_route_decision *d)
{
    bool vllm = d->engine == KVR_ENGINE_VLLM;
    if (vllm)
        KEY(o, ",\"multi_modal_uuids\":[");
    else
        KEY(o, ",\"mm_hashes\":[");
    for (size_t i = 0; i < rq->q.n_mm_items; i++) {
        const kvr_mm_item *it = &rq->q.mm_items[i];
        char hex[72];
        snprintf(hex, sizeof hex, "%s\"%016" PRIx64 "%s\"", i ? "," : "",
                 vllm && it->has_mm_hash_vllm ? it->mm_hash_vllm : it->mm_hash,
                 vllm ? "000000000000000000000000000000000000000000000000" : "");
        kvr_sbuf_append(o, hex, strlen(hex));
    }
    KEY(o, "]");
}

char *kvr_route_json(const kvr_route_request *rq, const kvr_route_decision *d, size_t *len)
{
    kvr_sbuf o = {0};
    KEY(&o, "{\"worker_id\":");
    kvr_sbuf_u64(&o, d->worker_id);
    KEY(&o, ",\"dp_rank\":");
    kvr_sbuf_u64(&o, d->dp_rank);
    KEY(&o, ",\"overlap_tokens\":");
    kvr_sbuf_u64(&o, d->overlap_tokens);
    if (d->forward_mm_hashes)
        KEY(&o, ",\"forward_mm_hashes\":true");
    else
        KEY(&o, ",\"forward_mm_hashes\":false");
    KEY(&o, ",\"routing_tokens\":");
    kvr_sbuf_u64(&o, d->routing_tokens);
    KEY(&o, ",\"reason\":");
    kvr_sbuf_json_str(&o, kvr_route_reason_name(d->reason));
    KEY(&o, ",\"request_id\":");
    kvr_sbuf_json_str(&o, rq->request_id);
    KEY(&o, ",\"engine\":");
    kvr_sbuf_json_str(&o, kvr_engine_name(d->engine));
    if (d->forward_mm_hashes)
        write_mm_hashes(&o, rq, d);
    if (rq->debug) {
        write_costs(&o, d);
        KEY(&o, ",\"cost\":");
        kvr_sbuf_json_real(&o, d->cost);
    }
    KEY(&o, "}");
    return kvr_sbuf_take(&o, len);
}
