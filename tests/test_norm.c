/*
 * tests/test_norm.c - batch norm (train/eval, running statistics),
 * layer norm and dropout.
 */
#include <stdlib.h>
#include "tests/test_util.h"

START_TEST(batch_norm_train)
{
    /* x [2,2,1,2]: channel 0 holds 1,2,3,4; channel 1 holds 10,10,20,20 */
    mf_tensor *x = T64(MF_DIMS(2, 2, 1, 2), 1, 2, 10, 10, 3, 4, 20, 20);
    mf_tensor *rm = mf_zeros(MF_F64, MF_DIMS(2)), *rv = mf_ones(MF_F64, MF_DIMS(2));
    mf_tensor *y = mf_batch_norm(x, rm, rv, NULL, NULL, true, 0.1, 1e-5);
    /* channel 0: mean 2.5, var 1.25; channel 1: mean 15, var 25 */
    double s0 = 1 / sqrt(1.25 + 1e-5), s1 = 1 / sqrt(25 + 1e-5);
    ck_expect(y, 1e-9, MF_DIMS(2, 2, 1, 2), -1.5 * s0, -0.5 * s0, -5 * s1, -5 * s1, 0.5 * s0, 1.5 * s0, 5 * s1, 5 * s1);
    /* running: 0.9*old + 0.1*batch, with the unbiased variance (n-1 = 3) */
    ck_expect(rm, 1e-12, MF_DIMS(2), 0.25, 1.5);
    ck_expect(rv, 1e-12, MF_DIMS(2), 0.9 + 0.1 * 5.0 / 3, 0.9 + 0.1 * 100.0 / 3);
    mf_tensor_destroy(y);
    /* eval uses the running statistics, weight and bias */
    mf_tensor *w = T64(MF_DIMS(2), 2, 1), *b = T64(MF_DIMS(2), 0, -1);
    y = mf_batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5);
    double v0 = 0.9 + 0.5 / 3, v1 = 0.9 + 10.0 / 3;
    ck_expect(y, 1e-9, MF_DIMS(2, 2, 1, 2), 2 * (1 - 0.25) / sqrt(v0 + 1e-5), 2 * (2 - 0.25) / sqrt(v0 + 1e-5),
              (10 - 1.5) / sqrt(v1 + 1e-5) - 1, (10 - 1.5) / sqrt(v1 + 1e-5) - 1, 2 * (3 - 0.25) / sqrt(v0 + 1e-5),
              2 * (4 - 0.25) / sqrt(v0 + 1e-5), (20 - 1.5) / sqrt(v1 + 1e-5) - 1, (20 - 1.5) / sqrt(v1 + 1e-5) - 1);
    ck_expect(rm, 1e-12, MF_DIMS(2), 0.25, 1.5);   /* eval leaves them alone */
    mf_tensor *all[] = {x, rm, rv, y, w, b};
    for (int k = 0; k < 6; k++) mf_tensor_destroy(all[k]);
}
END_TEST

typedef struct { bool train; mf_tensor *rm, *rv; } bn_case;

static mf_tensor *bn_fn(mf_tensor **in, void *u)
{
    bn_case *c = u;
    return mf_batch_norm(in[0], c->rm, c->rv, in[1], in[2], c->train, 0.0, 1e-5);
}

START_TEST(batch_norm_gradients)
{
    for (int train = 0; train < 2; train++) {
        bn_case c = {train, mf_test_rand64(MF_DIMS(3), -0.5, 0.5), mf_test_rand64(MF_DIMS(3), 0.5, 1.5)};
        mf_tensor_set_requires_grad(c.rm, false);
        mf_tensor_set_requires_grad(c.rv, false);
        mf_tensor *in[3] = {mf_test_rand64(MF_DIMS(4, 3, 2, 2), -1, 1), mf_test_rand64(MF_DIMS(3), 0.5, 1.5),
                            mf_test_rand64(MF_DIMS(3), -1, 1)};
        mf_test_gradcheck(train ? "batch_norm train" : "batch_norm eval", bn_fn, 3, in, &c, 1e-6, 1e-7, 1e-5);
        for (int k = 0; k < 3; k++) mf_tensor_destroy(in[k]);
        mf_tensor_destroy(c.rm);
        mf_tensor_destroy(c.rv);
    }
    /* no affine parameters, 2-D input [N, C] */
    bn_case c = {true, NULL, NULL};
    mf_tensor *in[3] = {mf_test_rand64(MF_DIMS(5, 4), -1, 1), NULL, NULL};
    mf_test_gradcheck("batch_norm 2-D", bn_fn, 3, in, &c, 1e-6, 1e-7, 1e-5);
    mf_tensor_destroy(in[0]);
}
END_TEST

START_TEST(batch_norm_errors)
{
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(1, 3, 1, 1)), *rm = mf_zeros(MF_F32, MF_DIMS(4));
    ck_assert_fails(mf_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), MF_ERR_SHAPE, "one value per channel");
    ck_assert_fails(mf_batch_norm(x, rm, NULL, NULL, NULL, false, 0.1, 1e-5), MF_ERR_SHAPE, "running_mean", "[4]", "3 channels");
    ck_assert_fails(mf_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5), MF_ERR_ARG, "eval mode");
    mf_tensor_destroy(x);
    mf_tensor_destroy(rm);
}
END_TEST

START_TEST(layer_norm)
{
    mf_tensor *x = T64(MF_DIMS(2, 2), 1, 3, 5, 5);
    mf_tensor *y = mf_layer_norm(x, 1, NULL, NULL, 1e-5);
    double s = 1 / sqrt(1 + 1e-5);
    ck_expect(y, 1e-9, MF_DIMS(2, 2), -s, s, 0, 0);
    mf_tensor_destroy(y);
    mf_tensor *w = T64(MF_DIMS(2), 2, 3), *b = T64(MF_DIMS(2), 1, 1);
    y = mf_layer_norm(x, 1, w, b, 1e-5);
    ck_expect(y, 1e-9, MF_DIMS(2, 2), 1 - 2 * s, 1 + 3 * s, 1, 1);
    mf_tensor_destroy(y);
    mf_tensor *bad = mf_zeros(MF_F64, MF_DIMS(3));
    ck_assert_fails(mf_layer_norm(x, 1, bad, NULL, 1e-5), MF_ERR_SHAPE, "weight", "[3]", "[2]");
    ck_assert_fails(mf_layer_norm(x, 3, NULL, NULL, 1e-5), MF_ERR_ARG, "last 3 dims");
    mf_tensor *all[] = {x, w, b, bad};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static mf_tensor *ln_fn(mf_tensor **in, void *u)
{
    return mf_layer_norm(in[0], *(int *)u, in[1], in[2], 1e-5);
}

START_TEST(layer_norm_gradients)
{
    int nn = 2;
    mf_tensor *in[3] = {mf_test_rand64(MF_DIMS(3, 2, 4), -1, 1), mf_test_rand64(MF_DIMS(2, 4), 0.5, 1.5),
                        mf_test_rand64(MF_DIMS(2, 4), -1, 1)};
    mf_test_gradcheck("layer_norm", ln_fn, 3, in, &nn, 1e-6, 1e-7, 1e-5);
    for (int k = 0; k < 3; k++) mf_tensor_destroy(in[k]);
    /* rows whose length is not a multiple of the 8 partial sums, with and
     * without the affine parameters */
    const int64_t cols[] = {3, 11, 19};
    for (int c = 0; c < 3; c++) {
        int one = 1;
        mf_tensor *x[3] = {mf_test_rand64(MF_DIMS(4, cols[c]), -1, 1), mf_test_rand64(MF_DIMS(cols[c]), 0.5, 1.5),
                           mf_test_rand64(MF_DIMS(cols[c]), -1, 1)};
        mf_test_gradcheck("layer_norm affine", ln_fn, 3, x, &one, 1e-6, 1e-7, 1e-5);
        mf_test_gradcheck("layer_norm plain", ln_fn, 1, x, &one, 1e-6, 1e-7, 1e-5);
        for (int k = 0; k < 3; k++) mf_tensor_destroy(x[k]);
    }
}
END_TEST

/* f32 rows of a GPT's width (and one more) agree with f64 */
START_TEST(layer_norm_f32)
{
    const int64_t cols[] = {384, 389};
    for (int c = 0; c < 2; c++) {
        mf_tensor *x = mf_test_rand64(MF_DIMS(6, cols[c]), -2, 3), *w = mf_test_rand64(MF_DIMS(cols[c]), 0.5, 1.5),
                  *b = mf_test_rand64(MF_DIMS(cols[c]), -1, 1);
        mf_tensor *r = mf_test_rand64(MF_DIMS(6, cols[c]), -1, 1);
        mf_tensor *in[6] = {x, w, b};
        for (int k = 0; k < 3; k++) {   /* f32 leaves of the same values */
            mf_tensor *c32 = mf_cast(in[k], MF_F32);
            in[k + 3] = mf_tensor_detach(c32);
            mf_tensor_destroy(c32);
            ck_assert_ok(mf_tensor_set_requires_grad(in[k + 3], true));
        }
        mf_tensor *xf = in[3], *wf = in[4], *bf = in[5], *rf = mf_cast(r, MF_F32);
        mf_tensor *y = mf_layer_norm(x, 1, w, b, 1e-5), *yf = mf_layer_norm(xf, 1, wf, bf, 1e-5);
        ck_assert_msg(mf_test_max_diff(y, yf, true) < 1e-5, "f32 layer norm differs by %g", mf_test_max_diff(y, yf, true));
        /* backward of sum(y r): all three gradients */
        mf_tensor *p = mf_mul(y, r), *pf = mf_mul(yf, rf), *l = mf_sum_all(p), *lf = mf_sum_all(pf);
        ck_assert_ok(mf_backward(l));
        ck_assert_ok(mf_backward(lf));
        for (int k = 0; k < 3; k++) {
            double d = mf_test_max_diff(mf_tensor_grad(in[k]), mf_tensor_grad(in[k + 3]), true);
            ck_assert_msg(d < 1e-4, "f32 layer norm gradient %d differs by %g", k, d);
        }
        mf_tensor *all[] = {x, w, b, r, xf, wf, bf, rf, y, yf, p, pf, l, lf};
        for (int k = 0; k < 14; k++) mf_tensor_destroy(all[k]);
    }
}
END_TEST

START_TEST(dropout)
{
    mf_manual_seed(3);
    mf_tensor *x = mf_ones(MF_F32, MF_DIMS(100, 100));
    mf_tensor_set_requires_grad(x, true);
    mf_tensor *y = mf_dropout(x, 0.3, true);
    float *v = mf_tensor_data(y);
    int zeros = 0;
    for (int i = 0; i < 10000; i++) {
        ck_assert(v[i] == 0 || fabsf(v[i] - 1 / 0.7f) < 1e-6);
        zeros += v[i] == 0;
    }
    ck_assert_msg(zeros > 2800 && zeros < 3200, "%d zeros of 10000 at p=0.3", zeros);
    /* the gradient is the mask */
    mf_tensor *s = mf_sum_all(y);
    ck_assert_ok(mf_backward(s));
    ck_assert(!memcmp(mf_tensor_data(mf_tensor_grad(x)), v, 10000 * sizeof(float)));
    /* the same seed gives the same mask; the next call a different one */
    mf_manual_seed(3);
    mf_tensor *y2 = mf_dropout(x, 0.3, true), *y3 = mf_dropout(x, 0.3, true);
    ck_assert(!memcmp(mf_tensor_data(y2), v, 10000 * sizeof(float)));
    ck_assert(memcmp(mf_tensor_data(y3), v, 10000 * sizeof(float)));
    /* eval: identity */
    mf_tensor *e = mf_dropout(x, 0.3, false);
    ck_assert(!memcmp(mf_tensor_data(e), mf_tensor_data(x), 10000 * sizeof(float)));
    ck_assert_fails(mf_dropout(x, 1.5, true), MF_ERR_ARG, "p=1.5");
    mf_tensor *all[] = {x, y, s, y2, y3, e};
    for (int k = 0; k < 6; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("norm");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, batch_norm_train);
    tcase_add_test(tc, batch_norm_gradients);
    tcase_add_test(tc, batch_norm_errors);
    tcase_add_test(tc, layer_norm);
    tcase_add_test(tc, layer_norm_gradients);
    tcase_add_test(tc, layer_norm_f32);
    tcase_add_test(tc, dropout);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
