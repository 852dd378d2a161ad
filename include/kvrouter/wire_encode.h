/* msgpack encoder for KV event batches (the engine side of SPEC §3), built on
 * msgpuck. Used by the simulator's mock engines and by tests that publish
 * real bytes, and installed with the library for the same uses in a
 * gateway's or an engine's own code; encode(decode(x)) round-trips. */
#ifndef KVROUTER_WIRE_ENCODE_H
#define KVROUTER_WIRE_ENCODE_H

#include "kvrouter/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KVR_WIRE_SGLANG = 0, /* tagged arrays ["BlockStored", ...] */
    KVR_WIRE_VLLM = 1    /* maps {"type": "BlockStored", ...} */
} kvr_wire_style;

typedef struct {
    char *data;
    size_t len;
    size_t cap;
    bool failed; /* private: out of memory inside the current batch */
} kvr_wbuf;

void kvr_wbuf_init(kvr_wbuf *w);
void kvr_wbuf_free(kvr_wbuf *w);
void kvr_wbuf_reset(kvr_wbuf *w);

/* Appends one batch [ts, [events...], dp_rank] (dp_rank nil when !has_rank).
 * Events use: type, tier (as its canonical medium name), parent, block
 * hashes, token ids (Eagle bigram form when ev->eagle), block_size,
 * lora_name, cache_salt (SGLang: metadata map at position 7; vLLM: top-level
 * key), group_idx / kv_cache_spec_kind / locality when present.
 * SGLang style: a store is 8 elements (13 when group fields are set), a
 * removal 3 (7); with a salt or session the position-7 map also carries
 * lora_name. Eagle events need >= 2 tokens to have a bigram form. Dropped
 * events have no wire form and are left out. Appends to w; returns false
 * when out of memory, with w as it was before the call (nothing of the batch
 * appended; w stays usable). */
bool kvr_wire_encode_batch(kvr_wbuf *w, kvr_wire_style style, double ts,
                           const kvr_raw_event *events, size_t n, bool has_rank, uint32_t rank);

/* 8-byte big-endian sequence frame. */
void kvr_wire_encode_seq(uint64_t seq, unsigned char out[8]);

#ifdef __cplusplus
}
#endif
#endif
