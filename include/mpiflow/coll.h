/*
 * mpiflow/coll.h - collectives on raw buffers over all ranks, with a
 * choice of algorithm (doc/design.md section 6). Global tensors use the same
 * algorithms when boxing (P -> B is an allreduce).
 *
 *   mf_allreduce(grad, n, MF_F32, MF_COLL_AUTO);   // sum over ranks, in place
 *
 * MF_COLL_AUTO picks by message size, rank count and node count; the
 * environment variables MF_ALLREDUCE_ALGO=mpi|ring|rhd|hier,
 * MF_REDUCE_SCATTER_ALGO=mpi|ring|hier and MF_ALLGATHER_ALGO=mpi|ring|hier
 * force one for every such call (boxing and gradient sync included).
 */
#ifndef MPIFLOW_COLL_H
#define MPIFLOW_COLL_H

#include <stdbool.h>
#include "mpiflow/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mf_coll_algo {
    MF_COLL_AUTO = 0,
    MF_COLL_MPI,    /* the MPI library's own */
    MF_COLL_RING,   /* ring: reduce-scatter then allgather, 2(n-1) steps */
    MF_COLL_RHD,    /* recursive halving-doubling (Rabenseifner), any n (allreduce only) */
    MF_COLL_HIER,   /* inside the node by shared memory, between nodes by peers */
    MF_COLL_ALGO_COUNT
} mf_coll_algo;

/* "auto", "mpi", "ring", "rhd", "hier" */
MF_API const char *mf_coll_algo_name(mf_coll_algo a);
/* MF_ERR_ARG for a name that is not one of them */
MF_API mf_status mf_coll_algo_parse(const char *name, mf_coll_algo *out);
/* What 'auto' runs for op ("allreduce", "reduce_scatter" or
 * "allgather") moving `bytes` (the whole buffer) over all ranks: the
 * op's MF_*_ALGO variable, else the tuning file's rule (MF_COLL_TUNING,
 * doc/collectives.md), else the built-in table. Collective the first
 * time (it learns the node layout). */
MF_API mf_status mf_coll_choice(const char *op, int64_t bytes, mf_coll_algo *out);
/* Replaces this process's tuning rules with the file at path (the format
 * of MF_COLL_TUNING, doc/collectives.md), for 'auto' from now on; a bad
 * file fails with MF_ERR_ARG and keeps the old rules. Not collective;
 * call it on every rank, with no collective in flight. */
MF_API mf_status mf_coll_tuning_load(const char *path);
/* The world's node class, as tuning files name it: 1 one node; 2 several
 * nodes with several ranks on each; 3 several nodes otherwise.
 * Collective the first time. */
MF_API mf_status mf_coll_node_class(int *cls);
/* Sum of buf over all ranks into buf on every rank. Collective. */
MF_API mf_status mf_allreduce(void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo);
/* send holds world-size pieces of count elements; recv (count elements)
 * gets the sum over ranks of this rank's piece. Collective. */
MF_API mf_status mf_reduce_scatter(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo);
/* Every rank's count elements of send, in rank order, into recv
 * (world-size * count elements). Collective. */
MF_API mf_status mf_allgather(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo);

/* Deterministic sums over npieces virtual pieces, each a vector of count
 * elements: this rank holds pieces first .. first+n-1 (mf_pieces_range)
 * back to back in local; out gets the sum over all pieces in piece
 * order 0, 1, ..., npieces-1. The bits do not depend on algo (which
 * moves the result) or on the number of ranks. MF_DETERMINISTIC=1 makes
 * every allreduce and reduce-scatter sum in rank order this way. */
MF_API void mf_pieces_range(int npieces, int *first, int *count);
MF_API mf_status mf_allreduce_pieces(const void *local, void *out, int64_t count, mf_dtype dt, int npieces,
                                     mf_coll_algo algo);

/* Non-blocking forms: the collective runs on mpiflow's progress thread
 * while the caller computes. Leave the buffers alone until mf_wait, which
 * returns the collective's status and frees the request; mf_test says
 * whether it has finished (true for NULL). Every rank must start the
 * same collectives in the same order, and wait for each. */
typedef struct mf_request mf_request;
MF_API mf_status mf_iallreduce(void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo, mf_request **req);
MF_API mf_status mf_ireduce_scatter(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo,
                                    mf_request **req);
MF_API mf_status mf_iallgather(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo,
                               mf_request **req);
MF_API bool mf_test(mf_request *req);
MF_API mf_status mf_wait(mf_request *req);

/* What this rank's collectives have moved since start-up or the last
 * reset, by kind (doc/collectives.md): every collective over more than
 * one rank that mpiflow runs (boxing, gradient buckets, ZeRO, pipeline
 * transfers) counts its message: an allreduce its buffer, a
 * reduce-scatter its input, an allgather its output, an all-to-all and
 * a point-to-point exchange what this rank sends, a broadcast its
 * buffer. Not collective. */
typedef enum mf_comm_kind {
    MF_COMM_ALLREDUCE = 0, MF_COMM_REDUCE_SCATTER, MF_COMM_ALLGATHER, MF_COMM_ALLTOALL, MF_COMM_BCAST, MF_COMM_P2P,
    MF_COMM_KINDS
} mf_comm_kind;
typedef struct mf_comm_tally {
    int64_t calls[MF_COMM_KINDS];
    int64_t bytes[MF_COMM_KINDS];
} mf_comm_tally;
MF_API void mf_comm_tally_get(mf_comm_tally *t);
MF_API void mf_comm_tally_reset(void);
MF_API const char *mf_comm_kind_name(mf_comm_kind k);   /* "allreduce", "reduce-scatter", ... */

#ifdef __cplusplus
}
#endif
#endif
