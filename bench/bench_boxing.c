/*
 * bench/bench_boxing.c - boxing against the bare MPI collective on the
 * same bytes: P->B (allreduce), S(0)->B (allgather), P->S(0)
 * (reduce-scatter) and S(0)->S(1) (all-to-all), 4 KiB to 64 MiB.
 *
 *   mpiexec -n N bench/bench_boxing [--reps R] [--max-mb M]
 *
 * Each repetition runs the bare call and mf_redistribute back to back
 * (alternating which goes first), each after a barrier; a time is the slowest rank's, and the table keeps the
 * median over the repetitions. bytes is the global tensor's size; busbw
 * follows nccl-tests (allreduce 2(n-1)/n, the others (n-1)/n).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/bench_mpi.h"
#include "mpiflow.h"

enum { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, NOPS };
static const char *names[NOPS] = {"allreduce", "allgather", "reduce-scatter", "all-to-all"};
static const char *from[NOPS] = {"P", "S(0)", "P", "S(0)"}, *to[NOPS] = {"B", "B", "S(0)", "S(1)"};

static double bare(int op, float *a, float *b, int count, int n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    switch (op) {
    case ALLREDUCE: MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case ALLGATHER: MPI_Allgather(a, count / n, MPI_FLOAT, b, count / n, MPI_FLOAT, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(a, b, count / n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    default: MPI_Alltoall(a, count / n / n, MPI_FLOAT, b, count / n / n, MPI_FLOAT, MPI_COMM_WORLD); break;
    }
    return slowest(MPI_Wtime() - t0);
}

static double boxed(mf_tensor *x, const mf_placement *p, const char *sbp)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    mf_tensor *y = mf_redistribute(x, p, sbp);
    double t = MPI_Wtime() - t0;
    if (!y) {
        fprintf(stderr, "bench_boxing: %s\n", mf_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    mf_tensor_destroy(y);
    return slowest(t);
}

int main(int argc, char **argv)
{
    int reps = 9;
    long max_mb = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-mb") && i + 1 < argc) max_mb = atol(argv[++i]);
        else {
            printf("usage: mpiexec -n N bench_boxing [--reps R] [--max-mb M]\n"
                   "Times boxing (mf_redistribute) against the bare MPI collective on the same bytes.\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    int n = mf_world_size(), me = mf_rank();
    mf_placement *p = mf_placement_world();
    mf_set_grad_enabled(false);
    if (me == 0)
        printf("%-15s %10s %12s %12s %9s %12s\n", "boxing", "bytes", "MPI us", "boxing us", "overhead", "busbw GB/s");
    double *tb = malloc((size_t)reps * sizeof *tb), *tx = malloc((size_t)reps * sizeof *tx);
    for (int op = 0; op < NOPS; op++) {
        for (long bytes = 4096; bytes <= max_mb << 20; bytes *= 4) {
            /* [rows, 256] with rows a multiple of n*n, so every piece is even */
            int64_t cols = 256, rows = bytes / 4 / cols;
            rows = (rows + (int64_t)n * n - 1) / ((int64_t)n * n) * n * n;
            int count = (int)(rows * cols);
            float *a = malloc((size_t)count * sizeof *a), *b = malloc((size_t)count * sizeof *b);
            /* real pages with data: calloc's untouched pages all map the
             * one zero page, which reads from cache and flatters MPI */
            for (int i = 0; a && b && i < count; i++) a[i] = b[i] = 1.0f;
            mf_tensor *full = mf_ones(MF_F32, 2, (const int64_t[]){rows, cols});
            mf_tensor *x = op == ALLREDUCE || op == REDUCE_SCATTER ? mf_to_global(full, p, "P")
                                                                   : mf_global_from_full(full, p, from[op]);
            if (!x || !a || !b) {
                fprintf(stderr, "bench_boxing: %s\n", mf_last_error());
                return 1;
            }
            for (int r = -1; r < reps; r++) {   /* one warm-up round; alternate which goes first */
                double t1, t2;
                if (r % 2) {
                    t1 = bare(op, a, b, count, n);
                    t2 = boxed(x, p, to[op]);
                } else {
                    t2 = boxed(x, p, to[op]);
                    t1 = bare(op, a, b, count, n);
                }
                if (r >= 0) {
                    tb[r] = t1;
                    tx[r] = t2;
                }
            }
            double mb = median(tb, reps), mx = median(tx, reps);
            double f = op == ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
            if (me == 0)
                printf("%-15s %10lld %12.1f %12.1f %8.1f%% %12.2f\n", names[op], (long long)count * 4, mb * 1e6,
                       mx * 1e6, 100 * (mx / mb - 1), mx > 0 ? f * count * 4 / mx / 1e9 : 0.0);
            fflush(stdout);
            mf_tensor_destroy(x);
            mf_tensor_destroy(full);
            free(a);
            free(b);
        }
    }
    free(tb);
    free(tx);
    mf_placement_destroy(p);
    mf_finalize();
    return 0;
}
