/*
 * collectives/reduce_scatter_ring.c - ring reduce-scatter and ring
 * allgather, for pieces of any sizes (counts[r] elements for rank r).
 *
 * Reduce-scatter: at step s (0 .. n-2) rank r sends its running sum of
 * piece r-s-1 to rank r+1 and receives the running sum of piece r-s-2
 * from rank r-1, adding its own contribution; after n-1 steps it holds
 * the full sum of piece r. Allgather: at step s rank r passes piece r-s
 * to the right and receives piece r-s-1 from the left.
 *
 * Cost of each: (n-1) alpha + (n-1)/n m beta (+ (n-1)/n m gamma for the
 * reduce-scatter), m the total bytes: bandwidth optimal, n-1 latencies.
 */
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "base/error.h"

/* offsets of the pieces; the largest piece in *maxc */
static int64_t *offsets(int n, const int64_t *counts, int64_t *maxc)
{
    int64_t *off = malloc(((size_t)n + 1) * sizeof *off);
    if (!off) return NULL;
    off[0] = 0;
    *maxc = 0;
    for (int r = 0; r < n; r++) {
        off[r + 1] = off[r] + counts[r];
        if (counts[r] > *maxc) *maxc = counts[r];
    }
    return off;
}

mf_status mfi_reduce_scatter_ring(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    size_t es = mf_dtype_size(dt);
    int64_t maxc = 0;
    int64_t *off = offsets(n, counts, &maxc);
    char *a = mfi_comm_scratch(c, 2 * ((size_t)maxc * es + 64)), *b = a ? a + (size_t)maxc * es + 64 : NULL;
    mf_status st = off && a ? MF_OK : mfi_error(MF_ERR_NOMEM, "reduce-scatter (ring): out of memory");
    const char *s = send;
    const char *out = NULL;   /* the running sum this rank sends next */
    for (int k = 0; k < n - 1 && st == MF_OK; k++) {
        int sp = (r - k - 1 + 2 * n) % n, rp = (r - k - 2 + 2 * n) % n;
        if (!out) out = s + off[sp] * es;   /* step 0: its own piece */
        st = mfi_sendrecv(c, out, counts[sp], right, b, counts[rp], left, dt);
        if (st != MF_OK) break;
        mfi_sum_into(b, s + off[rp] * es, counts[rp], dt);
        char *t = a;   /* b becomes what goes out next */
        a = b;
        b = t;
        out = a;
    }
    if (st == MF_OK) memcpy(recv, n > 1 ? (const char *)a : s + off[r] * es, (size_t)counts[r] * es);
    free(off);
    return st;
}

mf_status mfi_allgather_ring(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    size_t es = mf_dtype_size(dt);
    int64_t maxc = 0;
    int64_t *off = offsets(n, counts, &maxc);
    if (!off) MF_FAIL(MF_ERR_NOMEM, "allgather (ring): out of memory");
    char *g = recv;
    if ((const char *)send != g + off[r] * es) memmove(g + off[r] * es, send, (size_t)counts[r] * es);
    mf_status st = MF_OK;
    for (int k = 0; k < n - 1 && st == MF_OK; k++) {
        int sp = (r - k + n) % n, rp = (r - k - 1 + n) % n;
        st = mfi_sendrecv(c, g + off[sp] * es, counts[sp], right, g + off[rp] * es, counts[rp], left, dt);
    }
    free(off);
    return st;
}
