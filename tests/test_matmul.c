/*
 * tests/test_matmul.c - matmul (batched, transposed, broadcast, vectors,
 * strided operands) and linear: hand-worked values, finite-difference
 * gradients and shape errors that name both shapes.
 */
#include "tests/test_util.h"

START_TEST(matmul_forward)
{
    mf_tensor *a = T32(MF_DIMS(2, 3), 1, 2, 3, 4, 5, 6);
    mf_tensor *b = T32(MF_DIMS(3, 2), 7, 8, 9, 10, 11, 12);
    mf_tensor *y = mf_matmul(a, b);
    ck_expect(y, 0, MF_DIMS(2, 2), 58, 64, 139, 154);
    mf_tensor_destroy(y);
    /* a^T a: [3,2]x[2,3] via the flag, and via a transposed view */
    y = mf_matmul_t(a, a, true, false);
    ck_expect(y, 0, MF_DIMS(3, 3), 17, 22, 27, 22, 29, 36, 27, 36, 45);
    mf_tensor_destroy(y);
    mf_tensor *at = mf_transpose(a, 0, 1);
    y = mf_matmul(at, a);
    ck_expect(y, 0, MF_DIMS(3, 3), 17, 22, 27, 22, 29, 36, 27, 36, 45);
    mf_tensor_destroy(y);
    y = mf_matmul_t(a, a, false, true);
    ck_expect(y, 0, MF_DIMS(2, 2), 14, 32, 32, 77);
    mf_tensor_destroy(y);
    /* vectors */
    mf_tensor *v = T32(MF_DIMS(3), 1, 0, -1);
    y = mf_matmul(a, v);
    ck_expect(y, 0, MF_DIMS(2), -2, -2);
    mf_tensor_destroy(y);
    mf_tensor *u = T32(MF_DIMS(2), 1, 1);
    y = mf_matmul(u, a);
    ck_expect(y, 0, MF_DIMS(3), 5, 7, 9);
    mf_tensor_destroy(y);
    y = mf_matmul(v, v);
    ck_expect(y, 0, MF_DIMS(), 2);
    mf_tensor_destroy(y);
    mf_tensor *all[] = {a, b, at, v, u};
    for (int k = 0; k < 5; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(matmul_batched)
{
    mf_tensor *a = T32(MF_DIMS(2, 2, 2), 1, 2, 3, 4, 1, 0, 0, 1);
    mf_tensor *b = T32(MF_DIMS(2, 2, 1), 1, 1, 5, 6);
    mf_tensor *y = mf_matmul(a, b);
    ck_expect(y, 0, MF_DIMS(2, 2, 1), 3, 7, 5, 6);
    mf_tensor_destroy(y);
    /* a 2-D right operand shared by the batch */
    mf_tensor *w = T32(MF_DIMS(2, 1), 1, -1);
    y = mf_matmul(a, w);
    ck_expect(y, 0, MF_DIMS(2, 2, 1), -1, -1, 1, -1);
    mf_tensor_destroy(y);
    /* batch of transposed views */
    mf_tensor *p = mf_permute(a, (const int[]){0, 2, 1});
    y = mf_matmul(p, b);
    ck_expect(y, 0, MF_DIMS(2, 2, 1), 4, 6, 5, 6);
    mf_tensor_destroy(y);
    mf_tensor *all[] = {a, b, w, p};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(matmul_large_matches_naive)
{
    int64_t m = 37, k = 53, n = 29;
    mf_tensor *a = mf_randn(MF_F64, MF_DIMS(m, k)), *b = mf_randn(MF_F64, MF_DIMS(k, n));
    mf_tensor *y = mf_matmul(a, b);
    double *pa = mf_tensor_data(a), *pb = mf_tensor_data(b), *py = mf_tensor_data(y);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t q = 0; q < k; q++) s += pa[i * k + q] * pb[q * n + j];
            ck_assert_msg(fabs(s - py[i * n + j]) < 1e-10, "y[%lld,%lld]", (long long)i, (long long)j);
        }
    mf_tensor_destroy(a);
    mf_tensor_destroy(b);
    mf_tensor_destroy(y);
}
END_TEST

typedef struct { bool ta, tb; } mm_case;

static mf_tensor *mm_fn(mf_tensor **in, void *u)
{
    const mm_case *c = u;
    return mf_matmul_t(in[0], in[1], c->ta, c->tb);
}

START_TEST(matmul_gradients)
{
    for (int t = 0; t < 4; t++) {
        mm_case c = {t & 1, (t >> 1) & 1};
        int64_t as[2] = {c.ta ? 4 : 3, c.ta ? 3 : 4}, bs[2] = {c.tb ? 2 : 4, c.tb ? 4 : 2};
        mf_tensor *in[2] = {mf_test_rand64(2, as, -1, 1), mf_test_rand64(2, bs, -1, 1)};
        mf_test_gradcheck("matmul 2-D", mm_fn, 2, in, &c, 1e-6, 1e-8, 1e-6);
        mf_tensor_destroy(in[0]);
        mf_tensor_destroy(in[1]);
    }
    /* batched, and a 2-D operand shared by the batch */
    mm_case c = {false, true};
    mf_tensor *in[2] = {mf_test_rand64(MF_DIMS(2, 3, 4), -1, 1), mf_test_rand64(MF_DIMS(5, 4), -1, 1)};
    mf_test_gradcheck("matmul batched", mm_fn, 2, in, &c, 1e-6, 1e-8, 1e-6);
    mf_tensor_destroy(in[0]);
    mf_tensor_destroy(in[1]);
    mm_case d = {true, false};
    mf_tensor *in2[2] = {mf_test_rand64(MF_DIMS(2, 4, 3), -1, 1), mf_test_rand64(MF_DIMS(2, 4, 2), -1, 1)};
    mf_test_gradcheck("matmul batched transposed", mm_fn, 2, in2, &d, 1e-6, 1e-8, 1e-6);
    mf_tensor_destroy(in2[0]);
    mf_tensor_destroy(in2[1]);
}
END_TEST

START_TEST(linear_forward)
{
    mf_tensor *x = T32(MF_DIMS(2, 3), 1, 2, 3, 4, 5, 6);
    mf_tensor *w = T32(MF_DIMS(2, 3), 1, 0, -1, 0.5, 0.5, 0.5);
    mf_tensor *b = T32(MF_DIMS(2), 10, 20);
    mf_tensor *y = mf_linear(x, w, b);
    ck_expect(y, 1e-6, MF_DIMS(2, 2), 8, 23, 8, 27.5);
    mf_tensor_destroy(y);
    y = mf_linear(x, w, NULL);
    ck_expect(y, 1e-6, MF_DIMS(2, 2), -2, 3, -2, 7.5);
    mf_tensor_destroy(y);
    /* leading dims are kept: [2,1,3] -> [2,1,2] */
    mf_tensor *x3 = mf_reshape(x, MF_DIMS(2, 1, 3));
    y = mf_linear(x3, w, b);
    ck_expect(y, 1e-6, MF_DIMS(2, 1, 2), 8, 23, 8, 27.5);
    mf_tensor_destroy(y);
    mf_tensor *all[] = {x, w, b, x3};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static mf_tensor *linear_fn(mf_tensor **in, void *u)
{
    (void)u;
    return mf_linear(in[0], in[1], in[2]);
}

START_TEST(linear_gradients)
{
    mf_tensor *in[3] = {mf_test_rand64(MF_DIMS(5, 4), -1, 1), mf_test_rand64(MF_DIMS(3, 4), -1, 1),
                        mf_test_rand64(MF_DIMS(3), -1, 1)};
    mf_test_gradcheck("linear", linear_fn, 3, in, NULL, 1e-6, 1e-8, 1e-6);
    mf_tensor_destroy(in[2]);
    in[2] = NULL;
    mf_test_gradcheck("linear without bias", linear_fn, 3, in, NULL, 1e-6, 1e-8, 1e-6);
    mf_tensor_destroy(in[0]);
    in[0] = mf_test_rand64(MF_DIMS(2, 3, 4), -1, 1);
    mf_test_gradcheck("linear 3-D input", linear_fn, 3, in, NULL, 1e-6, 1e-8, 1e-6);
    mf_tensor_destroy(in[0]);
    mf_tensor_destroy(in[1]);
}
END_TEST

START_TEST(shape_errors)
{
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(32, 784)), *w = mf_zeros(MF_F32, MF_DIMS(512, 10));
    ck_assert_fails(mf_matmul(x, w), MF_ERR_SHAPE, "mf_matmul", "[32,784]", "[512,10]", "inner dims");
    ck_assert_fails(mf_linear(x, w, NULL), MF_ERR_SHAPE, "mf_linear", "[32,784]", "[512,10]");
    mf_tensor *b = mf_zeros(MF_F32, MF_DIMS(3));
    mf_tensor *w2 = mf_zeros(MF_F32, MF_DIMS(10, 784));
    ck_assert_fails(mf_linear(x, w2, b), MF_ERR_SHAPE, "bias", "[3]", "[10,784]");
    mf_tensor *a3 = mf_zeros(MF_F32, MF_DIMS(2, 3, 4)), *b3 = mf_zeros(MF_F32, MF_DIMS(3, 4, 5));
    ck_assert_fails(mf_matmul(a3, b3), MF_ERR_SHAPE, "batch", "[2,3,4]", "[3,4,5]");
    mf_tensor *d = mf_zeros(MF_F64, MF_DIMS(784, 2));
    ck_assert_fails(mf_matmul(x, d), MF_ERR_DTYPE, "f32", "f64");
    mf_tensor *all[] = {x, w, b, w2, a3, b3, d};
    for (int k = 0; k < 7; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, matmul_forward);
    tcase_add_test(tc, matmul_batched);
    tcase_add_test(tc, matmul_large_matches_naive);
    tcase_add_test(tc, matmul_gradients);
    tcase_add_test(tc, linear_forward);
    tcase_add_test(tc, linear_gradients);
    tcase_add_test(tc, shape_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
