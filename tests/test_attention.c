/*
 * tests/test_attention.c - fused causal attention against the unfused
 * composition (matmul, mask, softmax, matmul), forward and backward, for
 * T not a multiple of the tiles, T = 1 and several head counts; q, k, v
 * as the strided heads of one fused projection; finite differences; and
 * GPT-2's tanh GELU.
 */
#include <math.h>
#include <stdlib.h>
#include "tests/test_util.h"

/* softmax(q k^T / sqrt(D) + causal mask) v, from ops that store [T, T] */
static mf_tensor *unfused(mf_tensor *q, mf_tensor *k, mf_tensor *v)
{
    const int64_t *s = mf_tensor_shape(q);
    int64_t T = s[2];
    mf_tensor *mask = mf_zeros(mf_tensor_dtype(q), 2, (const int64_t[]){T, T});
    double *m = malloc((size_t)(T * T) * sizeof *m);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) m[i * T + j] = j <= i ? 0.0 : -INFINITY;
    mf_tensor *mm = mf_from_data(MF_F64, 2, (const int64_t[]){T, T}, m);
    ck_assert_ok(mf_copy_(mask, mm));
    free(m);
    mf_tensor *sc = mf_matmul_t(q, k, false, true), *ss = mf_scale(sc, 1.0 / sqrt((double)s[3]));
    mf_tensor *sm = mf_add(ss, mask), *p = mf_softmax(sm, -1), *o = mf_matmul(p, v);
    mf_tensor *all[] = {mask, mm, sc, ss, sm, p};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
    return o;
}

/* out and the gradients of q, k, v for loss sum(out * w) */
static void run(mf_tensor *(*fn)(mf_tensor *, mf_tensor *, mf_tensor *), mf_tensor *q, mf_tensor *k, mf_tensor *v,
                mf_tensor *w, mf_tensor **out, mf_tensor **g)
{
    mf_tensor *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++) ck_assert_ok(mf_tensor_set_grad(in[i], NULL));
    *out = fn(q, k, v);
    ck_assert_nonnull(*out);
    mf_tensor *ow = mf_mul(*out, w), *loss = mf_sum_all(ow);
    ck_assert_ok(mf_backward(loss));
    for (int i = 0; i < 3; i++) g[i] = mf_tensor_retain(mf_tensor_grad(in[i]));
    mf_tensor_destroy(ow);
    mf_tensor_destroy(loss);
}

static mf_tensor *rand_like_shape(mf_dtype dt, const int64_t *shape)
{
    mf_tensor *r = mf_test_rand64(4, shape, -1.5, 1.5), *c = mf_cast(r, dt);
    mf_tensor_destroy(r);
    mf_tensor *d = mf_tensor_detach(c);
    mf_tensor_destroy(c);
    ck_assert_ok(mf_tensor_set_requires_grad(d, true));
    return d;
}

static void compare(mf_dtype dt, int64_t B, int64_t H, int64_t T, int64_t D, double tol)
{
    mf_manual_seed((uint64_t)(B * 1000 + H * 100 + T * 10 + D));
    int64_t shape[4] = {B, H, T, D};
    mf_tensor *q = rand_like_shape(dt, shape), *k = rand_like_shape(dt, shape), *v = rand_like_shape(dt, shape);
    mf_tensor *w = mf_randn(dt, 4, shape);
    mf_tensor *o1, *o2, *g1[3], *g2[3];
    run(mf_causal_attention, q, k, v, w, &o1, g1);
    run(unfused, q, k, v, w, &o2, g2);
    double d = mf_test_max_diff(o1, o2, true);
    ck_assert_msg(d < tol, "%s B%lld H%lld T%lld D%lld: output differs by %g", mf_dtype_name(dt), (long long)B,
                  (long long)H, (long long)T, (long long)D, d);
    for (int i = 0; i < 3; i++) {
        d = mf_test_max_diff(g1[i], g2[i], true);
        ck_assert_msg(d < tol, "%s B%lld H%lld T%lld D%lld: gradient of %c differs by %g", mf_dtype_name(dt),
                      (long long)B, (long long)H, (long long)T, (long long)D, "qkv"[i], d);
        mf_tensor_destroy(g1[i]);
        mf_tensor_destroy(g2[i]);
    }
    mf_tensor *all[] = {q, k, v, w, o1, o2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
}

START_TEST(matches_unfused)
{
    /* T around the tiles (64 query rows, 256 keys) and T = 1 */
    const int64_t T[] = {1, 2, 15, 17, 63, 64, 65, 127, 128, 130, 255, 256, 257, 320};
    const int64_t H[] = {1, 3, 2, 1, 2, 1, 3, 2, 1, 2, 1, 2, 1, 1};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        compare(MF_F64, 2, H[i], T[i], 8, 1e-11);
        compare(MF_F32, 1, H[i], T[i], 16, 2e-5);
    }
    compare(MF_F32, 2, 6, 100, 64, 2e-5);   /* GPT's head size */
    compare(MF_F64, 1, 1, 40, 1, 1e-11);    /* one-element heads */
}
END_TEST

/* GPT's layout: one [B, T, 3, H, D] projection, q, k, v its strided heads */
static mf_tensor *split_heads(mf_tensor *qkv, int which)
{
    mf_tensor *n = mf_narrow(qkv, 2, which, 1), *s = mf_squeeze(n, 2), *p = mf_permute(s, (const int[]){0, 2, 1, 3});
    mf_tensor_destroy(n);
    mf_tensor_destroy(s);
    return p;
}

static mf_tensor *fused_qkv(mf_tensor **in, void *user)
{
    (void)user;
    mf_tensor *q = split_heads(in[0], 0), *k = split_heads(in[0], 1), *v = split_heads(in[0], 2);
    mf_tensor *o = mf_causal_attention(q, k, v);
    mf_tensor_destroy(q);
    mf_tensor_destroy(k);
    mf_tensor_destroy(v);
    return o;
}

START_TEST(strided_heads_and_gradcheck)
{
    mf_manual_seed(5);
    mf_tensor *qkv = mf_test_rand64(MF_DIMS(2, 19, 3, 2, 4), -1, 1);
    mf_tensor *q = split_heads(qkv, 0);
    ck_assert(!mf_tensor_is_contiguous(q));
    mf_test_gradcheck("attention on strided heads", fused_qkv, 1, &qkv, NULL, 1e-6, 1e-8, 1e-6);
    mf_tensor_destroy(q);
    mf_tensor_destroy(qkv);
}
END_TEST

static mf_tensor *fused_self(mf_tensor **in, void *user)
{
    return mf_causal_self_attention(in[0], *(const int *)user);
}

/* the composition fused_qkv does, as [B, T, C] */
static mf_tensor *composed_self(mf_tensor *qkv, int64_t B, int64_t T, int64_t C)
{
    mf_tensor *o = fused_qkv(&qkv, NULL), *t = mf_permute(o, (const int[]){0, 2, 1, 3});
    mf_tensor *r = mf_reshape(t, MF_DIMS(B, T, C));
    mf_tensor_destroy(o);
    mf_tensor_destroy(t);
    return r;
}

START_TEST(self_attention_in_place)
{
    mf_manual_seed(6);
    const int64_t B = 2, T = 21, H = 2, D = 4, C = H * D;
    mf_tensor *qkv = mf_test_rand64(MF_DIMS(B, T, 3, H, D), -1, 1);
    mf_tensor *flat = mf_reshape(qkv, MF_DIMS(B, T, 3 * C));
    mf_tensor *w = mf_randn(MF_F64, MF_DIMS(B, T, C));
    mf_tensor *a = mf_causal_self_attention(flat, (int)H), *b = composed_self(qkv, B, T, C);
    ck_assert_nonnull(a);
    ck_assert_msg(mf_test_max_diff(a, b, true) < 1e-12, "forward differs");
    mf_tensor *aw = mf_mul(a, w), *la = mf_sum_all(aw);
    ck_assert_ok(mf_backward(la));
    mf_tensor *g1 = mf_tensor_retain(mf_tensor_grad(qkv));
    ck_assert_ok(mf_tensor_set_grad(qkv, NULL));
    mf_tensor *bw = mf_mul(b, w), *lb = mf_sum_all(bw);
    ck_assert_ok(mf_backward(lb));
    ck_assert_msg(mf_test_max_diff(g1, mf_tensor_grad(qkv), true) < 1e-12, "gradient differs");
    mf_tensor *x = mf_test_rand64(MF_DIMS(2, 9, 12), -1, 1);
    int heads = 2;
    mf_test_gradcheck("causal_self_attention", fused_self, 1, &x, &heads, 1e-6, 1e-8, 1e-6);
    ck_assert_fails(mf_causal_self_attention(x, 5), MF_ERR_SHAPE, "divisible by 5 heads");
    mf_tensor *all[] = {qkv, flat, w, a, b, aw, la, g1, bw, lb, x};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
}
END_TEST

START_TEST(bad_input)
{
    mf_tensor *a = mf_zeros(MF_F32, 4, (const int64_t[]){1, 2, 3, 4});
    mf_tensor *b = mf_zeros(MF_F32, 4, (const int64_t[]){1, 2, 4, 4});
    mf_tensor *c = mf_zeros(MF_F32, 3, (const int64_t[]){2, 3, 4});
    mf_tensor *d = mf_zeros(MF_F64, 4, (const int64_t[]){1, 2, 3, 4});
    mf_tensor *i = mf_zeros(MF_I64, 4, (const int64_t[]){1, 2, 3, 4});
    ck_assert_fails(mf_causal_attention(a, b, a), MF_ERR_SHAPE, "mf_causal_attention", "k", "does not match q");
    ck_assert_fails(mf_causal_attention(c, c, c), MF_ERR_SHAPE, "mf_causal_attention", "[B, H, T, D]");
    ck_assert_fails(mf_causal_attention(a, a, d), MF_ERR_SHAPE, "v");
    ck_assert_fails(mf_causal_attention(i, i, i), MF_ERR_DTYPE, "not a float dtype");
    ck_assert_fails(mf_causal_attention(a, NULL, a), MF_ERR_ARG, "mf_causal_attention");
    mf_tensor *all[] = {a, b, c, d, i};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++) mf_tensor_destroy(all[j]);
}
END_TEST

static mf_tensor *gelu_fn(mf_tensor **in, void *user)
{
    (void)user;
    return mf_gelu_tanh(in[0]);
}

START_TEST(gelu_tanh)
{
    mf_tensor *x = T64(MF_DIMS(5), -3, -0.5, 0, 0.7, 2.5);
    mf_tensor *y = mf_gelu_tanh(x);
    double want[5];
    const double xs[5] = {-3, -0.5, 0, 0.7, 2.5};
    for (int i = 0; i < 5; i++)
        want[i] = 0.5 * xs[i] * (1 + tanh(sqrt(2 / M_PI) * (xs[i] + 0.044715 * xs[i] * xs[i] * xs[i])));
    mf_test_expect("gelu_tanh", y, MF_DIMS(5), want, 1e-14);
    mf_tensor_destroy(y);
    mf_tensor *f = mf_cast(x, MF_F32), *yf = mf_gelu_tanh(f);
    mf_test_expect("gelu_tanh f32", yf, MF_DIMS(5), want, 1e-6);
    mf_tensor_destroy(yf);
    mf_tensor_destroy(f);
    mf_tensor_destroy(x);
    mf_tensor *r = mf_test_rand64(MF_DIMS(3, 7), -4, 4);
    mf_test_gradcheck("gelu_tanh", gelu_fn, 1, &r, NULL, 1e-6, 1e-8, 1e-6);
    mf_tensor_destroy(r);
}
END_TEST

static Suite *attention_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("attention");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, matches_unfused);
    tcase_add_test(tc, strided_heads_and_gradcheck);
    tcase_add_test(tc, self_attention_in_place);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, gelu_tanh);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(attention_suite)
