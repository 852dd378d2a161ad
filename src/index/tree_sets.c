/* The interned owner sets of tree_sets.h: the intern table (open
 * addressing by the sets' additive hash), a set's content kept inline up to
 * two entries, its in-place rewrite when one run alone holds it, and the
 * memo of recent (set, owner, entry) -> set changes that generations keep
 * honest. Apart from the tree because the tree only ever sees set ids. */
#include "index/tree_sets.h"

#include <stdlib.h>
#include <string.h>

#include "index/tree_table.h"
#include "util/u64map.h"

#define INTERN_MIN 16u

static inline uint64_t entry_hash(uint32_t e) { return kvr_mix64((uint64_t)e + 0x9E3779B97F4A7C15ULL); }

static int grow_sets(kvr_osets *s)
{
    if (s->ids.cap == s->sets_cap)
        return 0;
    kvr_oset *n = realloc(s->sets, (size_t)s->ids.cap * sizeof *n);
    if (!n && s->ids.cap)
        return -1;
    if (s->ids.cap > s->sets_cap)
        memset(n + s->sets_cap, 0, (size_t)(s->ids.cap - s->sets_cap) * sizeof *n);
    s->sets = n;
    s->sets_cap = s->ids.cap;
    return 0;
}

int kvr_osets_init(kvr_osets *s)
{
    memset(s, 0, sizeof *s);
    kvr_ids_init(&s->ids);
    /* id 0 is the empty set and is never interned */
    if (kvr_ids_get(&s->ids) != KVR_OSET_EMPTY || grow_sets(s) < 0)
        return -1;
    s->sets[0].ref = 1;
    return 0;
}

void kvr_osets_free(kvr_osets *s)
{
    for (uint32_t i = 1; i < s->sets_cap; i++)
        if (s->sets[i].ref && s->sets[i].len > 2)
            free(s->sets[i].e.ext);
    free(s->sets);
    free(s->intern);
    free(s->scratch);
    kvr_ids_free(&s->ids);
    memset(s, 0, sizeof *s);
}

size_t kvr_osets_bytes(const kvr_osets *s)
{
    return (size_t)s->sets_cap * sizeof(kvr_oset) + kvr_ids_bytes(&s->ids) +
           (size_t)s->intern_cap * sizeof(uint32_t) + s->entry_bytes + sizeof s->memo +
           (size_t)s->scratch_cap * sizeof(uint32_t);
}

/* Lower bound of owner in the sorted entries. */
uint32_t kvr_osets_search(const uint32_t *e, uint32_t len, uint32_t owner)
{
    uint32_t lo = 0, hi = len;
    uint32_t key = owner << KVR_OSET_SHIFT;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (e[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int intern_resize(kvr_osets *s, uint32_t cap)
{
    uint32_t *t = NULL;
    if (cap) {
        t = calloc(cap, sizeof *t);
        if (!t)
            return -1;
        for (uint32_t i = 0; i < s->intern_cap; i++) {
            uint32_t id = s->intern[i];
            if (!id)
                continue;
            uint32_t j = (uint32_t)s->sets[id].hash & (cap - 1);
            while (t[j])
                j = (j + 1) & (cap - 1);
            t[j] = id;
        }
    }
    free(s->intern);
    s->intern = t;
    s->intern_cap = cap;
    return 0;
}

static uint32_t intern_find(const kvr_osets *s, uint64_t hash, const uint32_t *e, uint32_t len)
{
    if (!s->intern_cap)
        return 0;
    uint32_t mask = s->intern_cap - 1;
    for (uint32_t i = (uint32_t)hash & mask; s->intern[i]; i = (i + 1) & mask) {
        const kvr_oset *o = &s->sets[s->intern[i]];
        if (o->hash == hash && o->len == len &&
            memcmp(kvr_oset_entries(o), e, (size_t)len * sizeof *e) == 0)
            return s->intern[i];
    }
    return 0;
}

/* Takes id out of the intern table, which keeps its size. */
static void intern_remove(kvr_osets *s, uint32_t id)
{
    uint32_t mask = s->intern_cap - 1;
    uint32_t i = (uint32_t)s->sets[id].hash & mask;
    while (s->intern[i] != id)
        i = (i + 1) & mask;
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & mask; s->intern[j]; j = (j + 1) & mask) {
        uint32_t h = (uint32_t)s->sets[s->intern[j]].hash & mask;
        if (!kvr_probe_stays(hole, j, h)) {
            s->intern[hole] = s->intern[j];
            hole = j;
        }
    }
    s->intern[hole] = 0;
    s->intern_len--;
}

static void intern_del(kvr_osets *s, uint32_t id)
{
    intern_remove(s, id);
    if (s->intern_len == 0)
        intern_resize(s, 0);
    else if (s->intern_cap > INTERN_MIN && s->intern_len * 8 < s->intern_cap)
        intern_resize(s, s->intern_cap / 2);
}

static void intern_put(kvr_osets *s, uint32_t id)
{
    uint32_t mask = s->intern_cap - 1;
    uint32_t i = (uint32_t)s->sets[id].hash & mask;
    while (s->intern[i])
        i = (i + 1) & mask;
    s->intern[i] = id;
    s->intern_len++;
}

/* Set o's content to the entries e (sorted, len > 0), into ext (allocated
 * for them) when len > 2, else inline; the bytes of entries o held before
 * are the caller's to account for. */
static void set_content(kvr_osets *s, kvr_oset *o, uint32_t *ext, uint64_t hash,
                        const uint32_t *e, uint32_t len, uint32_t tiers, uint32_t uncounted)
{
    if (ext) {
        memcpy(ext, e, (size_t)len * sizeof *e);
        o->e.ext = ext;
        s->entry_bytes += (size_t)len * sizeof *ext;
    } else {
        memcpy(o->e.inl, e, (size_t)len * sizeof *e);
    }
    o->hash = hash;
    o->len = len;
    o->tiers = tiers;
    o->uncounted = uncounted;
}

/* A new set of the entries e (sorted, len > 0), whose tier union and count
 * of uncounted entries the caller worked out from the set it came from. */
static uint32_t create(kvr_osets *s, uint64_t hash, const uint32_t *e, uint32_t len,
                       uint32_t tiers, uint32_t uncounted)
{
    if ((s->intern_len + 1) * 10 > s->intern_cap * 7 &&
        intern_resize(s, s->intern_cap ? s->intern_cap * 2 : INTERN_MIN) < 0)
        return UINT32_MAX;
    uint32_t *ext = NULL;
    if (len > 2) {
        ext = malloc((size_t)len * sizeof *ext);
        if (!ext)
            return UINT32_MAX;
    }
    uint32_t id = kvr_ids_get(&s->ids);
    if (id == UINT32_MAX || grow_sets(s) < 0) {
        if (id != UINT32_MAX)
            kvr_ids_put(&s->ids, id);
        free(ext);
        return UINT32_MAX;
    }
    kvr_oset *o = &s->sets[id];
    o->ref = 0;
    o->runs = 0;
    set_content(s, o, ext, hash, e, len, tiers, uncounted);
    intern_put(s, id);
    return id;
}

/* The set `id`, held by one run alone, becomes the entries e (sorted,
 * len > 0, interned nowhere) in place: a run changing owners had its old
 * set freed and a new one allocated, copied and interned, per change (10 %
 * of a 1000-owner replay). Its generation moves on, so memo entries about
 * the old content fail. -1 on OOM (nothing changed). */
static int rewrite(kvr_osets *s, uint32_t id, uint64_t hash, const uint32_t *e, uint32_t len,
                   uint32_t tiers, uint32_t uncounted)
{
    kvr_oset *o = &s->sets[id];
    uint32_t *ext = NULL;
    if (len > 2) {
        ext = o->len > 2 ? realloc(o->e.ext, (size_t)len * sizeof *ext)
                         : malloc((size_t)len * sizeof *ext);
        if (!ext)
            return -1; /* realloc left the old entries */
    } else if (o->len > 2) {
        free(o->e.ext);
    }
    intern_remove(s, id);
    s->entry_bytes -= (o->len > 2 ? (size_t)o->len : 0) * sizeof *ext;
    set_content(s, o, ext, hash, e, len, tiers, uncounted);
    o->gen++;
    intern_put(s, id);
    return 0;
}

void kvr_osets_unref(kvr_osets *s, uint32_t id)
{
    if (id == KVR_OSET_EMPTY)
        return;
    kvr_oset *o = &s->sets[id];
    if (--o->ref)
        return;
    intern_del(s, id);
    if (o->len > 2) {
        free(o->e.ext);
        s->entry_bytes -= (size_t)o->len * sizeof(uint32_t);
    }
    uint32_t gen = o->gen + 1;
    memset(o, 0, sizeof *o);
    o->gen = gen;
    kvr_ids_put(&s->ids, id);
    /* The id allocator may have shrunk: follow it. The generations of the
     * cut ids are lost with it, so memo entries could validate falsely:
     * forget them. */
    if (s->ids.cap < s->sets_cap) {
        grow_sets(s);
        memset(s->memo, 0, sizeof s->memo);
    }
}

int kvr_osets_reserve(kvr_osets *s, uint32_t max_len)
{
    if (s->scratch_cap >= max_len)
        return 0;
    uint32_t ncap = s->scratch_cap ? s->scratch_cap : 16;
    while (ncap < max_len)
        ncap *= 2;
    uint32_t *ns = realloc(s->scratch, (size_t)ncap * sizeof *ns);
    if (!ns)
        return -1;
    s->scratch = ns;
    s->scratch_cap = ncap;
    return 0;
}

/* Whether entry e (0: none) is on no tier a match counts. */
static uint32_t uncounted(uint32_t e) { return e && !(e & KVR_OSET_COUNTED); }

/* The tier union of the set `from` with entry `gone` (0: none) replaced by
 * `entry`: its union plus the new tiers, unless `gone` had a tier `entry`
 * lacks (that tier may have been gone's alone: then the entries out[0..n)
 * are read again). The union was a loop over every entry of each new set,
 * 6 % of a replay with 1000 owners. */
static uint32_t derived_tiers(const kvr_oset *from, const uint32_t *out, uint32_t n,
                              uint32_t gone, uint32_t entry)
{
    if (!(gone & ~entry & KVR_OSET_TIERS))
        return from->tiers | (entry & KVR_OSET_TIERS);
    uint32_t tiers = 0;
    for (uint32_t k = 0; k < n; k++)
        tiers |= out[k] & KVR_OSET_TIERS;
    return tiers;
}

static uint32_t memo_slot(uint32_t from, uint32_t owner, uint32_t entry)
{
    uint64_t k = ((uint64_t)from << 32 | owner) ^ ((uint64_t)entry * 0x9E3779B97F4A7C15ULL);
    return (uint32_t)kvr_mix64(k) & (KVR_OSET_MEMO - 1);
}

uint32_t kvr_osets_apply(kvr_osets *s, uint32_t from, uint32_t owner, uint32_t entry)
{
    kvr_oset_memo *m = &s->memo[memo_slot(from, owner, entry)];
    uint32_t to;
    if (m->from == from && m->owner == owner && m->entry == entry &&
        m->from_gen == s->sets[from].gen && m->to < s->sets_cap &&
        (m->to == KVR_OSET_EMPTY || s->sets[m->to].ref) && s->sets[m->to].gen == m->to_gen) {
        to = m->to;
    } else {
        const kvr_oset *o = &s->sets[from];
        const uint32_t *e = kvr_oset_entries(o);
        uint32_t len = o->len;
        uint32_t i = kvr_osets_search(e, len, owner);
        bool present = i < len && kvr_oset_owner(e[i]) == owner;
        if (s->scratch_cap < len + 1 && kvr_osets_reserve(s, len + 1) < 0)
            return UINT32_MAX;
        e = kvr_oset_entries(&s->sets[from]);
        uint64_t hash = o->hash;
        uint32_t *out = s->scratch, n = 0;
        memcpy(out, e, (size_t)i * sizeof *e);
        n = i;
        if (present)
            hash -= entry_hash(e[i]);
        if (entry) {
            out[n++] = entry;
            hash += entry_hash(entry);
        }
        uint32_t rest = len - i - (present ? 1 : 0);
        memcpy(out + n, e + i + (present ? 1 : 0), (size_t)rest * sizeof *e);
        n += rest;
        if (n == 0) {
            to = KVR_OSET_EMPTY;
        } else {
            to = intern_find(s, hash, out, n);
            if (!to) {
                uint32_t tiers = derived_tiers(o, out, n, present ? e[i] : 0, entry);
                uint32_t unc = o->uncounted - uncounted(present ? e[i] : 0) + uncounted(entry);
                /* the one run holding `from` is the one changing */
                if (from != KVR_OSET_EMPTY && o->ref == 1)
                    return rewrite(s, from, hash, out, n, tiers, unc) < 0 ? UINT32_MAX : from;
                to = create(s, hash, out, n, tiers, unc);
                if (to == UINT32_MAX)
                    return UINT32_MAX;
            }
        }
        m = &s->memo[memo_slot(from, owner, entry)];
        *m = (kvr_oset_memo){from, s->sets[from].gen, owner, entry, to, s->sets[to].gen};
    }
    if (to != KVR_OSET_EMPTY)
        s->sets[to].ref++;
    kvr_osets_unref(s, from);
    return to;
}
