/*
 * collectives/allreduce_rhd.c - recursive halving-doubling allreduce
 * (Rabenseifner): a reduce-scatter by recursive halving (log2 p steps,
 * each exchanging half of what is left), then an allgather by recursive
 * doubling. For n ranks that are not a power of two, the first 2r ranks
 * (r = n - p, p the largest power of two <= n) first fold in pairs: the
 * even one sends its vector to the odd one, sits out, and gets the result
 * at the end.
 *
 * Cost (n = p): 2 log2(p) alpha + 2(p-1)/p m beta + (p-1)/p m gamma;
 * the fold adds 2 alpha + 2 m beta for the extra ranks. Fewer steps than
 * the ring: the choice for medium messages and many ranks.
 */
#include <stdlib.h>
#include "collectives/coll_algo.h"
#include "base/error.h"

/* the real rank of folded rank v */
static int real_rank(int v, int rem)
{
    return v < rem ? 2 * v + 1 : v + rem;
}

/* elements of blocks [lo, hi) of count cut into p blocks */
static void span(int64_t count, int p, int lo, int hi, int64_t *off, int64_t *len)
{
    int64_t o2, l2;
    mfi_block(count, p, lo, off, &l2);
    mfi_block(count, p, hi - 1, &o2, &l2);
    *len = o2 + l2 - *off;
}

mf_status mfi_allreduce_rhd(mfi_comm *c, void *buf, int64_t count, mf_dtype dt)
{
    int n = c->size, r = c->rank, p = 1;
    while (2 * p <= n) p *= 2;
    int rem = n - p;
    size_t es = mf_dtype_size(dt);
    char *b = buf, *tmp = mfi_comm_scratch(c, (size_t)count * es + 1);
    if (!tmp) MF_FAIL(MF_ERR_NOMEM, "allreduce (rhd): out of memory for %lld elements", (long long)count);
    mf_status st = MF_OK;
    int v = -1;   /* rank among the p that take part, -1 for those that sit out */
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            st = mfi_sendrecv(c, b, count, r + 1, NULL, 0, MPI_PROC_NULL, dt);
        } else {
            st = mfi_sendrecv(c, NULL, 0, MPI_PROC_NULL, tmp, count, r - 1, dt);
            if (st == MF_OK) mfi_sum_into(b, tmp, count, dt);
            v = r / 2;
        }
    } else {
        v = r - rem;
    }
    if (v >= 0) {
        int lo = 0, hi = p;   /* the blocks this rank is still responsible for */
        for (int mask = p / 2; mask >= 1 && st == MF_OK; mask /= 2) {
            int peer = real_rank(v ^ mask, rem), mid = (lo + hi) / 2;
            int klo = v & mask ? mid : lo, khi = v & mask ? hi : mid;   /* keep */
            int glo = v & mask ? lo : mid, ghi = v & mask ? mid : hi;   /* give */
            int64_t ko, kl, go, gl;
            span(count, p, klo, khi, &ko, &kl);
            span(count, p, glo, ghi, &go, &gl);
            st = mfi_sendrecv(c, b + go * es, gl, peer, tmp, kl, peer, dt);
            if (st == MF_OK) mfi_sum_into(b + ko * es, tmp, kl, dt);
            lo = klo;
            hi = khi;
        }
        /* block v is summed; double what each rank has, log2 p times */
        for (int mask = 1; mask < p && st == MF_OK; mask *= 2) {
            int peer = real_rank(v ^ mask, rem);
            int mine = v & ~(mask - 1), theirs = (v ^ mask) & ~(mask - 1);
            int64_t mo, ml, to, tl;
            span(count, p, mine, mine + mask, &mo, &ml);
            span(count, p, theirs, theirs + mask, &to, &tl);
            st = mfi_sendrecv(c, b + mo * es, ml, peer, b + to * es, tl, peer, dt);
        }
    }
    /* the folded pairs: the odd rank hands the result back */
    if (st == MF_OK && r < 2 * rem) {
        if (r % 2 == 0) st = mfi_sendrecv(c, NULL, 0, MPI_PROC_NULL, b, count, r + 1, dt);
        else st = mfi_sendrecv(c, b, count, r - 1, NULL, 0, MPI_PROC_NULL, dt);
    }
    return st;
}
