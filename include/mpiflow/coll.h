/*
 * mpiflow/coll.h - collectives on raw buffers over all ranks, with a
 * choice of algorithm (DESIGN.md section 6). Global tensors use the same
 * algorithms when boxing (P -> B is an allreduce).
 *
 *   mf_allreduce(grad, n, MF_F32, MF_COLL_AUTO);   // sum over ranks, in place
 *
 * MF_COLL_AUTO picks by message size and topology; the environment
 * variable MF_ALLREDUCE_ALGO=mpi|ring|rhd forces one for every allreduce
 * (boxing included).
 */
#ifndef MPIFLOW_COLL_H
#define MPIFLOW_COLL_H

#include "mpiflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mf_coll_algo {
    MF_COLL_AUTO = 0,
    MF_COLL_MPI,    /* the MPI library's own */
    MF_COLL_RING,   /* ring: reduce-scatter then allgather, 2(n-1) steps */
    MF_COLL_RHD,    /* recursive halving-doubling (Rabenseifner), any n */
    MF_COLL_ALGO_COUNT
} mf_coll_algo;

/* "auto", "mpi", "ring", "rhd" */
MF_API const char *mf_coll_algo_name(mf_coll_algo a);
/* MF_ERR_ARG for a name that is not one of them */
MF_API mf_status mf_coll_algo_parse(const char *name, mf_coll_algo *out);
/* Sum of buf over all ranks into buf on every rank. Collective. */
MF_API mf_status mf_allreduce(void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo);

#ifdef __cplusplus
}
#endif
#endif
