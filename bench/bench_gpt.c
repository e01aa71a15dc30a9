/*
 * bench/bench_gpt.c - GPT training throughput and memory (doc/gpt.md).
 *
 *   bench_gpt train     [--preset 10m|gpt2|char] [--batch B] [--threads 1,2]
 *                       [--steps N] [--repeat R] [--bf16] [--profile]
 *   bench_gpt attention [--threads N] [--heads H] [--head-dim D]
 *   bench_gpt memory    [--preset gpt2] [--batch 4]
 *
 * train: tokens/s of full AdamW steps (forward, loss, backward, step) on
 * random tokens, best of R windows, then one profiled window for the
 * time split (GEMM, attention, the rest) and the GEMMs' GFLOP/s, read
 * against the FMA peak of the CPU engine's ISA (bench/peak.h); --bf16
 * trains under bfloat16 autocast; --profile adds the microseconds per
 * step in each kernel class (bench/classes.h). attention: the fused causal
 * attention against the matmul-mask-softmax-matmul composition, forward
 * plus backward time and the bytes the forward keeps for backward, T
 * from 256 to 2048. memory: the allocator's peak during one step and the
 * process's maximum resident size. bench/torch_gpt.py is the same in
 * PyTorch; bench/run_gpt.sh runs both.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "bench/peak.h"
#include "bench/classes.h"
#include "mpiflow.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_gpt: %s: %s\n", what, mf_last_error());
    exit(1);
}

static mf_tensor *random_tokens(int64_t B, int64_t T, int vocab, uint64_t *s)
{
    int64_t *v = malloc((size_t)(B * T) * sizeof *v);
    for (int64_t i = 0; i < B * T; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int64_t)((*s >> 33) % (uint64_t)vocab);
    }
    mf_tensor *t = mf_from_data(MF_I64, 2, (const int64_t[]){B, T}, v);
    free(v);
    return t;
}

typedef struct gpt_run {
    mf_module *model;
    mf_tensor_list *params;
    mf_optim *optim;
    mf_tensor *x, *y;
} gpt_run;

static void run_open(gpt_run *r, const mf_gpt_config *c, int B)
{
    mf_manual_seed(0);
    r->model = mf_model_gpt(c);
    if (!r->model) die("mf_model_gpt");
    r->params = mf_module_parameters(r->model);
    mf_adam_opts ao = mf_adamw_defaults();
    ao.lr = 1e-4;
    ao.weight_decay = 0.1;
    ao.beta2 = 0.95;
    ao.decay_matrices_only = true;
    r->optim = mf_adamw_create(r->params, &ao);
    uint64_t s = 42;
    r->x = random_tokens(B, c->seq_len, c->vocab_size, &s);
    r->y = random_tokens(B, c->seq_len, c->vocab_size, &s);
}

static void run_close(gpt_run *r)
{
    mf_tensor_destroy(r->x);
    mf_tensor_destroy(r->y);
    mf_optim_destroy(r->optim);
    mf_tensor_list_destroy(r->params);
    mf_module_destroy(r->model);
}

static void step(gpt_run *r)
{
    mf_optim_zero_grad(r->optim);
    mf_tensor *loss = mf_gpt_loss(r->model, r->x, r->y);
    if (!loss || mf_backward(loss) != MF_OK || mf_optim_step(r->optim) != MF_OK) die("step");
    mf_tensor_destroy(loss);
}

static double window(gpt_run *r, int steps)
{
    double t0 = mf_time();
    for (int i = 0; i < steps; i++) step(r);
    return mf_time() - t0;
}

static void preset(const char *name, mf_gpt_config *c)
{
    if (mf_gpt_preset(name, c) != MF_OK) die("preset");
    c->dropout = 0;
}

static int bench_train(const char *name, int B, const char *threads, int steps, int repeat, bool profile)
{
    mf_gpt_config c;
    preset(name, &c);
    int T = c.seq_len;
    if (!steps) steps = T >= 1024 ? 2 : 5;
    char desc[512];
    mf_cpu_engine_describe(desc, sizeof desc);
    const char *isa = peak_isa_name(peak_isa_of(desc, mf_autocast_get() == MF_PRECISION_BF16));
    printf("%-6s %7s %5s %5s %12s %8s %8s %8s %9s %-12s\n", "model", "threads", "batch", "T", "tokens/s", "gemm%",
           "attn%", "other%", "gemm GF/s", "peak isa");
    char tl[64];
    snprintf(tl, sizeof tl, "%s", threads);
    for (char *tok = strtok(tl, ","); tok; tok = strtok(NULL, ",")) {
        int nt = atoi(tok);
        mf_set_threads(nt);
        gpt_run r = {0};
        run_open(&r, &c, B);
        window(&r, 1);   /* warm-up: the allocator's cache, first touches */
        double best = 1e30;
        for (int i = 0; i < repeat; i++) {
            double t = window(&r, steps);
            if (t < best) best = t;
        }
        mf_profile_reset();
        mf_profile_enable(true);
        double tp = window(&r, steps);
        mf_profile_enable(false);
        double gemm = mf_profile_seconds(MF_PROF_GEMM, NULL), attn = mf_profile_seconds(MF_PROF_ATTENTION, NULL);
        double gf = gemm > 0 ? mf_profile_flops(MF_PROF_GEMM) / gemm / 1e9 : 0;
        printf("%-6s %7d %5d %5d %12.0f %7.1f%% %7.1f%% %7.1f%% %9.1f %-12s\n", name, nt, B, T,
               (double)steps * B * T / best, 100 * gemm / tp, 100 * attn / tp, 100 * (tp - gemm - attn) / tp, gf, isa);
        if (profile) bench_print_classes(tp, steps);
        fflush(stdout);
        run_close(&r);
    }
    return 0;
}

/* softmax(q k^T / sqrt(D) + causal mask) v from ops that keep [T, T] */
static mf_tensor *unfused(mf_tensor *q, mf_tensor *k, mf_tensor *v, mf_tensor *mask)
{
    double scale = 1.0 / sqrt((double)mf_tensor_shape(q)[3]);
    mf_tensor *sc = mf_matmul_t(q, k, false, true), *ss = mf_scale(sc, scale);
    mf_tensor *sm = mf_add(ss, mask), *p = mf_softmax(sm, -1), *o = mf_matmul(p, v);
    mf_tensor *all[] = {sc, ss, sm, p};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
    return o;
}

static mf_tensor *causal_mask(int64_t T)
{
    float *m = malloc((size_t)(T * T) * sizeof *m);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) m[i * T + j] = j <= i ? 0.0f : -INFINITY;
    mf_tensor *t = mf_from_data(MF_F32, 2, (const int64_t[]){T, T}, m);
    free(m);
    return t;
}

/* one forward and backward of attention; *saved: bytes held between them */
static double attention_once(bool fused, mf_tensor *const qkv[3], mf_tensor *mask, int64_t *saved)
{
    for (int i = 0; i < 3; i++) mf_tensor_set_grad(qkv[i], NULL);
    mf_memory_stats a, b;
    mf_memory_get_stats(&a);
    double t0 = mf_time();
    mf_tensor *o = fused ? mf_causal_attention(qkv[0], qkv[1], qkv[2]) : unfused(qkv[0], qkv[1], qkv[2], mask);
    if (!o) die("attention");
    mf_tensor *loss = mf_sum_all(o);
    mf_memory_get_stats(&b);
    *saved = b.in_use - a.in_use;   /* the output, the loss, and what backward keeps */
    if (mf_backward(loss) != MF_OK) die("attention backward");
    double t = mf_time() - t0;
    mf_tensor_destroy(loss);
    mf_tensor_destroy(o);
    return t;
}

static int bench_attention(int nt, int H, int D)
{
    mf_set_threads(nt);
    printf("%5s %3s %3s %12s %12s %8s %14s %14s %8s\n", "T", "H", "D", "fused ms", "unfused ms", "speedup",
           "fused saved", "unfused saved", "ratio");
    for (int64_t T = 256; T <= 2048; T *= 2) {
        mf_manual_seed(1);
        mf_tensor *qkv[3];
        for (int i = 0; i < 3; i++) {
            qkv[i] = mf_randn(MF_F32, 4, (const int64_t[]){1, H, T, D});
            mf_tensor_set_requires_grad(qkv[i], true);
        }
        mf_tensor *mask = causal_mask(T);
        double best[2] = {1e30, 1e30};
        int64_t saved[2] = {0, 0};
        int reps = T <= 512 ? 5 : 3;
        for (int r = 0; r < reps; r++)
            for (int f = 0; f < 2; f++) {
                double t = attention_once(f == 0, qkv, mask, &saved[f]);
                if (t < best[f]) best[f] = t;
            }
        printf("%5lld %3d %3d %12.2f %12.2f %7.2fx %11.2f MiB %11.2f MiB %7.1fx\n", (long long)T, H, D, 1e3 * best[0],
               1e3 * best[1], best[1] / best[0], saved[0] / 1048576.0, saved[1] / 1048576.0,
               (double)saved[1] / (double)saved[0]);
        fflush(stdout);
        for (int i = 0; i < 3; i++) mf_tensor_destroy(qkv[i]);
        mf_tensor_destroy(mask);
    }
    return 0;
}

static int bench_memory(const char *name, int B)
{
    mf_gpt_config c;
    preset(name, &c);
    mf_set_threads(mf_cores());
    gpt_run r = {0};
    run_open(&r, &c, B);
    step(&r);   /* the optimizer's state exists after the first step */
    mf_memory_reset_peak();
    step(&r);
    mf_memory_stats st;
    mf_memory_get_stats(&st);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%-6s %5s %5s %16s %16s %16s\n", "model", "batch", "T", "allocator peak", "in use after", "max RSS");
    printf("%-6s %5d %5d %12.1f MiB %12.1f MiB %12.1f MiB\n", name, B, c.seq_len, st.peak / 1048576.0,
           st.in_use / 1048576.0, ru.ru_maxrss / 1024.0);
    run_close(&r);
    return 0;
}

static void usage(void)
{
    puts("usage: bench_gpt train [--preset NAME] [--batch B] [--threads LIST] [--steps N] [--repeat R] [--bf16]\n"
         "                 [--profile]\n"
         "       bench_gpt attention [--threads N] [--heads H] [--head-dim D]\n"
         "       bench_gpt memory [--preset NAME] [--batch B]\n"
         "GPT tokens/s and time split, fused against unfused attention, and peak memory (doc/performance.md).");
}

int main(int argc, char **argv)
{
    const char *name = NULL, *threads = "1,2";
    int batch = 0, steps = 0, repeat = 3, heads = 12, head_dim = 64;
    bool bf16 = false, profile = false;
    static const struct option opts[] = {{"preset", 1, 0, 'p'}, {"batch", 1, 0, 'b'}, {"threads", 1, 0, 't'},
                                         {"steps", 1, 0, 's'},  {"repeat", 1, 0, 'r'}, {"heads", 1, 0, 'H'},
                                         {"head-dim", 1, 0, 'D'}, {"bf16", 0, 0, 'f'},  {"profile", 0, 0, 'P'},
                                         {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': name = optarg; break;
        case 'b': batch = atoi(optarg); break;
        case 't': threads = optarg; break;
        case 's': steps = atoi(optarg); break;
        case 'r': repeat = atoi(optarg); break;
        case 'H': heads = atoi(optarg); break;
        case 'D': head_dim = atoi(optarg); break;
        case 'f': bf16 = true; break;
        case 'P': profile = true; break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    const char *mode = optind < argc ? argv[optind] : "train";
    if (repeat < 1 || batch < 0 || steps < 0 || heads < 1 || head_dim < 1 ||
        (strcmp(mode, "train") && strcmp(mode, "attention") && strcmp(mode, "memory"))) {
        usage();
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    if (bf16 && !mf_cpu_bf16_native()) {
        fprintf(stderr, "bench_gpt: --bf16: this engine and CPU have no native bfloat16\n");
        mf_finalize();
        return 2;
    }
    if (bf16) mf_autocast_set(MF_PRECISION_BF16);
    int rc;
    if (!strcmp(mode, "attention"))
        rc = bench_attention(atoi(threads), heads, head_dim);
    else if (!strcmp(mode, "memory"))
        rc = bench_memory(name ? name : "gpt2", batch ? batch : 4);
    else
        rc = bench_train(name ? name : "10m", batch ? batch : (name && strstr(name, "gpt2") ? 1 : 8), threads, steps,
                         repeat, profile);
    mf_finalize();
    return rc;
}
