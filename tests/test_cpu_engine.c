/*
 * tests/test_cpu_engine.c - the CPU engines (doc/cpu.md): choosing one,
 * and oneDNN agreeing with OpenBLAS on convolutions (strides, padding,
 * dilation, groups) and matrix products (transposes, batches, broadcast
 * operands, bias, accumulated gradients), forward and backward, in f32
 * and under bf16 autocast; each engine repeats its own bits.
 */
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "config.h"   /* MF_HAVE_ONEDNN, MF_ONEDNN_STATUS: what configure found */
#include "tests/test_util.h"

typedef mf_tensor *(*op_fn)(mf_tensor **in, const void *arg);

/* An op's output and input gradients under one engine. */
typedef struct result {
    mf_tensor *y, *g[3];
} result;

static void result_free(result *r)
{
    mf_tensor_destroy(r->y);
    for (int i = 0; i < 3; i++) mf_tensor_destroy(r->g[i]);
    memset(r, 0, sizeof *r);
}

static mf_tensor *copy_of(mf_tensor *t)
{
    mf_tensor *d = mf_tensor_detach(t);
    ck_assert_nonnull(d);
    mf_tensor *c = mf_scale(d, 1.0);
    ck_assert_nonnull(c);
    mf_tensor_destroy(d);
    mf_tensor_set_requires_grad(c, true);
    return c;
}

/* Runs fn on copies of in under engine e: forward, then two backward
 * passes with the output weights wy, so that the second accumulates into
 * the gradients the first wrote. */
static result run_on(mf_cpu_engine e, op_fn fn, const void *arg, int n, mf_tensor **in, mf_tensor *wy)
{
    ck_assert_ok(mf_cpu_engine_set(e));
    result r = {0};
    mf_tensor *c[3] = {0};
    for (int i = 0; i < n; i++) c[i] = in[i] ? copy_of(in[i]) : NULL;
    for (int pass = 0; pass < 2; pass++) {
        mf_tensor *y = fn(c, arg);
        ck_assert_nonnull(y);
        mf_tensor *p = mf_mul(y, wy), *l = mf_sum_all(p);
        ck_assert_nonnull(l);
        ck_assert_ok(mf_backward(l));
        if (pass == 0) r.y = mf_tensor_detach(y);
        mf_tensor_destroy(y);
        mf_tensor_destroy(p);
        mf_tensor_destroy(l);
    }
    for (int i = 0; i < n; i++) {
        if (!c[i]) continue;
        r.g[i] = mf_tensor_detach(mf_tensor_grad(c[i]));
        mf_tensor_destroy(c[i]);
    }
    return r;
}

static double worst(const result *a, const result *b, int n)
{
    double m = mf_test_max_diff(a->y, b->y, true);
    for (int i = 0; i < n; i++) {
        if (!a->g[i]) continue;
        double d = mf_test_max_diff(a->g[i], b->g[i], true);
        if (d > m) m = d;
    }
    return m;
}

/* oneDNN against OpenBLAS within tol, and oneDNN against itself bit for
 * bit. Without oneDNN in the build, only that asking for it fails. */
static void compare(const char *what, op_fn fn, const void *arg, int n, mf_tensor **in, double tol)
{
    if (!mf_cpu_engine_available(MF_CPU_ONEDNN)) {
        ck_assert_fails(mf_cpu_engine_set(MF_CPU_ONEDNN), MF_ERR_ARG, "not in this build");
        return;
    }
    mf_tensor *y0 = fn(in, arg);
    ck_assert_nonnull(y0);
    mf_tensor *wy = mf_randn(MF_F32, mf_tensor_ndim(y0), mf_tensor_shape(y0));
    mf_tensor_destroy(y0);
    result ob = run_on(MF_CPU_OPENBLAS, fn, arg, n, in, wy);
    result dn = run_on(MF_CPU_ONEDNN, fn, arg, n, in, wy);
    result dn2 = run_on(MF_CPU_ONEDNN, fn, arg, n, in, wy);
    double d = worst(&dn, &ob, n), rep = worst(&dn2, &dn, n);
    ck_assert_msg(d <= tol, "%s: oneDNN and OpenBLAS differ by %g (relative; tolerance %g)", what, d, tol);
    ck_assert_msg(rep == 0, "%s: oneDNN gave different bits on a second run (%g)", what, rep);
    result_free(&ob);
    result_free(&dn);
    result_free(&dn2);
    mf_tensor_destroy(wy);
}

static mf_tensor *rnd(int ndim, const int64_t *shape)
{
    mf_tensor *u = mf_randn(MF_F32, ndim, shape);
    mf_tensor_set_requires_grad(u, true);
    return u;
}

typedef struct conv_case {
    int n, c, h, w, o, kh, kw;
    mf_conv2d_params p;
    bool bias;
} conv_case;

static const conv_case convs[] = {
    {2, 3, 7, 6, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
    {1, 2, 9, 9, 2, 3, 2, {{2, 3}, {0, 1}, {1, 1}, 1}, true},
    {2, 4, 8, 8, 6, 3, 3, {{1, 1}, {2, 2}, {2, 2}, 2}, false},
    {2, 6, 5, 5, 6, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 3}, true},
    {3, 1, 28, 28, 6, 5, 5, {{1, 1}, {2, 2}, {1, 1}, 1}, true},    /* LeNet's first layer */
    {4, 16, 14, 14, 32, 5, 5, {{1, 1}, {2, 2}, {1, 1}, 1}, true},  /* and a wide one */
    {2, 8, 11, 10, 8, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 8}, true},    /* depthwise, strided */
};

static mf_tensor *conv_fn(mf_tensor **in, const void *arg)
{
    const conv_case *c = arg;
    return mf_conv2d(in[0], in[1], in[2], &c->p);
}

static void conv_case_run(const conv_case *c, double tol)
{
    mf_tensor *in[3] = {rnd(MF_DIMS(c->n, c->c, c->h, c->w)), rnd(MF_DIMS(c->o, c->c / c->p.groups, c->kh, c->kw)),
                        c->bias ? rnd(MF_DIMS(c->o)) : NULL};
    char what[96];
    snprintf(what, sizeof what, "conv2d %dx%dx%dx%d, %d out, k%dx%d s%d,%d p%d,%d d%d,%d g%d", c->n, c->c, c->h, c->w,
             c->o, c->kh, c->kw, c->p.stride[0], c->p.stride[1], c->p.padding[0], c->p.padding[1], c->p.dilation[0],
             c->p.dilation[1], c->p.groups);
    compare(what, conv_fn, c, 3, in, tol);
    for (int i = 0; i < 3; i++) mf_tensor_destroy(in[i]);
}

START_TEST(conv_engines_agree)
{
    mf_manual_seed(21);
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) conv_case_run(&convs[i], 1e-4);
}
END_TEST

typedef struct mm_case {
    int64_t a[3], b[3];
    int na, nb;
    bool ta, tb;
} mm_case;

static const mm_case mms[] = {
    {{7, 33}, {33, 5}, 2, 2, false, false},
    {{33, 7}, {33, 5}, 2, 2, true, false},
    {{7, 33}, {5, 33}, 2, 2, false, true},
    {{33, 7}, {5, 33}, 2, 2, true, true},
    {{1, 300}, {300, 1}, 2, 2, false, false},
    {{64, 1}, {1, 48}, 2, 2, false, false},
    {{3, 9, 20}, {3, 20, 11}, 3, 3, false, false},   /* batched */
    {{3, 20, 9}, {3, 11, 20}, 3, 3, true, true},
    {{4, 6, 16}, {16, 10}, 3, 2, false, false},      /* a batch against one matrix */
    {{12, 16}, {2, 10, 16}, 2, 3, false, true},      /* one matrix against a batch */
    {{128, 256}, {256, 192}, 2, 2, false, false},    /* big enough for blocked kernels */
};

static mf_tensor *mm_fn(mf_tensor **in, const void *arg)
{
    const mm_case *c = arg;
    return mf_matmul_t(in[0], in[1], c->ta, c->tb);
}

static mf_tensor *linear_fn(mf_tensor **in, const void *arg)
{
    (void)arg;
    return mf_linear(in[0], in[1], in[2]);
}

static void gemm_cases(double tol)
{
    for (size_t i = 0; i < sizeof mms / sizeof *mms; i++) {
        const mm_case *c = &mms[i];
        mf_tensor *in[2] = {rnd(c->na, c->a), rnd(c->nb, c->b)};
        char what[64];
        snprintf(what, sizeof what, "matmul case %zu (ta %d, tb %d)", i, c->ta, c->tb);
        compare(what, mm_fn, c, 2, in, tol);
        mf_tensor_destroy(in[0]);
        mf_tensor_destroy(in[1]);
    }
    mf_tensor *l[3] = {rnd(MF_DIMS(2, 9, 40)), rnd(MF_DIMS(24, 40)), rnd(MF_DIMS(24))};
    compare("linear", linear_fn, NULL, 3, l, tol);
    for (int i = 0; i < 3; i++) mf_tensor_destroy(l[i]);
}

START_TEST(gemm_engines_agree)
{
    mf_manual_seed(22);
    gemm_cases(1e-4);
}
END_TEST

/* Under bf16 autocast both engines multiply the same bfloat16 values
 * and accumulate in f32, oneDNN natively where the CPU can: the results
 * differ only by the order of the sums. */
START_TEST(bf16_engines_agree)
{
    mf_manual_seed(23);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_BF16));
    gemm_cases(1e-4);
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) conv_case_run(&convs[i], 1e-4);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_FP32));
}
END_TEST

/* Signals arriving while oneDNN computes (a timer every 97 us, as a
 * profiler's, or the SIGUSR1 that asks mpiflow-train to checkpoint and
 * stop): the handler runs and the heap stays whole. oneDNN's generated
 * f32 GEMM kernels move the stack pointer into a heap buffer, so a
 * handler run on top of them writes into the heap (doc/cpu.md); glibc
 * then aborts in free(). */
static volatile sig_atomic_t ticks;
static void on_tick(int sig)
{
    (void)sig;
    ticks++;
}

START_TEST(signals_during_onednn)
{
    if (!mf_cpu_engine_available(MF_CPU_ONEDNN)) return;
    ck_assert_ok(mf_cpu_engine_set(MF_CPU_ONEDNN));
    struct sigaction sa, prev;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, &prev);
    struct itimerval on = {{0, 97}, {0, 97}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &on, NULL);
    /* at least 60 iterations per thread count, and on until 150 ticks
     * arrived each time (a loaded machine runs fewer of them; 60 s at most) */
    double t_end = mf_time() + 60;
    int goal = 0;
    for (int threads = 1; threads <= 2; threads++) {
        mf_set_threads(threads);
        goal += 150;
        mf_tensor *x = mf_randn(MF_F32, MF_DIMS(64, 3136)), *w = mf_randn(MF_F32, MF_DIMS(512, 3136));
        mf_tensor *q = mf_randn(MF_F32, MF_DIMS(64, 256)), *v = mf_randn(MF_F32, MF_DIMS(256, 64));
        mf_tensor_set_requires_grad(w, true);
        for (int i = 0; i < 60 || (ticks < goal && mf_time() < t_end); i++) {
            mf_tensor *y = mf_linear(x, w, NULL), *s = mf_sum_all(y), *p = mf_matmul(q, v);
            ck_assert_ok(mf_backward(s));
            mf_tensor_set_grad(w, NULL);
            mf_tensor_destroy(y);
            mf_tensor_destroy(s);
            mf_tensor_destroy(p);
            free(malloc(4096 + 64 * (i % 60)));
            malloc_trim(0);   /* glibc walks and checks its free chunks here */
        }
        mf_tensor *all[] = {x, w, q, v};
        for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
    }
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &prev, NULL);
    mf_set_threads(1);
    ck_assert_msg(ticks >= goal, "only %d timer signals arrived in 60 s", (int)ticks);
}
END_TEST

START_TEST(choosing_an_engine)
{
    mf_cpu_engine was = mf_cpu_engine_get();
    ck_assert(mf_cpu_engine_available(MF_CPU_OPENBLAS));
    ck_assert_str_eq(mf_cpu_engine_name(MF_CPU_OPENBLAS), "openblas");
    ck_assert_str_eq(mf_cpu_engine_name(MF_CPU_ONEDNN), "onednn");
    ck_assert_fails(mf_cpu_engine_set((mf_cpu_engine)9), MF_ERR_ARG, "unknown engine 9");
    ck_assert_int_eq(mf_cpu_engine_get(), was);
    char d[512];
    ck_assert_ok(mf_cpu_engine_set(MF_CPU_OPENBLAS));
    ck_assert_int_eq(mf_cpu_engine_get(), MF_CPU_OPENBLAS);
    ck_assert(!mf_cpu_bf16_native());
    ck_assert_msg(strstr(mf_cpu_engine_describe(d, sizeof d), "openblas") != NULL, "%s", d);
    if (mf_cpu_engine_available(MF_CPU_ONEDNN)) {
        ck_assert_ok(mf_cpu_engine_set(MF_CPU_ONEDNN));
        ck_assert_int_eq(mf_cpu_engine_get(), MF_CPU_ONEDNN);
        mf_cpu_engine_describe(d, sizeof d);
        ck_assert_msg(strstr(d, "onednn, isa ") != NULL, "%s", d);
        ck_assert_msg(strstr(d, mf_cpu_bf16_native() ? "bf16 native" : "bf16 emulated") != NULL, "%s", d);
    } else {
        ck_assert_fails(mf_cpu_engine_set(MF_CPU_ONEDNN), MF_ERR_ARG, "libdnnl-dev");
        ck_assert_int_eq(mf_cpu_engine_get(), MF_CPU_OPENBLAS);
    }
    ck_assert_ok(mf_cpu_engine_set(was));
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("cpu_engine");
    TCase *tc = tcase_create("engines");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, choosing_an_engine);
    tcase_add_test(tc, conv_engines_agree);
    tcase_add_test(tc, gemm_engines_agree);
    tcase_add_test(tc, bf16_engines_agree);
    tcase_add_test(tc, signals_during_onednn);
    suite_add_tcase(s, tc);
    return s;
}

/* Without oneDNN in the build the suite still checks the OpenBLAS side
 * (asking for oneDNN fails), then SKIPs saying why configure left it out:
 * not installed, or --without-onednn (an installed oneDNN that cannot be
 * used stops configure instead). */
static const char *no_onednn(bool *fail)
{
    static char why[256];
    *fail = false;
#if MF_HAVE_ONEDNN
    if (mf_cpu_engine_available(MF_CPU_ONEDNN)) return NULL;
    *fail = true;
    snprintf(why, sizeof why, "configure found oneDNN but the CPU backend does not offer it");
#else
    snprintf(why, sizeof why, "no oneDNN engine to compare with OpenBLAS: oneDNN %s", MF_ONEDNN_STATUS);
#endif
    return why;
}

int main(int argc, char **argv) { return mf_test_main_then_skip(argc, argv, make_suite, no_onednn); }
