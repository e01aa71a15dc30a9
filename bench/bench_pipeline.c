/*
 * bench/bench_pipeline.c - the pipeline's bubble and activation memory.
 *
 *   mpiexec -n P bench/bench_pipeline [--width W] [--layers L] [--batch B] [--steps S] [--micro 1,2,4,8,16]
 *
 * A chain of P * L equal blocks (Linear W x W, ReLU) cut into P stages of
 * L blocks, one rank each, so every stage does the same work. For each
 * schedule and micro-batch count M, the median step time, samples/s, the
 * measured bubble (the share of a step each stage spends outside its own
 * forward and backward compute, the mean over stages) next to the
 * theoretical (P - 1) / (M + P - 1), and stage 0's peak tensor memory
 * above the step's start (GPipe holds all M micro-batches' activations,
 * 1F1B at most P). The first row is the baseline: the whole model on one
 * rank, no pipeline, the same batch; "eff" is its time over P times the
 * pipeline's (1.0: a perfect P-fold speed-up).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static mf_module *chain(int blocks, int64_t w)
{
    mf_module *m = mf_sequential_create();
    for (int i = 0; m && i < blocks; i++) {
        if (mf_sequential_add(m, NULL, mf_linear_create(w, w, true)) != MF_OK ||
            mf_sequential_add(m, NULL, mf_relu_create()) != MF_OK) {
            mf_module_destroy(m);
            return NULL;
        }
    }
    if (m && mf_module_reset_parameters(m, 1) != MF_OK) {
        mf_module_destroy(m);
        return NULL;
    }
    return m;
}

static void drop_grads(mf_module *m)
{
    mf_tensor_list *l = mf_module_parameters(m);
    for (int i = 0; l && i < l->n; i++) mf_tensor_set_grad(l->items[i].tensor, NULL);
    mf_tensor_list_destroy(l);
}

/* the baseline on rank 0: forward and backward of the whole batch */
static double one_rank(int blocks, int64_t w, int64_t batch, int steps)
{
    mf_module *m = chain(blocks, w);
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(batch, w)), *y = mf_zeros(MF_I64, MF_DIMS(batch));
    double *t = calloc((size_t)steps, sizeof *t), med = -1;
    for (int s = -1; m && x && y && t && s < steps; s++) {
        drop_grads(m);
        double t0 = mf_time();
        mf_tensor *out = mf_module_forward(m, x), *loss = out ? mf_cross_entropy(out, y, MF_REDUCTION_MEAN) : NULL;
        mf_status st = loss ? mf_backward(loss) : mf_last_status();
        if (s >= 0) t[s] = mf_time() - t0;
        mf_tensor_destroy(out);
        mf_tensor_destroy(loss);
        if (st != MF_OK) break;
        if (s == steps - 1) {
            qsort(t, (size_t)steps, sizeof *t, cmp_d);
            med = t[steps / 2];
        }
    }
    free(t);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_module_destroy(m);
    return med;
}

typedef struct result {
    double step_s, bubble;
    int64_t peak;
} result;

static mf_status run(int P, int L, int64_t w, int64_t batch, int M, mf_pipeline_schedule sc, int steps, result *r)
{
    int first[MF_MAX_STAGES + 1];
    mf_placement *pl[MF_MAX_STAGES];
    const char *ins[MF_MAX_STAGES];
    mf_module *m = chain(P * L, w);
    if (!m) return mf_last_status();
    mf_status st = MF_OK;
    for (int s = 0; s < P; s++) {
        first[s] = 2 * L * s;
        ins[s] = "S(0)";
        pl[s] = mf_placement_create(1, &s, 1, (const int[]){1}, MF_DEV_CPU);
        for (int c = first[s]; c < 2 * L * (s + 1) && st == MF_OK; c++)
            st = mf_module_to_global(mf_module_child_at(m, c), pl[s], "B");
    }
    first[P] = 2 * L * P;
    mf_pipeline_opts o = {P, first, pl, ins, M, sc, 0};
    mf_pipeline *pipe = st == MF_OK ? mf_pipeline_create(m, &o) : NULL;
    mf_tensor *x[1024] = {NULL}, *y[1024] = {NULL};
    for (int k = 0; pipe && k < M; k++) {
        x[k] = mf_global_randn(MF_F32, 2, (const int64_t[]){batch / M, w}, pl[0], "S(0)");
        y[k] = mf_global_zeros(MF_I64, 1, (const int64_t[]){batch / M}, pl[P - 1], "S(0)");
    }
    double *t = calloc((size_t)steps, sizeof *t), bubble = 0;
    int64_t peak = 0;
    if (!pipe || !t) st = mf_last_status() != MF_OK ? mf_last_status() : MF_ERR_NOMEM;
    for (int s = -1; s < steps && st == MF_OK; s++) {   /* one warm-up step */
        double loss;
        drop_grads(m);
        st = mf_pipeline_train_step(pipe, x, y, NULL, NULL, &loss);
        mf_pipeline_stats ps;
        if (st != MF_OK || s < 0 || mf_pipeline_last_stats(pipe, &ps) != MF_OK) continue;
        t[s] = ps.step_s;
        bubble += ps.bubble / steps;
        if (ps.peak_bytes > peak) peak = ps.peak_bytes;
    }
    if (st == MF_OK) {
        qsort(t, (size_t)steps, sizeof *t, cmp_d);
        double v[2] = {t[steps / 2], bubble};   /* the means over ranks (stages) */
        st = mf_allreduce(v, 2, MF_F64, MF_COLL_MPI);
        r->step_s = v[0] / P;
        r->bubble = v[1] / P;
        r->peak = peak;   /* rank 0 = stage 0 */
    }
    for (int k = 0; k < M; k++) {
        mf_tensor_destroy(x[k]);
        mf_tensor_destroy(y[k]);
    }
    free(t);
    mf_pipeline_destroy(pipe);
    for (int s = 0; s < P; s++) mf_placement_destroy(pl[s]);
    mf_module_destroy(m);
    return st;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mpiexec -n P bench_pipeline [--width W] [--layers L] [--batch B] [--steps S] [--micro LIST]\n"
               "Pipeline bubble and activation memory: a chain of P*L Linear(W,W)+ReLU blocks in P equal\n"
               "stages (one rank each), for GPipe and 1F1B and each micro-batch count M in LIST.\n"
               "  --width W    features (default 512)\n"
               "  --layers L   blocks per stage (default 4)\n"
               "  --batch B    samples per step (default 512; each M must divide it)\n"
               "  --steps S    timed steps per row, after one warm-up (default 10)\n"
               "  --micro LIST micro-batch counts (default 1,2,4,8,16)\n");
}

int main(int argc, char **argv)
{
    int64_t w = 512, batch = 512;
    int L = 4, steps = 10, micro[32] = {1, 2, 4, 8, 16}, nm = 5;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--width")) w = atoll(v), i++;
        else if (!strcmp(argv[i], "--layers")) L = atoi(v), i++;
        else if (!strcmp(argv[i], "--batch")) batch = atoll(v), i++;
        else if (!strcmp(argv[i], "--steps")) steps = atoi(v), i++;
        else if (!strcmp(argv[i], "--micro")) {
            nm = 0;
            for (char *p = argv[++i]; p && *p && nm < 32;) {
                micro[nm++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
            }
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (w < 1 || L < 1 || batch < 1 || steps < 1 || nm < 1) {
        usage(stderr);
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    int P = mf_world_size(), me = mf_rank();
    mf_set_threads(1);
    double base = me == 0 ? one_rank(P * L, w, batch, steps) : 0;
    mf_allreduce(&base, 1, MF_F64, MF_COLL_MPI);
    if (me == 0) {
        printf("pipeline: %d stages x %d blocks of Linear(%lld,%lld)+ReLU, batch %lld, %d steps, 1 thread per rank\n",
               P, L, (long long)w, (long long)w, (long long)batch, steps);
        printf("%-8s %4s %10s %10s %9s %9s %11s %6s\n", "schedule", "M", "step ms", "samples/s", "bubble", "theory",
               "stage0 MiB", "eff");
        printf("%-8s %4s %10.2f %10.0f %9s %9s %11s %6s\n", "1 rank", "-", base * 1e3, (double)batch / base, "-", "-",
               "-", "1.00");
    }
    int code = 0;
    for (int i = 0; i < nm; i++)   /* both schedules for each M in turn: no drift between them */
        for (int k = 0; k < 2; k++) {
            int M = micro[i];
            if (M < 1 || M > 1024 || batch % M) continue;
            mf_pipeline_schedule sc = k ? MF_PIPELINE_1F1B : MF_PIPELINE_GPIPE;
            result r;
            if (run(P, L, w, batch, M, sc, steps, &r) != MF_OK) {
                if (me == 0) fprintf(stderr, "bench_pipeline: %s\n", mf_last_error());
                code = 1;
                continue;
            }
            if (me == 0)
                printf("%-8s %4d %10.2f %10.0f %9.3f %9.3f %11.1f %6.2f\n", mf_pipeline_schedule_name(sc), M,
                       r.step_s * 1e3, (double)batch / r.step_s, r.bubble, (double)(P - 1) / (M + P - 1),
                       (double)r.peak / 1048576.0, base / (P * r.step_s));
            fflush(stdout);
        }
    mf_finalize();
    return code;
}
