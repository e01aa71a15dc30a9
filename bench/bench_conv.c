/*
 * bench/bench_conv.c - conv2d GFLOP/s on lenet's layer shapes against
 * bare OpenBLAS sgemm and the measured FMA peak, on either CPU engine.
 *
 * For each lenet convolution, forward, backward-data and backward-filter
 * are timed through mpiflow, and compared with bare cblas_sgemm doing
 * the same arithmetic as whole-batch GEMMs (forward [M,K]x[K,N];
 * backward [K,M]^T x [M,N] for the data and [M,N] x [K,N]^T for the
 * filter, with M = out channels, N = batch*OH*OW, K = in*KH*KW), and
 * with the FMA peak of the ISA the engine uses (bench/peak.h); a rate
 * above that peak is marked invalid. FLOPs count 2 per multiply-add: a
 * GEMM's 2*M*N*K, a convolution's as mf_profile_flops counts them, without
 * the taps on the zero padding (a direct convolution skips them, so
 * counting them would put oneDNN above the peak); "vs same" is the ratio
 * of the times. Best of R repeats. --engine picks oneDNN or OpenBLAS (MF_CPU_ENGINE), --bf16
 * runs under bfloat16 autocast.
 */
#include <cblas.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/peak.h"
#include "mpiflow.h"

static double best_of(int r, double (*fn)(void *), void *u)
{
    double b = 1e30;
    for (int i = 0; i < r; i++) {
        double t = fn(u);
        if (t < b) b = t;
    }
    return b;
}

typedef struct sg { int m, n, k, reps; bool ta, tb; float *a, *b, *c; } sg;

static double time_sgemm(void *u)
{
    sg *s = u;
    double t0 = mf_time();
    for (int i = 0; i < s->reps; i++)
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->m, s->n,
                    s->k, 1, s->a, s->ta ? s->m : s->k, s->b, s->tb ? s->k : s->n, 0, s->c, s->n);
    return (mf_time() - t0) / s->reps;
}

/* Seconds for one sgemm C[m,n] = op(A) op(B), best of repeat. */
static double sgemm_seconds(int m, int n, int k, bool ta, bool tb, int repeat)
{
    sg s = {m, n, k, 3, ta, tb, malloc(sizeof(float) * m * k), malloc(sizeof(float) * k * n),
            malloc(sizeof(float) * m * n)};
    for (int i = 0; i < m * k; i++) s.a[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < k * n; i++) s.b[i] = (float)(i % 5) * 0.1f;
    time_sgemm(&s);
    double t = best_of(repeat, time_sgemm, &s);
    free(s.a);
    free(s.b);
    free(s.c);
    return t;
}

typedef struct cv { mf_tensor *x, *w, *b; mf_conv2d_params p; int pass, reps; } cv;

static double time_conv(void *u)
{
    cv *c = u;
    double t = 0;
    for (int i = 0; i < c->reps; i++) {
        mf_tensor *y = mf_conv2d(c->x, c->w, c->b, &c->p);
        if (c->pass == 0) {
            mf_tensor_destroy(y);
            continue;
        }
        mf_tensor *s = mf_sum_all(y);
        mf_tensor_set_grad(c->x, NULL);
        mf_tensor_set_grad(c->w, NULL);
        double t0 = mf_time();
        mf_backward(s);
        t += mf_time() - t0;
        mf_tensor_destroy(y);
        mf_tensor_destroy(s);
    }
    if (c->pass == 0) {
        double t0 = mf_time();
        for (int i = 0; i < c->reps; i++) mf_tensor_destroy(mf_conv2d(c->x, c->w, c->b, &c->p));
        t = mf_time() - t0;
    }
    return t / c->reps;
}

/* The FLOPs of one pass of c's convolution, as the library counts them
 * (mf_profile_flops): one profiled forward. */
static double conv_flops(cv *c)
{
    mf_profile_reset();
    mf_profile_enable(true);
    mf_tensor_destroy(mf_conv2d(c->x, c->w, c->b, &c->p));
    mf_profile_enable(false);
    double f = mf_profile_flops(MF_PROF_CONV);
    mf_profile_reset();
    return f;
}

int main(int argc, char **argv)
{
    int batch = 128, repeat = 5, threads = 1;
    const char *engine = NULL;
    bool bf16 = false;
    double peak = 0;
    static const struct option opts[] = {{"batch", 1, 0, 'b'}, {"repeat", 1, 0, 'r'}, {"threads", 1, 0, 't'},
                                         {"engine", 1, 0, 'e'}, {"bf16", 0, 0, 'f'}, {"peak", 1, 0, 'p'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (o == 'b') batch = atoi(optarg);
        else if (o == 'r') repeat = atoi(optarg);
        else if (o == 't') threads = atoi(optarg);
        else if (o == 'e') engine = optarg;
        else if (o == 'f') bf16 = true;
        else if (o == 'p') peak = atof(optarg);
        else {
            puts("usage: bench_conv [--batch B] [--repeat R] [--threads T] [--engine onednn|openblas] [--bf16]\n"
                 "                  [--peak GFLOPS]\n"
                 "conv2d GFLOP/s on lenet's shapes against bare OpenBLAS sgemm and the FMA peak (measured here\n"
                 "unless --peak gives it).");
            return o == 'h' ? 0 : 2;
        }
    }
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    if (engine && mf_cpu_engine_set(!strcmp(engine, "openblas") ? MF_CPU_OPENBLAS : MF_CPU_ONEDNN) != MF_OK) {
        fprintf(stderr, "bench_conv: --engine %s: %s\n", engine, mf_last_error());
        mf_finalize();
        return 2;
    }
    if (bf16 && !mf_cpu_bf16_native()) {
        fprintf(stderr, "bench_conv: --bf16: this engine and CPU have no native bfloat16\n");
        mf_finalize();
        return 2;
    }
    mf_set_threads(threads);
    char desc[512];
    mf_cpu_engine_describe(desc, sizeof desc);
    peak_isa isa = peak_isa_of(desc, bf16);
    if (peak <= 0) peak = peak_gflops(isa, threads, 5);
    if (bf16) mf_autocast_set(MF_PRECISION_BF16);
    printf("engine %s%s, threads %d, batch %d; peak %s %.1f GFLOP/s\n", mf_cpu_engine_name(mf_cpu_engine_get()),
           bf16 ? " bf16" : "", threads, batch, peak_isa_name(isa), peak);
    printf("%-6s %-12s %6s %8s %6s %12s %12s %8s %8s\n", "layer", "pass", "M", "N", "K", "conv GF/s", "sgemm GF/s",
           "vs same", "vs peak");
    struct { const char *name; int c, h, o; } layers[] = {{"conv1", 1, 28, 32}, {"conv2", 32, 14, 64}};
    for (int li = 0; li < 2; li++) {
        int C = layers[li].c, H = layers[li].h, O = layers[li].o, L = H * H, K = C * 25;
        cv c = {mf_randn(MF_F32, MF_DIMS(batch, C, H, H)), mf_randn(MF_F32, MF_DIMS(O, C, 5, 5)),
                mf_randn(MF_F32, MF_DIMS(O)), mf_conv2d_defaults(), 0, 3};
        c.p.padding[0] = c.p.padding[1] = 2;
        mf_tensor_set_requires_grad(c.w, true);
        mf_tensor_set_requires_grad(c.x, li > 0);   /* lenet never needs conv1's input gradient */
        double nominal = 2.0 * O * (double)L * batch * K, flops = conv_flops(&c);
        for (int pass = 0; pass < 2; pass++) {
            c.pass = pass;
            time_conv(&c);
            double t = best_of(repeat, time_conv, &c);
            /* the same work as whole-batch GEMMs: forward W x col; backward W^T x gy (data,
             * not for conv1) and gy x col^T (filter) */
            int m = O, n = L * batch, k = K;
            double ref = pass == 0 ? sgemm_seconds(m, n, k, false, false, repeat)
                                   : sgemm_seconds(m, k, n, false, true, repeat) +
                                         (li > 0 ? sgemm_seconds(k, n, m, true, false, repeat) : 0);
            int npass = pass == 0 ? 1 : (li > 0 ? 2 : 1);
            double gf = npass * flops / t / 1e9, gemm = npass * nominal / ref / 1e9;
            printf("%-6s %-12s %6d %8d %6d %12.1f %12.1f %7.0f%% %7.0f%%%s\n", layers[li].name,
                   pass == 0 ? "forward" : (li > 0 ? "backward" : "bwd-filter"), m, n, k, gf, gemm, 100 * ref / t,
                   100 * gf / peak, gf > peak ? " INVALID (above the peak)" : "");
        }
        mf_tensor_destroy(c.x);
        mf_tensor_destroy(c.w);
        mf_tensor_destroy(c.b);
    }
    mf_finalize();
    return 0;
}
