/*
 * collectives/select.c - which algorithm runs each collective: the one
 * place that decides (STYLE.md), plus the public mf_allreduce.
 *
 * MF_ALLREDUCE_ALGO=mpi|ring|rhd forces one for every allreduce. Without
 * it, the table below decides by message size; it follows the
 * measurements in doc/performance.md (bench: mpiflow-bench allreduce).
 */
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "collectives/comm.h"
#include "lib/error.h"

static const char *const names[MF_COLL_ALGO_COUNT] = {"auto", "mpi", "ring", "rhd"};

const char *mf_coll_algo_name(mf_coll_algo a)
{
    return a >= 0 && a < MF_COLL_ALGO_COUNT ? names[a] : "?";
}

mf_status mf_coll_algo_parse(const char *name, mf_coll_algo *out)
{
    for (int a = 0; name && a < MF_COLL_ALGO_COUNT; a++)
        if (!strcmp(name, names[a])) {
            *out = (mf_coll_algo)a;
            return MF_OK;
        }
    MF_FAIL(MF_ERR_ARG, "collective algorithm '%s' is not one of auto, mpi, ring, rhd", name ? name : "(null)");
}

/* MF_ALLREDUCE_ALGO, read once; MF_COLL_AUTO when unset or unknown */
static mf_coll_algo forced(void)
{
    static int cached = -1;
    if (cached < 0) {
        mf_coll_algo a = MF_COLL_AUTO;
        const char *e = getenv("MF_ALLREDUCE_ALGO");
        if (e && *e && mf_coll_algo_parse(e, &a) != MF_OK) a = MF_COLL_AUTO;
        cached = (int)a;
    }
    return (mf_coll_algo)cached;
}

/* The table, from mpiflow-bench allreduce on this machine type
 * (doc/performance.md): on 2 ranks the ring moves 64 KiB - 16 MiB at
 * 1.4-2.8x MPICH's busbw, and halving-doubling matches or beats MPICH
 * below that; with more ranks than cores every extra step costs a
 * scheduler slice, so the fewest steps (rhd, log2 n) win. */
mf_coll_algo mfi_allreduce_choose(const mf_comm *c, int64_t bytes)
{
    mf_coll_algo f = forced();
    if (f != MF_COLL_AUTO) return f;
    if (c->size == 2 && bytes >= (64 << 10)) return MF_COLL_RING;
    return MF_COLL_RHD;
}

/* in place on buf, by algorithm a (not AUTO) */
static mf_status run_allreduce(mf_comm *c, void *buf, int64_t count, mf_dtype dt, mf_coll_algo a)
{
    switch (a) {
    case MF_COLL_RING: return mfi_allreduce_ring(c, buf, count, dt);
    case MF_COLL_RHD: return mfi_allreduce_rhd(c, buf, count, dt);
    default: return mfi_allreduce_mpi(c, buf, count, dt);
    }
}

mf_status mfi_allreduce(mf_comm *c, const void *send, void *recv, int64_t count, mf_dtype dt)
{
    if (!c || c->comm == MPI_COMM_NULL) MF_FAIL(MF_ERR_STATE, "allreduce: no communicator (is mf_init done?)");
    if (mfi_mpi_type(dt) == MPI_DATATYPE_NULL) MF_FAIL(MF_ERR_DTYPE, "allreduce: unsupported dtype %d", (int)dt);
    if (count < 0) MF_FAIL(MF_ERR_ARG, "allreduce: negative count %lld", (long long)count);
    if (count == 0) return MF_OK;
    if (send != recv) memcpy(recv, send, (size_t)count * mf_dtype_size(dt));
    if (c->size == 1) return MF_OK;
    return run_allreduce(c, recv, count, dt, mfi_allreduce_choose(c, count * (int64_t)mf_dtype_size(dt)));
}

mf_status mf_allreduce(void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo)
{
    if (!buf && count > 0) MF_FAIL(MF_ERR_ARG, "mf_allreduce: buf is NULL");
    if (algo < 0 || algo >= MF_COLL_ALGO_COUNT) MF_FAIL(MF_ERR_ARG, "mf_allreduce: unknown algorithm %d", (int)algo);
    mf_comm *c = mfi_comm_world();
    if (algo == MF_COLL_AUTO || count == 0 || !c || c->size == 1 || c->comm == MPI_COMM_NULL)
        return mfi_allreduce(c, buf, buf, count, dt);
    if (mfi_mpi_type(dt) == MPI_DATATYPE_NULL) MF_FAIL(MF_ERR_DTYPE, "mf_allreduce: unsupported dtype %d", (int)dt);
    if (count < 0) MF_FAIL(MF_ERR_ARG, "mf_allreduce: negative count %lld", (long long)count);
    return run_allreduce(c, buf, count, dt, algo);
}
