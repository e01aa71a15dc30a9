/*
 * tests/test_softmax.c - softmax, log_softmax and embedding.
 */
#include "tests/test_util.h"

START_TEST(softmax_forward)
{
    mf_tensor *x = T64(MF_DIMS(2, 3), 1, 2, 3, 1000, 1000, 1000);
    mf_tensor *y = mf_softmax(x, 1);
    ck_expect(y, 1e-12, MF_DIMS(2, 3), 0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 1.0 / 3,
              1.0 / 3, 1.0 / 3);
    mf_tensor_destroy(y);
    y = mf_log_softmax(x, -1);
    ck_expect(y, 1e-12, MF_DIMS(2, 3), -2.4076059644443806, -1.4076059644443806, -0.4076059644443806,
              -1.0986122886681098, -1.0986122886681098, -1.0986122886681098);
    mf_tensor_destroy(y);
    /* along dim 0 the columns sum to one */
    mf_tensor *z = T32(MF_DIMS(2, 2), 0, 1, 0, 3);
    y = mf_softmax(z, 0);
    ck_expect(y, 1e-6, MF_DIMS(2, 2), 0.5, 0.11920292202211755, 0.5, 0.8807970779778823);
    mf_tensor_destroy(y);
    mf_tensor_destroy(x);
    mf_tensor_destroy(z);
}
END_TEST

typedef struct { int dim; bool log; } sm_case;

static mf_tensor *sm_fn(mf_tensor **in, void *u)
{
    const sm_case *c = u;
    return c->log ? mf_log_softmax(in[0], c->dim) : mf_softmax(in[0], c->dim);
}

START_TEST(softmax_gradients)
{
    sm_case cases[] = {{1, false}, {1, true}, {0, false}, {2, true}, {-1, false}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mf_tensor *x = mf_test_rand64(MF_DIMS(2, 3, 4), -2, 2);
        mf_test_gradcheck("softmax", sm_fn, 1, &x, &cases[i], 1e-6, 1e-8, 1e-6);
        mf_tensor_destroy(x);
    }
}
END_TEST

START_TEST(embedding_forward)
{
    mf_tensor *w = T32(MF_DIMS(3, 2), 0, 1, 10, 11, 20, 21);
    mf_tensor *ix = TI64(MF_DIMS(2, 2), 2, 0, 1, 2);
    mf_tensor *y = mf_embedding(w, ix);
    ck_expect(y, 0, MF_DIMS(2, 2, 2), 20, 21, 0, 1, 10, 11, 20, 21);
    mf_tensor_destroy(y);
    mf_tensor *i32 = mf_cast(ix, MF_I32);
    y = mf_embedding(w, i32);
    ck_expect_shape(y, MF_DIMS(2, 2, 2));
    mf_tensor_destroy(y);
    mf_tensor *bad = TI64(MF_DIMS(2), 1, 3);
    ck_assert_fails(mf_embedding(w, bad), MF_ERR_ARG, "mf_embedding", "3", "out of range");
    ck_assert_fails(mf_embedding(w, w), MF_ERR_DTYPE, "index", "f32");
    mf_tensor *all[] = {w, ix, i32, bad};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static mf_tensor *emb_fn(mf_tensor **in, void *u)
{
    mf_tensor *y = mf_embedding(in[0], u);
    mf_tensor *z = y ? mf_mul(y, y) : NULL;
    mf_tensor_destroy(y);
    return z;
}

START_TEST(embedding_gradient)
{
    mf_tensor *w = mf_test_rand64(MF_DIMS(5, 3), -1, 1);
    mf_tensor *ix = TI64(MF_DIMS(2, 3), 4, 0, 4, 1, 4, 2);   /* repeats accumulate */
    mf_test_gradcheck("embedding", emb_fn, 1, &w, ix, 1e-6, 1e-8, 1e-6);
    /* row 3 is never looked up: zero gradient */
    double g[3];
    mf_tensor *row = mf_narrow(mf_tensor_grad(w), 0, 3, 1);
    ck_assert_ok(mf_tensor_copy_out(row, MF_F64, g, 3));
    ck_assert(g[0] == 0 && g[1] == 0 && g[2] == 0);
    mf_tensor_destroy(row);
    mf_tensor_destroy(w);
    mf_tensor_destroy(ix);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("softmax");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, softmax_forward);
    tcase_add_test(tc, softmax_gradients);
    tcase_add_test(tc, embedding_forward);
    tcase_add_test(tc, embedding_gradient);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
