/*
 * collectives/hier.c - what the hierarchical algorithms need of a
 * communicator: its split into topology nodes (the shared-memory nodes,
 * or MF_RANKS_PER_NODE emulated ones), the peer communicators of ranks
 * with the same local rank, and a shared-memory window over the node
 * (MPI_Win_allocate_shared) through which the node's ranks read each
 * other's buffers without messages.
 *
 * Built on first use, collectively over the communicator, and kept until
 * it is freed. The hierarchy is usable when every node has the same
 * number of ranks and each node's ranks really share memory; otherwise
 * the hierarchical algorithms fall back (allreduce_hier.c says to what).
 */
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "collectives/coll_hier.h"
#include "collectives/comm.h"
#include "base/error.h"

static void sub_free(mfi_comm *s)
{
    if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
    mfi_comm_extras_free(s);
}

static void window_free(mfi_hier *h)
{
    if (h->win == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(h->win);
    MPI_Win_free(&h->win);
    h->win_bytes = 0;
}

void mfi_hier_free(mfi_hier *h)
{
    if (!h) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        window_free(h);
        sub_free(&h->node);
        sub_free(&h->peers);
    }
    free(h->rank_at);
    free(h->seg);
    free(h);
}

static mf_status sub_make(MPI_Comm parent, int color, int key, mfi_comm *out)
{
    *out = (mfi_comm){.comm = MPI_COMM_NULL, .size = 1};
    MFI_MPI_TRY(MPI_Comm_split(parent, color, key, &out->comm));
    MFI_MPI_TRY(MPI_Comm_set_errhandler(out->comm, MPI_ERRORS_RETURN));
    MFI_MPI_TRY(MPI_Comm_rank(out->comm, &out->rank));
    MFI_MPI_TRY(MPI_Comm_size(out->comm, &out->size));
    return MF_OK;
}

/* the splits and the rank map; h->usable says whether they fit */
static mf_status build(mfi_comm *c, mfi_hier *h)
{
    MF_TRY(sub_make(c->comm, mfi_comm_node_id(), c->rank, &h->node));
    MF_TRY(sub_make(c->comm, h->node.rank, c->rank, &h->peers));
    int L = h->node.size;
    /* do the node's ranks share memory? (emulated nodes on a real
     * cluster might not) */
    MPI_Comm sh = MPI_COMM_NULL;
    MFI_MPI_TRY(MPI_Comm_split_type(h->node.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &sh));
    int shsize = 0;
    MPI_Comm_size(sh, &shsize);
    MPI_Comm_free(&sh);
    int v[3] = {L, -L, shsize == L ? 1 : 0};   /* min L, max L, all shared */
    MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MIN, c->comm));
    h->local = h->node.rank;
    h->local_size = L;
    h->nnodes = h->peers.size;
    if (v[0] != -v[1]) {
        snprintf(h->why, sizeof h->why, "nodes have %d to %d ranks", v[0], -v[1]);
        return MF_OK;
    }
    if (!v[2]) {
        snprintf(h->why, sizeof h->why, "a node's ranks do not share memory");
        return MF_OK;
    }
    /* rank_at[p * L + l]: the rank of c with local rank l in the node
     * that is rank p of the peer communicators */
    h->rank_at = malloc((size_t)c->size * sizeof *h->rank_at);
    int *pairs = malloc(2 * (size_t)c->size * sizeof *pairs);
    h->seg = calloc((size_t)L, sizeof *h->seg);
    int me[2] = {h->peers.rank, h->local};
    mf_status st = h->rank_at && pairs && h->seg ? MF_OK : mfi_error(MF_ERR_NOMEM, "hierarchy: out of memory");
    int rc = MPI_Allgather(me, 2, MPI_INT, pairs ? pairs : me, pairs ? 2 : 0, MPI_INT, c->comm);
    if (st == MF_OK && rc != MPI_SUCCESS) st = mfi_mpi_fail(rc, "MPI_Allgather");
    for (int r = 0; st == MF_OK && r < c->size; r++) h->rank_at[pairs[2 * r] * L + pairs[2 * r + 1]] = r;
    free(pairs);
    h->usable = st == MF_OK;
    return st;
}

mf_status mfi_hier_get(mfi_comm *c, mfi_hier **out)
{
    *out = c->hier;
    if (c->hier) return MF_OK;
    mfi_hier *h = calloc(1, sizeof *h);
    if (!h) MF_FAIL(MF_ERR_NOMEM, "hierarchy: out of memory");
    h->node.comm = h->peers.comm = MPI_COMM_NULL;
    h->win = MPI_WIN_NULL;
    mf_status st = build(c, h);
    /* every rank must agree, or some would take the hierarchical path
     * and the others not */
    int ok = st == MF_OK && h->usable;
    int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, c->comm);
    if (st == MF_OK && rc != MPI_SUCCESS) st = mfi_mpi_fail(rc, "MPI_Allreduce");
    if (st != MF_OK) {
        mfi_hier_free(h);
        return st;
    }
    if (!ok && h->usable) snprintf(h->why, sizeof h->why, "another rank could not build the hierarchy");
    h->usable = ok;
    c->hier = *out = h;
    return MF_OK;
}

mf_status mfi_hier_window(mfi_hier *h, size_t bytes)
{
    if (h->win != MPI_WIN_NULL && h->win_bytes >= bytes) return MF_OK;
    window_free(h);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void *base = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, h->node.comm, &base, &h->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        h->win = MPI_WIN_NULL;
        return mfi_mpi_fail(rc, "MPI_Win_allocate_shared");
    }
    for (int l = 0; l < h->local_size; l++) {
        MPI_Aint size;
        int disp;
        void *p = NULL;
        rc = MPI_Win_shared_query(h->win, l, &size, &disp, &p);
        if (rc != MPI_SUCCESS) {
            MPI_Win_free(&h->win);
            return mfi_mpi_fail(rc, "MPI_Win_shared_query");
        }
        h->seg[l] = p;
    }
    MFI_MPI_TRY(MPI_Win_lock_all(MPI_MODE_NOCHECK, h->win));
    h->win_bytes = bytes;
    return MF_OK;
}

mf_status mfi_hier_sync(mfi_hier *h)
{
    /* the window's stores before the barrier are seen after it (MPI-3
     * unified memory model: sync, barrier, sync) */
    MFI_MPI_TRY(MPI_Win_sync(h->win));
    MPI_Request req;
    MFI_MPI_TRY(MPI_Ibarrier(h->node.comm, &req));
    MF_TRY(mfi_wait_all(1, &req, "MPI_Ibarrier"));
    MFI_MPI_TRY(MPI_Win_sync(h->win));
    return MF_OK;
}

void mfi_comm_extras_free(mfi_comm *c)
{
    mfi_hier_free(c->hier);
    c->hier = NULL;
    for (int k = 0; k < 2; k++) {
        free(c->scratch[k]);
        c->scratch[k] = NULL;
        c->scratch_bytes[k] = 0;
    }
    free(c->ledger_name);
    free(c->world_ranks);
    c->ledger_name = NULL;
    c->world_ranks = NULL;
    if (c->twin) {
        c->twin->owned = true;
        mfi_comm_free(c->twin);
        c->twin = NULL;
    }
}
