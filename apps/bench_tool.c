/*
 * apps/bench_tool.c - mpiflow-bench: collective benchmarks, every
 * algorithm side by side with the MPI library's own call in one run.
 *
 *   mpiexec -n N mpiflow-bench allreduce|reduce_scatter|allgather
 *                              [--min-kb 4] [--max-mb 256] [--reps R]
 *
 * For each size (x4 from --min-kb to --max-mb; the whole buffer, n
 * pieces for reduce-scatter and allgather) and algorithm: the median over
 * the repetitions (rounds of every algorithm in a shuffled order, each call after
 * a barrier) of the mean time over ranks, algbw = bytes / time and busbw
 * as nccl-tests defines it (allreduce: algbw * 2(n-1)/n; reduce-scatter
 * and allgather: algbw * (n-1)/n). The last columns are what the
 * selection (auto) picked and its busbw over MPI's, then the best
 * algorithm's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: mpiexec -n N mpiflow-bench allreduce|reduce_scatter|allgather [--min-kb K] [--max-mb M]\n"
                 "                    [--reps R]\n"
                 "       mpiexec -n N mpiflow-bench topo\n"
                 "Times each collective algorithm against the MPI library's own call, in one run;\n"
                 "topo prints what each rank sees: its node and local rank (MF_RANKS_PER_NODE=k\n"
                 "emulates nodes of k ranks), the machine as hwloc sees it, and its binding.\n"
                 "  allreduce       sum of float32 buffers over all ranks (mpi, ring, rhd, hier, auto)\n"
                 "  reduce_scatter  each rank gets the sum of its piece (mpi, ring, hier, auto)\n"
                 "  allgather       each rank gets every rank's piece (mpi, ring, hier, auto)\n"
                 "  --min-kb K      smallest message in KiB (default 4)\n"
                 "  --max-mb M      largest message in MiB (default 256)\n"
                 "  --reps R        repetitions per size; the median is shown (default: by size, 5..200)\n"
                 "  --help          this text\n"
                 "Columns: size of the whole buffer in bytes; per algorithm the time in microseconds and\n"
                 "busbw in GB/s (nccl-tests: allreduce algbw * 2(n-1)/n, the others algbw * (n-1)/n);\n"
                 "then auto's busbw over mpi's, and the best algorithm and its busbw over mpi's.\n"
                 "MF_RANKS_PER_NODE=k emulates nodes of k ranks for the hierarchical algorithms.\n");
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { ALLREDUCE, REDUCE_SCATTER, ALLGATHER };

/* one call on buf (count elements in all) after a barrier: the mean over
 * ranks of its time (ranks leave a collective within microseconds of
 * each other); < 0 on failure */
static double one(int op, float *buf, float *out, int64_t count, mf_coll_algo a)
{
    double t[1] = {0};
    int64_t piece = count / mf_world_size();
    mf_allreduce(t, 1, MF_F64, MF_COLL_MPI);   /* a barrier */
    double t0 = mf_time();
    mf_status st = op == ALLREDUCE        ? mf_allreduce(buf, count, MF_F32, a)
                   : op == REDUCE_SCATTER ? mf_reduce_scatter(buf, out, piece, MF_F32, a)
                                          : mf_allgather(out, buf, piece, MF_F32, a);
    t[0] = mf_time() - t0;
    if (mf_agree(st) != MF_OK) return -1;
    if (mf_allreduce(t, 1, MF_F64, MF_COLL_MPI) != MF_OK) return -1;
    return t[0] / mf_world_size();
}

/* every rank's topology line, in rank order */
static int topo(int argc, char **argv)
{
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "mpiflow-bench: error: %s\n", mf_last_error());
        return 1;
    }
    char line[1024];
    mf_topology_str(line, sizeof line);
    for (int r = 0; r < mf_world_size(); r++) {
        if (r == mf_rank()) {
            printf("%s\n", line);
            fflush(stdout);
        }
        double d = 0;
        mf_allreduce(&d, 1, MF_F64, MF_COLL_MPI);   /* a barrier */
    }
    mf_finalize();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "topo")) return topo(argc, argv);
    int op = !strcmp(argv[1], "allreduce") ? ALLREDUCE : !strcmp(argv[1], "reduce_scatter") ? REDUCE_SCATTER
             : !strcmp(argv[1], "allgather") ? ALLGATHER : -1;
    if (op < 0) {
        fprintf(stderr, "mpiflow-bench: error: unknown benchmark '%s' (see --help)\n", argv[1]);
        return 2;
    }
    double min_kb = 4, max_mb = 256;
    int reps = 0;
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--min-kb") && v) min_kb = atof(v), i++;
        else if (!strcmp(argv[i], "--max-mb") && v) max_mb = atof(v), i++;
        else if (!strcmp(argv[i], "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "mpiflow-bench: error: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!(min_kb > 0) || !(max_mb * 1024 >= min_kb) || reps < 0) {
        fprintf(stderr, "mpiflow-bench: error: need 0 < --min-kb <= --max-mb * 1024 and --reps >= 0\n");
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "mpiflow-bench: error: %s\n", mf_last_error());
        return 1;
    }
    int n = mf_world_size();
    const mf_coll_algo all_algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_RHD, MF_COLL_HIER, MF_COLL_AUTO};
    const mf_coll_algo piece_algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_HIER, MF_COLL_AUTO};
    const mf_coll_algo *algos = op == ALLREDUCE ? all_algos : piece_algos;
    const int na = op == ALLREDUCE ? 5 : 4;
    double factor = n == 1 ? 1.0 : op == ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    if (mf_rank() == 0) {
        printf("%s, float32, %d rank(s) on %d node(s)%s; time us, busbw GB/s (algbw * %.2f)\n", argv[1], n,
               mf_node_count(), getenv("MF_RANKS_PER_NODE") ? " (emulated)" : "", factor);
        printf("%12s", "bytes");
        for (int a = 0; a < na; a++) printf(" %10s %8s", mf_coll_algo_name(algos[a]), "busbw");
        printf(" %6s %6s %6s\n", "auto/m", "best", "x mpi");
    }
    int rc = 0;
    for (double kb = min_kb; kb <= max_mb * 1024 && !rc; kb *= 4) {
        int64_t count = (int64_t)(kb * 1024) / 4 / n * n, bytes = count * 4;
        if (count == 0) continue;
        float *buf = malloc((size_t)count * sizeof *buf + 4), *out = malloc((size_t)(count / n) * sizeof *out + 4);
        if (!buf || !out) {
            free(buf);
            free(out);
            rc = 1;
            break;
        }
        for (int64_t i = 0; i < count; i++) buf[i] = 1.0f;
        for (int64_t i = 0; i < count / n; i++) out[i] = 1.0f;
        int r = reps ? reps : bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 20 : 5;
        double med[5], *t = malloc(5 * (size_t)r * sizeof *t);
        for (int a = 0; a < na; a++) one(op, buf, out, count, algos[a]);   /* warm-up */
        unsigned rng = 12345;   /* the same order on every rank */
        for (int k = 0; k < r && !rc; k++) {
            int order[5] = {0, 1, 2, 3, 4};
            for (int j = na - 1; j > 0; j--) {   /* each round in a fresh order, so no algorithm
                                                   always runs after the same one (caches) */
                rng = rng * 1103515245u + 12345u;
                int x = (int)((rng >> 16) % (unsigned)(j + 1)), tmp = order[j];
                order[j] = order[x];
                order[x] = tmp;
            }
            for (int j = 0; j < na && !rc; j++) {
                int a = order[j];
                t[a * r + k] = one(op, buf, out, count, algos[a]);
                if (t[a * r + k] < 0) rc = 1;
            }
        }
        for (int a = 0; a < na && !rc; a++) {
            qsort(t + a * r, (size_t)r, sizeof *t, cmp_d);
            med[a] = t[a * r + r / 2];
        }
        free(t);
        free(buf);
        free(out);
        if (mf_rank() == 0 && !rc) {
            int best = 0;
            printf("%12lld", (long long)bytes);
            for (int a = 0; a < na; a++) {
                printf(" %10.1f %8.3f", med[a] * 1e6, (double)bytes / med[a] / 1e9 * factor);
                if (a < na - 1 && med[a] < med[best]) best = a;
            }
            printf(" %6.2f %6s %6.2f\n", med[0] / med[na - 1], mf_coll_algo_name(algos[best]), med[0] / med[best]);
            fflush(stdout);
        }
    }
    if (rc) fprintf(stderr, "mpiflow-bench: error: %s\n", mf_last_error());
    mf_finalize();
    return rc;
}
