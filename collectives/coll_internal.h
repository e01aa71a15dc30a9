/*
 * collectives/coll_internal.h - the mfi_comm struct and MPI error helper,
 * shared by the files of collectives/ only.
 */
#ifndef MPIFLOW_COLLECTIVES_COLL_INTERNAL_H
#define MPIFLOW_COLLECTIVES_COLL_INTERNAL_H

#include <mpi.h>
#include "collectives/coll.h"

typedef struct mfi_hier mfi_hier;

struct mfi_comm {
    MPI_Comm comm;
    int rank, size;
    bool owned;          /* freed by mfi_comm_free */
    mfi_hier *hier;      /* node and peer split, shared window (hier.c); lazily */
    struct mfi_comm *twin;   /* duplicate for non-blocking requests (request.c); lazily */
    void *scratch[2];    /* the algorithms' temporary buffers (mfi_comm_scratch) */
    size_t scratch_bytes[2];
    bool is_twin;        /* the progress thread's duplicate of another */
    char *ledger_name;   /* "ranks 0-3" for the watchdog's ledger (ledger.c); lazily */
    int *world_ranks;    /* [size]: each member's world rank; lazily, with ledger_name */
    int ledger_index, ledger_gen;   /* its count's place in the ledger, and that ledger's generation */
    bool sim;            /* of a simulated world (sim.c): calls are counted, nothing moves */
    int sim_nodes, sim_local;   /* simulated: the nodes it spans, the most of its ranks on one */
};

/* A call on a simulated communicator: counted (the tally, the log, the
 * observer) with the algorithm the selection would run; moves nothing. */
mf_status mfi_sim_call(mf_comm_kind kind, mfi_comm *c, int64_t bytes, mf_coll_algo algo);
/* The same for point-to-point transfers, marked as a pipeline's where c
 * is the pipeline's communicator. */
mf_status mfi_sim_call_p2p(mfi_comm *c, int64_t bytes);

/* A buffer of at least bytes owned by c, kept between calls so that
 * large collectives do not fault in fresh pages every time; NULL when
 * out of memory. One user at a time: calls on c are serialised. Slot 1
 * is a second buffer for a caller (the deterministic sums) whose
 * collective uses slot 0 meanwhile. */
void *mfi_comm_scratch(mfi_comm *c, size_t bytes);
void *mfi_comm_scratch_at(mfi_comm *c, int slot, size_t bytes);

/* Frees what the communicator grew lazily (hier, twin); not c itself. */
void mfi_comm_extras_free(mfi_comm *c);

/* "what failed: <MPI's message>" as MF_ERR_MPI. */
mf_status mfi_mpi_fail(int rc, const char *what);

#define MFI_MPI_TRY(call)                                              \
    do {                                                               \
        int mpi_rc_ = (call);                                          \
        if (mpi_rc_ != MPI_SUCCESS) return mfi_mpi_fail(mpi_rc_, #call); \
    } while (0)

/* Counts one collective of kind k moving nbytes (tally.c). */
void mfi_tally(mf_comm_kind k, int64_t nbytes);

#endif
