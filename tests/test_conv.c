/*
 * tests/test_conv.c - conv2d against a direct-loop reference for
 * strides, padding, dilation and groups, and the profiler's count of its
 * multiply-adds against the reference's; pooling against hand values;
 * finite-difference gradients; shape errors.
 */
#include <stdlib.h>
#include "tests/test_util.h"

/* y[n,o,i,j] = b[o] + sum_{c,ki,kj} x[n, g*Cg + c, i*s - p + ki*d, ...] * w[o, c, ki, kj];
 * returns the multiply-adds done (taps on the padding skipped) */
static int64_t conv_ref(const double *x, const double *w, const double *b, double *y, int N, int C, int H, int W, int O,
                     int KH, int KW, const mf_conv2d_params *p, int OH, int OW)
{
    int cg = C / p->groups, og = O / p->groups;
    int64_t macs = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int i = 0; i < OH; i++)
                for (int j = 0; j < OW; j++) {
                    double s = b ? b[o] : 0;
                    int g = o / og;
                    for (int c = 0; c < cg; c++)
                        for (int ki = 0; ki < KH; ki++)
                            for (int kj = 0; kj < KW; kj++) {
                                int ih = i * p->stride[0] - p->padding[0] + ki * p->dilation[0];
                                int iw = j * p->stride[1] - p->padding[1] + kj * p->dilation[1];
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                s += x[((n * C + g * cg + c) * H + ih) * W + iw] * w[((o * cg + c) * KH + ki) * KW + kj];
                                macs++;
                            }
                    y[((n * O + o) * OH + i) * OW + j] = s;
                }
    return macs;
}

typedef struct conv_case {
    int n, c, h, w, o, kh, kw;
    mf_conv2d_params p;
} conv_case;

static const conv_case cases[] = {
    {2, 3, 7, 6, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}},
    {1, 2, 9, 9, 2, 3, 2, {{2, 3}, {0, 1}, {1, 1}, 1}},
    {2, 4, 8, 8, 6, 3, 3, {{1, 1}, {2, 2}, {2, 2}, 2}},
    {3, 1, 12, 12, 5, 5, 5, {{1, 1}, {2, 2}, {1, 1}, 1}},    /* lenet's first layer, "same" */
    {2, 6, 5, 5, 6, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 3}},
};

static int out_size(int in, int k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

START_TEST(conv_matches_reference)
{
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const conv_case *c = &cases[ci];
        for (int dt = 0; dt < 2; dt++) {
            mf_dtype type = dt ? MF_F64 : MF_F32;
            mf_tensor *x = mf_randn(type, MF_DIMS(c->n, c->c, c->h, c->w));
            mf_tensor *w = mf_randn(type, MF_DIMS(c->o, c->c / c->p.groups, c->kh, c->kw));
            mf_tensor *b = mf_randn(type, MF_DIMS(c->o));
            mf_profile_reset();
            mf_profile_enable(true);
            mf_tensor *y = mf_conv2d(x, w, b, &c->p);
            mf_profile_enable(false);
            ck_assert_nonnull(y);
            int oh = out_size(c->h, c->kh, c->p.stride[0], c->p.padding[0], c->p.dilation[0]);
            int ow = out_size(c->w, c->kw, c->p.stride[1], c->p.padding[1], c->p.dilation[1]);
            ck_expect_shape(y, MF_DIMS(c->n, c->o, oh, ow));
            int64_t nx = mf_tensor_numel(x), nw = mf_tensor_numel(w), ny = mf_tensor_numel(y);
            double *xv = malloc(nx * 8), *wv = malloc(nw * 8), *bv = malloc(c->o * 8), *yv = malloc(ny * 8),
                   *rv = malloc(ny * 8);
            mf_tensor_copy_out(x, MF_F64, xv, nx);
            mf_tensor_copy_out(w, MF_F64, wv, nw);
            mf_tensor_copy_out(b, MF_F64, bv, c->o);
            mf_tensor_copy_out(y, MF_F64, yv, ny);
            int64_t macs = conv_ref(xv, wv, bv, rv, c->n, c->c, c->h, c->w, c->o, c->kh, c->kw, &c->p, oh, ow);
            ck_assert_msg(mf_profile_flops(MF_PROF_CONV) == 2.0 * (double)macs, "case %zu: profiler counts %.0f FLOPs, reference %lld",
                          ci, mf_profile_flops(MF_PROF_CONV), 2 * (long long)macs);
            for (int64_t i = 0; i < ny; i++)
                ck_assert_msg(fabs(yv[i] - rv[i]) < (dt ? 1e-10 : 1e-4) * (1 + fabs(rv[i])),
                              "case %zu %s: y[%lld] = %g, reference %g", ci, dt ? "f64" : "f32", (long long)i, yv[i], rv[i]);
            free(xv); free(wv); free(bv); free(yv); free(rv);
            mf_tensor *all[] = {x, w, b, y};
            for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
        }
    }
}
END_TEST

static mf_tensor *conv_fn(mf_tensor **in, void *u)
{
    return mf_conv2d(in[0], in[1], in[2], &((const conv_case *)u)->p);
}

START_TEST(conv_gradients)
{
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        conv_case c = cases[ci];
        if (c.n > 2) c.n = 2;
        if (c.h > 8) c.h = c.w = 8;
        mf_tensor *in[3] = {mf_test_rand64(MF_DIMS(c.n, c.c, c.h, c.w), -1, 1),
                            mf_test_rand64(MF_DIMS(c.o, c.c / c.p.groups, c.kh, c.kw), -1, 1),
                            mf_test_rand64(MF_DIMS(c.o), -1, 1)};
        char what[32];
        snprintf(what, sizeof what, "conv2d case %zu", ci);
        mf_test_gradcheck(what, conv_fn, 3, in, &c, 1e-6, 1e-7, 1e-6);
        for (int k = 0; k < 3; k++) mf_tensor_destroy(in[k]);
    }
}
END_TEST

START_TEST(conv_errors)
{
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(1, 3, 8, 8)), *w = mf_zeros(MF_F32, MF_DIMS(4, 2, 3, 3));
    mf_conv2d_params p = mf_conv2d_defaults();
    ck_assert_fails(mf_conv2d(x, w, NULL, &p), MF_ERR_SHAPE, "mf_conv2d", "[1,3,8,8]", "[4,2,3,3]", "channels");
    mf_tensor *w2 = mf_zeros(MF_F32, MF_DIMS(4, 3, 9, 9));
    ck_assert_fails(mf_conv2d(x, w2, NULL, &p), MF_ERR_SHAPE, "smaller than the kernel 9x9");
    p.groups = 2;
    ck_assert_fails(mf_conv2d(x, w, NULL, &p), MF_ERR_ARG, "groups=2");
    mf_tensor *x3 = mf_zeros(MF_F32, MF_DIMS(3, 8, 8));
    p.groups = 1;
    ck_assert_fails(mf_conv2d(x3, w2, NULL, &p), MF_ERR_SHAPE, "4-D");
    mf_tensor *all[] = {x, w, w2, x3};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(pool_forward)
{
    mf_tensor *x = T32(MF_DIMS(1, 1, 4, 4), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
    mf_pool2d_params p = mf_pool2d_defaults(2);
    mf_tensor *y = mf_max_pool2d(x, &p);
    ck_expect(y, 0, MF_DIMS(1, 1, 2, 2), 6, 8, 14, 16);
    mf_tensor_destroy(y);
    y = mf_avg_pool2d(x, &p);
    ck_expect(y, 1e-6, MF_DIMS(1, 1, 2, 2), 3.5, 5.5, 11.5, 13.5);
    mf_tensor_destroy(y);
    /* 3x3 windows, stride 2, padding 1: corners see 4 real elements */
    mf_pool2d_params q = {{3, 3}, {2, 2}, {1, 1}, true};
    y = mf_avg_pool2d(x, &q);
    ck_expect(y, 1e-6, MF_DIMS(1, 1, 2, 2), 14.0 / 9, 30.0 / 9, 57.0 / 9, 99.0 / 9);
    mf_tensor_destroy(y);
    q.count_include_pad = false;
    y = mf_avg_pool2d(x, &q);
    ck_expect(y, 1e-6, MF_DIMS(1, 1, 2, 2), 14.0 / 4, 30.0 / 6, 57.0 / 6, 99.0 / 9);
    mf_tensor_destroy(y);
    y = mf_max_pool2d(x, &q);
    ck_expect(y, 0, MF_DIMS(1, 1, 2, 2), 6, 8, 14, 16);
    mf_tensor_destroy(y);
    /* a NaN anywhere in a window comes out, on the 2x2 fast path too */
    for (int at = 0; at < 4; at++) {
        float v[4] = {1, 2, 3, 4};
        v[at] = NAN;
        mf_tensor *n = mf_from_data(MF_F32, MF_DIMS(1, 1, 2, 2), v), *m = mf_max_pool2d(n, &p);
        ck_assert_msg(isnan(mf_tensor_item(m)), "NaN at %d was dropped", at);
        mf_tensor_destroy(n);
        mf_tensor_destroy(m);
    }
    y = mf_adaptive_avg_pool2d(x, 1, 1);
    ck_expect(y, 1e-6, MF_DIMS(1, 1, 1, 1), 8.5);
    mf_tensor_destroy(y);
    y = mf_adaptive_avg_pool2d(x, 3, 3);   /* overlapping windows of 2x2 */
    ck_expect(y, 1e-6, MF_DIMS(1, 1, 3, 3), 3.5, 4.5, 5.5, 7.5, 8.5, 9.5, 11.5, 12.5, 13.5);
    mf_tensor_destroy(y);
    mf_tensor_destroy(x);
}
END_TEST

/* 2x2 max pooling in f32 (16 windows at a time where the CPU has
 * AVX-512) against the f64 path (one window at a time), on small
 * integers (many ties) with NaNs: the same maxima, the same index per
 * window, so the same gradient, bit for bit. Rows of 37 and 64 make
 * chunks of 16 windows with and without a remainder, odd sizes a row
 * and a column that no window covers. */
START_TEST(max_pool_2x2_paths_agree)
{
    const int64_t shapes[][4] = {{2, 3, 7, 37}, {3, 2, 6, 64}, {1, 1, 2, 2}, {2, 2, 5, 3}};
    mf_pool2d_params p = mf_pool2d_defaults(2);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int64_t *sh = shapes[si];
        int64_t n = sh[0] * sh[1] * sh[2] * sh[3], on = sh[0] * sh[1] * (sh[2] / 2) * (sh[3] / 2);
        double *xv = malloc(n * 8), *wv = malloc(on * 8);
        for (int64_t i = 0; i < n; i++) xv[i] = i % 97 == 13 ? NAN : (double)(rand() % 5);
        for (int64_t i = 0; i < on; i++) wv[i] = (double)(1 + rand() % 7);
        double *y[2], *gx[2];
        for (int k = 0; k < 2; k++) {
            mf_dtype dt = k ? MF_F64 : MF_F32;
            mf_tensor *x64 = mf_from_data(MF_F64, 4, sh, xv), *x = mf_cast(x64, dt);
            int64_t osh[4] = {sh[0], sh[1], sh[2] / 2, sh[3] / 2};
            mf_tensor *w64 = mf_from_data(MF_F64, 4, osh, wv), *w = mf_cast(w64, dt);
            mf_tensor_set_requires_grad(x, true);
            mf_tensor *yt = mf_max_pool2d(x, &p), *prod = mf_mul(yt, w), *s = mf_sum_all(prod);
            ck_assert_int_eq(mf_backward(s), MF_OK);
            y[k] = malloc(on * 8);
            gx[k] = malloc(n * 8);
            mf_tensor_copy_out(yt, MF_F64, y[k], on);
            mf_tensor_copy_out(mf_tensor_grad(x), MF_F64, gx[k], n);
            mf_tensor *all[] = {x64, x, w64, w, yt, prod, s};
            for (int i = 0; i < 7; i++) mf_tensor_destroy(all[i]);
        }
        for (int64_t i = 0; i < on; i++)
            ck_assert_msg((isnan(y[0][i]) && isnan(y[1][i])) || y[0][i] == y[1][i], "shape %zu: y[%lld] f32 %g, f64 %g", si,
                          (long long)i, y[0][i], y[1][i]);
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(gx[0][i] == gx[1][i], "shape %zu: gx[%lld] f32 %g, f64 %g", si, (long long)i, gx[0][i], gx[1][i]);
        free(xv); free(wv); free(y[0]); free(y[1]); free(gx[0]); free(gx[1]);
    }
}
END_TEST

typedef struct { int kind; mf_pool2d_params p; } pool_case;

static mf_tensor *pool_fn(mf_tensor **in, void *u)
{
    const pool_case *c = u;
    if (c->kind == 0) return mf_max_pool2d(in[0], &c->p);
    if (c->kind == 1) return mf_avg_pool2d(in[0], &c->p);
    return mf_adaptive_avg_pool2d(in[0], 3, 2);
}

START_TEST(pool_gradients)
{
    pool_case cases[] = {
        {0, {{2, 2}, {2, 2}, {0, 0}, true}}, {0, {{3, 3}, {2, 2}, {1, 1}, true}},
        {1, {{3, 2}, {1, 2}, {1, 1}, true}}, {1, {{3, 3}, {2, 2}, {1, 1}, false}}, {2, {{0}, {0}, {0}, true}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mf_tensor *x = mf_test_rand64(MF_DIMS(2, 2, 5, 6), -1, 1);
        mf_test_gradcheck("pool", pool_fn, 1, &x, &cases[i], 1e-6, 1e-8, 1e-6);
        mf_tensor_destroy(x);
    }
}
END_TEST

START_TEST(pool_errors)
{
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(1, 1, 2, 2));
    mf_pool2d_params p = mf_pool2d_defaults(3);
    ck_assert_fails(mf_max_pool2d(x, &p), MF_ERR_SHAPE, "smaller than the window 3x3");
    p.padding[0] = 2;
    ck_assert_fails(mf_avg_pool2d(x, &p), MF_ERR_ARG, "padding");
    ck_assert_fails(mf_adaptive_avg_pool2d(x, 0, 1), MF_ERR_ARG, "0x1");
    mf_tensor_destroy(x);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, conv_matches_reference);
    tcase_add_test(tc, conv_gradients);
    tcase_add_test(tc, conv_errors);
    tcase_add_test(tc, pool_forward);
    tcase_add_test(tc, max_pool_2x2_paths_agree);
    tcase_add_test(tc, pool_gradients);
    tcase_add_test(tc, pool_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
