/*
 * apps/train_device.c - what mpiflow-train says about where it computes:
 * each rank's GPU, the kernels each rank ran on which device (so a run
 * that fell back to the CPU shows it), and whether bf16 pays on this CPU
 * (doc/cpu.md, "When bf16 pays on a CPU").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/train_device.h"
#include "mpiflow.h"

enum { LINE = 256 };   /* bytes per rank's line, gathered as MF_I32 */

/* rank 0 prints every rank's line, in rank order. Collective. */
static void print_all(const char *mine)
{
    int n = mf_world_size();
    char buf[LINE] = {0}, *all = calloc((size_t)n, LINE);
    snprintf(buf, sizeof buf, "%s", mine);
    if (all && mf_allgather(buf, all, LINE / 4, MF_I32, MF_COLL_MPI) == MF_OK && mf_rank() == 0) {
        for (int r = 0; r < n; r++) printf("mpiflow-train: rank %d: %.*s\n", r, LINE - 1, all + (size_t)r * LINE);
        fflush(stdout);
    }
    free(all);
}

void device_lines(mf_device_type dev)
{
    if (dev == MF_DEV_CPU) return;
    char d[512], line[LINE];
    snprintf(line, sizeof line, "device %s", mf_device_describe(dev, d, sizeof d));
    print_all(line);
}

static int64_t calls_on(mf_device_type dev)
{
    int64_t n = 0;
    for (int i = 0; mf_kernel_name(i); i++) n += mf_kernel_calls(dev, mf_kernel_name(i));
    return n;
}

void kernel_tally(mf_device_type dev)
{
    if (dev == MF_DEV_CPU) return;
    char line[LINE];
    snprintf(line, sizeof line, "ran %lld kernels on %s, %lld on the cpu", (long long)calls_on(dev),
             mf_device_name(dev), (long long)calls_on(MF_DEV_CPU));
    print_all(line);
}

/* Best of three: seconds of one [m, k] x [k, n] product under the
 * current precision; 0 when it fails. */
static double gemm_seconds(mf_tensor *a, mf_tensor *b)
{
    double best = 0;
    for (int i = 0; i < 4; i++) {
        double t0 = mf_time();
        mf_tensor *c = mf_matmul(a, b);
        double t = mf_time() - t0;
        if (!c) return 0;
        mf_tensor_destroy(c);
        if (i > 0 && (best == 0 || t < best)) best = t;   /* the first one sets up the engine */
    }
    return best;
}

void bf16_rates(double *bf16, double *fp32)
{
    const int64_t m = 256, k = 1024, n = 1024;
    mf_precision prev = mf_autocast_get();
    mf_tensor *a = mf_randn(MF_F32, 2, (int64_t[]){m, k}), *b = mf_randn(MF_F32, 2, (int64_t[]){k, n});
    *bf16 = *fp32 = 0;
    if (a && b) {
        double flops = 2.0 * (double)(m * k * n) / 1e9, t;
        mf_autocast_set(MF_PRECISION_FP32);
        if ((t = gemm_seconds(a, b)) > 0) *fp32 = flops / t;
        mf_autocast_set(MF_PRECISION_BF16);
        if ((t = gemm_seconds(a, b)) > 0) *bf16 = flops / t;
    }
    mf_autocast_set(prev);
    mf_tensor_destroy(a);
    mf_tensor_destroy(b);
}

void bf16_advice(void)
{
    double bf16, fp32;
    uint64_t draws = mf_rng_draws();
    bf16_rates(&bf16, &fp32);
    mf_rng_set_draws(draws);   /* the probe's random operands leave training's stream as it was */
    double v[2] = {bf16, fp32};   /* rank 0's measure decides for all: one message */
    if (mf_rank() != 0) v[0] = v[1] = 0;
    if (mf_allreduce(v, 2, MF_F64, MF_COLL_MPI) != MF_OK || mf_rank() != 0 || v[0] <= 0 || v[1] <= 0) return;
    if (v[0] < 0.9 * v[1])
        printf("mpiflow-train: warning: --precision bf16 will be slower than fp32 on this CPU: its bfloat16 matrix "
               "products ran at %.0f GFLOP/s against %.0f for fp32 (%d thread(s)); train in fp32 here, see doc/cpu.md\n",
               v[0], v[1], mf_threads());
    else
        printf("mpiflow-train: bf16 pays on this CPU: bfloat16 matrix products ran at %.0f GFLOP/s against %.0f for "
               "fp32 (%d thread(s))\n", v[0], v[1], mf_threads());
    fflush(stdout);
}
