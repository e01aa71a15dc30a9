/*
 * bench/bench_cuda.c - mpiflow on a GPU, side by side with bare cuBLAS
 * and with mpiflow on the CPU.
 *
 *   bench_cuda [--sizes 1024,2048,4096,8192] [--repeat R] [--batch B] [--steps N]
 *
 * Three tables:
 *  1. GEMM TFLOP/s: mf_matmul on CUDA tensors (fp32, and bf16 under
 *     autocast) against cublasSgemm and cublasGemmEx (bf16 operands,
 *     fp32 accumulation) called directly on the same sizes; the ratio is
 *     mpiflow's overhead (the bf16 path also converts the operands).
 *  2. mlp and lenet training samples/s on the GPU (fp32 and bf16)
 *     against the CPU (all its threads), on synthetic Fashion-MNIST-shaped
 *     data, batch B.
 *  3. the step-time breakdown on the GPU: data to the device, forward
 *     (with the loss), backward, optimizer step, each ended by
 *     mf_synchronize so that its kernels are counted in it.
 * The best of R timed windows is reported (timings are noisy).
 * Exit 77 without a GPU.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

static int repeat = 5;

static void die(const char *what)
{
    fprintf(stderr, "bench_cuda: %s: %s\n", what, mf_last_error());
    exit(1);
}

/* --------------------------------------------------------------- GEMM */
static double best_of(double (*run)(void *), void *u)
{
    double best = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t = run(u);
        if (t < best) best = t;
    }
    return best;
}

typedef struct gemm_case {
    int n, reps;
    bool bf16;
    mf_tensor *a, *b;
    float *da, *db, *dc;
    unsigned short *ha, *hb;   /* bf16 operands for cublasGemmEx */
    cublasHandle_t h;
} gemm_case;

static double run_mf(void *u)
{
    gemm_case *g = u;
    mf_autocast_set(g->bf16 ? MF_PRECISION_BF16 : MF_PRECISION_FP32);
    mf_synchronize();
    double t0 = mf_time();
    for (int i = 0; i < g->reps; i++) {
        mf_tensor *c = mf_matmul(g->a, g->b);
        if (!c) die("mf_matmul");
        mf_tensor_destroy(c);
    }
    mf_synchronize();
    mf_autocast_set(MF_PRECISION_FP32);
    return (mf_time() - t0) / g->reps;
}

static double run_cublas(void *u)
{
    gemm_case *g = u;
    float one = 1, zero = 0;
    cudaDeviceSynchronize();
    double t0 = mf_time();
    for (int i = 0; i < g->reps; i++) {
        cublasStatus_t s = g->bf16 ? cublasGemmEx(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->hb,
                                                  CUDA_R_16BF, g->n, g->ha, CUDA_R_16BF, g->n, &zero, g->dc,
                                                  CUDA_R_32F, g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                                   : cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->db, g->n,
                                                 g->da, g->n, &zero, g->dc, g->n);
        if (s != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "bench_cuda: cuBLAS failed: %d\n", (int)s);
            exit(1);
        }
    }
    cudaDeviceSynchronize();
    return (mf_time() - t0) / g->reps;
}

static void gemm_table(const int *sizes, int nsizes)
{
    printf("GEMM C[n,n] = A B, TFLOP/s (best of %d)\n", repeat);
    printf("%6s  %5s  %10s  %10s  %7s\n", "n", "type", "mpiflow", "cuBLAS", "ratio");
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) die("cublasCreate");
    for (int k = 0; k < nsizes; k++) {
        int n = sizes[k];
        gemm_case g = {n, n <= 2048 ? 20 : 5, false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, h};
        g.a = mf_randn(MF_F32, MF_DIMS(n, n));
        g.b = mf_randn(MF_F32, MF_DIMS(n, n));
        if (!g.a || !g.b) die("mf_randn");
        size_t bytes = (size_t)n * n;
        if (cudaMalloc((void **)&g.da, bytes * 4) || cudaMalloc((void **)&g.db, bytes * 4) ||
            cudaMalloc((void **)&g.dc, bytes * 4) || cudaMalloc((void **)&g.ha, bytes * 2) ||
            cudaMalloc((void **)&g.hb, bytes * 2)) {
            fprintf(stderr, "bench_cuda: cudaMalloc failed for n=%d\n", n);
            exit(1);
        }
        cudaMemset(g.da, 0, bytes * 4);
        cudaMemset(g.db, 0, bytes * 4);
        cudaMemset(g.ha, 0, bytes * 2);
        cudaMemset(g.hb, 0, bytes * 2);
        double flops = 2.0 * n * (double)n * n;
        for (int b = 0; b < 2; b++) {
            g.bf16 = b;
            run_mf(&g);   /* warm up: caches, cuBLAS heuristics */
            run_cublas(&g);
            double tm = best_of(run_mf, &g), tc = best_of(run_cublas, &g);
            printf("%6d  %5s  %10.1f  %10.1f  %7.2f\n", n, b ? "bf16" : "fp32", flops / tm / 1e12, flops / tc / 1e12,
                   tc / tm);
        }
        cudaFree(g.da);
        cudaFree(g.db);
        cudaFree(g.dc);
        cudaFree(g.ha);
        cudaFree(g.hb);
        mf_tensor_destroy(g.a);
        mf_tensor_destroy(g.b);
        mf_memory_empty_cache();
    }
    cublasDestroy(h);
    printf("\n");
}

/* ---------------------------------------------------------- training */
typedef struct trainer {
    mf_module *m;
    mf_tensor_list *ps;
    mf_optim *o;
    mf_tensor *x, *y;     /* one batch on the host */
    mf_device_type dev;
    double t_data, t_fwd, t_bwd, t_opt;
} trainer;

static void trainer_init(trainer *t, const char *model, mf_device_type dev, int batch)
{
    memset(t, 0, sizeof *t);
    t->dev = dev;
    if (mf_set_default_device(dev) != MF_OK) die("mf_set_default_device");
    mf_manual_seed(1);
    t->m = mf_model_create(model, 1, 28, 28, 10);
    if (!t->m) die("mf_model_create");
    t->ps = mf_module_parameters(t->m);
    mf_adam_opts ao = mf_adam_defaults();
    t->o = mf_adam_create(t->ps, &ao);
    mf_set_default_device(MF_DEV_CPU);
    t->x = mf_randn(MF_F32, MF_DIMS(batch, 1, 28, 28));
    t->y = mf_empty(MF_I64, MF_DIMS(batch));
    for (int64_t i = 0; i < batch; i++) mf_tensor_set(t->y, &i, (double)(i % 10));
}

static void trainer_free(trainer *t)
{
    mf_optim_destroy(t->o);
    mf_tensor_list_destroy(t->ps);
    mf_module_destroy(t->m);
    mf_tensor_destroy(t->x);
    mf_tensor_destroy(t->y);
}

/* One step; with `split`, each phase is synchronised and timed. */
static void train_step(trainer *t, bool split)
{
    double t0 = mf_time();
    mf_tensor *x = mf_to_device(t->x, t->dev), *y = mf_to_device(t->y, t->dev);
    if (split) mf_synchronize();
    double t1 = mf_time();
    mf_optim_zero_grad(t->o);
    mf_tensor *out = mf_module_forward(t->m, x);
    mf_tensor *loss = out ? mf_cross_entropy(out, y, MF_REDUCTION_MEAN) : NULL;
    if (!loss) die("forward");
    if (split) mf_synchronize();
    double t2 = mf_time();
    if (mf_backward(loss) != MF_OK) die("backward");
    if (split) mf_synchronize();
    double t3 = mf_time();
    if (mf_optim_step(t->o) != MF_OK) die("optimizer step");
    if (split) mf_synchronize();
    double t4 = mf_time();
    t->t_data += t1 - t0;
    t->t_fwd += t2 - t1;
    t->t_bwd += t3 - t2;
    t->t_opt += t4 - t3;
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(out);
    mf_tensor_destroy(loss);
}

static double samples_per_sec(trainer *t, int batch, int steps)
{
    for (int i = 0; i < 3; i++) train_step(t, false);   /* warm up */
    double best = 1e30;
    for (int r = 0; r < repeat; r++) {
        mf_synchronize();
        double t0 = mf_time();
        for (int i = 0; i < steps; i++) train_step(t, false);
        mf_synchronize();
        double dt = mf_time() - t0;
        if (dt < best) best = dt;
    }
    return batch * (double)steps / best;
}

static void train_tables(int batch, int steps)
{
    const char *models[] = {"mlp", "lenet"};
    printf("training samples/s, batch %d, Adam (best of %d windows of %d steps)\n", batch, repeat, steps);
    printf("%6s  %12s  %12s  %12s  %9s\n", "model", "cpu fp32", "cuda fp32", "cuda bf16", "cuda/cpu");
    for (int k = 0; k < 2; k++) {
        trainer t;
        trainer_init(&t, models[k], MF_DEV_CPU, batch);
        double cpu = samples_per_sec(&t, batch, steps < 20 ? steps : 20);
        trainer_free(&t);
        trainer_init(&t, models[k], MF_DEV_CUDA, batch);
        double gpu = samples_per_sec(&t, batch, steps);
        mf_autocast_set(MF_PRECISION_BF16);
        double gpu16 = samples_per_sec(&t, batch, steps);
        mf_autocast_set(MF_PRECISION_FP32);
        trainer_free(&t);
        printf("%6s  %12.0f  %12.0f  %12.0f  %9.1f\n", models[k], cpu, gpu, gpu16, gpu / cpu);
    }
    printf("\nstep time on the GPU, ms (mean of %d synchronised steps)\n", steps);
    printf("%6s  %8s  %8s  %8s  %8s  %8s\n", "model", "to GPU", "forward", "backward", "optim", "total");
    for (int k = 0; k < 2; k++) {
        trainer t;
        trainer_init(&t, models[k], MF_DEV_CUDA, batch);
        for (int i = 0; i < 3; i++) train_step(&t, true);
        t.t_data = t.t_fwd = t.t_bwd = t.t_opt = 0;
        for (int i = 0; i < steps; i++) train_step(&t, true);
        double s = 1e3 / steps;
        printf("%6s  %8.3f  %8.3f  %8.3f  %8.3f  %8.3f\n", models[k], t.t_data * s, t.t_fwd * s, t.t_bwd * s,
               t.t_opt * s, (t.t_data + t.t_fwd + t.t_bwd + t.t_opt) * s);
        trainer_free(&t);
    }
}

int main(int argc, char **argv)
{
    int sizes[8] = {1024, 2048, 4096, 8192}, nsizes = 4, batch = 256, steps = 50;
    static const struct option opts[] = {{"sizes", required_argument, 0, 's'}, {"repeat", required_argument, 0, 'r'},
                                         {"batch", required_argument, 0, 'b'}, {"steps", required_argument, 0, 'n'},
                                         {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': {
            nsizes = 0;
            for (char *p = strtok(optarg, ","); p && nsizes < 8; p = strtok(NULL, ",")) sizes[nsizes++] = atoi(p);
            break;
        }
        case 'r': repeat = atoi(optarg); break;
        case 'b': batch = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        default:
            printf("usage: bench_cuda [--sizes 1024,2048,4096,8192] [--repeat R] [--batch B] [--steps N]\n"
                   "GEMM TFLOP/s against bare cuBLAS, mlp/lenet samples/s on the GPU against the CPU,\n"
                   "and the GPU step-time breakdown. Exit 77 without a GPU.\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (repeat < 1 || batch < 1 || steps < 1 || nsizes < 1) {
        fprintf(stderr, "bench_cuda: --repeat, --batch, --steps and --sizes must be positive\n");
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) die("mf_init");
    char d[512];
    if (!mf_cuda_available()) {
        printf("bench_cuda: skipped: %s\n", mf_device_describe(MF_DEV_CUDA, d, sizeof d));
        mf_finalize();
        return 77;
    }
    printf("bench_cuda: %s\nbench_cuda: %s\n\n", mf_device_describe(MF_DEV_CUDA, d, sizeof d),
           mf_device_describe(MF_DEV_CPU, d + 256, sizeof d - 256));
    if (mf_set_default_device(MF_DEV_CUDA) != MF_OK) die("mf_set_default_device");
    gemm_table(sizes, nsizes);
    mf_set_default_device(MF_DEV_CPU);
    train_tables(batch, steps);
    mf_finalize();
    return 0;
}
