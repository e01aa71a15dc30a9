/*
 * bench/bench_mpi.h - what the MPI benchmarks share: the median of the
 * repetitions and the slowest rank's time.
 */
#ifndef MF_BENCH_MPI_H
#define MF_BENCH_MPI_H

#include <mpi.h>
#include <stdlib.h>

static int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* sorts v */
static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return v[n / 2];
}

static inline double slowest(double t)
{
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

#endif
