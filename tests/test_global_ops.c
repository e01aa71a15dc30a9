/*
 * tests/test_global_ops.c - every op on global tensors equals the 1-rank
 * result, forward and backward, whatever SBPs its inputs come with: each
 * combination of {S(axis), B, P} over the inputs (S(0) and B for index
 * inputs) makes the planner pick a signature and box to it, so every
 * signature an op declares is hit by the combination that matches it.
 * Runs under mpiexec -n 1 to 4 (tests/global.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include "tests/test_util.h"

typedef mf_tensor *(*op_fn)(mf_tensor **in);

typedef struct op_case {
    const char *name;
    op_fn fn;
    int n;
    int ndim[4];
    int64_t shape[4][4];
    int64_t int_hi[4];      /* > 0: an index input in [0, int_hi) */
} op_case;

/* ------------------------------------------------------------ the ops */
static mf_tensor *f_add(mf_tensor **x) { return mf_add(x[0], x[1]); }
static mf_tensor *f_sub(mf_tensor **x) { return mf_sub(x[0], x[1]); }
static mf_tensor *f_mul(mf_tensor **x) { return mf_mul(x[0], x[1]); }
static mf_tensor *f_div(mf_tensor **x)
{
    mf_tensor *d = mf_add_scalar(x[1], 3.0), *r = d ? mf_div(x[0], d) : NULL;
    mf_tensor_destroy(d);
    return r;
}
static mf_tensor *f_maximum(mf_tensor **x) { return mf_maximum(x[0], x[1]); }
static mf_tensor *f_neg(mf_tensor **x) { return mf_neg(x[0]); }
static mf_tensor *f_scale(mf_tensor **x) { return mf_scale(x[0], 2.5); }
static mf_tensor *f_exp(mf_tensor **x) { return mf_exp(x[0]); }
static mf_tensor *f_relu(mf_tensor **x) { return mf_relu(x[0]); }
static mf_tensor *f_gelu(mf_tensor **x) { return mf_gelu(x[0]); }
static mf_tensor *f_tanh(mf_tensor **x) { return mf_tanh(x[0]); }
static mf_tensor *f_gelu_tanh(mf_tensor **x) { return mf_gelu_tanh(x[0]); }
static mf_tensor *f_attention(mf_tensor **x) { return mf_causal_attention(x[0], x[1], x[2]); }
static mf_tensor *f_self_attention(mf_tensor **x) { return mf_causal_self_attention(x[0], 2); }
static mf_tensor *f_sigmoid(mf_tensor **x) { return mf_sigmoid(x[0]); }
static mf_tensor *f_pow(mf_tensor **x) { return mf_pow(x[0], 2.0); }
static mf_tensor *f_matmul(mf_tensor **x) { return mf_matmul(x[0], x[1]); }
static mf_tensor *f_matmul_tt(mf_tensor **x) { return mf_matmul_t(x[0], x[1], true, true); }
static mf_tensor *f_bmm(mf_tensor **x) { return mf_matmul(x[0], x[1]); }
static mf_tensor *f_linear(mf_tensor **x) { return mf_linear(x[0], x[1], x[2]); }
static mf_tensor *f_sum0(mf_tensor **x) { return mf_sum(x[0], 1, (const int[]){0}, false); }
static mf_tensor *f_sum1k(mf_tensor **x) { return mf_sum(x[0], 1, (const int[]){1}, true); }
static mf_tensor *f_mean0(mf_tensor **x) { return mf_mean(x[0], 1, (const int[]){0}, false); }
static mf_tensor *f_mean_all(mf_tensor **x) { return mf_mean_all(x[0]); }
static mf_tensor *f_max1(mf_tensor **x) { return mf_max(x[0], 1, (const int[]){1}, false); }
static mf_tensor *f_argmax(mf_tensor **x) { return mf_argmax(x[0], 1, false); }
static mf_tensor *f_reshape(mf_tensor **x) { return mf_reshape(x[0], 3, (const int64_t[]){6, 2, 2}); }
static mf_tensor *f_flatten(mf_tensor **x) { return mf_flatten(x[0], 1, -1); }
static mf_tensor *f_transpose(mf_tensor **x) { return mf_transpose(x[0], 0, 1); }
static mf_tensor *f_narrow(mf_tensor **x) { return mf_narrow(x[0], 1, 1, 2); }
static mf_tensor *f_expand(mf_tensor **x) { return mf_expand(x[0], 2, (const int64_t[]){5, 4}); }
static mf_tensor *f_concat(mf_tensor **x) { return mf_concat(2, x, 1); }
static mf_tensor *f_clone(mf_tensor **x) { return mf_clone(x[0]); }
static mf_tensor *f_softmax(mf_tensor **x) { return mf_softmax(x[0], 1); }
static mf_tensor *f_log_softmax(mf_tensor **x) { return mf_log_softmax(x[0], 1); }
static mf_tensor *f_xent(mf_tensor **x) { return mf_cross_entropy(x[0], x[1], MF_REDUCTION_MEAN); }
static mf_tensor *f_xent_sum(mf_tensor **x) { return mf_cross_entropy(x[0], x[1], MF_REDUCTION_SUM); }
static mf_tensor *f_xent_none(mf_tensor **x) { return mf_cross_entropy(x[0], x[1], MF_REDUCTION_NONE); }
static mf_tensor *f_lxent(mf_tensor **x) { return mf_linear_cross_entropy(x[0], x[1], x[2], MF_REDUCTION_MEAN); }
static mf_tensor *f_nll(mf_tensor **x) { return mf_nll_loss(x[0], x[1], MF_REDUCTION_MEAN); }
static mf_tensor *f_mse(mf_tensor **x) { return mf_mse_loss(x[0], x[1], MF_REDUCTION_MEAN); }
static mf_tensor *f_embedding(mf_tensor **x) { return mf_embedding(x[0], x[1]); }
static mf_tensor *f_conv(mf_tensor **x)
{
    mf_conv2d_params p = mf_conv2d_defaults();
    p.padding[0] = p.padding[1] = 1;
    return mf_conv2d(x[0], x[1], x[2], &p);
}
static mf_tensor *f_maxpool(mf_tensor **x)
{
    mf_pool2d_params p = mf_pool2d_defaults(2);
    return mf_max_pool2d(x[0], &p);
}
static mf_tensor *f_avgpool(mf_tensor **x)
{
    mf_pool2d_params p = mf_pool2d_defaults(2);
    return mf_avg_pool2d(x[0], &p);
}
static mf_tensor *f_batchnorm(mf_tensor **x) { return mf_batch_norm(x[0], NULL, NULL, x[1], x[2], true, 0.1, 1e-5); }
static mf_tensor *f_layernorm(mf_tensor **x) { return mf_layer_norm(x[0], 1, x[1], x[2], 1e-5); }
static mf_tensor *f_dropout(mf_tensor **x)
{
    mf_manual_seed(77);
    return mf_dropout(x[0], 0.4, true);
}

#define S2(a, b) {a, b}
static const op_case cases[] = {
    {"add", f_add, 2, {2, 2}, {S2(5, 4), S2(5, 4)}, {0}},
    {"add bias", f_add, 2, {2, 1}, {S2(5, 4), {4}}, {0}},
    {"sub", f_sub, 2, {2, 2}, {S2(5, 3), S2(5, 3)}, {0}},
    {"mul", f_mul, 2, {2, 1}, {S2(5, 3), {3}}, {0}},
    {"div", f_div, 2, {2, 2}, {S2(5, 3), S2(5, 3)}, {0}},
    {"maximum", f_maximum, 2, {2, 2}, {S2(3, 5), S2(3, 5)}, {0}},
    {"neg", f_neg, 1, {2}, {S2(5, 3)}, {0}},
    {"scale", f_scale, 1, {2}, {S2(5, 3)}, {0}},
    {"exp", f_exp, 1, {2}, {S2(5, 3)}, {0}},
    {"relu", f_relu, 1, {2}, {S2(5, 3)}, {0}},
    {"gelu", f_gelu, 1, {2}, {S2(3, 5)}, {0}},
    {"tanh", f_tanh, 1, {2}, {S2(5, 3)}, {0}},
    {"gelu_tanh", f_gelu_tanh, 1, {2}, {S2(3, 5)}, {0}},
    {"sigmoid", f_sigmoid, 1, {2}, {S2(5, 3)}, {0}},
    {"pow", f_pow, 1, {2}, {S2(5, 3)}, {0}},
    {"matmul", f_matmul, 2, {2, 2}, {S2(5, 6), S2(6, 3)}, {0}},
    {"matmul_t", f_matmul_tt, 2, {2, 2}, {S2(6, 5), S2(3, 6)}, {0}},
    {"batched matmul", f_bmm, 2, {3, 3}, {{3, 5, 4}, {3, 4, 2}}, {0}},
    {"linear", f_linear, 3, {2, 2, 1}, {S2(5, 6), S2(7, 6), {7}}, {0}},
    {"sum axis 0", f_sum0, 1, {2}, {S2(5, 3)}, {0}},
    {"sum axis 1 keepdim", f_sum1k, 1, {2}, {S2(5, 3)}, {0}},
    {"mean axis 0", f_mean0, 1, {2}, {S2(5, 3)}, {0}},
    {"mean all", f_mean_all, 1, {2}, {S2(5, 3)}, {0}},
    {"max axis 1", f_max1, 1, {2}, {S2(5, 3)}, {0}},
    {"argmax", f_argmax, 1, {2}, {S2(5, 3)}, {0}},
    {"reshape", f_reshape, 1, {2}, {S2(6, 4)}, {0}},
    {"flatten", f_flatten, 1, {3}, {{6, 2, 3}}, {0}},
    {"transpose", f_transpose, 1, {2}, {S2(5, 3)}, {0}},
    {"narrow", f_narrow, 1, {2}, {S2(5, 4)}, {0}},
    {"expand", f_expand, 1, {2}, {S2(5, 1)}, {0}},
    {"concat", f_concat, 2, {2, 2}, {S2(5, 2), S2(5, 3)}, {0}},
    {"clone", f_clone, 1, {2}, {S2(5, 3)}, {0}},
    {"softmax", f_softmax, 1, {2}, {S2(5, 4)}, {0}},
    {"log_softmax", f_log_softmax, 1, {2}, {S2(5, 4)}, {0}},
    {"cross_entropy mean", f_xent, 2, {2, 1}, {S2(7, 4), {7}}, {0, 4}},
    {"cross_entropy sum", f_xent_sum, 2, {2, 1}, {S2(7, 4), {7}}, {0, 4}},
    {"cross_entropy none", f_xent_none, 2, {2, 1}, {S2(7, 4), {7}}, {0, 4}},
    {"linear_cross_entropy", f_lxent, 3, {2, 2, 1}, {S2(7, 4), S2(6, 4), {7}}, {0, 0, 6}},
    {"nll_loss", f_nll, 2, {2, 1}, {S2(5, 4), {5}}, {0, 4}},
    {"mse_loss", f_mse, 2, {2, 2}, {S2(5, 3), S2(5, 3)}, {0}},
    {"embedding", f_embedding, 2, {2, 2}, {S2(6, 4), S2(5, 2)}, {0, 6}},
    {"conv2d", f_conv, 3, {4, 4, 1}, {{5, 3, 4, 4}, {4, 3, 3, 3}, {4}}, {0}},
    {"max_pool2d", f_maxpool, 1, {4}, {{5, 3, 4, 4}}, {0}},
    {"avg_pool2d", f_avgpool, 1, {4}, {{5, 3, 4, 4}}, {0}},
    {"batch_norm", f_batchnorm, 3, {4, 1, 1}, {{4, 3, 2, 2}, {3}, {3}}, {0}},
    {"layer_norm", f_layernorm, 3, {2, 1, 1}, {S2(5, 4), {4}, {4}}, {0}},
    {"dropout", f_dropout, 1, {2}, {S2(7, 3)}, {0}},
    {"causal_self_attention", f_self_attention, 1, {3}, {{4, 5, 12}}, {0}},
    {"causal_attention", f_attention, 3, {4, 4, 4}, {{4, 3, 5, 4}, {4, 3, 5, 4}, {4, 3, 5, 4}}, {0}},
};

/* ------------------------------------------------------------ harness */
static mf_tensor *make_input(const op_case *c, int i)
{
    if (c->int_hi[i] > 0) {
        mf_tensor *u = mf_rand(MF_F64, c->ndim[i], c->shape[i]);
        mf_tensor *s = mf_scale(u, (double)c->int_hi[i] - 1e-9), *t = mf_cast(s, MF_I64);
        mf_tensor_destroy(u);
        mf_tensor_destroy(s);
        return t;
    }
    mf_tensor *u = mf_rand(MF_F64, c->ndim[i], c->shape[i]);
    mf_tensor *s = mf_scale(u, 2.0), *t = mf_add_scalar(s, -1.0);
    mf_tensor_destroy(u);
    mf_tensor_destroy(s);
    return t;
}

#define diff(g, ref) mf_test_max_diff((g), (ref), true)

/* the global version of full with SBP text s (P: n equal shares) */
static mf_tensor *globalize(mf_tensor *full, mf_placement *p, const char *s)
{
    if (strcmp(s, "P")) return mf_global_from_full(full, p, s);
    mf_tensor *share = mf_scale(full, 1.0 / mf_world_size());
    mf_tensor *g = share ? mf_to_global(share, p, "P") : NULL;
    mf_tensor_destroy(share);
    return g;
}

static void run_case(const op_case *c, mf_placement *p)
{
    mf_manual_seed(1234);
    mf_tensor *full[4] = {NULL}, *grads[4] = {NULL};
    for (int i = 0; i < c->n; i++) {
        full[i] = make_input(c, i);
        ck_assert_nonnull(full[i]);
        if (!c->int_hi[i]) mf_tensor_set_requires_grad(full[i], true);
    }
    mf_tensor *ref = c->fn(full);
    ck_assert_msg(ref != NULL, "%s: %s", c->name, mf_last_error());
    bool diffable = mf_tensor_requires_grad(ref);
    mf_tensor *w = mf_randn(MF_F64, mf_tensor_ndim(ref), mf_tensor_shape(ref));
    if (diffable) {
        mf_tensor *rw = mf_mul(ref, mf_tensor_dtype(ref) == MF_F64 ? w : w), *loss = mf_sum_all(rw);
        ck_assert_ok(mf_backward(loss));
        for (int i = 0; i < c->n; i++)
            if (!c->int_hi[i]) grads[i] = mf_tensor_retain(mf_tensor_grad(full[i]));
        mf_tensor_destroy(rw);
        mf_tensor_destroy(loss);
    }
    /* the SBP choices of each input */
    const char *choice[4][6];
    int nchoice[4], total = 1;
    char axes[4][4][8];
    for (int i = 0; i < c->n; i++) {
        int k = 0;
        for (int a = 0; a < c->ndim[i] && a < 4 && (!c->int_hi[i] || a == 0); a++) {
            snprintf(axes[i][a], sizeof axes[i][a], "S(%d)", a);
            choice[i][k++] = axes[i][a];
        }
        choice[i][k++] = "B";
        if (!c->int_hi[i]) choice[i][k++] = "P";
        nchoice[i] = k;
        total *= k;
    }
    for (int combo = 0; combo < total; combo++) {
        mf_tensor *gin[4] = {NULL};
        char what[160];
        int rem = combo, len = snprintf(what, sizeof what, "%s with", c->name);
        for (int i = 0; i < c->n; i++) {
            const char *s = choice[i][rem % nchoice[i]];
            rem /= nchoice[i];
            len += snprintf(what + len, sizeof what - (size_t)len, " %s", s);
            mf_tensor *detached = mf_tensor_detach(full[i]);
            gin[i] = globalize(detached, p, s);
            mf_tensor_destroy(detached);
            ck_assert_msg(gin[i] != NULL, "%s: %s", what, mf_last_error());
            if (!c->int_hi[i]) ck_assert_ok(mf_tensor_set_requires_grad(gin[i], true));
        }
        mf_tensor *out = c->fn(gin);
        ck_assert_msg(out != NULL, "%s: %s", what, mf_last_error());
        double d = diff(out, ref);
        ck_assert_msg(d < 1e-9, "%s: forward differs by %g", what, d);
        if (diffable) {
            mf_tensor *wg = mf_global_from_full(w, p, "B");
            mf_tensor *ow = mf_mul(out, wg), *loss = ow ? mf_sum_all(ow) : NULL;
            ck_assert_msg(loss != NULL, "%s: %s", what, mf_last_error());
            ck_assert_ok(mf_backward(loss));
            for (int i = 0; i < c->n; i++) {
                if (!grads[i]) continue;
                mf_tensor *g = mf_tensor_grad(gin[i]);
                ck_assert_msg(g != NULL, "%s: no gradient for input %d", what, i);
                d = diff(g, grads[i]);
                ck_assert_msg(d < 1e-9, "%s: gradient of input %d differs by %g", what, i, d);
            }
            mf_tensor_destroy(wg);
            mf_tensor_destroy(ow);
            mf_tensor_destroy(loss);
        }
        mf_tensor_destroy(out);
        for (int i = 0; i < c->n; i++) mf_tensor_destroy(gin[i]);
    }
    mf_tensor_destroy(ref);
    mf_tensor_destroy(w);
    for (int i = 0; i < c->n; i++) {
        mf_tensor_destroy(full[i]);
        mf_tensor_destroy(grads[i]);
    }
}

START_TEST(test_op_signatures)
{
    mf_placement *p = mf_placement_world();
    run_case(&cases[_i], p);
    mf_placement_destroy(p);
}
END_TEST

Suite *global_ops_suite(void)
{
    Suite *s = suite_create("global_ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_op_signatures, 0, (int)(sizeof cases / sizeof *cases));
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(global_ops_suite)
