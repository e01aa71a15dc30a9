/*
 * apps/bench_tool.c - mpiflow-bench: collective benchmarks, every
 * algorithm side by side with the MPI library's own call in one run.
 *
 *   mpiexec -n N mpiflow-bench allreduce [--min-kb 4] [--max-mb 256] [--reps R]
 *
 * For each size (x4 from --min-kb to --max-mb) and algorithm: the median
 * over the repetitions (rounds of every algorithm in turn, each call after
 * a barrier) of the mean time over ranks,
 * algbw = bytes / time and busbw as nccl-tests defines it (allreduce:
 * algbw * 2(n-1)/n). The last column is the best algorithm's busbw over
 * MPI's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: mpiexec -n N mpiflow-bench allreduce [--min-kb K] [--max-mb M] [--reps R]\n"
                 "       mpiexec -n N mpiflow-bench topo\n"
                 "Times each collective algorithm against the MPI library's own call, in one run;\n"
                 "topo prints what each rank sees: its node and local rank (MF_RANKS_PER_NODE=k\n"
                 "emulates nodes of k ranks), the machine as hwloc sees it, and its binding.\n"
                 "  allreduce       sum of float32 buffers over all ranks (mpi, ring, rhd)\n"
                 "  --min-kb K      smallest message in KiB (default 4)\n"
                 "  --max-mb M      largest message in MiB (default 256)\n"
                 "  --reps R        repetitions per size; the median is shown (default: by size, 5..200)\n"
                 "  --help          this text\n"
                 "Columns: time in microseconds, algbw and busbw in GB/s (busbw = algbw * 2(n-1)/n).\n");
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* one allreduce of buf after a barrier: the mean over ranks of its time
 * (ranks leave a collective within microseconds of each other); < 0 on
 * failure */
static double one(float *buf, int64_t count, mf_coll_algo a)
{
    double t[1] = {0};
    mf_allreduce(t, 1, MF_F64, MF_COLL_MPI);   /* a barrier */
    double t0 = mf_time();
    mf_status st = mf_allreduce(buf, count, MF_F32, a);
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
    if (strcmp(argv[1], "allreduce")) {
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
    const mf_coll_algo algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_RHD};
    const int na = 3;
    double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    if (mf_rank() == 0) {
        printf("allreduce, float32, %d rank(s); time us, busbw GB/s (algbw * %.2f)\n", n, factor);
        printf("%12s", "bytes");
        for (int a = 0; a < na; a++) printf(" %10s %8s", mf_coll_algo_name(algos[a]), "busbw");
        printf(" %8s %6s\n", "best", "x mpi");
    }
    int rc = 0;
    for (double kb = min_kb; kb <= max_mb * 1024 && !rc; kb *= 4) {
        int64_t bytes = (int64_t)(kb * 1024), count = bytes / 4;
        float *buf = malloc((size_t)count * sizeof *buf + 4);
        if (!buf) {
            rc = 1;
            break;
        }
        for (int64_t i = 0; i < count; i++) buf[i] = 1.0f;
        int r = reps ? reps : bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 20 : 5;
        double med[3], *t = malloc(3 * (size_t)r * sizeof *t);
        for (int a = 0; a < na; a++) one(buf, count, algos[a]);   /* warm-up */
        for (int k = 0; k < r && !rc; k++)
            for (int j = 0; j < na && !rc; j++) {   /* each round in another order */
                int a = (j + k) % na;
                t[a * r + k] = one(buf, count, algos[a]);
                if (t[a * r + k] < 0) rc = 1;
            }
        for (int a = 0; a < na && !rc; a++) {
            qsort(t + a * r, (size_t)r, sizeof *t, cmp_d);
            med[a] = t[a * r + r / 2];
        }
        free(t);
        free(buf);
        if (mf_rank() == 0 && !rc) {
            int best = 0;
            printf("%12lld", (long long)bytes);
            for (int a = 0; a < na; a++) {
                printf(" %10.1f %8.3f", med[a] * 1e6, (double)bytes / med[a] / 1e9 * factor);
                if (med[a] < med[best]) best = a;
            }
            printf(" %8s %6.2f\n", mf_coll_algo_name(algos[best]), med[0] / med[best]);
            fflush(stdout);
        }
    }
    if (rc) fprintf(stderr, "mpiflow-bench: error: %s\n", mf_last_error());
    mf_finalize();
    return rc;
}
