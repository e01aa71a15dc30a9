/*
 * collectives/coll_algo.h - the collective algorithms and what they
 * share (collectives/ only). One algorithm per file, each opening with
 * its cost model; the choice between them is made in one place,
 * collectives/select.c.
 */
#ifndef MPIFLOW_COLLECTIVES_COLL_ALGO_H
#define MPIFLOW_COLLECTIVES_COLL_ALGO_H

#include "collectives/coll_internal.h"
#include "mpiflow/coll.h"

/* In-place sum allreduce of count elements of buf over c (c->size > 1). */
mf_status mfi_allreduce_mpi(mfi_comm *c, void *buf, int64_t count, mf_dtype dt);
mf_status mfi_allreduce_ring(mfi_comm *c, void *buf, int64_t count, mf_dtype dt);
mf_status mfi_allreduce_rhd(mfi_comm *c, void *buf, int64_t count, mf_dtype dt);
mf_status mfi_allreduce_hier(mfi_comm *c, void *buf, int64_t count, mf_dtype dt);
/* The fastest non-hierarchical algorithm for the size (select.c): the
 * step between nodes of the hierarchical ones. */
mf_status mfi_allreduce_flat(mfi_comm *c, void *buf, int64_t count, mf_dtype dt);

/* Reduce-scatter and allgather (c->size > 1), counts as in coll.h. */
mf_status mfi_reduce_scatter_mpi(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
mf_status mfi_reduce_scatter_ring(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
mf_status mfi_reduce_scatter_hier(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
mf_status mfi_reduce_scatter_flat(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
mf_status mfi_allgather_mpi(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
mf_status mfi_allgather_ring(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
mf_status mfi_allgather_hier(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
mf_status mfi_allgather_flat(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);

/* The collectives that have a choice of algorithm. */
typedef enum mfi_coll_op { MFI_ALLREDUCE, MFI_REDUCE_SCATTER, MFI_ALLGATHER, MFI_COLL_OPS } mfi_coll_op;
/* The algorithm for op on c moving `bytes` (the whole buffer): the
 * op's MF_*_ALGO variable when set, else the tuning file's rule
 * (MF_COLL_TUNING), else the built-in table. */
mf_status mfi_coll_choose(mfi_coll_op op, mfi_comm *c, int64_t bytes, mf_coll_algo *out);
/* c's node class: 1 one node; 2 several nodes, several of c's ranks on
 * each; 3 several nodes otherwise. Collective over c the first time. */
mf_status mfi_coll_node_class(mfi_comm *c, int *cls);
/* ---- the tuning file (tuning.c) */
mf_status mfi_coll_op_parse(const char *name, mfi_coll_op *out);   /* "allreduce", "reduce_scatter", ... */
const char *mfi_coll_op_name(mfi_coll_op op);
mf_status mfi_coll_tuning_load(void);   /* MF_COLL_TUNING, once; a bad file fails */
bool mfi_coll_tuning_lookup(mfi_coll_op op, int ranks, int nodes, int64_t bytes, mf_coll_algo *out);
/* The checked calls behind every entry point: algorithm a (AUTO: the
 * selection) for an allreduce from send into recv, or for op (reduce-
 * scatter or allgather) with counts[r] elements per rank. */
mf_status mfi_allreduce_algo(mfi_comm *c, const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo a);
mf_status mfi_pieces_algo(mfi_coll_op op, mfi_comm *c, const void *send, void *recv, const int64_t *counts,
                          mf_dtype dt, mf_coll_algo a);
/* Deterministic sums (deterministic.c). MF_DETERMINISTIC set and not 0: */
bool mfi_coll_deterministic(void);
/* local holds this rank's pieces mfi_block(npieces, n, rank), each of
 * sum(counts) elements; recv gets block rank (counts[rank] elements) of
 * the sum over all pieces in piece order. */
mf_status mfi_reduce_scatter_pieces(mfi_comm *c, const void *local, int npieces, const int64_t *counts, void *recv,
                                    mf_dtype dt);
/* mfi_allreduce_pieces (coll.h) is the same for the whole vector. */
/* Queues op as a request (request.c); counts are copied. */
mf_status mfi_ipieces(mfi_coll_op op, mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt,
                      mf_coll_algo algo, mfi_request **out);

/* dst[i] += src[i] */
void mfi_sum_into(void *dst, const void *src, int64_t n, mf_dtype dt);
MPI_Datatype mfi_mpi_type(mf_dtype dt);
/* Set on the progress thread (request.c), and on the caller's thread
 * when a node has more ranks than CPUs (comm.c; doc/collectives.md,
 * "Waiting"): waits for point-to-point requests poll, yield and sleep
 * instead of spinning in MPI, leaving the cores to compute. MPI's own
 * collectives still block. */
extern _Thread_local bool mfi_coll_polite;
/* MPI_Waitall, or the polite loop; sts may be NULL, else holds n. */
mf_status mfi_wait_all_n(int n, MPI_Request *req, MPI_Status *sts, const char *what);
/* the same for at most 4 requests */
mf_status mfi_wait_all(int n, MPI_Request *req, const char *what);
/* One MPI_Sendrecv of byte ranges (counts checked against MPI's int). */
mf_status mfi_sendrecv(mfi_comm *c, const void *sbuf, int64_t scount, int dest, void *rbuf, int64_t rcount, int src,
                       mf_dtype dt);

#endif
