/*
 * collectives/allreduce_ring.c - ring allreduce: a reduce-scatter around
 * the ring (n-1 steps, each rank sends one block of m/n bytes to its
 * right neighbour and adds the block from its left), then an allgather
 * around the ring (n-1 steps).
 *
 * Cost: 2(n-1) alpha + 2(n-1)/n m beta + (n-1)/n m gamma. Bandwidth
 * optimal; the latency term grows with n, so it suits large messages.
 */
#include <stdlib.h>
#include "collectives/coll_algo.h"
#include "base/error.h"

mf_status mfi_allreduce_ring(mfi_comm *c, void *buf, int64_t count, mf_dtype dt)
{
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    size_t es = mf_dtype_size(dt);
    int64_t off, maxlen;
    mfi_block(count, n, 0, &off, &maxlen);   /* block 0 is the largest */
    char *b = buf, *tmp = mfi_comm_scratch(c, (size_t)maxlen * es + 1);
    if (!tmp) MF_FAIL(MF_ERR_NOMEM, "allreduce (ring): out of memory for %lld elements", (long long)maxlen);
    mf_status st = MF_OK;
    /* reduce-scatter: after step s, block (r - s - 1) holds s + 2 ranks' sum */
    for (int s = 0; s < n - 1 && st == MF_OK; s++) {
        int64_t so, sl, ro, rl;
        mfi_block(count, n, (r - s + n) % n, &so, &sl);
        mfi_block(count, n, (r - s - 1 + 2 * n) % n, &ro, &rl);
        st = mfi_sendrecv(c, b + so * es, sl, right, tmp, rl, left, dt);
        if (st == MF_OK) mfi_sum_into(b + ro * es, tmp, rl, dt);
    }
    /* rank r now has the sum of block (r + 1); pass the sums around */
    for (int s = 0; s < n - 1 && st == MF_OK; s++) {
        int64_t so, sl, ro, rl;
        mfi_block(count, n, (r + 1 - s + n) % n, &so, &sl);
        mfi_block(count, n, (r - s + n) % n, &ro, &rl);
        st = mfi_sendrecv(c, b + so * es, sl, right, b + ro * es, rl, left, dt);
    }
    return st;
}
