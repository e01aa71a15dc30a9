/*
 * bench/bench_train.c - training throughput of mlp and lenet on
 * Fashion-MNIST, with the share of time inside GEMM.
 *
 *   bench_train [--model mlp|lenet|all] [--threads 1,2] [--batch 128]
 *               [--steps N] [--warmup N] [--repeat R] [--prefetch auto|on|off]
 *               [--engine onednn|openblas] [--bf16] [--profile]
 *
 * Each configuration runs `warmup` steps, then `repeat` timed windows of
 * `steps` steps, and reports the best window (this machine is noisy).
 * A second pass with kernel profiling on gives the time split and the
 * GFLOP/s that GEMMs and convolutions ran at inside training; it is kept
 * separate because timing every kernel costs a little. The last column
 * names the ISA whose FMA peak those rates are read against
 * (bench/peak.h). --profile adds, under each row, the microseconds per
 * step that profiled window spent in each kernel class.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/classes.h"
#include "bench/peak.h"
#include "mpiflow.h"

typedef struct bench {
    mf_module *model;
    mf_tensor_list *params;
    mf_optim *optim;
    mf_loader *loader;
} bench;

static int step(bench *b)
{
    mf_tensor *x, *y;
    if (mf_loader_next(b->loader, &x, &y) != MF_OK) return -1;
    mf_optim_zero_grad(b->optim);
    mf_tensor *out = mf_module_forward(b->model, x);
    mf_tensor *loss = out ? mf_cross_entropy(out, y, MF_REDUCTION_MEAN) : NULL;
    int rc = loss && mf_backward(loss) == MF_OK && mf_optim_step(b->optim) == MF_OK ? 0 : -1;
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(out);
    mf_tensor_destroy(loss);
    return rc;
}

static double window(bench *b, int steps)
{
    double t0 = mf_time();
    for (int i = 0; i < steps; i++)
        if (step(b) != 0) {
            fprintf(stderr, "bench_train: step failed: %s\n", mf_last_error());
            exit(1);
        }
    return mf_time() - t0;
}

static void usage(void)
{
    puts("usage: bench_train [--model mlp|lenet|all] [--threads LIST] [--batch B] [--steps N] [--warmup N] "
         "[--repeat R] [--prefetch auto|on|off] [--engine onednn|openblas] [--bf16] [--profile]\n"
         "Prints samples/s, the time split and the GEMM and conv GFLOP/s inside training for each model and\n"
         "thread count; --profile adds the microseconds per step spent in each kernel class.");
}

int main(int argc, char **argv)
{
    const char *model = "all", *threads = "1,2";
    int batch = 128, steps = 0, warmup = -1, repeat = 3;
    int prefetch = -1;   /* auto: when a core is spare, as mpiflow-train */
    const char *engine = NULL;
    bool bf16 = false, profile = false;
    static const struct option opts[] = {{"model", 1, 0, 'm'}, {"threads", 1, 0, 't'}, {"batch", 1, 0, 'b'},
                                         {"steps", 1, 0, 's'}, {"warmup", 1, 0, 'w'}, {"repeat", 1, 0, 'r'},
                                         {"prefetch", 1, 0, 'p'}, {"engine", 1, 0, 'e'}, {"bf16", 0, 0, 'f'},
                                         {"profile", 0, 0, 'P'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 't': threads = optarg; break;
        case 'b': batch = atoi(optarg); break;
        case 's': steps = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'r': repeat = atoi(optarg); break;
        case 'p': prefetch = !strcmp(optarg, "on") ? 1 : !strcmp(optarg, "off") ? 0 : -1; break;
        case 'e': engine = optarg; break;
        case 'f': bf16 = true; break;
        case 'P': profile = true; break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    if (batch < 1 || repeat < 1 || (strcmp(model, "all") && strcmp(model, "mlp") && strcmp(model, "lenet"))) {
        usage();
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    if (engine && mf_cpu_engine_set(!strcmp(engine, "openblas") ? MF_CPU_OPENBLAS : MF_CPU_ONEDNN) != MF_OK) {
        fprintf(stderr, "bench_train: --engine %s: %s\n", engine, mf_last_error());
        return 2;
    }
    if (bf16 && !mf_cpu_bf16_native()) {
        fprintf(stderr, "bench_train: --bf16: this engine and CPU have no native bfloat16\n");
        return 2;
    }
    if (bf16) mf_autocast_set(MF_PRECISION_BF16);
    char desc[512];
    mf_cpu_engine_describe(desc, sizeof desc);
    const char *isa = peak_isa_name(peak_isa_of(desc, bf16));
    mf_dataset *ds = mf_dataset_fashion_mnist(NULL, true);
    if (!ds) {
        fprintf(stderr, "bench_train: %s\n", mf_last_error());
        return 1;
    }
    printf("%-6s %7s %6s %12s %8s %8s %8s %9s %9s %-12s\n", "model", "threads", "batch", "samples/s", "gemm%", "conv%",
           "other%", "gemm GF/s", "conv GF/s", "peak isa");
    const char *models[] = {"mlp", "lenet"};
    for (int mi = 0; mi < 2; mi++) {
        if (strcmp(model, "all") && strcmp(model, models[mi])) continue;
        int n = steps ? steps : (mi == 0 ? 200 : 20), w = warmup >= 0 ? warmup : (mi == 0 ? 20 : 3);
        char tl[64];
        snprintf(tl, sizeof tl, "%s", threads);
        for (char *tok = strtok(tl, ","); tok; tok = strtok(NULL, ",")) {
            int nt = atoi(tok);
            mf_set_threads(nt);
            mf_manual_seed(0);
            bench b = {0};
            b.model = mf_model_create(models[mi], 1, 28, 28, 10);
            b.params = mf_module_parameters(b.model);
            mf_sgd_opts so = mf_sgd_defaults();
            so.lr = 0.01;
            b.optim = mf_sgd_create(b.params, &so);
            mf_loader_opts lo = {batch, 0, true, true, 0.2860, 0.3530,
                                 prefetch < 0 ? nt < mf_cores() : prefetch > 0, 0, 0, 0};
            b.loader = mf_loader_create(ds, &lo);
            window(&b, w);
            double best = 1e30;
            for (int r = 0; r < repeat; r++) {
                double t = window(&b, n);
                if (t < best) best = t;
            }
            mf_profile_reset();
            mf_profile_enable(true);
            double tp = window(&b, n);
            mf_profile_enable(false);
            double gemm = mf_profile_seconds(MF_PROF_GEMM, NULL), conv = mf_profile_seconds(MF_PROF_CONV, NULL);
            double gf = gemm > 0 ? mf_profile_flops(MF_PROF_GEMM) / gemm / 1e9 : 0;
            double cf = conv > 0 ? mf_profile_flops(MF_PROF_CONV) / conv / 1e9 : 0;
            printf("%-6s %7d %6d %12.0f %7.1f%% %7.1f%% %7.1f%% %9.1f %9.1f %-12s\n", models[mi], nt, batch,
                   n * batch / best, 100 * gemm / tp, 100 * conv / tp, 100 * (tp - gemm - conv) / tp, gf, cf, isa);
            if (profile) bench_print_classes(tp, n);
            fflush(stdout);
            mf_loader_destroy(b.loader);
            mf_optim_destroy(b.optim);
            mf_tensor_list_destroy(b.params);
            mf_module_destroy(b.model);
        }
    }
    mf_dataset_destroy(ds);
    mf_finalize();
    return 0;
}
