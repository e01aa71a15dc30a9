/*
 * collectives/coll.h - communicators and collectives on raw buffers
 * (not installed).
 *
 * The layer knows buffers, counts, dtypes and communicators, never
 * tensors or SBP (doc/design.md section 1). The global-tensor layer's boxing
 * calls only these functions. Every communicator is an MPI duplicate or
 * split of the world duplicate, so it inherits MPI_ERRORS_RETURN and an
 * MPI failure comes back as MF_ERR_MPI.
 *
 * Counts are in elements of dtype. Reductions are sums. The blocking
 * calls choose an algorithm in collectives/select.c; each has a
 * non-blocking request form run by a progress thread (request.c).
 */
#ifndef MPIFLOW_COLLECTIVES_COLL_H
#define MPIFLOW_COLLECTIVES_COLL_H

#include <stddef.h>
#include <stdint.h>
#include "mpiflow/status.h"
#include "mpiflow/coll.h"
#include "mpiflow/dtype.h"

typedef struct mfi_comm mfi_comm;

/* The world duplicate (borrowed; valid between mf_init and mf_finalize). */
mfi_comm *mfi_comm_world(void);
/* Splits parent: ranks with the same color >= 0 share a communicator,
 * ordered by key; color < 0 gets *out = NULL. Collective over parent. */
mf_status mfi_comm_split(mfi_comm *parent, int color, int key, mfi_comm **out);
void mfi_comm_free(mfi_comm *c);

/* ---- a simulated world (collectives/sim.c, doc/planning.md): this
 * process plays rank `rank` of `size` ranks in nodes of ranks_per_node
 * (world rank r on node r / ranks_per_node). The world and pipeline
 * communicators become simulated ones; every call on a simulated
 * communicator is counted and moves nothing (its buffers are never
 * touched: meta tensors). MF_ERR_STATE if one is on already. */
mf_status mfi_sim_begin(int size, int rank, int ranks_per_node);
void mfi_sim_end(void);
bool mfi_sim_on(void);
int mfi_sim_ranks_per_node(void);
/* A simulated communicator of the given world ranks (n of them, this
 * process's at index rank), as a split would make it. */
mf_status mfi_comm_sim_create(int n, const int *world_ranks, int rank, mfi_comm **out);
bool mfi_comm_is_sim(const mfi_comm *c);
/* What a simulated call reports, besides the tally. */
typedef struct mfi_sim_event {
    mf_comm_kind kind;
    int64_t bytes;       /* the message: the whole buffer (allreduce, gather's result, scatter's input), or sent */
    int ranks;           /* the communicator's size */
    int nodes;           /* the nodes it spans */
    int local;           /* the most of its ranks on one node */
    mf_coll_algo algo;   /* what the selection chose (tuning file, table, environment) */
    bool async;          /* a non-blocking request's */
    bool pipe;           /* a pipeline's stage-to-stage transfer (on mfi_comm_pipe) */
} mfi_sim_event;
/* Brackets a non-blocking request's simulated run (request.c). */
void mfi_sim_async(bool on);
/* Called for every simulated call (NULL: none); the step graph records them. */
void mfi_sim_set_observer(void (*fn)(const mfi_sim_event *e));

int mfi_comm_rank_in(const mfi_comm *c);
int mfi_comm_size_of(const mfi_comm *c);

/* Sum over all ranks of c of send into recv (send == recv: in place). */
mf_status mfi_allreduce(mfi_comm *c, const void *send, void *recv, int64_t count, mf_dtype dt);
/* send holds size pieces back to back (counts[r] elements for rank r);
 * recv gets the sum of this rank's piece. */
mf_status mfi_reduce_scatter(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
/* Each rank contributes counts[rank] elements; recv gets all pieces back
 * to back in rank order. */
mf_status mfi_allgather(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt);
/* A sum whose bits do not depend on the rank count (deterministic.c):
 * over npieces virtual pieces of count elements each, of which this rank
 * holds pieces mfi_block(npieces, size, rank) back to back in local; out
 * gets the sum over all pieces in piece order 0, 1, ..., gathered by
 * algorithm `gather`. out may be local. */
mf_status mfi_allreduce_pieces(mfi_comm *c, const void *local, int npieces, void *out, int64_t count, mf_dtype dt,
                               mf_coll_algo gather);
/* send holds scounts[r] elements for each rank r back to back; recv gets
 * rcounts[r] elements from each rank r back to back. */
mf_status mfi_alltoall(mfi_comm *c, const void *send, const int64_t *scounts, void *recv,
                       const int64_t *rcounts, mf_dtype dt);
mf_status mfi_bcast(mfi_comm *c, void *buf, int64_t count, mf_dtype dt, int root);

/* Non-blocking versions (request.c): the call returns once the request
 * is queued; buffers must stay untouched until mfi_wait, which frees the
 * request and returns its status (mf_last_error holds its message).
 * Every rank must start the same requests in the same order. */
typedef struct mf_request mfi_request;
/* MPI takes GPU buffers (MPIX_Query_cuda_support, or MF_CUDA_AWARE=0/1). */
bool mfi_coll_cuda_aware(void);
/* Sums over ranks in rank order (MF_DETERMINISTIC=1), on the host. */
bool mfi_coll_deterministic(void);
/* A blocking allreduce by the given algorithm (MF_COLL_MPI: the library's own). */
mf_status mfi_allreduce_algo(mfi_comm *c, const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo a);
mf_status mfi_iallreduce(mfi_comm *c, void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo, mfi_request **out);
mf_status mfi_ireduce_scatter(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt,
                              mfi_request **out);
mf_status mfi_iallgather(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt,
                         mfi_request **out);
bool mfi_test(mfi_request *r);
mf_status mfi_wait(mfi_request *r);
/* mfi_wait, and when the collective ran (mf_time's clock, for traces). */
mf_status mfi_wait_times(mfi_request *r, double *t_start, double *t_end);
/* Checks MF_ALLREDUCE_ALGO, MF_REDUCE_SCATTER_ALGO and MF_ALLGATHER_ALGO
 * (mf_init), so a bad value fails at start-up, not at the first call. */
mf_status mfi_coll_check_env(void);
/* Finishes queued requests and stops the progress thread (mf_finalize). */
void mfi_request_shutdown(void);

/* ---- the watchdog's ledger (ledger.c, ledger.h; MF_TIMEOUT). enter and
 * leave bracket every wait on other ranks, on any thread: enter records
 * the collective op on c (numbered there) and returns a token for leave
 * (0: not recorded). enter_p2p records a point-to-point wait on the
 * given ranks of c. A wait inside another is the outer one's. context
 * names, for this thread, what the next waits move ("boxing 'w' f32 [4,8]
 * S(0) -> B", "gradient bucket 2 of 3"; "" clears it); a non-blocking
 * request takes its caller's context along to the progress thread. */
int mfi_ledger_enter(mfi_comm *c, const char *op);
int mfi_ledger_enter_p2p(mfi_comm *c, const char *op, const int *peers, int npeers);
void mfi_ledger_leave(int token);
void mfi_ledger_context(const char *text);
void mfi_ledger_context_copy(char *buf, size_t size);
bool mfi_ledger_on(void);   /* MF_TIMEOUT is set: worth describing what moves */
/* A thread that recorded waits ends (the progress thread): its slot goes. */
void mfi_ledger_thread_done(void);
/* Starts the watchdog thread when MF_TIMEOUT is set (collective, at
 * mf_init); MF_ERR_ARG for a bad value or an MPI without
 * MPI_THREAD_MULTIPLE. stop ends it (mf_finalize). */
mf_status mfi_watchdog_start(void);
void mfi_watchdog_stop(void);

/* Block k of count elements cut into n balanced blocks (the first
 * count % n blocks one longer): the split of S(axis) and of the ring. */
void mfi_block(int64_t count, int n, int k, int64_t *off, int64_t *len);

/* One point-to-point transfer of the general (hyperslab) path. */
typedef struct mfi_p2p {
    int peer;            /* rank in the communicator */
    void *buf;
    int64_t count;
} mfi_p2p;
/* Point-to-point in two halves: start posts every receive and send
 * (with tag) and returns; wait completes them and frees the request. The buffers
 * stay untouched in between. Pipeline stages pass activations this way,
 * on their own communicator (mfi_comm_pipe). */
typedef struct mfi_xreq mfi_xreq;
mf_status mfi_exchange_start(mfi_comm *c, const mfi_p2p *sends, int nsend, const mfi_p2p *recvs, int nrecv,
                             mf_dtype dt, int tag, mfi_xreq **out);
/* Whether x has completed (then mfi_exchange_wait returns at once);
 * drives MPI's progress. Not collective. */
bool mfi_exchange_test(mfi_xreq *x);
mf_status mfi_exchange_wait(mfi_xreq *x);
/* A duplicate of the world for pipeline transfers, so that their
 * point-to-point messages never match the boxing path's. */
mfi_comm *mfi_comm_pipe(void);

/* Copies the block [off, off+len) along the middle axis of a row-major
 * [outer, axis, inner] array of elsize-byte elements into the dense
 * [outer, len, inner] array dst (pack) or back (unpack). */
void mfi_pack_axis(const void *src, size_t elsize, int64_t outer, int64_t axis, int64_t inner, int64_t off,
                   int64_t len, void *dst);
void mfi_unpack_axis(const void *src, size_t elsize, int64_t outer, int64_t axis, int64_t inner, int64_t off,
                     int64_t len, void *dst);

#endif
