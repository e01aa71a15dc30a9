/*
 * tests/test_loss.c - cross entropy, NLL, MSE and L1: hand values for
 * every reduction, finite-difference gradients, bad targets.
 */
#include <math.h>
#include "tests/test_util.h"

START_TEST(cross_entropy_values)
{
    mf_tensor *x = T64(MF_DIMS(2, 3), 1, 2, 3, 1, 1, 1);
    mf_tensor *t = TI64(MF_DIMS(2), 2, 0);
    double l0 = 0.4076059644443806, l1 = 1.0986122886681098;
    mf_tensor *y = mf_cross_entropy(x, t, MF_REDUCTION_NONE);
    ck_expect(y, 1e-12, MF_DIMS(2), l0, l1);
    mf_tensor_destroy(y);
    y = mf_cross_entropy(x, t, MF_REDUCTION_SUM);
    ck_expect(y, 1e-12, MF_DIMS(), l0 + l1);
    mf_tensor_destroy(y);
    y = mf_cross_entropy(x, t, MF_REDUCTION_MEAN);
    ck_expect(y, 1e-12, MF_DIMS(), (l0 + l1) / 2);
    mf_tensor_destroy(y);
    /* nll of log_softmax is cross entropy */
    mf_tensor *lp = mf_log_softmax(x, 1);
    y = mf_nll_loss(lp, t, MF_REDUCTION_MEAN);
    ck_expect(y, 1e-12, MF_DIMS(), (l0 + l1) / 2);
    mf_tensor_destroy(y);
    mf_tensor *t32 = mf_cast(t, MF_I32);
    y = mf_cross_entropy(x, t32, MF_REDUCTION_SUM);
    ck_expect(y, 1e-12, MF_DIMS(), l0 + l1);
    mf_tensor_destroy(y);
    mf_tensor *all[] = {x, t, lp, t32};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(regression_values)
{
    mf_tensor *x = T32(MF_DIMS(2, 2), 1, 2, 3, 4), *y = T32(MF_DIMS(2, 2), 1, 0, 5, 4);
    mf_tensor *l = mf_mse_loss(x, y, MF_REDUCTION_MEAN);
    ck_expect(l, 1e-6, MF_DIMS(), 2);
    mf_tensor_destroy(l);
    l = mf_mse_loss(x, y, MF_REDUCTION_NONE);
    ck_expect(l, 1e-6, MF_DIMS(2, 2), 0, 4, 4, 0);
    mf_tensor_destroy(l);
    l = mf_l1_loss(x, y, MF_REDUCTION_SUM);
    ck_expect(l, 1e-6, MF_DIMS(), 4);
    mf_tensor_destroy(l);
    l = mf_l1_loss(x, y, MF_REDUCTION_MEAN);
    ck_expect(l, 1e-6, MF_DIMS(), 1);
    mf_tensor_destroy(l);
    mf_tensor *z = mf_zeros(MF_F32, MF_DIMS(4));
    ck_assert_fails(mf_mse_loss(x, z, MF_REDUCTION_MEAN), MF_ERR_SHAPE, "mf_mse_loss", "[2,2]", "[4]");
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(z);
}
END_TEST

typedef struct { int kind; mf_reduction r; mf_tensor *target; } loss_case;

static mf_tensor *loss_fn(mf_tensor **in, void *u)
{
    const loss_case *c = u;
    switch (c->kind) {
    case 0: return mf_cross_entropy(in[0], c->target, c->r);
    case 1: {
        mf_tensor *lp = mf_log_softmax(in[0], 1);
        mf_tensor *l = lp ? mf_nll_loss(lp, c->target, c->r) : NULL;
        mf_tensor_destroy(lp);
        return l;
    }
    case 2: return mf_mse_loss(in[0], in[1], c->r);
    default: return mf_l1_loss(in[0], in[1], c->r);
    }
}

START_TEST(gradients)
{
    mf_tensor *t = TI64(MF_DIMS(4), 0, 2, 1, 2);
    for (int kind = 0; kind < 4; kind++)
        for (int r = 0; r < 3; r++) {
            loss_case c = {kind, (mf_reduction)r, t};
            mf_tensor *in[2] = {mf_test_rand64(MF_DIMS(4, 3), -2, 2), mf_test_rand64(MF_DIMS(4, 3), -2, 2)};
            if (kind < 2) mf_tensor_set_requires_grad(in[1], false);
            char what[32];
            snprintf(what, sizeof what, "loss %d reduction %d", kind, r);
            mf_test_gradcheck(what, loss_fn, 2, in, &c, 1e-6, 1e-8, 1e-6);
            mf_tensor_destroy(in[0]);
            mf_tensor_destroy(in[1]);
        }
    mf_tensor_destroy(t);
}
END_TEST

START_TEST(bad_targets)
{
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(2, 10));
    mf_tensor *t = TI64(MF_DIMS(2), 3, 12);
    ck_assert_fails(mf_cross_entropy(x, t, MF_REDUCTION_MEAN), MF_ERR_ARG, "mf_cross_entropy", "target 12",
                    "10 classes");
    mf_tensor *neg = TI64(MF_DIMS(2), -1, 0);
    ck_assert_fails(mf_nll_loss(x, neg, MF_REDUCTION_MEAN), MF_ERR_ARG, "target -1");
    mf_tensor *t3 = TI64(MF_DIMS(3), 0, 0, 0);
    ck_assert_fails(mf_cross_entropy(x, t3, MF_REDUCTION_MEAN), MF_ERR_SHAPE, "[2,10]", "[3]");
    ck_assert_fails(mf_cross_entropy(x, x, MF_REDUCTION_MEAN), MF_ERR_DTYPE, "target", "f32");
    mf_tensor *all[] = {x, t, neg, t3};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

typedef struct lx_case {
    mf_reduction r;
    mf_tensor *target;
} lx_case;

static mf_tensor *lx_fn(mf_tensor **in, void *u)
{
    const lx_case *c = u;
    return mf_linear_cross_entropy(in[0], in[1], c->target, c->r);
}

static mf_tensor *lx_unfused(mf_tensor *x, mf_tensor *w, mf_tensor *t, mf_reduction r)
{
    mf_tensor *logits = mf_linear(x, w, NULL), *l = logits ? mf_cross_entropy(logits, t, r) : NULL;
    mf_tensor_destroy(logits);
    return l;
}

/* the fused head equals linear + cross_entropy, over several row chunks */
START_TEST(linear_cross_entropy)
{
    mf_tensor *t = TI64(MF_DIMS(5), 6, 0, 3, 3, 1);
    for (int r = 0; r < 3; r++) {
        lx_case c = {(mf_reduction)r, t};
        mf_tensor *in[2] = {mf_test_rand64(MF_DIMS(5, 3), -2, 2), mf_test_rand64(MF_DIMS(7, 3), -2, 2)};
        mf_test_gradcheck("linear_cross_entropy", lx_fn, 2, in, &c, 1e-6, 1e-8, 1e-6);
        mf_tensor_destroy(in[0]);
        mf_tensor_destroy(in[1]);
    }
    mf_tensor_destroy(t);
    /* 30000 classes in f32: about 280 rows per chunk, so 700 rows take three */
    const int64_t N = 700, C = 8, V = 30000;
    mf_manual_seed(3);
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(N, C)), *w = mf_randn(MF_F32, MF_DIMS(V, C));
    mf_tensor *u = mf_rand(MF_F64, MF_DIMS(N)), *us = mf_scale(u, V - 1e-6), *tt = mf_cast(us, MF_I64);
    ck_assert_ok(mf_tensor_set_requires_grad(x, true));
    ck_assert_ok(mf_tensor_set_requires_grad(w, true));
    mf_tensor *l1 = mf_linear_cross_entropy(x, w, tt, MF_REDUCTION_MEAN);
    ck_assert_nonnull(l1);
    ck_assert_ok(mf_backward(l1));
    mf_tensor *gx = mf_tensor_retain(mf_tensor_grad(x)), *gw = mf_tensor_retain(mf_tensor_grad(w));
    ck_assert_ok(mf_tensor_set_grad(x, NULL));
    ck_assert_ok(mf_tensor_set_grad(w, NULL));
    mf_tensor *l2 = lx_unfused(x, w, tt, MF_REDUCTION_MEAN);
    ck_assert_ok(mf_backward(l2));
    ck_assert_msg(fabs(mf_tensor_item(l1) - mf_tensor_item(l2)) < 1e-5 * fabs(mf_tensor_item(l2)), "loss %g vs %g",
                  mf_tensor_item(l1), mf_tensor_item(l2));
    double dx = mf_test_max_diff(gx, mf_tensor_grad(x), true), dw = mf_test_max_diff(gw, mf_tensor_grad(w), true);
    ck_assert_msg(dx < 1e-6 && dw < 1e-6, "gradients differ: x %g, weight %g", dx, dw);
    /* without grad mode nothing is kept, and the loss is the same */
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *l3 = mf_linear_cross_entropy(x, w, tt, MF_REDUCTION_MEAN);
    mf_set_grad_enabled(prev);
    ck_assert(mf_tensor_item(l3) == mf_tensor_item(l1));
    mf_tensor *wide = mf_zeros(MF_F32, MF_DIMS(V, C + 1));
    ck_assert_fails(mf_linear_cross_entropy(x, wide, tt, MF_REDUCTION_MEAN), MF_ERR_SHAPE, "weight [V, C]");
    mf_tensor *all[] = {x, w, u, us, tt, l1, l2, l3, gx, gw, wide};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("loss");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cross_entropy_values);
    tcase_add_test(tc, regression_values);
    tcase_add_test(tc, gradients);
    tcase_add_test(tc, bad_targets);
    tcase_add_test(tc, linear_cross_entropy);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
