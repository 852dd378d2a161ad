/* Mooncake FAST'25 trace loading (SPEC §9) and deterministic token
 * expansion, shared by the benchmark and the simulator. */
#ifndef KVR_MOCK_TRACE_H
#define KVR_MOCK_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define KVR_TRACE_BLOCK_TOKENS 512

typedef struct {
    double timestamp_ms;
    uint32_t input_length, output_length;
    uint32_t n_hash_ids;
    uint64_t *hash_ids;
} kvr_trace_request;

typedef struct {
    kvr_trace_request *reqs;
    size_t n;
} kvr_trace;

/* One JSON object per line (blank lines skipped). limit 0 = all. Returns 0,
 * or -1 with a message naming the line in err (out is then left empty). */
int kvr_trace_load(const char *path, size_t limit, kvr_trace *out, char *err, size_t errlen);
/* The same after skipping the first `skip` requests (not parsed). */
int kvr_trace_load_slice(const char *path, size_t skip, size_t limit, kvr_trace *out, char *err,
                         size_t errlen);
void kvr_trace_free(kvr_trace *t);

/* Deterministic text tokens (< 1 000 000): each hash id expands to 512 tokens
 * that depend only on (hash id, position in block), so requests sharing ids
 * share token prefixes. Truncated to input_length, and never longer than
 * n_hash_ids * 512. Returns the full count; writes at most cap. */
size_t kvr_trace_tokens(const kvr_trace_request *r, uint32_t *out, size_t cap);
/* The token at position pos of hash id `id` (exposed for tests). */
uint32_t kvr_trace_token(uint64_t id, uint32_t pos);

#endif
