/*
 * collectives/allreduce_hier.c - hierarchical allreduce: inside each
 * node a reduce-scatter through the shared-memory window (every rank
 * copies its slab in, then sums its block of all the node's slabs in
 * local-rank order), an allreduce of that block between the peers with
 * the same local rank on the other nodes (ring, rhd or MPI's, by the
 * flat selection), and an allgather inside the node by reading the
 * other ranks' blocks out of the window.
 *
 * Cost, with L ranks per node and N nodes: inside the node 2 barriers
 * and 3 m of memory traffic per rank per slab (copy in, sum, copy out),
 * no messages; between nodes the flat allreduce of m/L bytes over N
 * ranks, i.e. 2(N-1)/N m/L beta per rank: L times less network traffic
 * than a flat algorithm over all ranks when nodes are the bottleneck.
 *
 * Buffers go through the window in slabs of MFI_HIER_SLAB bytes, the
 * window's two halves alternating so that one round's copy-out never
 * races the next round's copy-in. Without a usable hierarchy (uneven
 * nodes, or nodes that do not share memory) it runs the flat selection.
 */
#include <string.h>
#include "collectives/coll_algo.h"
#include "collectives/coll_hier.h"
#include "base/error.h"

mf_status mfi_allreduce_hier(mfi_comm *c, void *buf, int64_t count, mf_dtype dt)
{
    mfi_hier *h;
    MF_TRY(mfi_hier_get(c, &h));
    if (!h->usable) return mfi_allreduce_flat(c, buf, count, dt);
    size_t es = mf_dtype_size(dt);
    int64_t slab = (int64_t)(MFI_HIER_SLAB / es);
    MF_TRY(mfi_hier_window(h, 2 * MFI_HIER_SLAB));
    int L = h->local_size, me = h->local;
    char *b = buf;
    for (int64_t o = 0; o < count; o += slab) {
        int64_t len = count - o < slab ? count - o : slab;
        size_t half = (h->phase++ & 1) * MFI_HIER_SLAB;
        memcpy(h->seg[me] + half, b + o * es, (size_t)len * es);
        MF_TRY(mfi_hier_sync(h));
        int64_t bo, bl;
        mfi_block(len, L, me, &bo, &bl);
        char *mine = b + (o + bo) * es;   /* the caller's buffer is free scratch now */
        memcpy(mine, h->seg[0] + half + bo * es, (size_t)bl * es);
        for (int j = 1; j < L; j++) mfi_sum_into(mine, h->seg[j] + half + bo * es, bl, dt);
        if (h->nnodes > 1 && bl > 0) MF_TRY(mfi_allreduce_flat(&h->peers, mine, bl, dt));
        memcpy(h->seg[me] + half + bo * es, mine, (size_t)bl * es);
        MF_TRY(mfi_hier_sync(h));
        for (int j = 0; j < L; j++) {
            if (j == me) continue;
            int64_t jo, jl;
            mfi_block(len, L, j, &jo, &jl);
            memcpy(b + (o + jo) * es, h->seg[j] + half + jo * es, (size_t)jl * es);
        }
    }
    return MF_OK;
}
