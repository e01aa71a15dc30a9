/*
 * tests/test_tensor.c - tensor core: creation, dtypes, views sharing
 * storage, refcounts, data access, random draws and errors.
 */
#include "tests/test_util.h"

START_TEST(create_and_fill)
{
    mf_tensor *z = mf_zeros(MF_F32, MF_DIMS(2, 3));
    ck_expect(z, 0, MF_DIMS(2, 3), 0, 0, 0, 0, 0, 0);
    ck_assert(mf_tensor_is_contiguous(z));
    ck_assert_int_eq(mf_tensor_strides(z)[0], 3);
    ck_assert_int_eq(mf_tensor_nbytes(z), 24);
    mf_tensor *f = mf_full(MF_I64, MF_DIMS(4), 7);
    ck_expect(f, 0, MF_DIMS(4), 7, 7, 7, 7);
    mf_tensor *s = mf_scalar(MF_F64, 2.5);
    ck_assert_int_eq(mf_tensor_ndim(s), 0);
    ck_assert(mf_tensor_item(s) == 2.5);
    mf_tensor *a = mf_arange(MF_I32, 5);
    ck_expect(a, 0, MF_DIMS(5), 0, 1, 2, 3, 4);
    mf_tensor *e = mf_zeros(MF_F32, MF_DIMS(0, 3));
    ck_assert_int_eq(mf_tensor_numel(e), 0);
    mf_tensor_destroy(z);
    mf_tensor_destroy(f);
    mf_tensor_destroy(s);
    mf_tensor_destroy(a);
    mf_tensor_destroy(e);
}
END_TEST

START_TEST(dtypes)
{
    mf_dtype dt;
    ck_assert_ok(mf_dtype_parse("float64", &dt));
    ck_assert_int_eq(dt, MF_F64);
    ck_assert_ok(mf_dtype_parse("i32", &dt));
    ck_assert_int_eq(dt, MF_I32);
    ck_assert_fails(mf_dtype_parse("f16", &dt), MF_ERR_ARG, "f16");
    ck_assert_int_eq(mf_dtype_size(MF_I64), 8);
    mf_tensor *x = T32(MF_DIMS(3), 1.5, -2.5, 3.7);
    mf_tensor *i = mf_cast(x, MF_I32);
    ck_expect(i, 0, MF_DIMS(3), 1, -2, 3);
    mf_tensor *d = mf_cast(i, MF_F64);
    ck_assert_int_eq(mf_tensor_dtype(d), MF_F64);
    mf_tensor_destroy(x);
    mf_tensor_destroy(i);
    mf_tensor_destroy(d);
}
END_TEST

START_TEST(views_share_storage)
{
    mf_tensor *x = T32(MF_DIMS(2, 3), 0, 1, 2, 3, 4, 5);
    mf_tensor *r = mf_reshape(x, MF_DIMS(3, -1));
    ck_expect(r, 0, MF_DIMS(3, 2), 0, 1, 2, 3, 4, 5);
    ck_assert(mf_tensor_shares_storage(x, r));
    mf_tensor *t = mf_transpose(x, 0, 1);
    ck_expect(t, 0, MF_DIMS(3, 2), 0, 3, 1, 4, 2, 5);
    ck_assert(mf_tensor_shares_storage(x, t));
    ck_assert(!mf_tensor_is_contiguous(t));
    mf_tensor *n = mf_narrow(x, 1, 1, 2);
    ck_expect(n, 0, MF_DIMS(2, 2), 1, 2, 4, 5);
    ck_assert(mf_tensor_shares_storage(x, n));
    mf_tensor *sl = mf_slice(x, 1, 0, 3, 2);
    ck_expect(sl, 0, MF_DIMS(2, 2), 0, 2, 3, 5);
    mf_tensor *row = T32(MF_DIMS(1, 3), 7, 8, 9);
    mf_tensor *ex = mf_expand(row, MF_DIMS(2, 3));
    ck_expect(ex, 0, MF_DIMS(2, 3), 7, 8, 9, 7, 8, 9);
    ck_assert_int_eq(mf_tensor_strides(ex)[0], 0);
    /* writes through a view are seen by the base */
    int64_t idx[2] = {1, 0};
    ck_assert_ok(mf_tensor_set(n, idx, 40));
    int64_t bidx[2] = {1, 1};
    ck_assert(mf_tensor_get(x, bidx) == 40);
    /* reshaping a transposed view must copy */
    mf_tensor *rt = mf_reshape(t, MF_DIMS(6));
    ck_expect(rt, 0, MF_DIMS(6), 0, 3, 1, 40, 2, 5);
    ck_assert(!mf_tensor_shares_storage(rt, x));
    /* a view outlives its base */
    mf_tensor_destroy(x);
    ck_expect(r, 0, MF_DIMS(3, 2), 0, 1, 2, 3, 40, 5);
    mf_tensor *c = mf_contiguous(t);
    ck_assert(mf_tensor_is_contiguous(c));
    ck_expect(c, 0, MF_DIMS(3, 2), 0, 3, 1, 40, 2, 5);
    mf_tensor *p = mf_permute(c, (const int[]){1, 0});
    ck_expect(p, 0, MF_DIMS(2, 3), 0, 1, 2, 3, 40, 5);
    mf_tensor *u = mf_unsqueeze(p, 0);
    ck_expect_shape(u, MF_DIMS(1, 2, 3));
    mf_tensor *sq = mf_squeeze(u, 0);
    ck_expect_shape(sq, MF_DIMS(2, 3));
    mf_tensor *fl = mf_flatten(u, 0, -1);
    ck_expect_shape(fl, MF_DIMS(6));
    mf_tensor *vs[] = {r, t, n, sl, row, ex, rt, c, p, u, sq, fl};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) mf_tensor_destroy(vs[i]);
}
END_TEST

START_TEST(refcounts)
{
    mf_tensor *x = mf_ones(MF_F32, MF_DIMS(4));
    ck_assert_ptr_eq(mf_tensor_retain(x), x);
    mf_tensor_destroy(x);
    ck_expect(x, 0, MF_DIMS(4), 1, 1, 1, 1);  /* still alive: one reference left */
    mf_tensor_destroy(x);
    mf_tensor_destroy(NULL);
    mf_memory_stats st;
    mf_memory_get_stats(&st);
    ck_assert(st.allocs > 0);
}
END_TEST

/* a memory limit refuses what would pass it, names itself, and lifts */
START_TEST(memory_limit)
{
    mf_memory_stats st;
    mf_memory_get_stats(&st);
    ck_assert_int_eq(mf_memory_set_limit_on(MF_DEV_CPU, st.in_use + (4 << 20)), MF_OK);
    mf_tensor *a = mf_zeros(MF_F32, MF_DIMS(512 * 1024));   /* 2 MiB: fits */
    ck_assert_ptr_nonnull(a);
    mf_clear_error();
    ck_assert_ptr_null(mf_zeros(MF_F32, MF_DIMS(768 * 1024)));   /* 3 MiB more: past it */
    ck_assert_int_eq(mf_last_status(), MF_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(mf_last_error(), "the limit is"));
    mf_tensor_destroy(a);
    mf_tensor *b = mf_zeros(MF_F32, MF_DIMS(768 * 1024));   /* fits once a is back (from the cache) */
    ck_assert_ptr_nonnull(b);
    mf_tensor_destroy(b);
    ck_assert_int_eq(mf_memory_set_limit_on(MF_DEV_CPU, 0), MF_OK);
    ck_assert_int_eq(mf_memory_limit_on(MF_DEV_CPU), 0);
    ck_assert_int_eq(mf_memory_set_limit_on(MF_DEV_CPU, -1), MF_ERR_ARG);
}
END_TEST

START_TEST(data_access)
{
    mf_tensor *x = T64(MF_DIMS(2, 2), 1, 2, 3, 4);
    mf_tensor *t = mf_transpose(x, 0, 1);
    float out[4];
    ck_assert_ok(mf_tensor_copy_out(t, MF_F32, out, 4));
    ck_assert(out[0] == 1 && out[1] == 3 && out[2] == 2 && out[3] == 4);
    ck_assert_fails(mf_tensor_copy_out(t, MF_F32, out, 3), MF_ERR_ARG, "count 3", "4 elements");
    int64_t bad[2] = {2, 0};
    mf_clear_error();
    ck_assert(isnan(mf_tensor_get(x, bad)));
    ck_assert(strstr(mf_last_error(), "out of range") != NULL);
    ck_assert(isnan(mf_tensor_item(x)));
    ck_assert(strstr(mf_last_error(), "[2,2]") != NULL);
    mf_tensor_set_name(x, "weights");
    ck_assert_str_eq(mf_tensor_name(x), "weights");
    char buf[64];
    ck_assert_str_eq(mf_tensor_shape_str(t, buf, sizeof buf), "[2,2]");
    mf_tensor_destroy(x);
    mf_tensor_destroy(t);
}
END_TEST

START_TEST(random_is_keyed)
{
    mf_manual_seed(42);
    mf_tensor *a = mf_rand(MF_F32, MF_DIMS(1000));
    mf_tensor *b = mf_randn(MF_F64, MF_DIMS(1000));
    mf_manual_seed(42);
    mf_tensor *a2 = mf_rand(MF_F32, MF_DIMS(1000));
    float *pa = mf_tensor_data(a), *pa2 = mf_tensor_data(a2);
    ck_assert(!memcmp(pa, pa2, 1000 * sizeof(float)));
    double s = 0, s2 = 0, mn = 1, mx = 0;
    for (int i = 0; i < 1000; i++) {
        mn = fmin(mn, pa[i]);
        mx = fmax(mx, pa[i]);
    }
    ck_assert(mn >= 0 && mx < 1 && mx - mn > 0.9);
    double *pb = mf_tensor_data(b);
    for (int i = 0; i < 1000; i++) {
        s += pb[i];
        s2 += pb[i] * pb[i];
    }
    ck_assert_msg(fabs(s / 1000) < 0.15 && fabs(s2 / 1000 - 1) < 0.2, "normal draws: mean %g var %g", s / 1000, s2 / 1000);
    /* keyed draws: same name, same values, whatever else was drawn */
    mf_tensor *k1 = mf_empty(MF_F32, MF_DIMS(10)), *k2 = mf_empty(MF_F32, MF_DIMS(20));
    ck_assert_ok(mf_uniform_keyed_(k1, -1, 1, 7, "fc.weight"));
    ck_assert_ok(mf_uniform_keyed_(k2, -1, 1, 7, "fc.weight"));
    ck_assert(!memcmp(mf_tensor_data(k1), mf_tensor_data(k2), 10 * sizeof(float)));
    ck_assert_ok(mf_uniform_keyed_(k2, -1, 1, 7, "fc.bias"));
    ck_assert(memcmp(mf_tensor_data(k1), mf_tensor_data(k2), 10 * sizeof(float)));
    mf_tensor *vs[] = {a, b, a2, k1, k2};
    for (size_t i = 0; i < 5; i++) mf_tensor_destroy(vs[i]);
}
END_TEST

START_TEST(creation_errors)
{
    ck_assert_fails(mf_zeros(MF_F32, MF_DIMS(2, -1)), MF_ERR_SHAPE, "negative", "[2,-1]");
    ck_assert_fails(mf_zeros(MF_F32, 9, (int64_t[9]){1, 1, 1, 1, 1, 1, 1, 1, 1}), MF_ERR_SHAPE, "9 dims");
    ck_assert_fails(mf_rand(MF_I32, MF_DIMS(3)), MF_ERR_DTYPE, "i32");
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(2, 3));
    ck_assert_fails(mf_reshape(x, MF_DIMS(4, 2)), MF_ERR_SHAPE, "[2,3]", "[4,2]");
    ck_assert_fails(mf_reshape(x, MF_DIMS(-1, -1)), MF_ERR_ARG, "-1");
    ck_assert_fails(mf_narrow(x, 1, 2, 2), MF_ERR_ARG, "out of range");
    ck_assert_fails(mf_transpose(x, 0, 2), MF_ERR_ARG, "axis 2");
    ck_assert_fails(mf_expand(x, MF_DIMS(3, 3)), MF_ERR_SHAPE, "[2,3]", "[3,3]");
    ck_assert_fails(mf_permute(x, (const int[]){0, 0}), MF_ERR_ARG, "twice");
    mf_tensor *lab = mf_scalar(MF_I64, 1);
    ck_assert_fails(mf_tensor_set_requires_grad(lab, true), MF_ERR_DTYPE, "i64");
    mf_tensor_destroy(lab);
    mf_tensor_destroy(x);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, create_and_fill);
    tcase_add_test(tc, dtypes);
    tcase_add_test(tc, memory_limit);
    tcase_add_test(tc, views_share_storage);
    tcase_add_test(tc, refcounts);
    tcase_add_test(tc, data_access);
    tcase_add_test(tc, random_is_keyed);
    tcase_add_test(tc, creation_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
