/*
 * collectives/sim.c - calls on simulated communicators (doc/planning.md,
 * "A simulated world").
 *
 * In a simulated world (mfi_sim_begin, collectives/comm.c) this process
 * plays one rank of many. Its communicators carry the sizes and node
 * layout of the real ones they stand for, and each call on them is
 * counted as the real call would be (mf_comm_tally_get), with the
 * algorithm the selection would run for that size, rank count and node
 * layout (the tuning file, the built-in table, MF_*_ALGO), and reported
 * to an observer; nothing is sent and no buffer is read or written.
 */
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "collectives/comm.h"
#include "base/error.h"

static void (*observer)(const mfi_sim_event *e);
static _Thread_local bool async;

void mfi_sim_async(bool on) { async = on; }

void mfi_sim_set_observer(void (*fn)(const mfi_sim_event *e)) { observer = fn; }

bool mfi_comm_is_sim(const mfi_comm *c) { return c && c->sim; }

mf_status mfi_comm_sim_create(int n, const int *world_ranks, int rank, mfi_comm **out)
{
    *out = NULL;
    if (!mfi_sim_on()) MF_FAIL(MF_ERR_STATE, "a simulated communicator outside a simulated world");
    if (n < 1 || rank < 0 || rank >= n) MF_FAIL(MF_ERR_INTERNAL, "a simulated communicator of %d ranks as rank %d", n, rank);
    /* its nodes, and the most of its ranks any one holds */
    int rpn = mfi_sim_ranks_per_node(), nn = 0, most = 0, nodes = mfi_comm_size() / rpn + 1;
    mfi_comm *c = calloc(1, sizeof *c);
    int *on = calloc((size_t)nodes, sizeof *on);   /* ranks on each node */
    if (!c || !on) {
        free(c);
        free(on);
        MF_FAIL(MF_ERR_NOMEM, "simulated communicator: out of memory");
    }
    for (int i = 0; i < n; i++) {
        int node = world_ranks[i] / rpn;
        if (node < 0 || node >= nodes) continue;
        nn += on[node] == 0;
        if (++on[node] > most) most = on[node];
    }
    free(on);
    c->comm = MPI_COMM_NULL;
    c->rank = rank;
    c->size = n;
    c->owned = true;
    c->sim = true;
    c->sim_nodes = nn;
    c->sim_local = most;
    *out = c;
    return MF_OK;
}

static mf_status sim_call(mf_comm_kind kind, mfi_comm *c, int64_t bytes, mf_coll_algo algo, bool pipe)
{
    if (c->size > 1 && bytes > 0) mfi_tally(kind, bytes);
    mfi_coll_op op = kind == MF_COMM_ALLREDUCE ? MFI_ALLREDUCE : kind == MF_COMM_REDUCE_SCATTER ? MFI_REDUCE_SCATTER
                   : MFI_ALLGATHER;
    bool selected = kind == MF_COMM_ALLREDUCE || kind == MF_COMM_REDUCE_SCATTER || kind == MF_COMM_ALLGATHER;
    if (selected && algo == MF_COLL_AUTO && c->size > 1) MF_TRY(mfi_coll_choose(op, c, bytes, &algo));
    if (!selected) algo = MF_COLL_MPI;
    if (observer && c->size > 1 && bytes > 0) {
        mfi_sim_event e = {kind, bytes, c->size, c->sim_nodes, c->sim_local, algo, async, pipe};
        observer(&e);
    }
    return MF_OK;
}

mf_status mfi_sim_call(mf_comm_kind kind, mfi_comm *c, int64_t bytes, mf_coll_algo algo)
{
    return sim_call(kind, c, bytes, algo, false);
}

mf_status mfi_sim_call_p2p(mfi_comm *c, int64_t bytes)
{
    return sim_call(MF_COMM_P2P, c, bytes, MF_COLL_MPI, c == mfi_comm_pipe());
}
