/*
 * collectives/coll.c - communicator splits and the first version of the
 * collectives: the MPI library's own calls with 64-bit counts checked
 * against MPI's int, plus the point-to-point exchange of the general
 * boxing path.
 *
 * Cost models (alpha-beta, n ranks, m bytes), as MPICH's defaults reach
 * them on one node: allreduce 2(n-1)/n m, reduce-scatter and allgather
 * (n-1)/n m, all-to-all (n-1)/n m. The reduce-scatter and allgather
 * here are the "mpi" algorithms of collectives/select.c.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "base/error.h"

static mf_status check_comm(const char *what, const mfi_comm *c, mf_dtype dt)
{
    if (!c || (c->comm == MPI_COMM_NULL && !c->sim)) MF_FAIL(MF_ERR_STATE, "%s: no communicator (is mf_init done?)", what);
    if (mfi_mpi_type(dt) == MPI_DATATYPE_NULL) MF_FAIL(MF_ERR_DTYPE, "%s: unsupported dtype %d", what, (int)dt);
    return MF_OK;
}

static mf_status to_int(const char *what, int64_t n, int *out)
{
    if (n < 0 || n > INT_MAX) MF_FAIL(MF_ERR_ARG, "%s: count %lld does not fit MPI's int", what, (long long)n);
    *out = (int)n;
    return MF_OK;
}

static bool all_equal(int n, const int64_t *v)
{
    for (int r = 1; r < n; r++)
        if (v[r] != v[0]) return false;
    return true;
}

/* counts and displacements as MPI ints, in one allocation */
static mf_status int_counts(const char *what, int n, const int64_t *counts, int **cnt, int **disp)
{
    int *a = malloc(2 * (size_t)n * sizeof *a);
    if (!a) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", what);
    int64_t off = 0;
    for (int r = 0; r < n; r++) {
        mf_status st = to_int(what, counts[r], &a[r]);
        if (st == MF_OK) st = to_int(what, off, &a[n + r]);
        if (st != MF_OK) {
            free(a);
            return st;
        }
        off += counts[r];
    }
    *cnt = a;
    *disp = a + n;
    return MF_OK;
}

mf_status mfi_comm_split(mfi_comm *parent, int color, int key, mfi_comm **out)
{
    *out = NULL;
    if (!parent || parent->comm == MPI_COMM_NULL) MF_FAIL(MF_ERR_STATE, "mfi_comm_split: no parent communicator");
    if (parent->sim) MF_FAIL(MF_ERR_INTERNAL, "mfi_comm_split: a simulated communicator (use mfi_comm_sim_create)");
    MPI_Comm nc = MPI_COMM_NULL;
    int tok = mfi_ledger_enter(parent, "communicator split");
    int rc = MPI_Comm_split(parent->comm, color < 0 ? MPI_UNDEFINED : color, key, &nc);
    mfi_ledger_leave(tok);
    if (rc != MPI_SUCCESS) return mfi_mpi_fail(rc, "MPI_Comm_split");
    if (nc == MPI_COMM_NULL) return MF_OK;
    mfi_comm *c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Comm_free(&nc);
        MF_FAIL(MF_ERR_NOMEM, "mfi_comm_split: out of memory");
    }
    c->comm = nc;
    c->owned = true;
    MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(nc, &c->rank);
    MPI_Comm_size(nc, &c->size);
    *out = c;
    return MF_OK;
}

void mfi_comm_free(mfi_comm *c)
{
    if (!c || !c->owned) return;
    mfi_comm_extras_free(c);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    free(c);
}

int mfi_comm_rank_in(const mfi_comm *c) { return c ? c->rank : -1; }
int mfi_comm_size_of(const mfi_comm *c) { return c ? c->size : 0; }

mf_status mfi_reduce_scatter_mpi(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    int *cnt, *disp;
    if (all_equal(c->size, counts)) {   /* MPI's block variant picks better algorithms */
        int n = 0;
        MF_TRY(to_int("reduce-scatter", counts[0], &n));
        MFI_MPI_TRY(MPI_Reduce_scatter_block(send, recv, n, mfi_mpi_type(dt), MPI_SUM, c->comm));
        return MF_OK;
    }
    MF_TRY(int_counts("reduce-scatter", c->size, counts, &cnt, &disp));
    int rc = MPI_Reduce_scatter(send, recv, cnt, mfi_mpi_type(dt), MPI_SUM, c->comm);
    free(cnt);
    return rc == MPI_SUCCESS ? MF_OK : mfi_mpi_fail(rc, "MPI_Reduce_scatter");
}

mf_status mfi_allgather_mpi(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    int *cnt, *disp;
    if (all_equal(c->size, counts)) {
        int n = 0;
        MF_TRY(to_int("allgather", counts[0], &n));
        MFI_MPI_TRY(MPI_Allgather(send, n, mfi_mpi_type(dt), recv, n, mfi_mpi_type(dt), c->comm));
        return MF_OK;
    }
    MF_TRY(int_counts("allgather", c->size, counts, &cnt, &disp));
    int rc = MPI_Allgatherv(send, cnt[c->rank], mfi_mpi_type(dt), recv, cnt, disp, mfi_mpi_type(dt), c->comm);
    free(cnt);
    return rc == MPI_SUCCESS ? MF_OK : mfi_mpi_fail(rc, "MPI_Allgatherv");
}

mf_status mfi_alltoall(mfi_comm *c, const void *send, const int64_t *scounts, void *recv,
                       const int64_t *rcounts, mf_dtype dt)
{
    MF_TRY(check_comm("all-to-all", c, dt));
    if (c->size > 1) {
        int64_t sent = 0;
        for (int r = 0; r < c->size; r++) sent += r == c->rank ? 0 : scounts[r];
        if (c->sim) return mfi_sim_call(MF_COMM_ALLTOALL, c, sent * (int64_t)mf_dtype_size(dt), MF_COLL_MPI);
        mfi_tally(MF_COMM_ALLTOALL, sent * (int64_t)mf_dtype_size(dt));
    }
    if (c->sim) return MF_OK;
    if (all_equal(c->size, scounts) && all_equal(c->size, rcounts) && scounts[0] == rcounts[0]) {
        int n = 0;
        MF_TRY(to_int("all-to-all", scounts[0], &n));
        MFI_MPI_TRY(MPI_Alltoall(send, n, mfi_mpi_type(dt), recv, n, mfi_mpi_type(dt), c->comm));
        return MF_OK;
    }
    int *sc, *sd, *rc_, *rd;
    MF_TRY(int_counts("all-to-all", c->size, scounts, &sc, &sd));
    mf_status st = int_counts("all-to-all", c->size, rcounts, &rc_, &rd);
    if (st != MF_OK) {
        free(sc);
        return st;
    }
    int tok = mfi_ledger_enter(c, "all-to-all");
    int rc = MPI_Alltoallv(send, sc, sd, mfi_mpi_type(dt), recv, rc_, rd, mfi_mpi_type(dt), c->comm);
    mfi_ledger_leave(tok);
    free(sc);
    free(rc_);
    return rc == MPI_SUCCESS ? MF_OK : mfi_mpi_fail(rc, "MPI_Alltoallv");
}

mf_status mfi_bcast(mfi_comm *c, void *buf, int64_t count, mf_dtype dt, int root)
{
    int n = 0;
    MF_TRY(check_comm("broadcast", c, dt));
    MF_TRY(to_int("broadcast", count, &n));
    if (c->size == 1 || n == 0) return MF_OK;
    if (c->sim) return mfi_sim_call(MF_COMM_BCAST, c, count * (int64_t)mf_dtype_size(dt), MF_COLL_MPI);
    mfi_tally(MF_COMM_BCAST, count * (int64_t)mf_dtype_size(dt));
    int tok = mfi_ledger_enter(c, "broadcast");
    int rc = MPI_Bcast(buf, n, mfi_mpi_type(dt), root, c->comm);
    mfi_ledger_leave(tok);
    return rc == MPI_SUCCESS ? MF_OK : mfi_mpi_fail(rc, "MPI_Bcast");
}

struct mfi_xreq {
    mfi_comm *c;
    int n, npeers;
    int *peers;          /* the ranks it exchanges with, for the watchdog */
    char what[192];      /* the ledger context at the start */
    MPI_Request req[];
};

mf_status mfi_exchange_start(mfi_comm *c, const mfi_p2p *sends, int nsend, const mfi_p2p *recvs, int nrecv,
                             mf_dtype dt, int tag, mfi_xreq **out)
{
    *out = NULL;
    MF_TRY(check_comm("exchange", c, dt));
    int cap = nsend + nrecv + 1;
    mfi_xreq *x = malloc(sizeof *x + (size_t)cap * sizeof(MPI_Request) + (size_t)cap * sizeof(int));
    if (!x) MF_FAIL(MF_ERR_NOMEM, "exchange: out of memory");
    x->c = c;
    x->n = x->npeers = 0;
    x->peers = (int *)(x->req + cap);
    mfi_ledger_context_copy(x->what, sizeof x->what);
    if (c->sim) {   /* counted; the wait completes nothing */
        int64_t sent = 0;
        for (int i = 0; i < nsend; i++) sent += sends[i].peer == c->rank ? 0 : sends[i].count;
        *out = x;
        return mfi_sim_call_p2p(c, sent * (int64_t)mf_dtype_size(dt));
    }
    int rc = MPI_SUCCESS;
    mf_status st = MF_OK;
    for (int i = 0; i < nrecv && st == MF_OK; i++) {
        int n = 0;
        st = to_int("exchange", recvs[i].count, &n);
        if (st == MF_OK) rc = MPI_Irecv(recvs[i].buf, n, mfi_mpi_type(dt), recvs[i].peer, tag, c->comm, &x->req[x->n++]);
        if (rc != MPI_SUCCESS) st = mfi_mpi_fail(rc, "MPI_Irecv");
        x->peers[x->npeers++] = recvs[i].peer;
    }
    int64_t sent = 0;
    for (int i = 0; i < nsend; i++) sent += sends[i].peer == c->rank ? 0 : sends[i].count;
    if (sent) mfi_tally(MF_COMM_P2P, sent * (int64_t)mf_dtype_size(dt));
    for (int i = 0; i < nsend && st == MF_OK; i++) {
        int n = 0;
        st = to_int("exchange", sends[i].count, &n);
        if (st == MF_OK) rc = MPI_Isend(sends[i].buf, n, mfi_mpi_type(dt), sends[i].peer, tag, c->comm, &x->req[x->n++]);
        if (rc != MPI_SUCCESS) st = mfi_mpi_fail(rc, "MPI_Isend");
        x->peers[x->npeers++] = sends[i].peer;
    }
    if (st != MF_OK) {   /* what was posted still completes: the peers post their halves */
        mfi_exchange_wait(x);
        return st;
    }
    *out = x;
    return MF_OK;
}

mf_status mfi_exchange_wait(mfi_xreq *x)
{
    if (!x) return MF_OK;
    if (x->c->sim) {
        free(x);
        return MF_OK;
    }
    MPI_Status *sts = malloc(((size_t)x->n + 1) * sizeof *sts);
    char saved[192];
    mfi_ledger_context_copy(saved, sizeof saved);
    mfi_ledger_context(x->what);
    int tok = mfi_ledger_enter_p2p(x->c, "point-to-point", x->peers, x->npeers);
    mf_status st = mfi_wait_all_n(x->n, x->req, sts, "MPI_Waitall");
    mfi_ledger_leave(tok);
    mfi_ledger_context(saved);
    free(sts);
    free(x);
    return st;
}

bool mfi_exchange_test(mfi_xreq *x)
{
    if (!x || x->c->sim) return true;
    int done = 1;
    MPI_Status *sts = malloc(((size_t)x->n + 1) * sizeof *sts);
    int rc = sts ? MPI_Testall(x->n, x->req, &done, sts) : MPI_SUCCESS;
    free(sts);
    return rc != MPI_SUCCESS || done != 0;   /* a failure: the wait reports it */
}

void mfi_pack_axis(const void *src, size_t elsize, int64_t outer, int64_t axis, int64_t inner, int64_t off,
                   int64_t len, void *dst)
{
    if (mfi_sim_on()) return;   /* simulated: no bytes to move */
    size_t row = (size_t)(len * inner) * elsize, full = (size_t)(axis * inner) * elsize;
    const char *s = (const char *)src + (size_t)(off * inner) * elsize;
    char *d = dst;
    for (int64_t o = 0; o < outer; o++) memcpy(d + (size_t)o * row, s + (size_t)o * full, row);
}

void mfi_unpack_axis(const void *src, size_t elsize, int64_t outer, int64_t axis, int64_t inner, int64_t off,
                     int64_t len, void *dst)
{
    if (mfi_sim_on()) return;
    size_t row = (size_t)(len * inner) * elsize, full = (size_t)(axis * inner) * elsize;
    const char *s = src;
    char *d = (char *)dst + (size_t)(off * inner) * elsize;
    for (int64_t o = 0; o < outer; o++) memcpy(d + (size_t)o * full, s + (size_t)o * row, row);
}
