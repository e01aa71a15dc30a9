/*
 * lib/op/elementwise.c - broadcasting binary ops, unary ops and their
 * gradients, and the in-place helpers.
 *
 * Binary ops broadcast NumPy-style: shapes align on the right and a dim
 * of size 1 stretches. The gradient of a broadcast input is summed back
 * to its shape (mfi_sum_to). SBP (later): all S(a) -> S(a), B -> B;
 * add/sub also P -> P; no non-linear op accepts P.
 */
#include "lib/internal.h"

char *mfi_meta_str(const mfi_meta *m, char *buf, size_t size)
{
    return mfi_shape_str(m->ndim, m->shape, buf, size);
}

mf_status mfi_broadcast_shapes(const char *op, const mfi_meta *a, const mfi_meta *b, mfi_meta *out)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    out->ndim = nd;
    out->dtype = a->dtype;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char x[128], y[128];
            MF_FAIL(MF_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", op,
                    mfi_meta_str(a, x, sizeof x), mfi_meta_str(b, y, sizeof y), i, (long long)da, (long long)db);
        }
        out->shape[i] = da == 1 ? db : da;
    }
    return MF_OK;
}

mfi_view mfi_view_broadcast(const mf_tensor *t, const mfi_meta *out)
{
    mfi_view v = mfi_view_of(t);
    int lead = out->ndim - t->ndim;
    v.ndim = out->ndim;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int j = i - lead;
        v.shape[i] = out->shape[i];
        v.stride[i] = (j >= 0 && t->shape[j] == out->shape[i]) ? t->stride[j] : 0;
    }
    return v;
}

mf_tensor *mfi_contiguous_raw(mf_tensor *t)
{
    if (mf_tensor_is_contiguous(t)) return mf_tensor_retain(t);
    mf_tensor *c = mfi_tensor_new(t->dtype, t->ndim, t->shape);
    if (!c) return NULL;
    mfi_view o = mfi_view_of(c), i = mfi_view_of(t);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(t), copy, &o, &i);
    if (st != MF_OK) {
        mf_tensor_destroy(c);
        return NULL;
    }
    return c;
}

/* ---------------------------------------------------------------- binary */
typedef struct bin_attrs { mfi_binop op; } bin_attrs;

static mf_status bin_infer(mfi_call *c, mfi_meta *out)
{
    const bin_attrs *a = c->attrs;
    const char *name = c->op->name;
    if (c->in_meta[0].dtype != c->in_meta[1].dtype)
        MF_FAIL(MF_ERR_DTYPE, "%s: dtypes %s and %s differ (cast one with mf_cast)", name,
                mf_dtype_name(c->in_meta[0].dtype), mf_dtype_name(c->in_meta[1].dtype));
    if (a->op == MFI_BIN_DIV && !mf_dtype_is_float(c->in_meta[0].dtype))
        MF_FAIL(MF_ERR_DTYPE, "%s: integer division is not supported (cast to f32 first)", name);
    return mfi_broadcast_shapes(name, &c->in_meta[0], &c->in_meta[1], out);
}

static mf_status bin_forward(mfi_call *c, mf_tensor **out)
{
    const bin_attrs *a = c->attrs;
    mfi_view o = mfi_view_of(*out);
    mfi_view va = mfi_view_broadcast(c->in[0], &c->out_meta), vb = mfi_view_broadcast(c->in[1], &c->out_meta);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(*out), binary_fwd, a->op, &o, &va, &vb);
    MF_TRY(st);
    switch (a->op) {
    case MFI_BIN_MUL:
    case MFI_BIN_MAX:
        MF_TRY(mfi_save(c, c->in[0]));
        MF_TRY(mfi_save(c, c->in[1]));
        break;
    case MFI_BIN_DIV:
        MF_TRY(mfi_save(c, c->in[1]));
        MF_TRY(mfi_save(c, *out));
        break;
    default:
        break;
    }
    return MF_OK;
}

/* gy * factor summed to the input's shape; factor NULL means 1. */
static mf_status grad_to(mf_tensor *gy, mf_tensor *factor, double scale, const mfi_meta *m, mf_tensor **gx)
{
    mf_tensor *g = factor ? mf_mul(gy, factor) : mf_tensor_retain(gy);
    if (g && scale != 1.0) {
        mf_tensor *s = mf_scale(g, scale);
        mf_tensor_destroy(g);
        g = s;
    }
    if (!g) return mf_last_status();
    *gx = mfi_sum_to(g, m);
    mf_tensor_destroy(g);
    return *gx ? MF_OK : mf_last_status();
}

static mf_status bin_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const bin_attrs *a = c->attrs;
    mf_status st = MF_OK;
    switch (a->op) {
    case MFI_BIN_ADD:
    case MFI_BIN_SUB:
        if (c->needs_grad[0]) MF_TRY(grad_to(gy, NULL, 1.0, &c->in_meta[0], &gx[0]));
        if (c->needs_grad[1]) MF_TRY(grad_to(gy, NULL, a->op == MFI_BIN_SUB ? -1.0 : 1.0, &c->in_meta[1], &gx[1]));
        return MF_OK;
    case MFI_BIN_MUL: {
        mf_tensor *x = mfi_saved(c, 0), *y = mfi_saved(c, 1);
        if (!x || !y) return mf_last_status();
        if (c->needs_grad[0]) MF_TRY(grad_to(gy, y, 1.0, &c->in_meta[0], &gx[0]));
        if (c->needs_grad[1]) MF_TRY(grad_to(gy, x, 1.0, &c->in_meta[1], &gx[1]));
        return MF_OK;
    }
    case MFI_BIN_DIV: {
        mf_tensor *b = mfi_saved(c, 0), *out = mfi_saved(c, 1);
        if (!b || !out) return mf_last_status();
        mf_tensor *inv = mf_pow(b, -1.0);
        if (!inv) return mf_last_status();
        if (c->needs_grad[0]) st = grad_to(gy, inv, 1.0, &c->in_meta[0], &gx[0]);
        if (st == MF_OK && c->needs_grad[1]) {
            mf_tensor *f = mf_mul(out, inv);   /* d(a/b)/db = -(a/b)/b */
            st = f ? grad_to(gy, f, -1.0, &c->in_meta[1], &gx[1]) : mf_last_status();
            mf_tensor_destroy(f);
        }
        mf_tensor_destroy(inv);
        return st;
    }
    case MFI_BIN_MAX: {
        mf_tensor *x = mfi_saved(c, 0), *y = mfi_saved(c, 1);
        if (!x || !y) return mf_last_status();
        /* ties share the gradient equally, as torch.maximum */
        for (int i = 0; i < 2 && st == MF_OK; i++) {
            if (!c->needs_grad[i]) continue;
            mf_tensor *gt = i == 0 ? mf_gt(x, y) : mf_gt(y, x), *eq = mf_eq(x, y);
            mf_tensor *half = eq ? mf_scale(eq, 0.5) : NULL;
            mf_tensor *mask = gt && half ? mf_add(gt, half) : NULL;
            st = mask ? grad_to(gy, mask, 1.0, &c->in_meta[i], &gx[i]) : mf_last_status();
            mf_tensor_destroy(gt);
            mf_tensor_destroy(eq);
            mf_tensor_destroy(half);
            mf_tensor_destroy(mask);
        }
        return st;
    }
    default:
        MF_FAIL(MF_ERR_INTERNAL, "%s has no gradient", c->op->name);
    }
}

/* add/sub keep P+P; mul keeps P*B and B*P; div keeps P/B */
static int bin_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const bin_attrs *a = c->attrs;
    switch (a->op) {
    case MFI_BIN_ADD: case MFI_BIN_SUB: return mfi_sig_elementwise(c, sigs, cap, 1);
    case MFI_BIN_MUL: return mfi_sig_elementwise(c, sigs, cap, 2);
    case MFI_BIN_DIV: {
        int n = mfi_sig_elementwise(c, sigs, cap, 0);
        mf_sbp in[2] = {mfi_P(), mfi_B()};
        return mfi_sig_add(sigs, n, cap, 2, in, mfi_P());
    }
    default: return mfi_sig_elementwise(c, sigs, cap, 0);
    }
}

#define BIN_OP(name) {name, 0, bin_infer, bin_forward, bin_backward, bin_sbp, NULL}
#define CMP_OP(name) {name, MFI_OP_NO_GRAD, bin_infer, bin_forward, NULL, bin_sbp, NULL}
static const mfi_op bin_ops[MFI_BIN_COUNT] = {
    BIN_OP("mf_add"), BIN_OP("mf_sub"), BIN_OP("mf_mul"), BIN_OP("mf_div"), BIN_OP("mf_maximum"),
    CMP_OP("mf_eq"), CMP_OP("mf_gt"), CMP_OP("mf_lt")};

mf_tensor *mfi_binary(mfi_binop op, mf_tensor *a, mf_tensor *b)
{
    if (mfi_check_input(bin_ops[op].name, "a", a) != MF_OK || mfi_check_input(bin_ops[op].name, "b", b) != MF_OK)
        return NULL;
    bin_attrs at = {op};
    mf_tensor *in[2] = {a, b};
    return mfi_apply(&bin_ops[op], 2, in, &at, sizeof at);
}

mf_tensor *mf_add(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_ADD, a, b); }
mf_tensor *mf_sub(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_SUB, a, b); }
mf_tensor *mf_mul(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_MUL, a, b); }
mf_tensor *mf_div(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_DIV, a, b); }
mf_tensor *mf_maximum(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_MAX, a, b); }
mf_tensor *mf_eq(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_EQ, a, b); }
mf_tensor *mf_gt(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_GT, a, b); }
mf_tensor *mf_lt(mf_tensor *a, mf_tensor *b) { return mfi_binary(MFI_BIN_LT, a, b); }

/* ----------------------------------------------------------------- unary */
typedef struct un_attrs {
    mfi_unop op;
    double alpha;
} un_attrs;

/* Which of x (1) and y (2) the gradient of each op reads. */
static int un_needs(mfi_unop op)
{
    switch (op) {
    case MFI_UN_POW: case MFI_UN_LOG: case MFI_UN_ABS: case MFI_UN_GELU: case MFI_UN_GELU_TANH: return 1;
    case MFI_UN_EXP: case MFI_UN_SQRT: case MFI_UN_RELU: case MFI_UN_SIGMOID: case MFI_UN_TANH: return 2;
    default: return 0;
    }
}

static mf_status un_infer(mfi_call *c, mfi_meta *out)
{
    if (!mf_dtype_is_float(c->in_meta[0].dtype))
        MF_FAIL(MF_ERR_DTYPE, "%s: input is %s, not a float dtype", c->op->name,
                mf_dtype_name(c->in_meta[0].dtype));
    *out = c->in_meta[0];
    return MF_OK;
}

static mf_status un_forward(mfi_call *c, mf_tensor **out)
{
    const un_attrs *a = c->attrs;
    mfi_view o = mfi_view_of(*out), x = mfi_view_of(c->in[0]);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(*out), unary_fwd, a->op, &o, &x, a->alpha);
    MF_TRY(st);
    int need = un_needs(a->op);
    if (need == 1) MF_TRY(mfi_save(c, c->in[0]));
    if (need == 2) MF_TRY(mfi_save(c, *out));
    return MF_OK;
}

static mf_status un_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const un_attrs *a = c->attrs;
    int need = un_needs(a->op);
    mf_tensor *s = need ? mfi_saved(c, 0) : NULL;
    if (need && !s) return mf_last_status();
    gx[0] = mfi_unary_grad(a->op, gy, need == 1 ? s : NULL, need == 2 ? s : NULL, a->alpha);
    return gx[0] ? MF_OK : mf_last_status();
}

/* S and B for all; P too for the linear ones */
static int un_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const un_attrs *a = c->attrs;
    return mfi_sig_elementwise(c, sigs, cap, a->op == MFI_UN_NEG || a->op == MFI_UN_SCALE);
}

#define UN_OP(name) {name, 0, un_infer, un_forward, un_backward, un_sbp, NULL}
static const mfi_op un_ops[MFI_UN_COUNT] = {
    UN_OP("mf_neg"), UN_OP("mf_scale"), UN_OP("mf_add_scalar"), UN_OP("mf_pow"), UN_OP("mf_exp"),
    UN_OP("mf_log"), UN_OP("mf_sqrt"), UN_OP("mf_abs"), UN_OP("mf_relu"), UN_OP("mf_gelu"),
    UN_OP("mf_sigmoid"), UN_OP("mf_tanh"), UN_OP("mf_round_bf16"), UN_OP("mf_gelu_tanh")};

mf_tensor *mfi_unary(mfi_unop op, mf_tensor *x, double alpha)
{
    if (mfi_check_input(un_ops[op].name, "x", x) != MF_OK) return NULL;
    un_attrs at = {op, alpha};
    return mfi_apply(&un_ops[op], 1, &x, &at, sizeof at);
}

mf_tensor *mf_neg(mf_tensor *x) { return mfi_unary(MFI_UN_NEG, x, 0); }
mf_tensor *mf_scale(mf_tensor *x, double s) { return mfi_unary(MFI_UN_SCALE, x, s); }
mf_tensor *mf_add_scalar(mf_tensor *x, double s) { return mfi_unary(MFI_UN_ADD_SCALAR, x, s); }
mf_tensor *mf_pow(mf_tensor *x, double p) { return mfi_unary(MFI_UN_POW, x, p); }
mf_tensor *mf_exp(mf_tensor *x) { return mfi_unary(MFI_UN_EXP, x, 0); }
mf_tensor *mf_log(mf_tensor *x) { return mfi_unary(MFI_UN_LOG, x, 0); }
mf_tensor *mf_sqrt(mf_tensor *x) { return mfi_unary(MFI_UN_SQRT, x, 0); }
mf_tensor *mf_abs(mf_tensor *x) { return mfi_unary(MFI_UN_ABS, x, 0); }
mf_tensor *mf_relu(mf_tensor *x) { return mfi_unary(MFI_UN_RELU, x, 0); }
mf_tensor *mf_gelu(mf_tensor *x) { return mfi_unary(MFI_UN_GELU, x, 0); }
mf_tensor *mf_gelu_tanh(mf_tensor *x) { return mfi_unary(MFI_UN_GELU_TANH, x, 0); }
mf_tensor *mf_sigmoid(mf_tensor *x) { return mfi_unary(MFI_UN_SIGMOID, x, 0); }
mf_tensor *mf_tanh(mf_tensor *x) { return mfi_unary(MFI_UN_TANH, x, 0); }

/* ------------------------------------------------ unary gradient (fused) */
static mf_status ug_infer(mfi_call *c, mfi_meta *out)
{
    *out = c->in_meta[0];
    return MF_OK;
}

static mf_status ug_forward(mfi_call *c, mf_tensor **out)
{
    const un_attrs *a = c->attrs;
    mf_tensor *ct[3] = {NULL, NULL, NULL};
    mfi_view v[3];
    mf_status st = MF_OK;
    for (int i = 0; i < 3; i++) {
        if (!c->in[i]) continue;
        ct[i] = mfi_contiguous_raw(c->in[i]);
        if (!ct[i]) MF_TRY_OUT(mf_last_status());
        v[i] = mfi_view_of(ct[i]);
    }
    mfi_view o = mfi_view_of(*out);
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(*out), unary_bwd, a->op, &o, &v[0], ct[1] ? &v[1] : NULL,
               ct[2] ? &v[2] : NULL, a->alpha);
out:
    for (int i = 0; i < 3; i++) mf_tensor_destroy(ct[i]);
    return st;
}

static const mfi_op ug_op = {"mf_unary_grad", MFI_OP_NO_GRAD, ug_infer, ug_forward, NULL, NULL, NULL};

mf_tensor *mfi_unary_grad(mfi_unop op, mf_tensor *gy, mf_tensor *x, mf_tensor *y, double alpha)
{
    un_attrs at = {op, alpha};
    mf_tensor *in[3] = {gy, x, y};
    return mfi_apply(&ug_op, 3, in, &at, sizeof at);
}

/* -------------------------------------------------------------- in place */
mf_status mf_fill_(mf_tensor *t, double value)
{
    MF_TRY(mfi_check_input("mf_fill_", "the tensor", t));
    if (t->global) return mfi_global_inplace(MFI_IP_FILL, t, NULL, value);
    mfi_view v = mfi_view_of(t);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(t), fill, &v, value);
    if (st == MF_OK) mfi_bump_version(t);
    return st;
}

mf_status mf_copy_(mf_tensor *dst, mf_tensor *src)
{
    MF_TRY(mfi_check_input("mf_copy_", "dst", dst));
    MF_TRY(mfi_check_input("mf_copy_", "src", src));
    if (dst->global || src->global) return mfi_global_inplace(MFI_IP_COPY, dst, src, 0);
    mfi_meta d, s, b;
    mfi_meta_of(dst, &d);
    mfi_meta_of(src, &s);
    MF_TRY(mfi_broadcast_shapes("mf_copy_", &d, &s, &b));
    if (!mfi_meta_same_shape(&b, &d)) {
        char x[128], y[128];
        MF_FAIL(MF_ERR_SHAPE, "mf_copy_: source %s does not broadcast to destination %s", mfi_meta_str(&s, x, sizeof x),
                mfi_meta_str(&d, y, sizeof y));
    }
    mf_status st;
    if (mf_tensor_device(dst) != mf_tensor_device(src)) {   /* across devices: through one transfer */
        mf_tensor *e = mf_expand(src, d.ndim, d.shape);
        if (!e) return mf_last_status();
        st = mfi_copy_across(dst, e);
        mf_tensor_destroy(e);
        if (st == MF_OK) mfi_bump_version(dst);
        return st;
    }
    mfi_view o = mfi_view_of(dst), i = mfi_view_broadcast(src, &d);
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(dst), copy, &o, &i);
    if (st == MF_OK) mfi_bump_version(dst);
    return st;
}

mf_status mf_add_(mf_tensor *a, mf_tensor *b, double alpha)
{
    MF_TRY(mfi_check_input("mf_add_", "a", a));
    MF_TRY(mfi_check_input("mf_add_", "b", b));
    if (a->global || b->global) return mfi_global_inplace(MFI_IP_ADD, a, b, alpha);
    if (mf_tensor_device(a) != mf_tensor_device(b))
        MF_FAIL(MF_ERR_ARG, "mf_add_: a is on %s and b on %s (move one with mf_to_device)",
                mf_device_name(mf_tensor_device(a)), mf_device_name(mf_tensor_device(b)));
    mfi_meta ma, mb, mo;
    mfi_meta_of(a, &ma);
    mfi_meta_of(b, &mb);
    if (a->dtype != b->dtype)
        MF_FAIL(MF_ERR_DTYPE, "mf_add_: dtypes %s and %s differ", mf_dtype_name(a->dtype), mf_dtype_name(b->dtype));
    MF_TRY(mfi_broadcast_shapes("mf_add_", &ma, &mb, &mo));
    if (!mfi_meta_same_shape(&mo, &ma)) {
        char x[128], y[128];
        MF_FAIL(MF_ERR_SHAPE, "mf_add_: %s does not broadcast to %s", mfi_meta_str(&mb, x, sizeof x),
                mfi_meta_str(&ma, y, sizeof y));
    }
    mf_tensor *sb = NULL;
    if (alpha != 1.0) {
        bool prev = mf_set_grad_enabled(false);
        sb = mf_scale(b, alpha);
        mf_set_grad_enabled(prev);
        if (!sb) return mf_last_status();
    }
    mfi_view o = mfi_view_of(a), x = o, y = mfi_view_broadcast(sb ? sb : b, &ma);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(a), binary_fwd, MFI_BIN_ADD, &o, &x, &y);
    mf_tensor_destroy(sb);
    if (st == MF_OK) mfi_bump_version(a);
    return st;
}

mf_status mf_scale_(mf_tensor *t, double s)
{
    MF_TRY(mfi_check_input("mf_scale_", "the tensor", t));
    if (t->global) return mfi_global_inplace(MFI_IP_SCALE, t, NULL, s);
    if (!mf_dtype_is_float(t->dtype)) MF_FAIL(MF_ERR_DTYPE, "mf_scale_: not a float tensor");
    mfi_view v = mfi_view_of(t);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(t), unary_fwd, MFI_UN_SCALE, &v, &v, s);
    if (st == MF_OK) mfi_bump_version(t);
    return st;
}
