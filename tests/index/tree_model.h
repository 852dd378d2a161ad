/* A deliberately naive reference of the SPEC §6 index semantics, for tests:
 * nodes in a flat array, owners as per-node arrays, no sharing, no tricks.
 * Used by the index model test and by the benchmark checksum test. */
#ifndef KVR_TEST_TREE_MODEL_H
#define KVR_TEST_TREE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/u64map.h"

#define TM_OWNERS 16

typedef struct {
    uint64_t local;
    uint32_t parent;
    uint32_t nchild;
    bool live;
    uint8_t tiers[TM_OWNERS]; /* bit per tier */
    uint64_t handle[TM_OWNERS];
} tm_node;

typedef struct {
    tm_node *n;
    uint32_t len, cap;
    kvr_u64map kids;                /* (parent, local) mixed -> node */
    kvr_u64map handles[TM_OWNERS];  /* engine hash -> node */
    uint64_t ownerships, nodes;
} tm_model;

static inline uint64_t tm_key(uint32_t parent, uint64_t local)
{
    return kvr_mix64(kvr_mix64(local) + parent) | 1;
}

static inline void tm_init(tm_model *m)
{
    memset(m, 0, sizeof *m);
    m->cap = 1024;
    m->n = calloc(m->cap, sizeof *m->n);
    m->len = 1; /* node 0 is the root */
    m->n[0].live = true;
    kvr_u64map_init(&m->kids);
    for (int o = 0; o < TM_OWNERS; o++)
        kvr_u64map_init(&m->handles[o]);
}

static inline void tm_free(tm_model *m)
{
    free(m->n);
    kvr_u64map_free(&m->kids);
    for (int o = 0; o < TM_OWNERS; o++)
        kvr_u64map_free(&m->handles[o]);
}

static inline uint32_t tm_child(tm_model *m, uint32_t parent, uint64_t local)
{
    uint64_t v;
    if (!kvr_u64map_get(&m->kids, tm_key(parent, local), &v))
        return 0;
    return (uint32_t)v;
}

/* Kills x and everything below it, forgetting every handle into it. */
static inline void tm_kill(tm_model *m, uint32_t x)
{
    if (!m->n[x].live)
        return;
    if (m->n[x].nchild)
        for (uint32_t y = 1; y < m->len; y++)
            if (m->n[y].live && m->n[y].parent == x)
                tm_kill(m, y);
    tm_node *nd = &m->n[x];
    for (int o = 0; o < TM_OWNERS; o++)
        if (nd->tiers[o]) {
            kvr_u64map_del(&m->handles[o], nd->handle[o], NULL);
            nd->tiers[o] = 0;
            m->ownerships--;
        }
    nd->live = false;
    m->nodes--;
    m->n[nd->parent].nchild--;
    kvr_u64map_del(&m->kids, tm_key(nd->parent, nd->local), NULL);
}

static inline bool tm_empty(const tm_node *nd)
{
    for (int o = 0; o < TM_OWNERS; o++)
        if (nd->tiers[o])
            return false;
    return true;
}

static inline void tm_leave(tm_model *m, int o, uint32_t x)
{
    kvr_u64map_del(&m->handles[o], m->n[x].handle[o], NULL);
    m->n[x].tiers[o] = 0;
    m->ownerships--;
    if (tm_empty(&m->n[x]))
        tm_kill(m, x);
}

/* 0 applied, -1 dropped (parent not found, or the chain lost its parent). */
static inline int tm_store(tm_model *m, int o, int tier, bool has_parent, uint64_t parent,
                           const uint64_t *eng, const uint64_t *loc, size_t n)
{
    uint32_t cur = 0;
    uint64_t v;
    if (has_parent) {
        if (!kvr_u64map_get(&m->handles[o], parent, &v))
            return -1;
        cur = (uint32_t)v;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t child = tm_child(m, cur, loc[i]);
        if (kvr_u64map_get(&m->handles[o], eng[i], &v) && (uint32_t)v != child) {
            tm_leave(m, o, (uint32_t)v);
            if (!m->n[cur].live)
                return -1;
            child = tm_child(m, cur, loc[i]);
        }
        if (!child) {
            if (m->len == m->cap) {
                m->cap *= 2;
                m->n = realloc(m->n, m->cap * sizeof *m->n);
            }
            child = m->len++;
            memset(&m->n[child], 0, sizeof m->n[child]);
            m->n[child].local = loc[i];
            m->n[child].parent = cur;
            m->n[child].live = true;
            m->n[cur].nchild++;
            m->nodes++;
            kvr_u64map_put(&m->kids, tm_key(cur, loc[i]), child);
        }
        tm_node *nd = &m->n[child];
        if (nd->tiers[o] && nd->handle[o] != eng[i])
            kvr_u64map_del(&m->handles[o], nd->handle[o], NULL);
        if (!nd->tiers[o])
            m->ownerships++;
        nd->tiers[o] |= (uint8_t)(1u << tier);
        nd->handle[o] = eng[i];
        kvr_u64map_put(&m->handles[o], eng[i], child);
        cur = child;
    }
    return 0;
}

static inline size_t tm_remove(tm_model *m, int o, int tier, const uint64_t *eng, size_t n)
{
    size_t unknown = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        if (!kvr_u64map_get(&m->handles[o], eng[i], &v) ||
            !(m->n[v].tiers[o] & (1u << tier))) {
            unknown++;
            continue;
        }
        m->n[v].tiers[o] &= (uint8_t)~(1u << tier);
        if (!m->n[v].tiers[o])
            tm_leave(m, o, (uint32_t)v);
    }
    return unknown;
}

static inline void tm_clear(tm_model *m, int o)
{
    for (uint32_t x = 1; x < m->len; x++)
        if (m->n[x].live && m->n[x].tiers[o])
            tm_leave(m, o, x);
}

/* Per owner: blocks from the root held on gpu, on gpu|cpu, on gpu|cpu|disk. */
static inline void tm_match(tm_model *m, const uint64_t *loc, size_t n, uint32_t *g, uint32_t *c,
                            uint32_t *d)
{
    bool gon[TM_OWNERS], con[TM_OWNERS], don[TM_OWNERS];
    for (int o = 0; o < TM_OWNERS; o++) {
        g[o] = c[o] = d[o] = 0;
        gon[o] = con[o] = don[o] = true;
    }
    uint32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        cur = tm_child(m, cur, loc[i]);
        if (!cur)
            break;
        for (int o = 0; o < TM_OWNERS; o++) {
            uint8_t t = m->n[cur].tiers[o];
            gon[o] = gon[o] && (t & 1);
            con[o] = con[o] && (t & 3);
            don[o] = don[o] && (t & 7);
            g[o] += gon[o];
            c[o] += con[o];
            d[o] += don[o];
        }
    }
}

#endif
