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
mf_status mfi_allreduce_mpi(mf_comm *c, void *buf, int64_t count, mf_dtype dt);
mf_status mfi_allreduce_ring(mf_comm *c, void *buf, int64_t count, mf_dtype dt);
mf_status mfi_allreduce_rhd(mf_comm *c, void *buf, int64_t count, mf_dtype dt);

/* The algorithm for an allreduce of `bytes` on c: MF_ALLREDUCE_ALGO when
 * set, else the selection table. */
mf_coll_algo mfi_allreduce_choose(const mf_comm *c, int64_t bytes);

/* dst[i] += src[i] */
void mfi_sum_into(void *dst, const void *src, int64_t n, mf_dtype dt);
MPI_Datatype mfi_mpi_type(mf_dtype dt);
/* One MPI_Sendrecv of byte ranges (counts checked against MPI's int). */
mf_status mfi_sendrecv(mf_comm *c, const void *sbuf, int64_t scount, int dest, void *rbuf, int64_t rcount, int src,
                       mf_dtype dt);

#endif
