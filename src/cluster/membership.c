/* Which replica a starting one recovers from. The membership bucket holds
 * one record per live replica (its TTL drops the dead ones); a starting
 * replica asks a ready peer for its /dump, and prefers the one running the
 * longest: it has seen the most of every engine's stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"

void cl_self_init(cl_self *me, const char *url, uint64_t incarnation, double started_at)
{
    static const char digits[] = "0123456789abcdef";
    memset(me, 0, sizeof *me);
    snprintf(me->url, sizeof me->url, "%s", url);
    size_t k = 0;
    for (const char *p = me->url; *p; p++) {
        me->key[k++] = digits[(unsigned char)*p >> 4];
        me->key[k++] = digits[(unsigned char)*p & 15];
    }
    me->incarnation = incarnation;
    me->started_at = started_at;
}

static int candidate_order(const void *pa, const void *pb)
{
    const cl_member *a = pa, *b = pb;
    if (a->ready != b->ready)
        return a->ready ? -1 : 1;
    return (a->started_at > b->started_at) - (a->started_at < b->started_at);
}

size_t cl_member_rank(cl_member *m, size_t n, const cl_self *me)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(m[i].url, me->url) != 0)
            m[k++] = m[i];
    qsort(m, k, sizeof *m, candidate_order);
    return k;
}
