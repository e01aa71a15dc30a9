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
#include "base/error.h"

/* The hierarchy and this round's half of the window for total bytes;
 * *h NULL when the flat path must run. */
static mf_status round_half(mfi_comm *c, size_t bytes, mfi_hier **h, size_t *half)
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
static mf_status peer_pieces(const mfi_comm *c, const mfi_hier *h, const int64_t *counts, int64_t **pc,
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

/* What both collectives need for one round: the window half, the whole
 * buffer's size, this local rank's pieces in node order, and a scratch
 * buffer for them; h NULL when the flat algorithm must run. */
typedef struct round {
    mfi_hier *h;
    size_t es, half;
    int64_t all;         /* elements in the whole buffer */
    int64_t *pc, *po;    /* per node: piece count and offset in the buffer */
    int64_t mine;        /* elements of those pieces */
    char *tmp;
} round;

static mf_status round_start(mfi_comm *c, const int64_t *counts, mf_dtype dt, const char *what, round *rd)
{
    *rd = (round){.es = mf_dtype_size(dt)};
    for (int r = 0; r < c->size; r++) rd->all += counts[r];
    MF_TRY(round_half(c, (size_t)rd->all * rd->es, &rd->h, &rd->half));
    if (!rd->h) return MF_OK;
    MF_TRY(peer_pieces(c, rd->h, counts, &rd->pc, &rd->po, &rd->mine));
    rd->tmp = mfi_comm_scratch(c, (size_t)rd->mine * rd->es + 1);
    return rd->tmp ? MF_OK : mfi_error(MF_ERR_NOMEM, "%s (hierarchical): out of memory", what);
}

static void round_end(mfi_comm *c, round *rd)
{
    if (rd->pc) free(rd->pc - c->size);   /* peer_pieces' one allocation */
}

mf_status mfi_reduce_scatter_hier(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    round rd;
    mf_status st = round_start(c, counts, dt, "reduce-scatter", &rd);
    if (st == MF_OK && !rd.h) return mfi_reduce_scatter_flat(c, send, recv, counts, dt);
    mfi_hier *h = rd.h;
    size_t es = rd.es;
    if (!h) return st;
    /* every rank reaches the sync, so none waits forever on a failed one */
    memcpy(h->seg[h->local] + rd.half, send, (size_t)rd.all * es);
    mf_status sync = mfi_hier_sync(h);
    if (st == MF_OK) st = sync;
    int64_t at = 0;   /* where node p's piece goes in tmp */
    for (int p = 0; st == MF_OK && p < h->nnodes; at += rd.pc[p], p++) {
        char *d = rd.tmp + (size_t)at * es;
        memcpy(d, h->seg[0] + rd.half + (size_t)rd.po[p] * es, (size_t)rd.pc[p] * es);
        for (int j = 1; j < h->local_size; j++)
            mfi_sum_into(d, h->seg[j] + rd.half + (size_t)rd.po[p] * es, rd.pc[p], dt);
    }
    if (st == MF_OK) st = h->nnodes > 1 ? mfi_reduce_scatter_flat(&h->peers, rd.tmp, recv, rd.pc, dt)
                                        : (memcpy(recv, rd.tmp, (size_t)rd.mine * es), MF_OK);
    round_end(c, &rd);
    return st;
}

mf_status mfi_allgather_hier(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    round rd;
    mf_status st = round_start(c, counts, dt, "allgather", &rd);
    if (st == MF_OK && !rd.h) return mfi_allgather_flat(c, send, recv, counts, dt);
    mfi_hier *h = rd.h;
    size_t es = rd.es;
    if (!h) return st;
    if (st == MF_OK) st = h->nnodes > 1 ? mfi_allgather_flat(&h->peers, send, rd.tmp, rd.pc, dt)
                                        : (memcpy(rd.tmp, send, (size_t)rd.mine * es), MF_OK);
    char *image = h->seg[0] + rd.half;
    int64_t at = 0;
    for (int p = 0; st == MF_OK && p < h->nnodes; at += rd.pc[p], p++)
        memcpy(image + (size_t)rd.po[p] * es, rd.tmp + (size_t)at * es, (size_t)rd.pc[p] * es);
    mf_status sync = mfi_hier_sync(h);
    if (st == MF_OK) st = sync;
    if (st == MF_OK) memcpy(recv, image, (size_t)rd.all * es);
    round_end(c, &rd);
    return st;
}
