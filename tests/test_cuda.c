/*
 * tests/test_cuda.c - the CUDA backend against the CPU backend, kernel by
 * kernel: the list of kernels to check is the backend table itself
 * (MFI_KERNELS, backends/backend.h), so a kernel added there without a
 * parity case here is a build error (check_<kernel> is undefined).
 *
 * Each case runs a function of its inputs on the GPU and on the CPU,
 * backpropagates sum(out * w) for a fixed w on both, and compares the
 * output and every input gradient element by element (the harness is
 * tests/cuda_parity.c):
 *
 *   |gpu - cpu| <= rtol * |cpu| + atol     (f32: 1e-4, 3e-6; f64: 1e-10, 1e-12)
 *
 * the same rule on every kernel; random fills and dropout masks must be
 * the same bits. After a kernel's cases, the kernel must have run on the
 * GPU (mf_kernel_calls): a case that fell back to the CPU, or checks
 * another kernel than it names, fails.
 *
 * Without a GPU the same cases run with the CPU in f32 as the device
 * under test against the CPU in f64: that checks every case and the
 * tolerances (the f32 error to the f64 result must use at most half the
 * tolerance, leaving the GPU as much again), then the suite exits 77
 * (SKIP) with the reason. A GPU that is there but that CUDA cannot start
 * on is a FAIL. Each kernel prints one line (cases, the worst error as a
 * share of the tolerance, seconds) for bench/run_cuda.sh's summary.
 */
#include <stdlib.h>
#include "backends/backend.h"   /* MFI_KERNELS: the kernels to check */
#include "tests/cuda_parity.h"   /* parity(): the comparison rule */

static const mf_dtype floats[2] = {MF_F32, MF_F64};

/* ----------------------------------------------------- memory and random */
static mf_tensor *fill_fn(mf_tensor **in, void *u)
{
    (void)u;
    mf_tensor *t = mf_clone(in[0]);
    if (t && mf_fill_(t, -2.75) != MF_OK) mf_tensor_destroy(t), t = NULL;
    mf_tensor *z = t ? mf_zeros(mf_tensor_dtype(in[0]), MF_DIMS(3)) : NULL;
    mf_tensor *all[2] = {t, z}, *r = z ? mf_concat(2, all, 0) : NULL;
    mf_tensor_destroy(t);
    mf_tensor_destroy(z);
    return r;
}

static void g_fill(void)
{
    for (int d = 0; d < 2; d++) {
        mf_tensor *in[1] = {rnd(floats[d], MF_DIMS(37), -1, 1)};
        parity("fill", fill_fn, 1, in, NULL, EXACT);
        free_all(1, in);
    }
}

/* strided copies, casts and broadcasts */
static mf_tensor *copy_fn(mf_tensor **in, void *u)
{
    (void)u;
    mf_tensor *t = mf_transpose(in[0], 0, 1), *c = t ? mf_contiguous(t) : NULL;
    mf_tensor *e = mf_expand(in[1], MF_DIMS(7, 5)), *ec = e ? mf_contiguous(e) : NULL;
    mf_tensor *d = c ? mf_cast(c, MF_F64) : NULL, *back = d ? mf_cast(d, mf_tensor_dtype(in[0])) : NULL;
    mf_tensor *flat[2] = {back ? mf_reshape(back, MF_DIMS(-1)) : NULL, ec ? mf_reshape(ec, MF_DIMS(-1)) : NULL};
    mf_tensor *r = flat[0] && flat[1] ? mf_concat(2, flat, 0) : NULL;
    mf_tensor *all[] = {t, c, e, ec, d, back, flat[0], flat[1]};
    free_all(8, all);
    return r;
}

static void g_copy(void)
{
    for (int d = 0; d < 2; d++) {
        mf_tensor *in[2] = {rnd(floats[d], MF_DIMS(5, 9), -1, 1), rnd(floats[d], MF_DIMS(1, 5), -1, 1)};
        parity("copy", copy_fn, 2, in, NULL, EXACT);
        free_all(2, in);
    }
}

static mf_tensor *rand_fn(mf_tensor **in, void *u)
{
    int k = *(int *)u;
    mf_manual_seed(1234);
    if (k == 0) return mf_rand(MF_F32, MF_DIMS(1001));
    if (k == 1) return mf_randn(MF_F64, MF_DIMS(999));
    return mf_dropout(in[0], 0.3, true);
}

static void g_philox(void)
{
    for (int k = 0; k < 2; k++) {
        mf_tensor *in[1] = {rnd(MF_F32, MF_DIMS(3), -1, 1)};
        /* normals go through log and cos, whose last bit may differ
         * between libm and CUDA: the f64 rule, not equal bits */
        parity(k == 0 ? "rand" : "randn", rand_fn, 1, in, &k, k == 0 ? EXACT : SAME_DTYPE);
        free_all(1, in);
    }
}

static void g_dropout(void)
{
    int k = 2;
    mf_tensor *in[1] = {rnd(MF_F32, MF_DIMS(37, 29), -1, 1)};
    parity("dropout", rand_fn, 1, in, &k, EXACT);
    free_all(1, in);
}

/* ------------------------------------------------------------ elementwise */
typedef mf_tensor *(*un_op)(mf_tensor *);
static mf_tensor *un_scale(mf_tensor *x) { return mf_scale(x, 0.75); }
static mf_tensor *un_add(mf_tensor *x) { return mf_add_scalar(x, 0.75); }
static mf_tensor *un_pow(mf_tensor *x) { return mf_pow(x, 2.5); }
static mf_tensor *un_round(mf_tensor *x) { return x; }   /* ROUND_BF16: by autocast, in g_unary */

/* every unary op of the backend, by its enum: one added there without
 * an entry here fails the count check in g_unary */
static const struct { const char *name; un_op f; bool pos; } unary[MFI_UN_COUNT] = {
    [MFI_UN_NEG] = {"neg", mf_neg, false},          [MFI_UN_SCALE] = {"scale", un_scale, false},
    [MFI_UN_ADD_SCALAR] = {"add_scalar", un_add, false}, [MFI_UN_POW] = {"pow", un_pow, true},
    [MFI_UN_EXP] = {"exp", mf_exp, false},          [MFI_UN_LOG] = {"log", mf_log, true},
    [MFI_UN_SQRT] = {"sqrt", mf_sqrt, true},        [MFI_UN_ABS] = {"abs", mf_abs, false},
    [MFI_UN_RELU] = {"relu", mf_relu, false},       [MFI_UN_GELU] = {"gelu", mf_gelu, false},
    [MFI_UN_SIGMOID] = {"sigmoid", mf_sigmoid, false}, [MFI_UN_TANH] = {"tanh", mf_tanh, false},
    [MFI_UN_ROUND_BF16] = {"round_bf16", un_round, false}, [MFI_UN_GELU_TANH] = {"gelu_tanh", mf_gelu_tanh, false},
};

static mf_tensor *un_fn(mf_tensor **in, void *u) { return unary[*(int *)u].f(in[0]); }

typedef struct { int kind; bool ta, tb; } mm_case;
static mf_tensor *mm_fn(mf_tensor **in, void *u)
{
    mm_case *c = u;
    if (c->kind == 0) return mf_matmul_t(in[0], in[1], c->ta, c->tb);
    return mf_linear(in[0], in[1], in[2]);
}

/* autocast: operands rounded to bfloat16 (ROUND_BF16 on a backend that
 * does not round inside its GEMM), products exact in f32, so the f32
 * rule holds */
static void autocast_cases(void)
{
    ck_assert_ok(mf_autocast_set(MF_PRECISION_BF16));
    mm_case m = {0, false, true}, l = {1, false, false};
    mf_tensor *a[2] = {rnd(MF_F32, MF_DIMS(3, 64, 96), -1, 1), rnd(MF_F32, MF_DIMS(3, 48, 96), -1, 1)};
    parity("bf16 matmul", mm_fn, 2, a, &m, SAME_DTYPE);
    mf_tensor *b[3] = {rnd(MF_F32, MF_DIMS(33, 80), -1, 1), rnd(MF_F32, MF_DIMS(24, 80), -1, 1),
                       rnd(MF_F32, MF_DIMS(24), -1, 1)};
    parity("bf16 linear", mm_fn, 3, b, &l, SAME_DTYPE);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_FP32));
    free_all(2, a);
    free_all(3, b);
}

static void g_unary(void)
{
    for (int op = 0; op < MFI_UN_COUNT; op++) {
        ck_assert_msg(unary[op].f, "unary op %d of the backend has no case here", op);
        if (op == MFI_UN_ROUND_BF16) continue;
        for (int d = 0; d < 2; d++) {
            /* a transposed view (the strided path), values around 0 or positive */
            mf_tensor *b = rnd(floats[d], MF_DIMS(7, 33), unary[op].pos ? 0.2 : -3, 3);
            mf_tensor *x = mf_transpose(b, 0, 1);
            mf_tensor *in[1] = {mf_contiguous(x)};
            mf_tensor_destroy(x);
            mf_tensor_destroy(b);
            mf_tensor_set_requires_grad(in[0], true);
            char what[64];
            snprintf(what, sizeof what, "%s %s", unary[op].name, mf_dtype_name(floats[d]));
            parity(what, un_fn, 1, in, &op, 0);
            free_all(1, in);
        }
    }
    autocast_cases();
}

typedef mf_tensor *(*bin_op)(mf_tensor *, mf_tensor *);
static const struct { const char *name; bin_op f; } binary[MFI_BIN_COUNT] = {
    [MFI_BIN_ADD] = {"add", mf_add}, [MFI_BIN_SUB] = {"sub", mf_sub}, [MFI_BIN_MUL] = {"mul", mf_mul},
    [MFI_BIN_DIV] = {"div", mf_div}, [MFI_BIN_MAX] = {"maximum", mf_maximum}, [MFI_BIN_EQ] = {"eq", mf_eq},
    [MFI_BIN_GT] = {"gt", mf_gt},    [MFI_BIN_LT] = {"lt", mf_lt},
};

static mf_tensor *bin_fn(mf_tensor **in, void *u) { return binary[*(int *)u].f(in[0], in[1]); }

static void g_binary(void)
{
    for (int op = 0; op < MFI_BIN_COUNT; op++) {
        ck_assert_msg(binary[op].f, "binary op %d of the backend has no case here", op);
        for (int d = 0; d < 3; d++) {
            mf_dtype t = d < 2 ? floats[d] : MF_I64;
            if (t == MF_I64 && op == MFI_BIN_DIV) continue;
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
            snprintf(what, sizeof what, "%s %s", binary[op].name, mf_dtype_name(t));
            parity(what, bin_fn, 2, in, &op, t == MF_I64 || op >= MFI_BIN_EQ ? EXACT : 0);
            free_all(2, in);
        }
    }
}

/* ----------------------------------------------------------- reductions */
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

/* the squared sums of gradient clipping (MFI_RED_SUMSQ): returns the clipped gradient */
static mf_tensor *clip_fn(mf_tensor **in, void *u)
{
    (void)u;
    mf_tensor *w = mf_clone(in[0]);
    mf_tensor_set_requires_grad(w, true);
    mf_tensor *sq = mf_mul(w, w), *l = sq ? mf_sum_all(sq) : NULL;
    mf_named_tensor item = {"w", w, MF_ENTRY_PARAM};
    mf_tensor_list lst = {1, &item};
    double norm = 0;
    mf_tensor *r = NULL;
    if (l && mf_backward(l) == MF_OK && mf_clip_grad_norm(&lst, 0.5, &norm) == MF_OK) r = mf_clone(mf_tensor_grad(w));
    mf_tensor_destroy(sq);
    mf_tensor_destroy(l);
    mf_tensor_destroy(w);
    return r;
}

static void red_cases(int kind_lo, int kind_hi)
{
    red_case cases[] = {{0, 1, {0}, false}, {0, 1, {2}, true}, {0, 2, {0, 2}, false}, {1, 1, {1}, false},
                        {2, 1, {2}, false}, {2, 2, {0, 1}, true}, {3, 0, {0}, false}, {4, 1, {1}, false},
                        {4, 1, {2}, true}};
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            if (cases[k].kind < kind_lo || cases[k].kind > kind_hi) continue;
            /* positive values: sums without cancellation, so the rule is per element */
            mf_tensor *in[1] = {rnd(floats[d], MF_DIMS(6, 5, 301), 0.25, 1.25)};
            char what[64];
            snprintf(what, sizeof what, "reduction %zu %s", k, mf_dtype_name(floats[d]));
            parity(what, red_fn, 1, in, &cases[k], cases[k].kind == 4 ? EXACT : 0);
            free_all(1, in);
        }
}

static void g_reduce(void)
{
    red_cases(0, 3);
    for (int d = 0; d < 2; d++) {
        mf_tensor *in[1] = {rnd(floats[d], MF_DIMS(40, 13), -1, 1)};
        mf_tensor_set_requires_grad(in[0], false);
        parity("clip_grad_norm", clip_fn, 1, in, NULL, 0);
        free_all(1, in);
    }
}

static void g_argmax(void) { red_cases(4, 4); }

/* --------------------------------------------------------------- GEMMs */
static void g_gemm(void)
{
    for (int d = 0; d < 2; d++) {
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                mm_case c = {0, ta, tb};
                /* batched: [2, 37, 19] x [2, 19, 23], with transposes */
                mf_tensor *in[2] = {ta ? rnd(floats[d], MF_DIMS(2, 19, 37), -1, 1) : rnd(floats[d], MF_DIMS(2, 37, 19), -1, 1),
                                    tb ? rnd(floats[d], MF_DIMS(2, 23, 19), -1, 1) : rnd(floats[d], MF_DIMS(2, 19, 23), -1, 1)};
                parity("matmul", mm_fn, 2, in, &c, 0);
                free_all(2, in);
            }
        mm_case c = {1, false, false};
        mf_tensor *in[3] = {rnd(floats[d], MF_DIMS(17, 40), -1, 1), rnd(floats[d], MF_DIMS(9, 40), -1, 1),
                            rnd(floats[d], MF_DIMS(9), -1, 1)};
        parity("linear", mm_fn, 3, in, &c, 0);
        free_all(3, in);
    }
    autocast_cases();
}

/* -------------------------------------------------------------- softmax */
typedef struct { int kind, dim; } sm_case;
static mf_tensor *sm_fn(mf_tensor **in, void *u)
{
    sm_case *c = u;
    return c->kind ? mf_log_softmax(in[0], c->dim) : mf_softmax(in[0], c->dim);
}

static void g_softmax(void)
{
    for (int d = 0; d < 2; d++)
        for (int kind = 0; kind < 2; kind++)
            for (int dim = 0; dim < 3; dim++) {
                sm_case c = {kind, dim};
                mf_tensor *in[1] = {rnd(floats[d], MF_DIMS(4, 11, 6), -3, 3)};
                parity(kind ? "log_softmax" : "softmax", sm_fn, 1, in, &c, 0);
                free_all(1, in);
            }
}

/* --------------------------------------------------------------- losses */
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
    if (k < 12) return mf_l1_loss(in[0], in[2], r);
    /* the fused LM head: x [300, 32] weight [97, 32], rows in chunks */
    return mf_linear_cross_entropy(in[0], in[2], in[1], r);
}

static void loss_cases(int lo, int hi)
{
    for (int d = 0; d < 2; d++)
        for (int k = lo; k < hi; k++) {
            bool head = k >= 12;
            mf_tensor *in[3] = {head ? rnd(floats[d], MF_DIMS(300, 32), -1, 1) : rnd(floats[d], MF_DIMS(13, 10), -2, 2),
                                head ? ints(300, 97) : ints(13, 10),
                                head ? rnd(floats[d], MF_DIMS(97, 32), -0.5, 0.5) : rnd(floats[d], MF_DIMS(13, 10), -2, 2)};
            parity(head ? "linear_cross_entropy" : "loss", loss_fn, 3, in, &k, 0);
            free_all(3, in);
        }
}

static void g_nll(void) { loss_cases(0, 6); }
static void g_lm_head(void) { loss_cases(0, 3), loss_cases(12, 15); }

/* ------------------------------------------------------------ embedding */
static mf_tensor *emb_fn(mf_tensor **in, void *u)
{
    (void)u;
    return mf_embedding(in[0], in[1]);
}

static void g_embedding(void)
{
    for (int d = 0; d < 2; d++) {
        mf_tensor *idx = ints(24, 9);   /* repeats: gradients add up */
        mf_tensor *in[2] = {rnd(floats[d], MF_DIMS(9, 16), -1, 1), mf_reshape(idx, MF_DIMS(4, 6))};
        parity("embedding", emb_fn, 2, in, NULL, 0);
        free_all(2, in);
        mf_tensor_destroy(idx);
    }
}

/* ---------------------------------------------------------- convolution */
typedef struct { mf_conv2d_params p; bool bias; } conv_case;
static mf_tensor *conv_fn(mf_tensor **in, void *u)
{
    conv_case *c = u;
    return mf_conv2d(in[0], in[1], c->bias ? in[2] : NULL, &c->p);
}

static void g_conv(void)
{
    for (int d = 0; d < 2; d++)
        for (int v = 0; v < 4; v++) {
            conv_case c = {mf_conv2d_defaults(), v != 1};
            int groups = v == 3 ? 2 : 1;
            if (v >= 1) c.p.padding[0] = c.p.padding[1] = 1;
            if (v == 2) {
                c.p.stride[0] = 2;
                c.p.dilation[1] = 2;
            }
            c.p.groups = groups;
            mf_tensor *in[3] = {rnd(floats[d], MF_DIMS(3, 4, 9, 8), -1, 1),
                                rnd(floats[d], MF_DIMS(6, 4 / groups, 3, 3), -1, 1), rnd(floats[d], MF_DIMS(6), -1, 1)};
            char what[64];
            snprintf(what, sizeof what, "conv2d variant %d %s", v, mf_dtype_name(floats[d]));
            parity(what, conv_fn, 3, in, &c, 0);
            free_all(3, in);
        }
    ck_assert_ok(mf_autocast_set(MF_PRECISION_BF16));
    conv_case c = {mf_conv2d_defaults(), true};
    c.p.padding[0] = c.p.padding[1] = 1;
    mf_tensor *in[3] = {rnd(MF_F32, MF_DIMS(4, 8, 10, 10), -1, 1), rnd(MF_F32, MF_DIMS(16, 8, 3, 3), -1, 1),
                        rnd(MF_F32, MF_DIMS(16), -1, 1)};
    parity("bf16 conv2d", conv_fn, 3, in, &c, SAME_DTYPE);
    ck_assert_ok(mf_autocast_set(MF_PRECISION_FP32));
    free_all(3, in);
}

/* -------------------------------------------------------------- pooling */
typedef struct { int kind; mf_pool2d_params p; } pool_case;
static mf_tensor *pool_fn(mf_tensor **in, void *u)
{
    pool_case *c = u;
    if (c->kind == 0) return mf_max_pool2d(in[0], &c->p);
    if (c->kind == 1) return mf_avg_pool2d(in[0], &c->p);
    return mf_adaptive_avg_pool2d(in[0], 3, 2);
}

static void pool_cases(int lo, int hi)
{
    for (int v = lo; v < hi; v++) {
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
        parity(what, pool_fn, 1, in, &c, 0);
        free_all(1, in);
    }
}

static void g_maxpool(void) { pool_cases(0, 3); }
static void g_avgpool(void) { pool_cases(3, 7); }

/* -------------------------------------------------------- normalisation */
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
    mf_tensor *all[] = {rv3, y, rm, rv};
    free_all(4, all);
    return ys;
}

static void norm_cases(int lo, int hi)
{
    for (int d = 0; d < 2; d++)
        for (int k = lo; k < hi; k++) {
            norm_case c = {k == 2, k == 0};
            mf_tensor *in[5] = {rnd(floats[d], MF_DIMS(5, 3, 4, 6), -1, 1), rnd(floats[d], MF_DIMS(4, 6), 0.5, 1.5),
                                rnd(floats[d], MF_DIMS(4, 6), -1, 1), rnd(floats[d], MF_DIMS(3), 0.5, 1.5),
                                rnd(floats[d], MF_DIMS(3), -1, 1)};
            parity(k == 2 ? "layer_norm" : k ? "batch_norm eval" : "batch_norm train", norm_fn, 5, in, &c, 0);
            free_all(5, in);
        }
}

static void g_batchnorm(void) { norm_cases(0, 2); }
static void g_layernorm(void) { norm_cases(2, 3); }

/* ------------------------------------------------------------ attention */
typedef struct { int heads; bool fused; } attn_case;
static mf_tensor *attn_fn(mf_tensor **in, void *u)
{
    attn_case *c = u;
    if (c->fused) return mf_causal_self_attention(in[0], c->heads);   /* strided heads of qkv */
    return mf_causal_attention(in[0], in[1], in[2]);
}

/* T around the tiles' sizes (64 query rows, up to 256 keys), 1 to 4
 * heads, head sizes 16 and 64, separate q, k, v and GPT's fused qkv */
static void g_attention(void)
{
    static const struct { int64_t b, h, t, d; bool fused; } cases[] = {
        {2, 3, 1, 16, false},  {1, 2, 63, 16, false}, {1, 1, 64, 64, false}, {2, 4, 65, 16, false},
        {1, 2, 130, 32, false}, {1, 1, 257, 16, false}, {2, 2, 70, 16, true}, {1, 4, 129, 16, true},
    };
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            int64_t b = cases[i].b, h = cases[i].h, t = cases[i].t, hd = cases[i].d;
            attn_case c = {(int)h, cases[i].fused};
            char what[96];
            snprintf(what, sizeof what, "attention b%lld h%lld t%lld d%lld%s %s", (long long)b, (long long)h, (long long)t,
                     (long long)hd, c.fused ? " fused qkv" : "", mf_dtype_name(floats[d]));
            if (c.fused) {
                mf_tensor *in[1] = {rnd(floats[d], MF_DIMS(b, t, 3 * h * hd), -1, 1)};
                parity(what, attn_fn, 1, in, &c, 0);
                free_all(1, in);
            } else {
                mf_tensor *in[3] = {rnd(floats[d], MF_DIMS(b, h, t, hd), -1, 1), rnd(floats[d], MF_DIMS(b, h, t, hd), -1, 1),
                                    rnd(floats[d], MF_DIMS(b, h, t, hd), -1, 1)};
                parity(what, attn_fn, 3, in, &c, 0);
                free_all(3, in);
            }
        }
}

/* ----------------------------------------------------------- optimizers */
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
        mf_tensor *all[] = {sq, p, loss};
        free_all(3, all);
    }
    mf_optim_destroy(o);
    mf_tensor *r = mf_tensor_detach(w);
    mf_tensor_destroy(w);
    return r;
}

static void opt_cases(int lo, int hi)
{
    for (int d = 0; d < 2; d++)
        for (int kind = lo; kind < hi; kind++) {
            mf_tensor *in[2] = {rnd(floats[d], MF_DIMS(50), -1, 1), rnd(floats[d], MF_DIMS(50), 0.5, 1.5)};
            mf_tensor_set_requires_grad(in[0], false);
            mf_tensor_set_requires_grad(in[1], false);
            parity("optimizer", opt_fn, 2, in, &kind, 0);
            free_all(2, in);
        }
}

static void g_sgd(void) { opt_cases(0, 1); }
static void g_adam(void) { opt_cases(1, 3); }
static void g_rmsprop(void) { opt_cases(3, 4); }

/* ------------------------------------------ each kernel of the table: its cases */
static void check_fill(void) { g_fill(); }
static void check_copy(void) { g_copy(); }
static void check_philox_fill(void) { g_philox(); }
static void check_unary_fwd(void) { g_unary(); }
static void check_unary_bwd(void) { g_unary(); }
static void check_binary_fwd(void) { g_binary(); }
static void check_reduce(void) { g_reduce(); }
static void check_argmax(void) { g_argmax(); }
static void check_gemm(void) { g_gemm(); }
static void check_softmax_fwd(void) { g_softmax(); }
static void check_softmax_bwd(void) { g_softmax(); }
static void check_nll_fwd(void) { g_nll(); }
static void check_nll_bwd(void) { g_nll(); }
static void check_xent_bwd(void) { g_lm_head(); }
static void check_embedding_fwd(void) { g_embedding(); }
static void check_embedding_bwd(void) { g_embedding(); }
static void check_conv2d_fwd(void) { g_conv(); }
static void check_conv2d_bwd_data(void) { g_conv(); }
static void check_conv2d_bwd_filter(void) { g_conv(); }
static void check_maxpool2d_fwd(void) { g_maxpool(); }
static void check_maxpool2d_bwd(void) { g_maxpool(); }
static void check_avgpool2d_fwd(void) { g_avgpool(); }
static void check_avgpool2d_bwd(void) { g_avgpool(); }
static void check_batchnorm_fwd(void) { g_batchnorm(); }
static void check_batchnorm_bwd(void) { g_batchnorm(); }
static void check_layernorm_fwd(void) { g_layernorm(); }
static void check_layernorm_bwd(void) { g_layernorm(); }
static void check_attention_fwd(void) { g_attention(); }
static void check_attention_bwd(void) { g_attention(); }
static void check_dropout_fwd(void) { g_dropout(); }
static void check_sgd_step(void) { g_sgd(); }
static void check_adam_step(void) { g_adam(); }
static void check_rmsprop_step(void) { g_rmsprop(); }

#define KERNEL_ENTRY(name, args) {#name, check_##name},
static const struct { const char *name; void (*check)(void); } kernels[] = {MFI_KERNELS(KERNEL_ENTRY)};
#undef KERNEL_ENTRY
enum { NKERNELS = sizeof kernels / sizeof *kernels };

/* Loop test i: kernel i's cases, then the kernel must have run on the
 * device under test. One line per kernel for the summary table. */
START_TEST(kernel_parity)
{
    ck_assert_msg(NKERNELS <= 64 && !strcmp(mf_kernel_name(_i), kernels[_i].name),
                  "the library's kernel %d is '%s', the test's '%s'", _i, mf_kernel_name(_i), kernels[_i].name);
    parity_worst = 0;
    parity_ncases = 0;
    memset(parity_dut_calls, 0, sizeof parity_dut_calls);
    mf_manual_seed(100 + (uint64_t)_i);
    double t0 = mf_time();
    kernels[_i].check();
    ck_assert_msg(parity_dut_calls[_i] > 0, "kernel %s: its %d case(s) never ran it on %s", kernels[_i].name, parity_ncases,
                  mf_device_name(parity_dut));
    printf("parity kernel %-18s %3d cases  %6lld calls  worst %.3f of the tolerance  %.2f s  ok\n", kernels[_i].name,
           parity_ncases, (long long)parity_dut_calls[_i], parity_worst, mf_time() - t0);
    fflush(stdout);
}
END_TEST

/* --list: the kernels this test checks, one per line (tests/cuda_kernels.sh
 * compares them with the table's source) */
static int list_kernels(void)
{
    for (int i = 0; i < NKERNELS; i++) printf("%s\n", kernels[i].name);
    return 0;
}

/* ------------------------------------------------------ device handling */
START_TEST(devices_and_errors)
{
    if (parity_self_check) return;   /* needs a second device */
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
    ck_assert_fails(mf_cross_entropy(g, tgc, MF_REDUCTION_MEAN), MF_ERR_ARG, "target 3", "out of range for 3 classes");
    /* the device's memory is cached */
    mf_memory_stats st;
    mf_memory_get_stats_on(MF_DEV_CUDA, &st);
    ck_assert(st.in_use > 0 && st.allocs > 0);
    mf_tensor *all[] = {c, g, s, tg, tgc};
    free_all(5, all);
}
END_TEST

/* SKIP without a GPU (or without the CUDA backend), after the cases ran
 * on the CPU against f64; FAIL when a GPU is there but CUDA cannot start
 * on it (an old driver, no cuBLAS) */
static const char *no_cuda(bool *fail)
{
    static char why[900];
    if (mf_cuda_available()) return NULL;
    char what[512];
    mf_device_describe(MF_DEV_CUDA, what, sizeof what);
    const char *dev = mf_test_gpu_device();
    const char *hidden = getenv("CUDA_VISIBLE_DEVICES");
    *fail = dev && !strstr(what, "built without") && !(hidden && !*hidden);
    if (*fail) {
        snprintf(why, sizeof why, "a GPU is present (%s) but CUDA failed to start: %s", dev, what);
        return why;
    }
    snprintf(why, sizeof why, "%s (the %d kernels' cases ran on the CPU in f32 against f64 instead: within half "
             "the tolerance)", what, NKERNELS);
    parity_self_check = true;
    parity_dut = MF_DEV_CPU;
    return why;
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, devices_and_errors);
    tcase_add_loop_test(tc, kernel_parity, 0, NKERNELS);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--list")) return list_kernels();
    return mf_test_main_then_skip(argc, argv, make_suite, no_cuda);
}
