/*
 * bench/bench_ckpt.c - checkpoint save and load bandwidth against a plain
 * sequential write() and read() of the same bytes to the same directory.
 *
 *   mpiexec -n N bench/bench_ckpt [--mb 1024] [--reps 3] [--dir DIR]
 *                                 [--layouts S,B,F] [--cold]
 *
 * The model is a stack of Linear(4096, 4096) layers (64 MiB each) adding
 * up to --mb. Layouts: S = every tensor split S(0) over the ranks (each
 * rank writes its shard), B = replicated as in data parallelism (the
 * ranks share the writing), F = S with --fletcher32. Each repetition
 * times, after a barrier:
 *   save    mf_ckpt_save (slowest rank), then the file's fsync on rank 0
 *   load    mf_ckpt_load (slowest rank)
 *   write() rank 0 alone writes the same bytes in 64 MiB calls, then fsync
 *   read()  rank 0 reads them back
 * after two untimed warm-up rounds, checkpoint and plain calls taking turns
 * at going first, each after the file it replaces is deleted and a sync()
 * (see settle()). write() writes from a buffer as large
 * as the model, and read() reads into another, both mapped beforehand.
 * The table shows medians in GB/s (1e9 bytes/s) and save/write(),
 * load/read() ratios. "cache" is up to the return of the call (the page
 * cache absorbs the writes); "+fsync" adds the flush to the disk. With
 * --cold the page cache is dropped before each read (root only).
 */
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/bench_mpi.h"
#include "mpiflow.h"

#define WIDTH 4096
#define CALL_BYTES ((size_t)64 << 20)

/* Before a timed write: the file it replaces is deleted and nothing is
 * left dirty, so that neither the checkpoint nor write() pays for the
 * previous round (freeing a 1 GiB file's page cache takes about 0.5 s
 * on a VM whose freed pages go back to the host). */
static void settle(const char *path)
{
    if (mf_rank() == 0) {
        remove(path);
        sync();
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void drop_caches(bool cold)
{
    if (!cold) return;
    if (mf_rank() == 0) {
        sync();
        FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
        if (f) {
            fputs("3\n", f);
            fclose(f);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static double fsync_path(const char *path)
{
    double t0 = MPI_Wtime();
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return MPI_Wtime() - t0;
}

/* rank 0 writes `bytes` from buf (as large as the model) in CALL_BYTES
 * calls and closes the file; then, like the checkpoint, fsyncs it */
static void plain_write(const char *path, const char *buf, size_t bytes, double *t, double *tsync)
{
    double t0 = MPI_Wtime();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (size_t done = 0; fd >= 0 && done < bytes;) {
        size_t n = bytes - done < CALL_BYTES ? bytes - done : CALL_BYTES;
        ssize_t w = write(fd, buf + done, n);
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (fd >= 0) close(fd);
    *t = MPI_Wtime() - t0;
    *tsync = *t + fsync_path(path);
}

/* rank 0 reads them back into memory as large as the model (mapped
 * once, before the timings: page faults are not counted) */
static double plain_read(const char *path, char *buf, size_t bytes)
{
    double t0 = MPI_Wtime();
    int fd = open(path, O_RDONLY);
    for (size_t done = 0; fd >= 0 && done < bytes;) {
        size_t n = bytes - done < CALL_BYTES ? bytes - done : CALL_BYTES;
        ssize_t r = read(fd, buf + done, n);
        if (r <= 0) break;
        done += (size_t)r;
    }
    if (fd >= 0) close(fd);
    return MPI_Wtime() - t0;
}

static mf_module *model(int layers, char layout)
{
    mf_manual_seed(1);
    mf_module *m = mf_sequential_create();
    for (int i = 0; i < layers; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        mf_sequential_add(m, name, mf_linear_create(WIDTH, WIDTH, true));
    }
    mf_placement *p = mf_placement_world();
    if (mf_module_to_global(m, p, layout == 'B' ? "B" : "S(0)") != MF_OK) {
        fprintf(stderr, "bench_ckpt: %s\n", mf_last_error());
        mf_module_destroy(m);
        m = NULL;
    }
    mf_placement_destroy(p);
    return m;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: mpiexec -n N bench_ckpt [--mb MB] [--reps R] [--dir DIR] [--layouts S,B,F] [--cold]\n"
                 "  --mb MB          model size in MiB, in 64 MiB layers (default 1024)\n"
                 "  --reps R         repetitions; the table shows medians (default 3)\n"
                 "  --dir DIR        where the files go (default .)\n"
                 "  --layouts L      S: sharded S(0), B: replicated, F: S with Fletcher32 (default S,B)\n"
                 "  --cold           drop the page cache before each read (needs root)\n");
}

int main(int argc, char **argv)
{
    int mb = 1024, reps = 3;
    const char *dir = ".", *layouts = "S,B";
    bool cold = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--cold")) {
            cold = true;
        } else if (v && !strcmp(a, "--mb")) {
            mb = atoi(v), i++;
        } else if (v && !strcmp(a, "--reps")) {
            reps = atoi(v), i++;
        } else if (v && !strcmp(a, "--dir")) {
            dir = v, i++;
        } else if (v && !strcmp(a, "--layouts")) {
            layouts = v, i++;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (mb < 64 || reps < 1 || reps > 100) {
        fprintf(stderr, "bench_ckpt: --mb must be >= 64 and --reps 1..100\n");
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    int layers = mb / 64, n = mf_world_size();
    char path[4096], plain[4096];
    snprintf(path, sizeof path, "%s/bench_ckpt.h5", dir);
    snprintf(plain, sizeof plain, "%s/bench_ckpt.bin", dir);
    size_t bytes = (size_t)layers * (WIDTH * WIDTH + WIDTH) * sizeof(float);
    char *buf = NULL, *rbuf = NULL;
    if (mf_rank() == 0) {
        rbuf = calloc(1, bytes);
        if (rbuf) memset(rbuf, 1, bytes);
        buf = malloc(bytes);
        for (size_t i = 0; buf && i < bytes; i++) buf[i] = (char)(i * 2654435761u >> 13);
        printf("checkpoint of %d x Linear(%d, %d) = %.2f GiB on %d rank(s), %d repetitions, in %s%s\n", layers, WIDTH,
               WIDTH, (double)bytes / (1 << 30), n, reps, dir, cold ? " (cold reads)" : "");
        printf("%-6s %-7s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s\n", "ranks", "layout", "save", "write()", "ratio",
               "save+fs", "write+fs", "ratio", "load", "read()", "ratio");
        printf("%-6s %-7s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s\n", "", "", "GB/s", "GB/s", "", "GB/s", "GB/s", "",
               "GB/s", "GB/s", "");
    }
    int rc = 0;
    for (const char *l = layouts; *l && !rc; l++) {
        if (*l == ',') continue;
        mf_module *m = model(layers, *l);
        if (!m) {
            rc = 1;
            break;
        }
        mf_ckpt_opts opts = {.keep_last = 1, .fletcher32 = *l == 'F'};
        double *t = calloc(6 * (size_t)reps, sizeof *t);   /* save, save+fs, load, write, write+fs, read */
        for (int r = -2; r < reps && !rc; r++) {   /* r < 0: warm-up rounds, overwritten */
            int ri = r < 0 ? 0 : r;
            for (int half = 0; half < 2; half++) {   /* which goes first alternates */
                if ((half + r + 2) % 2 == 0) {
                    settle(path);
                    double t0 = MPI_Wtime();
                    rc |= mf_ckpt_save_ex(path, m, NULL, NULL, &opts) != MF_OK;
                    t[0 * reps + ri] = slowest(MPI_Wtime() - t0);
                    t[1 * reps + ri] = t[0 * reps + ri] + (mf_rank() == 0 ? fsync_path(path) : 0);
                    drop_caches(cold);
                    MPI_Barrier(MPI_COMM_WORLD);
                    t0 = MPI_Wtime();
                    rc |= mf_ckpt_load(path, m, NULL, NULL) != MF_OK;
                    t[2 * reps + ri] = slowest(MPI_Wtime() - t0);
                } else {
                    settle(plain);
                    if (mf_rank() == 0) plain_write(plain, buf, bytes, &t[3 * reps + ri], &t[4 * reps + ri]);
                    drop_caches(cold);
                    if (mf_rank() == 0) t[5 * reps + ri] = plain_read(plain, rbuf, bytes);
                    MPI_Barrier(MPI_COMM_WORLD);
                }
            }
        }
        if (rc) fprintf(stderr, "bench_ckpt: %s\n", mf_last_error());
        if (mf_rank() == 0 && !rc) {
            double g[6];
            for (int k = 0; k < 6; k++) g[k] = (double)bytes / median(t + k * reps, reps) / 1e9;
            printf("%-6d %-7s | %8.2f %8.2f %6.2f | %8.2f %8.2f %6.2f | %8.2f %8.2f %6.2f\n", n,
                   *l == 'S' ? "S(0)" : *l == 'B' ? "B" : "S(0)+f32", g[0], g[3], g[0] / g[3], g[1], g[4], g[1] / g[4],
                   g[2], g[5], g[2] / g[5]);
            fflush(stdout);
        }
        free(t);
        mf_module_destroy(m);
    }
    if (mf_rank() == 0) {
        remove(path);
        remove(plain);
    }
    free(buf);
    free(rbuf);
    mf_finalize();
    return rc;
}
