/*
 * tests/test_cuda.c - the CUDA backend against the CPU backend: every
 * kernel of the backend table, forward and backward, on the same inputs.
 *
 * Each case runs a function of its inputs on the CPU and on the GPU,
 * backpropagates sum(out * w) for a fixed w on both, and compares the
 * outputs and every input gradient within a tolerance set by the dtype
 * (f32: 2e-5 relative to the tensor's scale; f64: 1e-11). Random fills
 * and dropout masks must agree bit for bit (Philox is the same function
 * on both). Exits 77 (SKIP) when this build or machine has no CUDA.
 */
#include <stdlib.h>
#include "tests/test_util.h"

#define TOL_F32 2e-5
#define TOL_F64 1e-11

typedef mf_tensor *(*fn_t)(mf_tensor **in, void *u);

static double tol_of(mf_dtype dt) { return dt == MF_F64 ? TOL_F64 : TOL_F32; }

/* Fails unless a (any device) and b (any device) agree within tol times
 * (1 + b's largest magnitude); tol 0 asks for equal bits. */
static void expect_close(const char *what, mf_tensor *a, mf_tensor *b, double tol)
{
    ck_assert_msg(a && b, "%s: missing tensor: %s", what, mf_last_error());
    int64_t n = mf_tensor_numel(b);
    ck_assert_msg(mf_tensor_numel(a) == n, "%s: %lld vs %lld elements", what, (long long)mf_tensor_numel(a),
                  (long long)n);
    double *x = malloc((size_t)(n + 1) * sizeof *x), *y = malloc((size_t)(n + 1) * sizeof *y);
    ck_assert(x && y);
    ck_assert_ok(mf_tensor_copy_out(a, MF_F64, x, n));
    ck_assert_ok(mf_tensor_copy_out(b, MF_F64, y, n));
    double scale = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(y[i]) && fabs(y[i]) > scale) scale = fabs(y[i]);
    for (int64_t i = 0; i < n; i++) {
        bool same = x[i] == y[i] || (isnan(x[i]) && isnan(y[i]));
        if (same || (tol > 0 && fabs(x[i] - y[i]) <= tol * (1 + scale))) continue;
        double xi = x[i], yi = y[i];
        free(x);
        free(y);
        ck_abort_msg("%s[%lld]: cuda %.9g vs cpu %.9g (tol %g of scale %g)", what, (long long)i, xi, yi, tol, scale);
    }
    free(x);
    free(y);
}

/* A fixed weighting for the backward pass: 0.5 + 0.25*sin(i) */
static mf_tensor *weights_like(mf_tensor *y)
{
    int64_t n = mf_tensor_numel(y);
    double *v = malloc((size_t)(n + 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = 0.5 + 0.25 * sin((double)i);
    mf_tensor *w = mf_empty(mf_tensor_dtype(y), mf_tensor_ndim(y), mf_tensor_shape(y));
    if (w) mf_tensor_copy_in(w, MF_F64, v, n);
    free(v);
    return w;
}

/* One run on device d: inputs copied there, output, input gradients. */
static mf_tensor *run_on(mf_device_type d, fn_t fn, int n, mf_tensor **in, void *u, mf_tensor **grads)
{
    ck_assert_ok(mf_set_default_device(d));
    mf_tensor *x[8] = {0};
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        mf_tensor *det = mf_tensor_detach(in[i]);
        mf_no_grad_begin();
        x[i] = mf_to_device(det, d);
        if (x[i] && d == MF_DEV_CPU) {   /* a leaf of its own */
            mf_tensor *c = mf_clone(x[i]);
            mf_tensor_destroy(x[i]);
            x[i] = c;
        }
        mf_no_grad_end();
        mf_tensor_destroy(det);
        ck_assert_nonnull(x[i]);
        ck_assert_msg(mf_tensor_device(x[i]) == d, "input %d is not on %s", i, mf_device_name(d));
        if (mf_dtype_is_float(mf_tensor_dtype(x[i])) && mf_tensor_requires_grad(in[i]))
            ck_assert_ok(mf_tensor_set_requires_grad(x[i], true));
    }
    mf_tensor *y = fn(x, u);
    ck_assert_msg(y != NULL, "forward on %s failed: %s", mf_device_name(d), mf_last_error());
    ck_assert_msg(mf_tensor_device(y) == d, "the output is on %s, not %s", mf_device_name(mf_tensor_device(y)),
                  mf_device_name(d));
    if (mf_tensor_requires_grad(y)) {
        mf_tensor *w = weights_like(y);
        mf_tensor *p = mf_mul(y, w);
        mf_tensor *l = p ? mf_sum_all(p) : NULL;
        ck_assert_msg(l != NULL, "loss on %s: %s", mf_device_name(d), mf_last_error());
        ck_assert_msg(mf_backward(l) == MF_OK, "backward on %s: %s", mf_device_name(d), mf_last_error());
        mf_tensor_destroy(w);
        mf_tensor_destroy(p);
        mf_tensor_destroy(l);
    }
    for (int i = 0; i < n; i++) {
        grads[i] = x[i] && mf_tensor_grad(x[i]) ? mf_tensor_retain(mf_tensor_grad(x[i])) : NULL;
        if (grads[i])
            ck_assert_msg(mf_tensor_device(grads[i]) == d, "gradient %d is on the wrong device", i);
        mf_tensor_destroy(x[i]);
    }
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
    return y;
}

/* Runs fn on both devices and compares output and gradients. */
static void parity(const char *what, fn_t fn, int n, mf_tensor **in, void *u, double tol)
{
    mf_tensor *gc[8] = {0}, *gg[8] = {0};
    mf_tensor *yc = run_on(MF_DEV_CPU, fn, n, in, u, gc);
    mf_tensor *yg = run_on(MF_DEV_CUDA, fn, n, in, u, gg);
    char name[160];
    snprintf(name, sizeof name, "%s output", what);
    expect_close(name, yg, yc, tol);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(!gc[i] == !gg[i], "%s: input %d has a gradient on one device only", what, i);
        if (!gc[i]) continue;
        snprintf(name, sizeof name, "%s d/d input %d", what, i);
        expect_close(name, gg[i], gc[i], tol);
        mf_tensor_destroy(gc[i]);
        mf_tensor_destroy(gg[i]);
    }
    mf_tensor_destroy(yc);
    mf_tensor_destroy(yg);
}

static mf_tensor *rnd(mf_dtype dt, int ndim, const int64_t *shape, double lo, double hi)
{
    mf_tensor *u = mf_rand(dt, ndim, shape);
    mf_tensor *s = u ? mf_scale(u, hi - lo) : NULL;
    mf_tensor *t = s ? mf_add_scalar(s, lo) : NULL;
    mf_tensor_destroy(u);
    mf_tensor_destroy(s);
    if (t) mf_tensor_set_requires_grad(t, true);
    return t;
}

static mf_tensor *ints(int64_t n, int64_t hi)
{
    mf_tensor *t = mf_empty(MF_I64, 1, &n);
    for (int64_t i = 0; i < n; i++) mf_tensor_set(t, &i, (double)((i * 7 + 3) % hi));
    return t;
}

static void free_all(int n, mf_tensor **t)
{
    for (int i = 0; i < n; i++) mf_tensor_destroy(t[i]);
}

/* ---------------------------------------------------------------- cases */
typedef struct { int op; double a; } un_case;

static mf_tensor *un_fn(mf_tensor **in, void *u)
{
    un_case *c = u;
    mf_tensor *x = in[0];
    switch (c->op) {
    case 0: return mf_neg(x);
    case 1: return mf_scale(x, c->a);
    case 2: return mf_add_scalar(x, c->a);
    case 3: return mf_pow(x, c->a);
    case 4: return mf_exp(x);
    case 5: return mf_log(x);
    case 6: return mf_sqrt(x);
    case 7: return mf_abs(x);
    case 8: return mf_relu(x);
    case 9: return mf_gelu(x);
    case 10: return mf_sigmoid(x);
    default: return mf_tanh(x);
    }
}

START_TEST(unary_ops)
{
    for (int dt = 0; dt < 2; dt++)
        for (int op = 0; op < 12; op++) {
            mf_dtype t = dt ? MF_F64 : MF_F32;
            bool pos = op == 3 || op == 5 || op == 6;
            /* a transposed view: the strided path */
            mf_tensor *b = rnd(t, MF_DIMS(7, 33), pos ? 0.2 : -2, 2);
            mf_tensor *x = mf_transpose(b, 0, 1);
            mf_tensor_destroy(b);
            mf_tensor *in[1] = {mf_contiguous(x)};
            mf_tensor_destroy(x);
            mf_tensor_set_requires_grad(in[0], true);
            un_case c = {op, op == 3 ? 2.5 : 0.75};
            char what[64];
            snprintf(what, sizeof what, "unary op %d %s", op, mf_dtype_name(t));
            parity(what, un_fn, 1, in, &c, tol_of(t));
            free_all(1, in);
        }
}
END_TEST

static mf_tensor *bin_fn(mf_tensor **in, void *u)
{
    switch (*(int *)u) {
    case 0: return mf_add(in[0], in[1]);
    case 1: return mf_sub(in[0], in[1]);
    case 2: return mf_mul(in[0], in[1]);
    case 3: return mf_div(in[0], in[1]);
    case 4: return mf_maximum(in[0], in[1]);
    case 5: return mf_eq(in[0], in[1]);
    case 6: return mf_gt(in[0], in[1]);
    default: return mf_lt(in[0], in[1]);
    }
}

START_TEST(binary_ops)
{
    for (int dt = 0; dt < 3; dt++)
        for (int op = 0; op < 8; op++) {
            mf_dtype t = dt == 0 ? MF_F32 : dt == 1 ? MF_F64 : MF_I64;
            if (t == MF_I64 && op == 3) continue;
            mf_tensor *in[2];
            if (t == MF_I64) {   /* broadcast [3,1,5] with [4,5] */
                mf_tensor *a = ints(15, 4), *b = ints(20, 3);
                in[0] = mf_reshape(a, MF_DIMS(3, 1, 5));
                in[1] = mf_reshape(b, MF_DIMS(4, 5));
                mf_tensor_destroy(a);
                mf_tensor_destroy(b);
            } else {
                in[0] = rnd(t, MF_DIMS(3, 1, 5), -1, 1);
                in[1] = rnd(t, MF_DIMS(4, 5), 0.5, 1.5);
            }
            char what[64];
            snprintf(what, sizeof what, "binary op %d %s", op, mf_dtype_name(t));
            parity(what, bin_fn, 2, in, &op, tol_of(t));
            free_all(2, in);
        }
}
END_TEST

typedef struct { int kind, naxes, axes[3]; bool keep; } red_case;

static mf_tensor *red_fn(mf_tensor **in, void *u)
{
    red_case *c = u;
    switch (c->kind) {
    case 0: return mf_sum(in[0], c->naxes, c->axes, c->keep);
    case 1: return mf_mean(in[0], c->naxes, c->axes, c->keep);
    case 2: return mf_max(in[0], c->naxes, c->axes, c->keep);
    case 3: return mf_sum_all(in[0]);
    default: return mf_argmax(in[0], c->axes[0], c->keep);
    }
}

START_TEST(reductions)
{
    red_case cases[] = {{0, 1, {0}, false}, {0, 1, {2}, true}, {0, 2, {0, 2}, false}, {1, 1, {1}, false},
                        {2, 1, {2}, false}, {2, 2, {0, 1}, true}, {3, 0, {0}, false}, {4, 1, {1}, false},
                        {4, 1, {2}, true}};
    for (int dt = 0; dt < 2; dt++)
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            mf_dtype t = dt ? MF_F64 : MF_F32;
            mf_tensor *in[1] = {rnd(t, MF_DIMS(6, 5, 301), -1, 1)};
            char what[64];
            snprintf(what, sizeof what, "reduction %zu %s", k, mf_dtype_name(t));
            parity(what, red_fn, 1, in, &cases[k], tol_of(t));
            free_all(1, in);
        }
}
END_TEST

typedef struct { int kind; bool ta, tb; } mm_case;

static mf_tensor *mm_fn(mf_tensor **in, void *u)
{
    mm_case *c = u;
    if (c->kind == 0) return mf_matmul_t(in[0], in[1], c->ta, c->tb);
    return mf_linear(in[0], in[1], in[2]);
}

START_TEST(matmul_and_linear)
{
    for (int dt = 0; dt < 2; dt++) {
        mf_dtype t = dt ? MF_F64 : MF_F32;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                mm_case c = {0, ta, tb};
                /* batched: [2, 37, 19] x [2, 19, 23] with transposes */
                mf_tensor *in[2] = {ta ? rnd(t, MF_DIMS(2, 19, 37), -1, 1) : rnd(t, MF_DIMS(2, 37, 19), -1, 1),
                                    tb ? rnd(t, MF_DIMS(2, 23, 19), -1, 1) : rnd(t, MF_DIMS(2, 19, 23), -1, 1)};
                parity("matmul", mm_fn, 2, in, &c, tol_of(t));
                free_all(2, in);
            }
        mm_case c = {1, false, false};
        mf_tensor *in[3] = {rnd(t, MF_DIMS(17, 40), -1, 1), rnd(t, MF_DIMS(9, 40), -1, 1), rnd(t, MF_DIMS(9), -1, 1)};
        parity("linear", mm_fn, 3, in, &c, tol_of(t));
        free_all(3, in);
    }
}
END_TEST

typedef struct { int kind, dim; } sm_case;

static mf_tensor *sm_fn(mf_tensor **in, void *u)
{
    sm_case *c = u;
    return c->kind ? mf_log_softmax(in[0], c->dim) : mf_softmax(in[0], c->dim);
}

START_TEST(softmax_both)
{
    for (int dt = 0; dt < 2; dt++)
        for (int kind = 0; kind < 2; kind++)
            for (int dim = 0; dim < 3; dim++) {
                mf_dtype t = dt ? MF_F64 : MF_F32;
                sm_case c = {kind, dim};
                mf_tensor *in[1] = {rnd(t, MF_DIMS(4, 11, 6), -3, 3)};
                parity("softmax", sm_fn, 1, in, &c, tol_of(t));
                free_all(1, in);
            }
}
END_TEST

static mf_tensor *loss_fn(mf_tensor **in, void *u)
{
    int k = *(int *)u;
    mf_reduction r = (mf_reduction)(k % 3);
    if (k < 3) return mf_cross_entropy(in[0], in[1], r);
    if (k < 6) {
        mf_tensor *lp = mf_log_softmax(in[0], 1);
        mf_tensor *l = mf_nll_loss(lp, in[1], r);
        mf_tensor_destroy(lp);
        return l;
    }
    if (k < 9) return mf_mse_loss(in[0], in[2], r);
    return mf_l1_loss(in[0], in[2], r);
}

START_TEST(losses)
{
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < 12; k++) {
            mf_dtype t = dt ? MF_F64 : MF_F32;
            mf_tensor *in[3] = {rnd(t, MF_DIMS(13, 10), -2, 2), ints(13, 10), rnd(t, MF_DIMS(13, 10), -2, 2)};
            parity("loss", loss_fn, 3, in, &k, tol_of(t));
            free_all(3, in);
        }
}
END_TEST

static mf_tensor *emb_fn(mf_tensor **in, void *u)
{
    (void)u;
    return mf_embedding(in[0], in[1]);
}

START_TEST(embedding_rows)
{
    mf_tensor *idx = ints(24, 9);   /* repeats: gradients add up */
    mf_tensor *in[2] = {rnd(MF_F32, MF_DIMS(9, 16), -1, 1), mf_reshape(idx, MF_DIMS(4, 6))};
    parity("embedding", emb_fn, 2, in, NULL, TOL_F32);
    free_all(2, in);
    mf_tensor_destroy(idx);
}
END_TEST

typedef struct { mf_conv2d_params p; bool bias; } conv_case;

static mf_tensor *conv_fn(mf_tensor **in, void *u)
{
    conv_case *c = u;
    return mf_conv2d(in[0], in[1], c->bias ? in[2] : NULL, &c->p);
}

START_TEST(conv2d_variants)
{
    for (int dt = 0; dt < 2; dt++)
        for (int v = 0; v < 4; v++) {
            mf_dtype t = dt ? MF_F64 : MF_F32;
            conv_case c = {mf_conv2d_defaults(), v != 1};
            int groups = v == 3 ? 2 : 1;
            if (v >= 1) c.p.padding[0] = c.p.padding[1] = 1;
            if (v == 2) {
                c.p.stride[0] = 2;
                c.p.dilation[1] = 2;
            }
            c.p.groups = groups;
            mf_tensor *in[3] = {rnd(t, MF_DIMS(3, 4, 9, 8), -1, 1), rnd(t, MF_DIMS(6, 4 / groups, 3, 3), -1, 1),
                                rnd(t, MF_DIMS(6), -1, 1)};
            char what[64];
            snprintf(what, sizeof what, "conv2d variant %d %s", v, mf_dtype_name(t));
            parity(what, conv_fn, 3, in, &c, tol_of(t));
            free_all(3, in);
        }
}
END_TEST

typedef struct { int kind; mf_pool2d_params p; } pool_case;

static mf_tensor *pool_fn(mf_tensor **in, void *u)
{
    pool_case *c = u;
    if (c->kind == 0) return mf_max_pool2d(in[0], &c->p);
    if (c->kind == 1) return mf_avg_pool2d(in[0], &c->p);
    return mf_adaptive_avg_pool2d(in[0], 3, 2);
}

START_TEST(pooling)
{
    for (int v = 0; v < 7; v++) {
        pool_case c = {v < 3 ? 0 : v < 6 ? 1 : 2, mf_pool2d_defaults(2)};
        if (v == 1 || v == 4 || v == 5) {   /* overlapping windows with padding */
            c.p = mf_pool2d_defaults(3);
            c.p.stride[0] = c.p.stride[1] = 2;
            c.p.padding[0] = c.p.padding[1] = 1;
            c.p.count_include_pad = v != 5;
        }
        if (v == 2) c.p.stride[0] = c.p.stride[1] = 1;
        mf_tensor *in[1] = {rnd(MF_F32, MF_DIMS(2, 3, 9, 7), -1, 1)};
        char what[64];
        snprintf(what, sizeof what, "pooling variant %d", v);
        parity(what, pool_fn, 1, in, &c, TOL_F32);
        free_all(1, in);
    }
}
END_TEST

typedef struct { int kind; bool train; } norm_case;

static mf_tensor *norm_fn(mf_tensor **in, void *u)
{
    norm_case *c = u;
    if (c->kind == 1) return mf_layer_norm(in[0], 2, in[1], in[2], 1e-5);
    /* running statistics made on the current device, from fixed values */
    mf_tensor *rm = mf_full(mf_tensor_dtype(in[0]), MF_DIMS(3), 0.25);
    mf_tensor *rv = mf_full(mf_tensor_dtype(in[0]), MF_DIMS(3), 1.5);
    mf_tensor *y = mf_batch_norm(in[0], rm, rv, in[3], in[4], c->train, 0.1, 1e-5);
    /* training also updates the running statistics: fold them in */
    mf_tensor *rv3 = mf_reshape(rv, MF_DIMS(3, 1, 1));
    mf_tensor *ys = y && c->train ? mf_mul(y, rv3) : mf_tensor_retain(y);
    mf_tensor_destroy(rv3);
    mf_tensor_destroy(y);
    mf_tensor_destroy(rm);
    mf_tensor_destroy(rv);
    return ys;
}

START_TEST(normalisation)
{
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < 3; k++) {
            mf_dtype t = dt ? MF_F64 : MF_F32;
            norm_case c = {k == 2, k == 0};
            mf_tensor *in[5] = {k == 2 ? rnd(t, MF_DIMS(5, 3, 4, 6), -1, 1) : rnd(t, MF_DIMS(5, 3, 4, 6), -1, 1),
                                rnd(t, MF_DIMS(4, 6), 0.5, 1.5), rnd(t, MF_DIMS(4, 6), -1, 1), rnd(t, MF_DIMS(3), 0.5, 1.5),
                                rnd(t, MF_DIMS(3), -1, 1)};
            parity(k == 2 ? "layer_norm" : k ? "batch_norm eval" : "batch_norm train", norm_fn, 5, in, &c, tol_of(t));
            free_all(5, in);
        }
}
END_TEST

/* Random fills and dropout masks: the same bits on both devices. */
static mf_tensor *rand_fn(mf_tensor **in, void *u)
{
    int k = *(int *)u;
    mf_manual_seed(1234);
    if (k == 0) return mf_rand(MF_F32, MF_DIMS(1001));
    if (k == 1) return mf_randn(MF_F64, MF_DIMS(999));
    return mf_dropout(in[0], 0.3, true);
}

START_TEST(philox_same_bits)
{
    for (int k = 0; k < 3; k++) {
        mf_tensor *in[1] = {rnd(MF_F32, MF_DIMS(37, 29), -1, 1)};
        /* normals go through log/cos, whose last bit may differ between libm and CUDA */
        parity(k == 0 ? "rand" : k == 1 ? "randn" : "dropout", rand_fn, 1, in, &k, k == 1 ? 1e-15 : 0);
        free_all(1, in);
    }
}
END_TEST

typedef struct { int kind; } opt_case;

/* Three optimizer steps on w with the gradient of sum(w*w*c); returns w. */
static mf_tensor *opt_fn(mf_tensor **in, void *u)
{
    int kind = *(int *)u;
    mf_tensor *w = mf_clone(in[0]);
    mf_tensor_set_requires_grad(w, true);
    mf_named_tensor item = {"w", w, MF_ENTRY_PARAM};
    mf_tensor_list lst = {1, &item}, *l = &lst;
    mf_optim *o = NULL;
    if (kind == 0) {
        mf_sgd_opts so = mf_sgd_defaults();
        so.lr = 0.1;
        so.momentum = 0.9;
        so.nesterov = true;
        so.weight_decay = 0.01;
        o = mf_sgd_create(l, &so);
    } else if (kind == 1 || kind == 2) {
        mf_adam_opts ao = kind == 1 ? mf_adam_defaults() : mf_adamw_defaults();
        ao.lr = 0.05;
        ao.amsgrad = kind == 2;
        o = kind == 1 ? mf_adam_create(l, &ao) : mf_adamw_create(l, &ao);
    } else {
        mf_rmsprop_opts ro = mf_rmsprop_defaults();
        ro.lr = 0.01;
        ro.momentum = 0.5;
        ro.centered = true;
        o = mf_rmsprop_create(l, &ro);
    }
    for (int s = 0; s < 3 && o; s++) {
        mf_optim_zero_grad(o);
        mf_tensor *sq = mf_mul(w, w), *p = sq ? mf_mul(sq, in[1]) : NULL, *loss = p ? mf_sum_all(p) : NULL;
        if (!loss || mf_backward(loss) != MF_OK || mf_optim_step(o) != MF_OK) s = 3;
        mf_tensor_destroy(sq);
        mf_tensor_destroy(p);
        mf_tensor_destroy(loss);
    }
    mf_optim_destroy(o);
    mf_tensor *r = mf_tensor_detach(w);
    mf_tensor_destroy(w);
    return r;
}

START_TEST(optimizers)
{
    for (int dt = 0; dt < 2; dt++)
        for (int kind = 0; kind < 4; kind++) {
            mf_dtype t = dt ? MF_F64 : MF_F32;
            mf_tensor *in[2] = {rnd(t, MF_DIMS(50), -1, 1), rnd(t, MF_DIMS(50), 0.5, 1.5)};
            mf_tensor_set_requires_grad(in[0], false);
            mf_tensor_set_requires_grad(in[1], false);
            parity("optimizer", opt_fn, 2, in, &kind, tol_of(t));
            free_all(2, in);
        }
}
END_TEST

/* Autocast: the GPU multiplies the bfloat16 operands on its tensor cores
 * (cublasGemmEx), the CPU in f32 on the rounded values: equal up to the
 * order of the f32 sums. */
START_TEST(autocast_bf16)
{
    ck_assert_ok(mf_autocast_set(MF_PRECISION_BF16));
    mm_case m = {0, false, true};
    mf_tensor *a[2] = {rnd(MF_F32, MF_DIMS(3, 64, 96), -1, 1), rnd(MF_F32, MF_DIMS(3, 48, 96), -1, 1)};
    parity("bf16 matmul", mm_fn, 2, a, &m, 1e-5);
    mm_case l = {1, false, false};
    mf_tensor *b[3] = {rnd(MF_F32, MF_DIMS(33, 80), -1, 1), rnd(MF_F32, MF_DIMS(24, 80), -1, 1),
                       rnd(MF_F32, MF_DIMS(24), -1, 1)};
    parity("bf16 linear", mm_fn, 3, b, &l, 1e-5);
    conv_case c = {mf_conv2d_defaults(), true};
    c.p.padding[0] = c.p.padding[1] = 1;
    mf_tensor *d[3] = {rnd(MF_F32, MF_DIMS(4, 8, 10, 10), -1, 1), rnd(MF_F32, MF_DIMS(16, 8, 3, 3), -1, 1),
                       rnd(MF_F32, MF_DIMS(16), -1, 1)};
    parity("bf16 conv2d", conv_fn, 3, d, &c, 1e-5);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_FP32));
    free_all(2, a);
    free_all(3, b);
    free_all(3, d);
}
END_TEST

/* ------------------------------------------------------ device handling */
START_TEST(devices_and_errors)
{
    mf_tensor *c = mf_ones(MF_F32, MF_DIMS(2, 3));
    mf_tensor *g = mf_to_device(c, MF_DEV_CUDA);
    ck_assert_nonnull(g);
    ck_assert_int_eq(mf_tensor_device(g), MF_DEV_CUDA);
    /* mixing devices names both */
    ck_assert_fails(mf_add(c, g), MF_ERR_ARG, "mf_add", "input 0 is on cpu", "input 1 on cuda");
    /* element access and printing on the device */
    int64_t at[2] = {1, 2};
    ck_assert_ok(mf_tensor_set(g, at, 7.5));
    ck_assert(mf_tensor_get(g, at) == 7.5);
    mf_tensor *s = mf_sum_all(g);
    ck_assert(mf_tensor_item(s) == 12.5);
    /* a target out of range fails as on the CPU */
    mf_tensor *tg = mf_from_data(MF_I64, MF_DIMS(2), (const int64_t[]){0, 3});
    mf_tensor *tgc = mf_to_device(tg, MF_DEV_CUDA);
    ck_assert_fails(mf_cross_entropy(g, tgc, MF_REDUCTION_MEAN), MF_ERR_ARG, "target 3",
                    "out of range for 3 classes");
    /* the device's memory is cached */
    mf_memory_stats st;
    mf_memory_get_stats_on(MF_DEV_CUDA, &st);
    ck_assert(st.in_use > 0 && st.allocs > 0);
    mf_tensor *all[] = {c, g, s, tg, tgc};
    free_all(5, all);
}
END_TEST

/* An MLP trained for a few steps: the same losses on both devices. */
static mf_tensor *train_fn(mf_tensor **in, void *u)
{
    (void)u;
    mf_manual_seed(7);
    mf_module *m = mf_model_mlp(20, 32, 5);
    mf_tensor_list *ps = mf_module_parameters(m);
    mf_adam_opts ao = mf_adam_defaults();
    mf_optim *o = mf_adam_create(ps, &ao);
    double losses[5];
    for (int s = 0; s < 5; s++) {
        mf_optim_zero_grad(o);
        mf_tensor *y = mf_module_forward(m, in[0]);
        mf_tensor *l = y ? mf_cross_entropy(y, in[1], MF_REDUCTION_MEAN) : NULL;
        losses[s] = l ? mf_tensor_item(l) : NAN;
        if (l) mf_backward(l);
        mf_optim_step(o);
        mf_tensor_destroy(y);
        mf_tensor_destroy(l);
    }
    mf_optim_destroy(o);
    mf_tensor_list_destroy(ps);
    mf_module_destroy(m);
    return mf_from_data(MF_F64, MF_DIMS(5), losses);
}

START_TEST(mlp_training)
{
    mf_tensor *in[2] = {rnd(MF_F32, MF_DIMS(64, 20), -1, 1), ints(64, 5)};
    mf_tensor_set_requires_grad(in[0], false);
    parity("mlp losses", train_fn, 2, in, NULL, 1e-5);
    free_all(2, in);
}
END_TEST

/* SKIP without a GPU (or without the CUDA backend); FAIL when a GPU is
 * there but CUDA cannot start on it (an old driver, no cuBLAS) */
static const char *no_cuda(bool *fail)
{
    static char why[768];
    if (mf_cuda_available()) return NULL;
    char what[512];
    mf_device_describe(MF_DEV_CUDA, what, sizeof what);
    const char *dev = mf_test_gpu_device();
    const char *hidden = getenv("CUDA_VISIBLE_DEVICES");
    *fail = dev && !strstr(what, "built without") && !(hidden && !*hidden);
    if (*fail) snprintf(why, sizeof why, "a GPU is present (%s) but CUDA failed to start: %s", dev, what);
    else snprintf(why, sizeof why, "%s", what);
    return why;
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, devices_and_errors);
    tcase_add_test(tc, unary_ops);
    tcase_add_test(tc, binary_ops);
    tcase_add_test(tc, reductions);
    tcase_add_test(tc, matmul_and_linear);
    tcase_add_test(tc, softmax_both);
    tcase_add_test(tc, losses);
    tcase_add_test(tc, embedding_rows);
    tcase_add_test(tc, conv2d_variants);
    tcase_add_test(tc, pooling);
    tcase_add_test(tc, normalisation);
    tcase_add_test(tc, philox_same_bits);
    tcase_add_test(tc, optimizers);
    tcase_add_test(tc, mlp_training);
    tcase_add_test(tc, autocast_bf16);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) { return mf_test_main_unless(argc, argv, make_suite, no_cuda); }
