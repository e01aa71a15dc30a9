/*
 * tests/test_reduce.c - sum, mean, max over axes, argmax: values,
 * keepdim, strided input, finite-difference gradients, errors.
 */
#include <stdlib.h>
#include "tests/test_util.h"

START_TEST(forward)
{
    mf_tensor *x = T32(MF_DIMS(2, 3), 1, 5, 3, 4, 2, 6);
    mf_tensor *y;
    y = mf_sum(x, 1, (const int[]){0}, false);
    ck_expect(y, 0, MF_DIMS(3), 5, 7, 9);
    mf_tensor_destroy(y);
    y = mf_sum(x, 1, (const int[]){-1}, true);
    ck_expect(y, 0, MF_DIMS(2, 1), 9, 12);
    mf_tensor_destroy(y);
    y = mf_mean(x, 1, (const int[]){1}, false);
    ck_expect(y, 1e-6, MF_DIMS(2), 3, 4);
    mf_tensor_destroy(y);
    y = mf_max(x, 1, (const int[]){1}, false);
    ck_expect(y, 0, MF_DIMS(2), 5, 6);
    mf_tensor_destroy(y);
    y = mf_max(x, 2, (const int[]){0, 1}, false);
    ck_expect(y, 0, MF_DIMS(), 6);
    mf_tensor_destroy(y);
    y = mf_sum_all(x);
    ck_expect(y, 0, MF_DIMS(), 21);
    mf_tensor_destroy(y);
    y = mf_mean_all(x);
    ck_expect(y, 1e-6, MF_DIMS(), 3.5);
    mf_tensor_destroy(y);
    y = mf_argmax(x, 1, false);
    ck_expect(y, 0, MF_DIMS(2), 1, 2);
    ck_assert_int_eq(mf_tensor_dtype(y), MF_I64);
    mf_tensor_destroy(y);
    y = mf_argmax(x, 0, true);
    ck_expect(y, 0, MF_DIMS(1, 3), 1, 0, 1);
    mf_tensor_destroy(y);
    /* a transposed view and a 3-D middle axis */
    mf_tensor *t = mf_transpose(x, 0, 1);
    y = mf_sum(t, 1, (const int[]){1}, false);
    ck_expect(y, 0, MF_DIMS(3), 5, 7, 9);
    mf_tensor_destroy(y);
    mf_tensor *z = T64(MF_DIMS(2, 2, 2), 1, 2, 3, 4, 5, 6, 7, 8);
    y = mf_sum(z, 1, (const int[]){1}, false);
    ck_expect(y, 0, MF_DIMS(2, 2), 4, 6, 12, 14);
    mf_tensor_destroy(y);
    y = mf_sum(z, 2, (const int[]){0, 2}, false);
    ck_expect(y, 0, MF_DIMS(2), 14, 22);
    mf_tensor_destroy(y);
    mf_tensor_destroy(x);
    mf_tensor_destroy(t);
    mf_tensor_destroy(z);
}
END_TEST

START_TEST(large_sum_is_accurate)
{
    /* 10^6 ones in f32: a float accumulator would drift, double does not */
    mf_tensor *x = mf_full(MF_F32, MF_DIMS(1000, 1000), 0.1);
    mf_tensor *s = mf_sum_all(x);
    ck_assert_msg(fabs(mf_tensor_item(s) - 100000.0) < 0.05, "sum %.6f", mf_tensor_item(s));
    mf_tensor *c = mf_sum(x, 1, (const int[]){0}, false);
    ck_assert(fabs(mf_tensor_get(c, (const int64_t[]){999}) - 100.0) < 1e-3);
    mf_tensor_destroy(x);
    mf_tensor_destroy(s);
    mf_tensor_destroy(c);
}
END_TEST

/* A convolution's bias gradient, [N, C, H, W] summed over N, H and W
 * (read row by row, every channel's run in turn): the values, and the
 * same bits on 1 and 2 threads. */
START_TEST(channel_sums)
{
    const int64_t N = 37, C = 5, H = 31, W = 33;
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(N, C, H, W));
    float *xv = malloc(sizeof(float) * N * C * H * W);
    mf_tensor_copy_out(x, MF_F32, xv, N * C * H * W);
    float y[2][5];
    for (int t = 0; t < 2; t++) {
        mf_set_threads(t + 1);
        mf_tensor *s = mf_sum(x, 3, (const int[]){0, 2, 3}, false);
        ck_expect_shape(s, MF_DIMS(C));
        mf_tensor_copy_out(s, MF_F32, y[t], C);
        mf_tensor_destroy(s);
    }
    mf_set_threads(1);
    for (int64_t c = 0; c < C; c++) {
        double ref = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < H * W; i++) ref += xv[(n * C + c) * H * W + i];
        ck_assert_msg(fabs(y[0][c] - ref) < 1e-5 * (1 + fabs(ref)), "channel %lld: %g, reference %g", (long long)c,
                      y[0][c], ref);
        ck_assert_msg(y[0][c] == y[1][c], "channel %lld: %a on 1 thread, %a on 2", (long long)c, y[0][c], y[1][c]);
    }
    free(xv);
    mf_tensor_destroy(x);
}
END_TEST

typedef struct { int op, naxes, axes[3]; bool keep; } red_case;

static mf_tensor *red_fn(mf_tensor **in, void *u)
{
    const red_case *c = u;
    if (c->op == 0) return mf_sum(in[0], c->naxes, c->axes, c->keep);
    if (c->op == 1) return mf_mean(in[0], c->naxes, c->axes, c->keep);
    return mf_max(in[0], c->naxes, c->axes, c->keep);
}

START_TEST(gradients)
{
    red_case cases[] = {
        {0, 1, {0}, false}, {0, 2, {0, 2}, true}, {1, 1, {1}, false}, {1, 0, {0}, false},
        {2, 1, {2}, false}, {2, 2, {0, 1}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mf_tensor *x = mf_test_rand64(MF_DIMS(3, 4, 2), -1, 1);
        char what[32];
        snprintf(what, sizeof what, "reduce case %zu", i);
        mf_test_gradcheck(what, red_fn, 1, &x, &cases[i], 1e-6, 1e-8, 1e-6);
        mf_tensor_destroy(x);
    }
}
END_TEST

START_TEST(max_ties_share_gradient)
{
    mf_tensor *x = T64(MF_DIMS(4), 1, 3, 3, 2);
    mf_tensor_set_requires_grad(x, true);
    mf_tensor *m = mf_max(x, 1, (const int[]){0}, false);
    ck_assert_ok(mf_backward(m));
    ck_expect(mf_tensor_grad(x), 0, MF_DIMS(4), 0, 0.5, 0.5, 0);
    mf_tensor_destroy(x);
    mf_tensor_destroy(m);
}
END_TEST

START_TEST(errors)
{
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(2, 3));
    ck_assert_fails(mf_sum(x, 1, (const int[]){2}, false), MF_ERR_ARG, "mf_sum", "axis 2");
    ck_assert_fails(mf_sum(x, 2, (const int[]){1, -1}, false), MF_ERR_ARG, "twice");
    ck_assert_fails(mf_argmax(x, 5, false), MF_ERR_ARG, "mf_argmax");
    mf_tensor *e = mf_zeros(MF_F32, MF_DIMS(0, 3));
    ck_assert_fails(mf_max(e, 1, (const int[]){0}, false), MF_ERR_SHAPE, "empty");
    mf_tensor *s = mf_sum(e, 1, (const int[]){0}, false);
    ck_expect(s, 0, MF_DIMS(3), 0, 0, 0);
    mf_tensor_destroy(s);
    mf_tensor_destroy(e);
    mf_tensor_destroy(x);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward);
    tcase_add_test(tc, large_sum_is_accurate);
    tcase_add_test(tc, channel_sums);
    tcase_add_test(tc, gradients);
    tcase_add_test(tc, max_ties_share_gradient);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
