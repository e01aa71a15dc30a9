/*
 * collectives/reduce_scatter_hier.c - hierarchical reduce-scatter and
 * allgather over the node/peer hierarchy (hier.c).
 *
 * Reduce-scatter: every rank copies its whole input into the shared
 * window; local rank l sums, over the node's ranks in local-rank order,
 * the pieces of the ranks with local rank l on every node; a flat
 * reduce-scatter between the peers then leaves each rank its own piece.
 * Allgather: a flat allgather between the peers collects the pieces of
 * local rank l from every node; each rank writes them into one shared
 * image of the result, and every rank copies the image out.
 *
 * Cost with L ranks per node, N nodes and m total bytes: between nodes
 * (N-1)/N m/L beta per rank, L times less than a flat ring over all
 * ranks; inside the node 1 barrier and about 2 m of memory traffic per
 * rank. The window holds the whole buffer, so above
 * MFI_HIER_WINDOW_MAX / 2 bytes (or without a usable hierarchy) both
 * run the flat selection.
 */
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "collectives/coll_hier.h"
#include "lib/error.h"

/* The hierarchy and this round's half of the window for total bytes;
 * *h NULL when the flat path must run. */
static mf_status round_half(mf_comm *c, size_t bytes, mfi_hier **h, size_t *half)
{
    MF_TRY(mfi_hier_get(c, h));
    if (!(*h)->usable || bytes > MFI_HIER_WINDOW_MAX / 2) {
        *h = NULL;
        return MF_OK;
    }
    size_t need = bytes > MFI_HIER_SLAB ? bytes : MFI_HIER_SLAB;
    MF_TRY(mfi_hier_window(*h, 2 * need));
    *half = ((*h)->phase++ & 1) * ((*h)->win_bytes / 2);
    return MF_OK;
}

/* the pieces of the ranks with this local rank, in peer (node) order:
 * their counts, offsets in the full buffer, and total */
static mf_status peer_pieces(const mf_comm *c, const mfi_hier *h, const int64_t *counts, int64_t **pc,
                             int64_t **po, int64_t *total)
{
    int n = c->size, N = h->nnodes;
    int64_t *off = malloc(((size_t)n + 2 * (size_t)N) * sizeof *off);
    if (!off) MF_FAIL(MF_ERR_NOMEM, "hierarchical collective: out of memory");
    for (int r = 0; r < n; r++) off[r] = r ? off[r - 1] + counts[r - 1] : 0;
    *pc = off + n;
    *po = off + n + N;
    *total = 0;
    for (int p = 0; p < N; p++) {
        int q = h->rank_at[p * h->local_size + h->local];
        (*pc)[p] = counts[q];
        (*po)[p] = off[q];
        *total += counts[q];
    }
    return MF_OK;
}

mf_status mfi_reduce_scatter_hier(mf_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    size_t es = mf_dtype_size(dt), half = 0;
    int64_t all = 0;
    for (int r = 0; r < c->size; r++) all += counts[r];
    mfi_hier *h;
    MF_TRY(round_half(c, (size_t)all * es, &h, &half));
    if (!h) return mfi_reduce_scatter_flat(c, send, recv, counts, dt);
    int64_t *pc, *po, mine;
    MF_TRY(peer_pieces(c, h, counts, &pc, &po, &mine));
    int64_t *base = pc - c->size;
    char *tmp = mfi_comm_scratch(c, (size_t)mine * es + 1);
    mf_status st = tmp ? MF_OK : mfi_error(MF_ERR_NOMEM, "reduce-scatter (hierarchical): out of memory");
    /* every rank reaches the sync, so none waits forever on a failed one */
    memcpy(h->seg[h->local] + half, send, (size_t)all * es);
    mf_status sync = mfi_hier_sync(h);
    if (st == MF_OK) st = sync;
    int64_t at = 0;   /* where node p's piece goes in tmp */
    for (int p = 0; st == MF_OK && p < h->nnodes; at += pc[p], p++) {
        char *d = tmp + (size_t)at * es;
        memcpy(d, h->seg[0] + half + (size_t)po[p] * es, (size_t)pc[p] * es);
        for (int j = 1; j < h->local_size; j++) mfi_sum_into(d, h->seg[j] + half + (size_t)po[p] * es, pc[p], dt);
    }
    if (st == MF_OK) st = h->nnodes > 1 ? mfi_reduce_scatter_flat(&h->peers, tmp, recv, pc, dt)
                                        : (memcpy(recv, tmp, (size_t)mine * es), MF_OK);
    free(base);
    return st;
}

mf_status mfi_allgather_hier(mf_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    size_t es = mf_dtype_size(dt), half = 0;
    int64_t all = 0;
    for (int r = 0; r < c->size; r++) all += counts[r];
    mfi_hier *h;
    MF_TRY(round_half(c, (size_t)all * es, &h, &half));
    if (!h) return mfi_allgather_flat(c, send, recv, counts, dt);
    int64_t *pc, *po, mine;
    MF_TRY(peer_pieces(c, h, counts, &pc, &po, &mine));
    int64_t *base = pc - c->size;
    char *tmp = mfi_comm_scratch(c, (size_t)mine * es + 1);
    mf_status st = tmp ? MF_OK : mfi_error(MF_ERR_NOMEM, "allgather (hierarchical): out of memory");
    if (st == MF_OK) st = h->nnodes > 1 ? mfi_allgather_flat(&h->peers, send, tmp, pc, dt)
                                        : (memcpy(tmp, send, (size_t)mine * es), MF_OK);
    char *image = h->seg[0] + half;
    int64_t at = 0;
    for (int p = 0; st == MF_OK && p < h->nnodes; at += pc[p], p++)
        memcpy(image + (size_t)po[p] * es, tmp + (size_t)at * es, (size_t)pc[p] * es);
    mf_status sync = mfi_hier_sync(h);
    if (st == MF_OK) st = sync;
    if (st == MF_OK) memcpy(recv, image, (size_t)all * es);
    free(base);
    return st;
}
