/*
 * collectives/coll_internal.h - the mf_comm struct and MPI error helper,
 * shared by the files of collectives/ only.
 */
#ifndef MPIFLOW_COLLECTIVES_COLL_INTERNAL_H
#define MPIFLOW_COLLECTIVES_COLL_INTERNAL_H

#include <mpi.h>
#include "collectives/coll.h"

struct mf_comm {
    MPI_Comm comm;
    int rank, size;
    bool owned;          /* freed by mfi_comm_free */
};

/* "what failed: <MPI's message>" as MF_ERR_MPI. */
mf_status mfi_mpi_fail(int rc, const char *what);

#define MFI_MPI_TRY(call)                                              \
    do {                                                               \
        int mpi_rc_ = (call);                                          \
        if (mpi_rc_ != MPI_SUCCESS) return mfi_mpi_fail(mpi_rc_, #call); \
    } while (0)

#endif
