/* Repeat detection over {parent} ∪ block_hashes (SPEC §5 rule 1). Shared by
 * the normalizer, which leaves such stores alone, and the converter, which
 * rejects them. Internal to the library. */
#ifndef KVR_NORMALIZE_DUPCHECK_H
#define KVR_NORMALIZE_DUPCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reusable scratch table: grows to the largest store seen, so steady-state
 * checks do not allocate. */
typedef struct {
    uint64_t *slots;
    size_t cap;
} kvr_dupcheck;

void kvr_dupcheck_init(kvr_dupcheck *d);
void kvr_dupcheck_free(kvr_dupcheck *d);
/* True when the parent (if any) and the hashes contain a value twice. Also
 * true when the scratch table cannot be allocated: callers then reject the
 * store, which is safe (an empty removal) where accepting it is not. */
bool kvr_dupcheck_has_repeat_in(kvr_dupcheck *d, bool has_parent, uint64_t parent,
                                const uint64_t *hashes, size_t n);
static inline bool kvr_dupcheck_has_repeat(kvr_dupcheck *d, bool has_parent, uint64_t parent,
                                           const uint64_t *hashes, size_t n)
{
    /* one page an event (SGLang): compared here, without the call */
    if (n <= 1)
        return n == 1 && has_parent && hashes[0] == parent;
    return kvr_dupcheck_has_repeat_in(d, has_parent, parent, hashes, n);
}

#endif
