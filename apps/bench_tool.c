/*
 * apps/bench_tool.c - mpiflow-bench: collective benchmarks, every
 * algorithm side by side with the MPI library's own call in one run.
 *
 *   mpiexec -n N mpiflow-bench allreduce|reduce_scatter|allgather
 *                              [--min-kb 4] [--max-mb 256] [--reps R] [--rounds K]
 *   mpiexec -n N mpiflow-bench tune [--out FILE] [...]
 *
 * For each size (x4 from --min-kb to --max-mb; the whole buffer, n
 * pieces for reduce-scatter and allgather) and algorithm: the median over
 * the repetitions (rounds of every algorithm in a shuffled order, each call after
 * a barrier) of the mean time over ranks, the best of K such rounds,
 * algbw = bytes / time and busbw as nccl-tests defines it (allreduce:
 * algbw * 2(n-1)/n; reduce-scatter and allgather: algbw * (n-1)/n). The
 * last columns are what the selection (auto) ran, auto's own time over
 * the best algorithm's, the time of the algorithm auto ran (its column)
 * over the best's, and the best algorithm and its speed-up over MPI's.
 *
 * tune measures the three collectives at every power of two from
 * --min-kb to --max-mb and writes the fastest algorithm per size range as
 * a tuning file for this rank count and node layout (collectives/
 * tuning.c), keeping the file's rules for other layouts; MF_COLL_TUNING
 * then points 'auto' at it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: mpiexec -n N mpiflow-bench allreduce|reduce_scatter|allgather [--min-kb K] [--max-mb M]\n"
                 "                    [--reps R] [--rounds K]\n"
                 "       mpiexec -n N mpiflow-bench tune [--out FILE] [--verify] [--min-kb K] [--max-mb M] [--rounds K]\n"
                 "       mpiexec -n N mpiflow-bench calibrate [--out FILE] [--quick]\n"
                 "       mpiexec -n N mpiflow-bench topo\n"
                 "Times each collective algorithm against the MPI library's own call, in one run;\n"
                 "topo prints what each rank sees: its node and local rank (MF_RANKS_PER_NODE=k\n"
                 "emulates nodes of k ranks), the machine as hwloc sees it, and its binding.\n"
                 "  allreduce       sum of float32 buffers over all ranks (mpi, ring, rhd, hier, auto)\n"
                 "  reduce_scatter  each rank gets the sum of its piece (mpi, ring, hier, auto)\n"
                 "  allgather       each rank gets every rank's piece (mpi, ring, hier, auto)\n"
                 "  tune            measure all three at every power of two and write the fastest\n"
                 "                  algorithm per size for this rank count and node layout to --out\n"
                 "                  (default mpiflow-tuning.txt; rules for other layouts in it are\n"
                 "                  kept); then MF_COLL_TUNING=FILE makes 'auto' follow it\n"
                 "  calibrate       measure what mpiflow-plan predicts with (doc/planning.md): GEMM,\n"
                 "                  convolution and attention FLOP/s, elementwise bandwidth, a kernel\n"
                 "                  call's cost and the collectives' times, every rank at once; write\n"
                 "                  them to --out (default mpiflow-calibration.txt); --quick: fewer sizes\n"
                 "  --verify        (tune) then load the file just written and print the three\n"
                 "                  tables from 64 KiB, in the same run: what 'auto' gains here\n"
                 "  --min-kb K      smallest message in KiB (default 4)\n"
                 "  --max-mb M      largest message in MiB (default 256; tune: 64)\n"
                 "  --reps R        repetitions per size; the median is kept (default: by size, 5..200,\n"
                 "                  fewer when a call is slow: about 0.3 s per algorithm)\n"
                 "  --rounds K      measure K times and keep each algorithm's best median (default 1;\n"
                 "                  tune: 3), for a noisy machine\n"
                 "  --help          this text\n"
                 "Columns: size of the whole buffer in bytes; per algorithm the time in microseconds and\n"
                 "busbw in GB/s (nccl-tests: allreduce algbw * 2(n-1)/n, the others algbw * (n-1)/n);\n"
                 "then the algorithm auto ran, auto's own time over the best one's, that algorithm's\n"
                 "column over the best one's (pick/best), and the best algorithm and its speed-up\n"
                 "over mpi.\n"
                 "MF_RANKS_PER_NODE=k emulates nodes of k ranks for the hierarchical algorithms;\n"
                 "MF_COLL_TUNING=FILE makes auto follow a tuning file (doc/collectives.md).\n");
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

static const char *const op_names[] = {"allreduce", "reduce_scatter", "allgather"};

/* med[a]: the median time of algos[a] on count floats, best of `rounds`
 * rounds; false on failure */
static bool measure(int op, int64_t count, int reps, int rounds, const mf_coll_algo *algos, int na, double *med)
{
    int n = mf_world_size();
    int64_t bytes = count * 4;
    float *buf = malloc((size_t)count * sizeof *buf + 4), *out = malloc((size_t)(count / n) * sizeof *out + 4);
    int r = reps ? reps : bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 20 : 5;
    double *t = malloc(5 * (size_t)200 * sizeof *t + 5 * (size_t)r * sizeof *t);
    bool ok = buf && out && t;
    for (int64_t i = 0; ok && i < count; i++) buf[i] = 1.0f;
    for (int64_t i = 0; ok && i < count / n; i++) out[i] = 1.0f;
    for (int a = 0; a < na; a++) med[a] = 1e30;
    double slowest = 0;
    for (int a = 0; ok && a < na; a++) {   /* warm-up */
        double w = one(op, buf, out, count, algos[a]);
        ok = w >= 0;
        if (w > slowest) slowest = w;
    }
    /* by default at most about 0.3 s per algorithm and round, at least 5
     * repetitions: oversubscribed ranks take milliseconds a call */
    if (!reps && slowest > 0 && r * slowest > 0.3) r = 0.3 / slowest > 5 ? (int)(0.3 / slowest) : 5;
    unsigned rng = 12345;   /* the same order on every rank */
    for (int round = 0; ok && round < rounds; round++) {
        for (int k = 0; k < r && ok; k++) {
            int order[5] = {0, 1, 2, 3, 4};
            for (int j = na - 1; j > 0; j--) {   /* each round in a fresh order, so no algorithm
                                                   always runs after the same one (caches) */
                rng = rng * 1103515245u + 12345u;
                int x = (int)((rng >> 16) % (unsigned)(j + 1)), tmp = order[j];
                order[j] = order[x];
                order[x] = tmp;
            }
            for (int j = 0; j < na && ok; j++) {
                int a = order[j];
                t[a * r + k] = one(op, buf, out, count, algos[a]);
                ok = t[a * r + k] >= 0;
            }
        }
        for (int a = 0; a < na && ok; a++) {
            qsort(t + a * r, (size_t)r, sizeof *t, cmp_d);
            if (t[a * r + r / 2] < med[a]) med[a] = t[a * r + r / 2];
        }
    }
    free(t);
    free(buf);
    free(out);
    return ok;
}

static int64_t count_of(double kb) { return (int64_t)(kb * 1024) / 4 / mf_world_size() * mf_world_size(); }

static int table(int op, double min_kb, double max_mb, int reps, int rounds, const char *tuning)
{
    int n = mf_world_size();
    const mf_coll_algo all_algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_RHD, MF_COLL_HIER, MF_COLL_AUTO};
    const mf_coll_algo piece_algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_HIER, MF_COLL_AUTO};
    const mf_coll_algo *algos = op == ALLREDUCE ? all_algos : piece_algos;
    const int na = op == ALLREDUCE ? 5 : 4;
    double factor = n == 1 ? 1.0 : op == ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    if (mf_rank() == 0) {
        printf("%s, float32, %d rank(s) on %d node(s)%s, best of %d round(s); time us, busbw GB/s (algbw * %.2f)%s%s\n",
               op_names[op], n, mf_node_count(), getenv("MF_RANKS_PER_NODE") ? " (emulated)" : "", rounds, factor,
               tuning && *tuning ? "; auto from " : "", tuning && *tuning ? tuning : "");
        printf("%12s", "bytes");
        for (int a = 0; a < na; a++) printf(" %10s %8s", mf_coll_algo_name(algos[a]), "busbw");
        printf(" %6s %9s %9s %6s %6s\n", "auto=", "auto/best", "pick/best", "best", "x mpi");
    }
    for (double kb = min_kb; kb <= max_mb * 1024; kb *= 4) {
        int64_t count = count_of(kb), bytes = count * 4;
        if (count == 0) continue;
        double med[5];
        mf_coll_algo chosen = MF_COLL_MPI;
        if (mf_coll_choice(op_names[op], bytes, &chosen) != MF_OK || !measure(op, count, reps, rounds, algos, na, med))
            return 1;
        if (mf_rank() == 0) {
            int best = 0;
            printf("%12lld", (long long)bytes);
            for (int a = 0; a < na; a++) {
                printf(" %10.1f %8.3f", med[a] * 1e6, (double)bytes / med[a] / 1e9 * factor);
                if (a < na - 1 && med[a] < med[best]) best = a;
            }
            int pick = best;   /* the column of the algorithm auto ran */
            for (int a = 0; a < na - 1; a++)
                if (algos[a] == chosen) pick = a;
            printf(" %6s %9.2f %9.2f %6s %6.2f\n", mf_coll_algo_name(chosen), med[na - 1] / med[best],
                   med[pick] / med[best], mf_coll_algo_name(algos[best]), med[0] / med[best]);
            fflush(stdout);
        }
    }
    return 0;
}

/* the existing file's lines for other rank counts or node classes */
static void keep_others(FILE *out, const char *path, int n, int cls)
{
    FILE *f = fopen(path, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char op[32];
        int ranks, nodes;
        const char *m = strstr(line, " node class ");
        if (!strncmp(line, "# measured by ", 14) && m && sscanf(strstr(line, " on ") ? strstr(line, " on ") : "",
                                                                " on %d ranks", &ranks) == 1 &&
            sscanf(m, " node class %d", &nodes) == 1) {   /* the heading of another layout's rules */
            if (ranks != n || nodes != cls) fputs(line, out);
            continue;
        }
        if (line[0] == '#' || sscanf(line, "%31s %d %d", op, &ranks, &nodes) != 3) continue;
        if (ranks != n || nodes != cls) fputs(line, out);
    }
    if (f) fclose(f);
}

static int tune(const char *path, double min_kb, double max_mb, int reps, int rounds, bool verify)
{
    int n = mf_world_size(), cls = 1;
    if (n < 2) {
        if (mf_rank() == 0) fprintf(stderr, "mpiflow-bench: error: tune needs 2 ranks or more\n");
        return 2;
    }
    if (mf_coll_node_class(&cls) != MF_OK) return 1;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = mf_rank() == 0 ? fopen(tmp, "w") : NULL;
    int bad = mf_rank() == 0 && !out;
    mf_allreduce(&bad, 1, MF_I32, MF_COLL_MPI);
    if (bad) {
        if (mf_rank() == 0) fprintf(stderr, "mpiflow-bench: error: tune: cannot write %s\n", tmp);
        return 1;
    }
    if (out) {
        fprintf(out, "# mpiflow collective tuning (doc/collectives.md): op ranks nodes from_bytes algorithm\n"
                     "# nodes: 1 one node, 2 several nodes with several ranks each, 3 other\n");
        keep_others(out, path, n, cls);
        fprintf(out, "# measured by mpiflow-bench tune on %d ranks, %d node(s)%s, node class %d, best of %d round(s)\n", n,
                mf_node_count(), getenv("MF_RANKS_PER_NODE") ? " (emulated)" : "", cls, rounds);
    }
    enum { MAXS = 64 };
    for (int op = 0; op < 3; op++) {
        const mf_coll_algo all[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_RHD, MF_COLL_HIER};
        const mf_coll_algo pieces[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_HIER};
        const mf_coll_algo *algos = op == ALLREDUCE ? all : pieces;
        int na = op == ALLREDUCE ? 4 : 3, ns = 0;
        double med[MAXS][5], low[MAXS];
        long long size[MAXS];
        for (double kb = min_kb; kb <= max_mb * 1024 && ns < MAXS; kb *= 2) {
            int64_t count = count_of(kb);
            if (count == 0) continue;
            if (!measure(op, count, reps, rounds, algos, na, med[ns])) {
                if (out) fclose(out);
                return 1;
            }
            size[ns] = (long long)count * 4;
            low[ns] = med[ns][0];
            for (int a = 1; a < na; a++)
                if (med[ns][a] < low[ns]) low[ns] = med[ns][a];
            ns++;
        }
        /* Each size takes, of the algorithms within 5 % of the best
         * there, the one whose worst time over the best at this size and
         * its two neighbours is least: when two are close, one noisy
         * measurement does not pick the one that is slow next door. A
         * range goes on while its algorithm stays among those and scores
         * within 3 % of the choice, so noise does not cut it into
         * alternating pieces. */
        int last = -1;
        for (int i = 0; i < ns; i++) {
            double score[5];
            int best = -1;
            for (int a = 0; a < na; a++) {
                score[a] = 0;
                for (int j = i > 0 ? i - 1 : 0; j <= i + 1 && j < ns; j++)
                    if (med[j][a] / low[j] > score[a]) score[a] = med[j][a] / low[j];
                if (med[i][a] <= 1.05 * low[i] && (best < 0 || score[a] < score[best])) best = a;
            }
            if (last >= 0 && med[i][last] <= 1.05 * low[i] && score[last] <= 1.03 * score[best]) best = last;
            if (mf_rank() == 0) {
                printf("%-15s %12lld bytes:", op_names[op], size[i]);
                for (int a = 0; a < na; a++) printf(" %s %.1f us", mf_coll_algo_name(algos[a]), med[i][a] * 1e6);
                printf(" -> %s (worst %.2f of the best nearby)\n", mf_coll_algo_name(algos[best]), score[best]);
                fflush(stdout);
            }
            if (out && best != last)   /* a new range from halfway between this size and the last */
                fprintf(out, "%-15s %d %d %lld %s\n", op_names[op], n, cls, i == 0 ? 0LL : (size[i - 1] + size[i]) / 2,
                        mf_coll_algo_name(algos[best]));
            last = best;
        }
    }
    int fail = 0;
    if (out) fail = fclose(out) != 0 || rename(tmp, path) != 0;
    mf_allreduce(&fail, 1, MF_I32, MF_COLL_MPI);
    if (mf_rank() == 0)
        fprintf(fail ? stderr : stdout, fail ? "mpiflow-bench: error: tune: cannot write %s\n" : "wrote %s\n", path);
    if (fail || !verify) return fail;
    if (mf_agree(mf_coll_tuning_load(path)) != MF_OK) return 1;
    for (int op = 0; op < 3; op++) {
        if (mf_rank() == 0) printf("\n");
        if (table(op, min_kb > 64 ? min_kb : 64, max_mb, reps, rounds, path)) return 1;
    }
    return 0;
}

/* calibrate: the rates mpiflow-plan predicts with (doc/planning.md) */
static int calibrate(int argc, char **argv)
{
    const char *path = "mpiflow-calibration.txt";
    bool quick = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "mpiflow-bench: error: calibrate: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "mpiflow-bench: error: %s\n", mf_last_error());
        return 1;
    }
    double t0 = mf_time();
    mf_calibration *c = mf_calibration_measure(quick);
    int rc = 0;
    if (!c) {
        fprintf(stderr, "mpiflow-bench: error: calibrate: %s\n", mf_last_error());
        rc = 1;
    } else if (mf_rank() == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        bool ok = f && mf_calibration_write(c, f) == MF_OK;
        if (f && fclose(f) != 0) ok = false;
        if (ok && rename(tmp, path) != 0) ok = false;
        if (!ok) {
            fprintf(stderr, "mpiflow-bench: error: calibrate: cannot write %s\n", path);
            remove(tmp);
            rc = 1;
        } else {
            printf("calibrate: %s\n", mf_calibration_source(c));
            static const struct { mf_prof_class c; double w; const char *what; } show[] = {
                {MF_PROF_GEMM, 1e6, "GEMM at 1 MFLOP a call"}, {MF_PROF_GEMM, 1e9, "GEMM at 1 GFLOP a call"},
                {MF_PROF_CONV, 1e8, "convolution at 100 MFLOP a call"},
                {MF_PROF_ATTENTION, 1e8, "attention at 100 MFLOP a call"}};
            for (size_t i = 0; i < sizeof show / sizeof *show; i++)
                printf("  %-32s %8.1f GFLOP/s\n", show[i].what, mf_calibration_rate(c, show[i].c, show[i].w) / 1e9);
            printf("  %-32s %8.1f GB/s\n", "elementwise at 4 MiB a call", mf_calibration_rate(c, MF_PROF_ELEMENTWISE, 4 << 20) / 1e9);
            printf("  %-32s %8.2f us\n", "a kernel call's fixed cost", mf_calibration_overhead(c) * 1e6);
            if (mf_world_size() > 1)
                printf("  %-32s %8.1f us\n", "allreduce of 1 MiB, all ranks",
                       mf_calibration_comm_time(c, MF_COMM_ALLREDUCE, 1 << 20, mf_world_size(), mf_node_count()) * 1e6);
            if (mf_world_size() > 1)
                printf("  %-32s %8.0f %%\n", "non-blocking comm. compute hides", mf_calibration_overlap(c) * 100);
            printf("wrote %s in %.1f s; mpiflow-plan --calibration %s predicts with it\n", path, mf_time() - t0, path);
        }
    }
    mf_calibration_destroy(c);
    rc = mf_agree(rc ? MF_ERR_IO : MF_OK) == MF_OK ? 0 : 1;
    mf_finalize();
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "topo")) return topo(argc, argv);
    if (!strcmp(argv[1], "calibrate")) return calibrate(argc, argv);
    bool tuning = !strcmp(argv[1], "tune"), verify = false;
    int op = !strcmp(argv[1], "allreduce") ? ALLREDUCE : !strcmp(argv[1], "reduce_scatter") ? REDUCE_SCATTER
             : !strcmp(argv[1], "allgather") ? ALLGATHER : -1;
    if (op < 0 && !tuning) {
        fprintf(stderr, "mpiflow-bench: error: unknown benchmark '%s' (see --help)\n", argv[1]);
        return 2;
    }
    double min_kb = 4, max_mb = tuning ? 64 : 256;
    int reps = 0, rounds = tuning ? 3 : 1;
    const char *path = "mpiflow-tuning.txt";
    for (int i = 2; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--min-kb") && v) min_kb = atof(v), i++;
        else if (!strcmp(argv[i], "--max-mb") && v) max_mb = atof(v), i++;
        else if (!strcmp(argv[i], "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(argv[i], "--rounds") && v) rounds = atoi(v), i++;
        else if (!strcmp(argv[i], "--out") && v && tuning) path = v, i++;
        else if (!strcmp(argv[i], "--verify") && tuning) verify = true;
        else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "mpiflow-bench: error: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!(min_kb > 0) || !(max_mb * 1024 >= min_kb) || reps < 0 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "mpiflow-bench: error: need 0 < --min-kb <= --max-mb * 1024, --reps >= 0 and --rounds 1..100\n");
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "mpiflow-bench: error: %s\n", mf_last_error());
        return 1;
    }
    int rc = tuning ? tune(path, min_kb, max_mb, reps, rounds, verify)
                    : table(op, min_kb, max_mb, reps, rounds, getenv("MF_COLL_TUNING"));
    if (rc == 1) fprintf(stderr, "mpiflow-bench: error: %s\n", mf_last_error());
    mf_finalize();
    return rc;
}
