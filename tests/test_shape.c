/*
 * tests/test_shape.c - reshape, permute, narrow/slice, expand, concat
 * and cast: forward values, gradients through views, edge cases.
 */
#include "tests/test_util.h"

typedef struct { int which; } sel;

static mf_tensor *view_fn(mf_tensor **in, void *u)
{
    mf_tensor *x = in[0], *v = NULL, *w = NULL;
    switch (((sel *)u)->which) {
    case 0: v = mf_reshape(x, MF_DIMS(4, -1)); break;
    case 1: v = mf_permute(x, (const int[]){2, 0, 1}); break;
    case 2: v = mf_narrow(x, 1, 1, 2); break;
    case 3: v = mf_slice(x, 2, 0, 4, 3); break;
    case 4: {
        mf_tensor *n = mf_narrow(x, 1, 0, 1);          /* [2,1,4] */
        v = mf_expand(n, MF_DIMS(3, 2, 3, 4));
        mf_tensor_destroy(n);
        break;
    }
    case 5: {
        mf_tensor *t = mf_transpose(x, 0, 2);          /* non-contiguous, then reshape copies */
        v = mf_reshape(t, MF_DIMS(-1));
        mf_tensor_destroy(t);
        break;
    }
    case 6: v = mf_flatten(x, 1, 2); break;
    default: {
        mf_tensor *s = mf_unsqueeze(x, 1);
        v = mf_squeeze(s, 1);
        mf_tensor_destroy(s);
    }
    }
    /* multiply so the gradient is not all ones */
    if (v) w = mf_mul(v, v);
    mf_tensor_destroy(v);
    return w;
}

START_TEST(view_gradients)
{
    for (int i = 0; i < 8; i++) {
        mf_tensor *x = mf_test_rand64(MF_DIMS(2, 3, 4), -1, 1);
        sel s = {i};
        char what[32];
        snprintf(what, sizeof what, "view case %d", i);
        mf_test_gradcheck(what, view_fn, 1, &x, &s, 1e-6, 1e-8, 1e-6);
        mf_tensor_destroy(x);
    }
}
END_TEST

START_TEST(concat_forward_and_grad)
{
    mf_tensor *a = T32(MF_DIMS(2, 1), 1, 2), *b = T32(MF_DIMS(2, 2), 3, 4, 5, 6);
    mf_tensor *y = mf_concat(2, (mf_tensor *const[]){a, b}, 1);
    ck_expect(y, 0, MF_DIMS(2, 3), 1, 3, 4, 2, 5, 6);
    mf_tensor_destroy(y);
    y = mf_concat(2, (mf_tensor *const[]){b, b}, 0);
    ck_expect(y, 0, MF_DIMS(4, 2), 3, 4, 5, 6, 3, 4, 5, 6);
    mf_tensor_destroy(y);
    ck_assert_fails(mf_concat(2, (mf_tensor *const[]){a, b}, 0), MF_ERR_SHAPE, "[2,2]", "[2,1]", "dim 0");
    mf_tensor_destroy(a);
    mf_tensor_destroy(b);
}
END_TEST

static mf_tensor *concat_fn(mf_tensor **in, void *u)
{
    (void)u;
    mf_tensor *c = mf_concat(3, in, 1);
    mf_tensor *y = c ? mf_mul(c, c) : NULL;
    mf_tensor_destroy(c);
    return y;
}

START_TEST(concat_gradients)
{
    mf_tensor *in[3] = {mf_test_rand64(MF_DIMS(2, 1, 3), -1, 1), mf_test_rand64(MF_DIMS(2, 2, 3), -1, 1),
                        mf_test_rand64(MF_DIMS(2, 3, 3), -1, 1)};
    mf_tensor_set_requires_grad(in[1], false);   /* a constant in the middle */
    mf_test_gradcheck("concat", concat_fn, 3, in, NULL, 1e-6, 1e-8, 1e-6);
    ck_assert_ptr_null(mf_tensor_grad(in[1]));
    for (int i = 0; i < 3; i++) mf_tensor_destroy(in[i]);
}
END_TEST

static mf_tensor *cast_fn(mf_tensor **in, void *u)
{
    (void)u;
    mf_tensor *f = mf_cast(in[0], MF_F32);
    mf_tensor *g = f ? mf_mul(f, f) : NULL;
    mf_tensor *d = g ? mf_cast(g, MF_F64) : NULL;
    mf_tensor_destroy(f);
    mf_tensor_destroy(g);
    return d;
}

START_TEST(cast_gradient)
{
    mf_tensor *x = mf_test_rand64(MF_DIMS(5), 0.5, 1.5);
    /* through f32: precision is that of float */
    mf_test_gradcheck("cast", cast_fn, 1, &x, NULL, 1e-3, 1e-4, 1e-3);
    ck_assert_int_eq(mf_tensor_dtype(mf_tensor_grad(x)), MF_F64);
    mf_tensor_destroy(x);
}
END_TEST

START_TEST(edge_cases)
{
    mf_tensor *x = T32(MF_DIMS(2, 3), 1, 2, 3, 4, 5, 6);
    /* empty slices and size-1 dims */
    mf_tensor *e = mf_narrow(x, 1, 3, 0);
    ck_expect_shape(e, MF_DIMS(2, 0));
    mf_tensor *s = mf_slice(x, 1, -2, 100, 1);
    ck_expect(s, 0, MF_DIMS(2, 2), 2, 3, 5, 6);
    mf_tensor *r = mf_reshape(x, MF_DIMS(1, 2, 1, 3, 1));
    ck_assert(mf_tensor_shares_storage(r, x));
    mf_tensor *q = mf_squeeze(r, 0);
    ck_expect_shape(q, MF_DIMS(2, 1, 3, 1));
    mf_tensor *n = mf_squeeze(q, 2);   /* size 3: unchanged */
    ck_expect_shape(n, MF_DIMS(2, 1, 3, 1));
    /* a view of a view of a transposed tensor */
    mf_tensor *t = mf_transpose(x, 0, 1), *tn = mf_narrow(t, 0, 1, 2), *tc = mf_contiguous(tn);
    ck_expect(tc, 0, MF_DIMS(2, 2), 2, 5, 3, 6);
    /* expand a 0-dim tensor */
    mf_tensor *z = mf_scalar(MF_F32, 3), *ze = mf_expand(z, MF_DIMS(2, 2));
    ck_expect(ze, 0, MF_DIMS(2, 2), 3, 3, 3, 3);
    mf_tensor *all[] = {x, e, s, r, q, n, t, tn, tc, z, ze};
    for (int k = 0; k < 11; k++) mf_tensor_destroy(all[k]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("shape");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, view_gradients);
    tcase_add_test(tc, concat_forward_and_grad);
    tcase_add_test(tc, concat_gradients);
    tcase_add_test(tc, cast_gradient);
    tcase_add_test(tc, edge_cases);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
