/*
 * collectives/coll_util.c - what the algorithms share: the sum kernel,
 * balanced blocks, the MPI type of a dtype, a checked MPI_Sendrecv, and
 * the MPI library's own allreduce as one more algorithm.
 */
#include <limits.h>
#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include "collectives/coll_algo.h"
#include "base/error.h"

MPI_Datatype mfi_mpi_type(mf_dtype dt)
{
    switch (dt) {
    case MF_F32: return MPI_FLOAT;
    case MF_F64: return MPI_DOUBLE;
    case MF_I32: return MPI_INT32_T;
    case MF_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

void mfi_sum_into(void *dst, const void *src, int64_t n, mf_dtype dt)
{
    switch (dt) {
    case MF_F32: {
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
        break;
    }
    case MF_F64: {
        double *d = dst;
        const double *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
        break;
    }
    case MF_I32: {
        int32_t *d = dst;
        const int32_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)d[i] + (uint32_t)s[i]);
        break;
    }
    default: {
        int64_t *d = dst;
        const int64_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)d[i] + (uint64_t)s[i]);
        break;
    }
    }
}

void mfi_block(int64_t count, int n, int k, int64_t *off, int64_t *len)
{
    int64_t q = count / n, r = count % n;
    *len = q + (k < r);
    *off = k * q + (k < r ? k : r);
}

_Thread_local bool mfi_coll_polite;

mf_status mfi_wait_all_n(int n, MPI_Request *req, MPI_Status *sts, const char *what)
{
    if (!mfi_coll_polite) {
        int rc = MPI_Waitall(n, req, sts ? sts : MPI_STATUSES_IGNORE);
        return rc == MPI_SUCCESS ? MF_OK : mfi_mpi_fail(rc, what);
    }
    /* the progress thread shares its cores with the caller's compute,
     * or the node's ranks share its CPUs: poll a little, then yield,
     * then sleep between polls */
    for (long k = 0;; k++) {
        int left = 0;
        for (int i = 0; i < n; i++) {   /* one by one: an error goes to its communicator's handler */
            if (req[i] == MPI_REQUEST_NULL) continue;
            int done = 0;
            int rc = MPI_Test(&req[i], &done, sts ? &sts[i] : MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return mfi_mpi_fail(rc, what);
            left += !done;
        }
        if (!left) return MF_OK;
        if (k < 64) continue;
        if (k < 256) sched_yield();
        else nanosleep(&(struct timespec){0, 20000}, NULL);
    }
}

mf_status mfi_wait_all(int n, MPI_Request *req, const char *what)
{
    MPI_Status sts[4];   /* (MPI_STATUSES_IGNORE trips GCC's -Wstringop-overflow) */
    if (n > 4) MF_FAIL(MF_ERR_INTERNAL, "%s: %d requests, at most 4", what, n);
    return mfi_wait_all_n(n, req, sts, what);
}

mf_status mfi_sendrecv(mfi_comm *c, const void *sbuf, int64_t scount, int dest, void *rbuf, int64_t rcount, int src,
                       mf_dtype dt)
{
    if (scount > INT_MAX || rcount > INT_MAX)
        MF_FAIL(MF_ERR_ARG, "collective: a block of %lld elements does not fit MPI's int",
                (long long)(scount > rcount ? scount : rcount));
    if (!mfi_coll_polite) {
        MFI_MPI_TRY(MPI_Sendrecv(sbuf, (int)scount, mfi_mpi_type(dt), dest, 77, rbuf, (int)rcount, mfi_mpi_type(dt),
                                 src, 77, c->comm, MPI_STATUS_IGNORE));
        return MF_OK;
    }
    MPI_Request req[2];
    MFI_MPI_TRY(MPI_Irecv(rbuf, (int)rcount, mfi_mpi_type(dt), src, 77, c->comm, &req[0]));
    int rc = MPI_Isend(sbuf, (int)scount, mfi_mpi_type(dt), dest, 77, c->comm, &req[1]);
    if (rc != MPI_SUCCESS) {
        MPI_Cancel(&req[0]);
        MPI_Request_free(&req[0]);
        return mfi_mpi_fail(rc, "MPI_Isend");
    }
    return mfi_wait_all(2, req, "MPI_Sendrecv");
}

mf_status mfi_allreduce_mpi(mfi_comm *c, void *buf, int64_t count, mf_dtype dt)
{
    if (count > INT_MAX) MF_FAIL(MF_ERR_ARG, "allreduce: count %lld does not fit MPI's int", (long long)count);
    if (!c->is_twin) {   /* the caller's thread: MPI's blocking call (non-blocking is the progress thread's) */
        MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mfi_mpi_type(dt), MPI_SUM, c->comm));
        return MF_OK;
    }
    MPI_Request req;
    MFI_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mfi_mpi_type(dt), MPI_SUM, c->comm, &req));
    return mfi_wait_all(1, &req, "MPI_Iallreduce");
}

void *mfi_comm_scratch_at(mfi_comm *c, int slot, size_t bytes)
{
    if (bytes <= c->scratch_bytes[slot]) return c->scratch[slot];
    free(c->scratch[slot]);
    c->scratch[slot] = malloc(bytes);
    c->scratch_bytes[slot] = c->scratch[slot] ? bytes : 0;
    return c->scratch[slot];
}

void *mfi_comm_scratch(mfi_comm *c, size_t bytes) { return mfi_comm_scratch_at(c, 0, bytes); }
