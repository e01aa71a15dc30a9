/*
 * tests/test_elementwise.c - broadcasting binary ops, unary ops and the
 * in-place helpers: hand-worked forward values, finite-difference
 * gradients in f64, strided inputs and error messages.
 */
#include "tests/test_util.h"

START_TEST(binary_forward)
{
    mf_tensor *a = T32(MF_DIMS(2, 3), 1, 2, 3, 4, 5, 6);
    mf_tensor *row = T32(MF_DIMS(3), 10, 20, 30);
    mf_tensor *col = T32(MF_DIMS(2, 1), 2, 4);
    mf_tensor *s = mf_scalar(MF_F32, 0.5);
    mf_tensor *y;
    y = mf_add(a, row);
    ck_expect(y, 0, MF_DIMS(2, 3), 11, 22, 33, 14, 25, 36);
    mf_tensor_destroy(y);
    y = mf_sub(a, col);
    ck_expect(y, 0, MF_DIMS(2, 3), -1, 0, 1, 0, 1, 2);
    mf_tensor_destroy(y);
    y = mf_mul(col, row);   /* [2,1] x [3] -> [2,3] */
    ck_expect(y, 0, MF_DIMS(2, 3), 20, 40, 60, 40, 80, 120);
    mf_tensor_destroy(y);
    y = mf_div(a, s);
    ck_expect(y, 0, MF_DIMS(2, 3), 2, 4, 6, 8, 10, 12);
    mf_tensor_destroy(y);
    y = mf_maximum(a, col);
    ck_expect(y, 0, MF_DIMS(2, 3), 2, 2, 3, 4, 5, 6);
    mf_tensor_destroy(y);
    y = mf_eq(a, col);
    ck_expect(y, 0, MF_DIMS(2, 3), 0, 1, 0, 1, 0, 0);
    mf_tensor_destroy(y);
    y = mf_gt(a, col);
    ck_expect(y, 0, MF_DIMS(2, 3), 0, 0, 1, 0, 1, 1);
    mf_tensor_destroy(y);
    y = mf_lt(a, col);
    ck_expect(y, 0, MF_DIMS(2, 3), 1, 0, 0, 0, 0, 0);
    mf_tensor_destroy(y);
    /* integers add and compare too */
    mf_tensor *i = TI64(MF_DIMS(3), 1, 2, 3), *j = TI64(MF_DIMS(1), 2);
    y = mf_add(i, j);
    ck_expect(y, 0, MF_DIMS(3), 3, 4, 5);
    mf_tensor_destroy(y);
    y = mf_eq(i, j);
    ck_expect(y, 0, MF_DIMS(3), 0, 1, 0);
    mf_tensor_destroy(y);
    mf_tensor *all[] = {a, row, col, s, i, j};
    for (int k = 0; k < 6; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(unary_forward)
{
    mf_tensor *x = T64(MF_DIMS(4), -1, 0, 1, 2);
    struct { mf_tensor *(*fn)(mf_tensor *); double v[4]; } cases[] = {
        {mf_neg, {1, 0, -1, -2}},
        {mf_exp, {0.36787944117144233, 1, 2.718281828459045, 7.38905609893065}},
        {mf_abs, {1, 0, 1, 2}},
        {mf_relu, {0, 0, 1, 2}},
        {mf_gelu, {-0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416}},
        {mf_sigmoid, {0.2689414213699951, 0.5, 0.7310585786300049, 0.8807970779778823}},
        {mf_tanh, {-0.7615941559557649, 0, 0.7615941559557649, 0.9640275800758169}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        mf_tensor *y = cases[c].fn(x);
        mf_test_expect("unary", y, MF_DIMS(4), cases[c].v, 1e-12);
        mf_tensor_destroy(y);
    }
    mf_tensor *p = T64(MF_DIMS(3), 1, 4, 9);
    mf_tensor *y = mf_sqrt(p);
    ck_expect(y, 1e-12, MF_DIMS(3), 1, 2, 3);
    mf_tensor_destroy(y);
    y = mf_log(p);
    ck_expect(y, 1e-12, MF_DIMS(3), 0, 1.3862943611198906, 2.1972245773362196);
    mf_tensor_destroy(y);
    y = mf_pow(p, 1.5);
    ck_expect(y, 1e-12, MF_DIMS(3), 1, 8, 27);
    mf_tensor_destroy(y);
    y = mf_scale(p, -2);
    ck_expect(y, 0, MF_DIMS(3), -2, -8, -18);
    mf_tensor_destroy(y);
    y = mf_add_scalar(p, 0.5);
    ck_expect(y, 0, MF_DIMS(3), 1.5, 4.5, 9.5);
    mf_tensor_destroy(y);
    /* f32 agrees with f64 */
    mf_tensor *x32 = mf_cast(x, MF_F32), *g32 = mf_gelu(x32);
    ck_expect(g32, 1e-6, MF_DIMS(4), -0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416);
    mf_tensor_destroy(x32);
    mf_tensor_destroy(g32);
    mf_tensor_destroy(x);
    mf_tensor_destroy(p);
}
END_TEST

typedef struct { int which; } fnsel;

static mf_tensor *binary_fn(mf_tensor **in, void *u)
{
    switch (((fnsel *)u)->which) {
    case 0: return mf_add(in[0], in[1]);
    case 1: return mf_sub(in[0], in[1]);
    case 2: return mf_mul(in[0], in[1]);
    case 3: return mf_div(in[0], in[1]);
    default: return mf_maximum(in[0], in[1]);
    }
}

START_TEST(binary_gradients)
{
    /* broadcasting both ways: [2,3] with [3], [2,1] with [1,3], [] with [2,2] */
    int64_t shapes[][2][3] = {{{2, 3, 0}, {3, 0, 0}}, {{2, 1, 0}, {1, 3, 0}}, {{0, 0, 0}, {2, 2, 0}}};
    int nds[][2] = {{2, 1}, {2, 2}, {0, 2}};
    for (int op = 0; op < 5; op++)
        for (int s = 0; s < 3; s++) {
            mf_tensor *in[2];
            for (int k = 0; k < 2; k++) in[k] = mf_test_rand64(nds[s][k], shapes[s][k], 0.5, 2.0);
            fnsel f = {op};
            char what[64];
            snprintf(what, sizeof what, "binary op %d shapes %d", op, s);
            mf_test_gradcheck(what, binary_fn, 2, in, &f, 1e-6, 1e-7, 1e-6);
            mf_tensor_destroy(in[0]);
            mf_tensor_destroy(in[1]);
        }
}
END_TEST

START_TEST(maximum_ties_share)
{
    mf_tensor *a = T64(MF_DIMS(2), 1, 3), *b = T64(MF_DIMS(2), 1, 2);
    mf_tensor_set_requires_grad(a, true);
    mf_tensor_set_requires_grad(b, true);
    mf_tensor *y = mf_maximum(a, b), *s = mf_sum_all(y);
    ck_assert_ok(mf_backward(s));
    ck_expect(mf_tensor_grad(a), 0, MF_DIMS(2), 0.5, 1);
    ck_expect(mf_tensor_grad(b), 0, MF_DIMS(2), 0.5, 0);
    mf_tensor *all[] = {a, b, y, s};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static mf_tensor *unary_fn(mf_tensor **in, void *u)
{
    switch (((fnsel *)u)->which) {
    case 0: return mf_neg(in[0]);
    case 1: return mf_scale(in[0], 1.7);
    case 2: return mf_add_scalar(in[0], -0.3);
    case 3: return mf_pow(in[0], 2.5);
    case 4: return mf_exp(in[0]);
    case 5: return mf_log(in[0]);
    case 6: return mf_sqrt(in[0]);
    case 7: return mf_abs(in[0]);
    case 8: return mf_relu(in[0]);
    case 9: return mf_gelu(in[0]);
    case 10: return mf_sigmoid(in[0]);
    default: return mf_tanh(in[0]);
    }
}

START_TEST(unary_gradients)
{
    for (int op = 0; op < 12; op++) {
        /* positive inputs where the op needs them; away from kinks at 0 */
        bool positive = op == 3 || op == 5 || op == 6;
        mf_tensor *x = mf_test_rand64(MF_DIMS(3, 4), positive ? 0.2 : -2.0, 2.0);
        double *v = mf_tensor_data(x);
        for (int i = 0; i < 12; i++)
            if (fabs(v[i]) < 0.05) v[i] = 0.1;
        fnsel f = {op};
        char what[32];
        snprintf(what, sizeof what, "unary op %d", op);
        mf_test_gradcheck(what, unary_fn, 1, &x, &f, 1e-6, 1e-7, 1e-6);
        mf_tensor_destroy(x);
    }
}
END_TEST

START_TEST(strided_inputs)
{
    mf_tensor *a = T32(MF_DIMS(2, 3), 1, 2, 3, 4, 5, 6);
    mf_tensor *t = mf_transpose(a, 0, 1);           /* [3,2], strides (1,3) */
    mf_tensor *b = T32(MF_DIMS(3, 2), 1, 1, 2, 2, 3, 3);
    mf_tensor *y = mf_mul(t, b);
    ck_expect(y, 0, MF_DIMS(3, 2), 1, 4, 4, 10, 9, 18);
    mf_tensor *r = mf_relu(t);
    ck_expect(r, 0, MF_DIMS(3, 2), 1, 4, 2, 5, 3, 6);
    mf_tensor *sl = mf_slice(a, 1, 0, 3, 2);        /* columns 0 and 2 */
    mf_tensor *z = mf_add(sl, sl);
    ck_expect(z, 0, MF_DIMS(2, 2), 2, 6, 8, 12);
    /* a large strided case exercises the threaded path */
    mf_tensor *big = mf_rand(MF_F32, MF_DIMS(300, 400));
    mf_tensor *bt = mf_transpose(big, 0, 1), *sq = mf_mul(bt, bt), *c = mf_contiguous(bt), *sq2 = mf_mul(c, c);
    float *p1 = mf_tensor_data(sq), *p2 = mf_tensor_data(sq2);
    ck_assert(!memcmp(p1, p2, 300 * 400 * sizeof(float)));
    mf_tensor *all[] = {a, t, b, y, r, sl, z, big, bt, sq, c, sq2};
    for (int k = 0; k < 12; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(in_place)
{
    mf_tensor *a = mf_zeros(MF_F32, MF_DIMS(2, 3));
    mf_tensor *row = T32(MF_DIMS(3), 1, 2, 3);
    ck_assert_ok(mf_copy_(a, row));
    ck_expect(a, 0, MF_DIMS(2, 3), 1, 2, 3, 1, 2, 3);
    ck_assert_ok(mf_add_(a, row, -2));
    ck_expect(a, 0, MF_DIMS(2, 3), -1, -2, -3, -1, -2, -3);
    ck_assert_ok(mf_scale_(a, -1));
    ck_expect(a, 0, MF_DIMS(2, 3), 1, 2, 3, 1, 2, 3);
    mf_tensor *col = mf_narrow(a, 1, 1, 1);
    ck_assert_ok(mf_fill_(col, 9));
    ck_expect(a, 0, MF_DIMS(2, 3), 1, 9, 3, 1, 9, 3);
    mf_tensor *big = mf_zeros(MF_F32, MF_DIMS(4));
    ck_assert_fails(mf_copy_(row, big), MF_ERR_SHAPE, "[4]", "[3]");
    ck_assert_fails(mf_add_(row, a, 1), MF_ERR_SHAPE, "[2,3]", "[3]");
    mf_tensor *d = mf_zeros(MF_F64, MF_DIMS(3));
    ck_assert_fails(mf_add_(row, d, 1), MF_ERR_DTYPE, "f32", "f64");
    mf_tensor *all[] = {a, row, col, big, d};
    for (int k = 0; k < 5; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(errors)
{
    mf_tensor *a = mf_zeros(MF_F32, MF_DIMS(2, 3)), *b = mf_zeros(MF_F32, MF_DIMS(4)), *c = mf_zeros(MF_F64, MF_DIMS(3));
    mf_tensor *i = mf_zeros(MF_I32, MF_DIMS(3));
    ck_assert_fails(mf_add(a, b), MF_ERR_SHAPE, "mf_add", "[2,3]", "[4]");
    ck_assert_fails(mf_mul(a, c), MF_ERR_DTYPE, "mf_mul", "f32", "f64");
    ck_assert_fails(mf_div(i, i), MF_ERR_DTYPE, "integer");
    ck_assert_fails(mf_exp(i), MF_ERR_DTYPE, "mf_exp", "i32");
    ck_assert_fails(mf_relu(NULL), MF_ERR_ARG, "mf_relu", "NULL");
    /* a NULL from an earlier failure keeps that failure's message */
    mf_clear_error();
    mf_tensor *bad = mf_add(a, b);
    ck_assert_ptr_null(bad);
    mf_tensor *chained = mf_relu(bad);
    ck_assert_ptr_null(chained);
    ck_assert(strstr(mf_last_error(), "[2,3]") != NULL && strstr(mf_last_error(), "mf_relu") != NULL);
    mf_tensor *all[] = {a, b, c, i};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, binary_forward);
    tcase_add_test(tc, unary_forward);
    tcase_add_test(tc, binary_gradients);
    tcase_add_test(tc, maximum_ties_share);
    tcase_add_test(tc, unary_gradients);
    tcase_add_test(tc, strided_inputs);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
