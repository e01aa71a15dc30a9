/*
 * collectives/gpu.c - whether the MPI library takes GPU buffers
 * (CUDA-aware MPI: Open MPI, MVAPICH2-GDR, Cray MPICH, MPICH built with
 * CUDA). It says so through MPIX_Query_cuda_support, an extension some
 * libraries lack: the symbol is weak, and an MPI without it is taken to
 * be unaware. MF_CUDA_AWARE=0/1 overrides the answer, for libraries
 * that support GPU buffers without saying so (or say so wrongly).
 */
#include <mpi.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "collectives/coll.h"

int MPIX_Query_cuda_support(void) __attribute__((weak));

bool mfi_coll_cuda_aware(void)
{
    static _Atomic int aware = -1;
    if (aware < 0) {
        const char *e = getenv("MF_CUDA_AWARE");
        if (e && *e) aware = strcmp(e, "0") != 0;
        else aware = MPIX_Query_cuda_support ? MPIX_Query_cuda_support() != 0 : 0;
    }
    return aware;
}
