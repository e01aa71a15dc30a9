/*
 * tests/test_autocast.c - bfloat16 autocast on the CPU: matmul, linear
 * and conv2d take their operands' bfloat16 values and accumulate in
 * f32, forward and backward; everything else stays f32; and training
 * under autocast follows f32 training within bfloat16's precision.
 */
#include <stdint.h>
#include <stdlib.h>
#include "tests/test_util.h"

/* v rounded to bfloat16 by bit arithmetic (ties to even), as a float */
static float bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

/* A copy of t with every value rounded to bfloat16, requiring grad. */
static mf_tensor *rounded(mf_tensor *t)
{
    int64_t n = mf_tensor_numel(t);
    float *v = malloc((size_t)(n + 1) * sizeof *v);
    ck_assert_ok(mf_tensor_copy_out(t, MF_F32, v, n));
    for (int64_t i = 0; i < n; i++) v[i] = bf16(v[i]);
    mf_tensor *r = mf_from_data(MF_F32, mf_tensor_ndim(t), mf_tensor_shape(t), v);
    free(v);
    mf_tensor_set_requires_grad(r, true);
    return r;
}

static mf_tensor *rnd(int ndim, const int64_t *shape)
{
    mf_tensor *u = mf_randn(MF_F32, ndim, shape);
    mf_tensor_set_requires_grad(u, true);
    return u;
}

static double max_abs_diff(mf_tensor *a, mf_tensor *b) { return mf_test_max_diff(a, b, false); }

START_TEST(rounding_and_state)
{
    ck_assert_int_eq(mf_autocast_get(), MF_PRECISION_FP32);
    ck_assert_fails(mf_autocast_set((mf_precision)7), MF_ERR_ARG, "unknown precision 7");
    mf_precision p;
    ck_assert_ok(mf_precision_parse("bf16", &p));
    ck_assert_int_eq(p, MF_PRECISION_BF16);
    ck_assert_fails(mf_precision_parse("fp16", &p), MF_ERR_ARG, "'fp16'", "fp32 or bf16");
    ck_assert_str_eq(mf_precision_name(MF_PRECISION_BF16), "bf16");
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1); 1 + 3*2^-9 rounds up */
    mf_tensor *x = T32(MF_DIMS(1, 3), 1.0 + 1.0 / 256, 1.0 + 3.0 / 512, -3.0);
    mf_tensor *one = T32(MF_DIMS(3, 1), 1, 0, 0), *two = T32(MF_DIMS(3, 1), 0, 1, 0);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_BF16));
    mf_tensor *a = mf_matmul(x, one), *b = mf_matmul(x, two);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_FP32));
    ck_expect(a, 0, MF_DIMS(1, 1), 1.0);
    ck_expect(b, 0, MF_DIMS(1, 1), 1.0 + 1.0 / 128);
    /* off: exact f32 again */
    mf_tensor *c = mf_matmul(x, one);
    ck_expect(c, 0, MF_DIMS(1, 1), (float)(1.0 + 1.0 / 256));
    mf_tensor *all[] = {x, one, two, a, b, c};
    for (int i = 0; i < 6; i++) mf_tensor_destroy(all[i]);
}
END_TEST

typedef mf_tensor *(*op_fn)(mf_tensor **in);

static mf_tensor *mm(mf_tensor **in) { return mf_matmul_t(in[0], in[1], false, true); }
static mf_tensor *lin(mf_tensor **in) { return mf_linear(in[0], in[1], in[2]); }
static mf_tensor *conv(mf_tensor **in)
{
    mf_conv2d_params p = mf_conv2d_defaults();
    p.padding[0] = p.padding[1] = 1;
    return mf_conv2d(in[0], in[1], in[2], &p);
}

/* Under autocast, fn(in) and its input gradients equal fn in f32 on the
 * rounded inputs with a rounded output gradient (the backward GEMMs
 * round gy too); with autocast off, they differ. */
static void same_as_rounded(const char *what, op_fn fn, int n, mf_tensor **in)
{
    mf_tensor *rin[3] = {0};
    for (int i = 0; i < n; i++) rin[i] = in[i] ? rounded(in[i]) : NULL;
    /* output gradient of bfloat16 values, so that rounding gy is exact */
    ck_assert_ok(mf_autocast_set(MF_PRECISION_BF16));
    mf_tensor *y = fn(in);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_FP32));
    ck_assert_nonnull(y);
    mf_tensor *w0 = mf_randn(MF_F32, mf_tensor_ndim(y), mf_tensor_shape(y)), *w = rounded(w0);
    mf_tensor_set_requires_grad(w, false);
    mf_tensor *p = mf_mul(y, w), *l = mf_sum_all(p);
    ck_assert_ok(mf_backward(l));
    mf_tensor *yr = fn(rin), *pr = mf_mul(yr, w), *lr = mf_sum_all(pr);
    ck_assert_ok(mf_backward(lr));
    double tol = 1e-5;
    ck_assert_msg(max_abs_diff(y, yr) <= tol, "%s: output differs from f32 on rounded inputs by %g", what,
                  max_abs_diff(y, yr));
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        double d = max_abs_diff(mf_tensor_grad(in[i]), mf_tensor_grad(rin[i]));
        ck_assert_msg(d <= tol, "%s: gradient %d differs by %g", what, i, d);
    }
    /* f32 on the unrounded inputs is measurably different */
    mf_tensor *yf = fn(in);
    ck_assert_msg(max_abs_diff(yf, y) > 1e-4, "%s: autocast changed nothing", what);
    mf_tensor *all[] = {y, w0, w, p, l, yr, pr, lr, yf};
    for (int i = 0; i < 9; i++) mf_tensor_destroy(all[i]);
    for (int i = 0; i < n; i++) mf_tensor_destroy(rin[i]);
}

START_TEST(gemm_ops_round_operands)
{
    mf_tensor *a[2] = {rnd(MF_DIMS(2, 7, 33)), rnd(MF_DIMS(2, 5, 33))};
    same_as_rounded("matmul", mm, 2, a);
    mf_tensor *b[3] = {rnd(MF_DIMS(9, 40)), rnd(MF_DIMS(6, 40)), rnd(MF_DIMS(6))};
    same_as_rounded("linear", lin, 3, b);
    mf_tensor *c[3] = {rnd(MF_DIMS(2, 3, 8, 8)), rnd(MF_DIMS(4, 3, 3, 3)), rnd(MF_DIMS(4))};
    same_as_rounded("conv2d", conv, 3, c);
    for (int i = 0; i < 3; i++) {
        if (i < 2) mf_tensor_destroy(a[i]);
        mf_tensor_destroy(b[i]);
        mf_tensor_destroy(c[i]);
    }
}
END_TEST

START_TEST(other_ops_stay_f32)
{
    mf_tensor *x = rnd(MF_DIMS(4, 50));
    mf_tensor *s0 = mf_softmax(x, 1), *e0 = mf_exp(x);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_BF16));
    mf_tensor *s1 = mf_softmax(x, 1), *e1 = mf_exp(x);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_FP32));
    ck_assert(max_abs_diff(s0, s1) == 0 && max_abs_diff(e0, e1) == 0);
    ck_assert_int_eq(mf_tensor_dtype(s1), MF_F32);
    mf_tensor *all[] = {x, s0, e0, s1, e1};
    for (int i = 0; i < 5; i++) mf_tensor_destroy(all[i]);
}
END_TEST

/* 30 Adam steps of an MLP: the losses under autocast stay within
 * bfloat16's precision of the f32 losses, and are not the same. */
static void train(bool bf16, double *losses, int steps)
{
    mf_manual_seed(11);
    mf_module *m = mf_model_mlp(32, 64, 4);
    mf_tensor_list *ps = mf_module_parameters(m);
    mf_adam_opts ao = mf_adam_defaults();
    ao.lr = 0.01;
    mf_optim *o = mf_adam_create(ps, &ao);
    mf_manual_seed(12);
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(128, 32));
    mf_tensor *t = mf_empty(MF_I64, MF_DIMS(128));
    for (int64_t i = 0; i < 128; i++) mf_tensor_set(t, &i, (double)((i * 5) % 4));
    mf_autocast_set(bf16 ? MF_PRECISION_BF16 : MF_PRECISION_FP32);
    for (int s = 0; s < steps; s++) {
        mf_optim_zero_grad(o);
        mf_tensor *y = mf_module_forward(m, x);
        mf_tensor *l = mf_cross_entropy(y, t, MF_REDUCTION_MEAN);
        ck_assert_nonnull(l);
        losses[s] = mf_tensor_item(l);
        ck_assert_ok(mf_backward(l));
        ck_assert_ok(mf_optim_step(o));
        mf_tensor_destroy(y);
        mf_tensor_destroy(l);
    }
    mf_autocast_set(MF_PRECISION_FP32);
    mf_optim_destroy(o);
    mf_tensor_list_destroy(ps);
    mf_module_destroy(m);
    mf_tensor_destroy(x);
    mf_tensor_destroy(t);
}

START_TEST(training_follows_f32)
{
    double f[30], b[30];
    train(false, f, 30);
    train(true, b, 30);
    double worst = 0;
    bool differ = false;
    for (int s = 0; s < 30; s++) {
        double d = fabs(b[s] - f[s]) / fabs(f[s]);
        if (d > worst) worst = d;
        differ |= b[s] != f[s];
    }
    ck_assert_msg(differ, "bf16 gave the f32 losses bit for bit");
    ck_assert_msg(worst < 2e-2, "bf16 losses differ from f32 by %g relative (first %g vs %g)", worst, b[0], f[0]);
    ck_assert_msg(b[29] < 0.8 * b[0], "bf16 training did not learn: %g -> %g", b[0], b[29]);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("autocast");
    TCase *tc = tcase_create("bf16");
    tcase_add_test(tc, rounding_and_state);
    tcase_add_test(tc, gemm_ops_round_operands);
    tcase_add_test(tc, other_ops_stay_f32);
    tcase_add_test(tc, training_follows_f32);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(make_suite)
