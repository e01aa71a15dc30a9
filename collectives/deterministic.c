/*
 * collectives/deterministic.c - sums whose bits do not depend on the
 * algorithm or on the number of ranks.
 *
 * The global sum is over V virtual pieces, each a full vector of count
 * elements; rank r holds pieces mfi_block(V, n, r), back to back. Every
 * element is the sum over the pieces in piece order 0, 1, ..., V-1,
 * whoever holds them: each rank receives, for its block of elements,
 * every piece's values (an all-to-all; the pieces arrive in order because
 * ranks hold consecutive pieces in rank order), adds them up in that
 * order, and an allgather, which only moves bits, gives everyone every
 * block. So V pieces summed on 1 rank or on 4, by any allgather
 * algorithm, give the same bits.
 *
 * MF_DETERMINISTIC=1 runs every allreduce and reduce-scatter this way
 * with one piece per rank (V = n): the sum is in rank order.
 *
 * Cost: (n-1) alpha + (V/n)(n-1)/n m beta for the all-to-all, plus the
 * allgather's (n-1)/n m beta; (V/n) m gamma.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "base/error.h"

bool mfi_coll_deterministic(void)
{
    static _Atomic int on = -1;   /* read by the progress thread too */
    if (on < 0) {
        const char *e = getenv("MF_DETERMINISTIC");
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on;
}

mf_status mfi_reduce_scatter_pieces(mfi_comm *c, const void *local, int npieces, const int64_t *counts, void *recv,
                                    mf_dtype dt)
{
    int n = c->size, me = c->rank;
    size_t es = mf_dtype_size(dt);
    int64_t first, nlocal, count = 0;
    mfi_block(npieces, n, me, &first, &nlocal);
    for (int q = 0; q < n; q++) count += counts[q];
    int64_t *sc = malloc(3 * (size_t)n * sizeof *sc), *rc = sc + n, *off = sc + 2 * n;
    if (!sc) MF_FAIL(MF_ERR_NOMEM, "deterministic sum: out of memory");
    for (int q = 0; q < n; q++) {
        int64_t f, k;
        mfi_block(npieces, n, q, &f, &k);
        sc[q] = nlocal * counts[q];
        rc[q] = k * counts[me];
        off[q] = q ? off[q - 1] + counts[q - 1] : 0;
    }
    size_t sbytes = (size_t)(nlocal * count) * es, rbytes = (size_t)(npieces * counts[me]) * es;
    /* kept between calls: fresh pages every step would cost more than the sum */
    char *sbuf = mfi_comm_scratch(c, sbytes + rbytes + 1), *rbuf = sbuf ? sbuf + sbytes : NULL;
    mf_status st = sbuf ? MF_OK : mfi_error(MF_ERR_NOMEM, "deterministic sum: out of memory");
    /* for rank q: block q of each of this rank's pieces, in piece order */
    for (int q = 0; st == MF_OK && q < n; q++)
        for (int64_t p = 0; p < nlocal; p++)
            memcpy(sbuf + (size_t)(nlocal * off[q] + p * counts[q]) * es,
                   (const char *)local + (size_t)(p * count + off[q]) * es, (size_t)counts[q] * es);
    if (st == MF_OK) st = mfi_alltoall(c, sbuf, sc, rbuf, rc, dt);
    if (st == MF_OK) {
        int64_t k = counts[me];
        memcpy(recv, rbuf, (size_t)k * es);
        for (int64_t v = 1; v < npieces; v++) mfi_sum_into(recv, rbuf + (size_t)(v * k) * es, k, dt);
    }
    free(sc);
    return st;
}

mf_status mfi_allreduce_pieces(mfi_comm *c, const void *local, int npieces, void *out, int64_t count, mf_dtype dt,
                               mf_coll_algo gather)
{
    int n = c->size;
    size_t es = mf_dtype_size(dt);
    if (n == 1) {   /* every piece is here: add them up in order, in out */
        if (out != local) memmove(out, local, (size_t)count * es);
        for (int v = 1; v < npieces; v++) mfi_sum_into(out, (const char *)local + (size_t)v * (size_t)count * es, count, dt);
        return MF_OK;
    }
    int64_t *counts = malloc((size_t)n * sizeof *counts), off, len;
    if (!counts) MF_FAIL(MF_ERR_NOMEM, "deterministic sum: out of memory");
    for (int q = 0; q < n; q++) mfi_block(count, n, q, &off, &counts[q]);
    mfi_block(count, n, c->rank, &off, &len);
    char *block = mfi_comm_scratch_at(c, 1, (size_t)len * es + 1);   /* slot 0 is the sum's */
    mf_status st = block ? mfi_reduce_scatter_pieces(c, local, npieces, counts, block, dt)
                         : mfi_error(MF_ERR_NOMEM, "deterministic sum: out of memory");
    if (st == MF_OK) st = mfi_pieces_algo(MFI_ALLGATHER, c, block, out, counts, dt,
                                         gather == MF_COLL_RHD ? MF_COLL_AUTO : gather);
    free(counts);
    return st;
}
