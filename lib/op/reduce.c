/*
 * lib/op/reduce.c - sum, mean, max (and sum of squares) over axes; argmax.
 *
 * Gradients: sum broadcasts gy back; mean also divides by the count; max
 * sends gy to the maxima, shared equally among ties (torch.amax).
 * SBP (later): a reduction over a split axis gives P.
 */
#include <math.h>
#include "lib/internal.h"

typedef struct red_attrs {
    mfi_redop op;
    bool mean;
    bool keepdim;
    bool axis[MF_MAX_DIMS];
    int64_t count;       /* mean: the divisor; 0 = the reduced elements here */
} red_attrs;

/* mean's divisor: count, or the reduced elements of in */
static int64_t red_count(const red_attrs *a, const mfi_meta *in)
{
    if (a->count > 0) return a->count;
    int64_t n = 1;
    for (int d = 0; d < in->ndim; d++)
        if (a->axis[d]) n *= in->shape[d];
    return n;
}

static const char *red_name(const red_attrs *a)
{
    return a->mean ? "mf_mean" : a->op == MFI_RED_MAX ? "mf_max" : a->op == MFI_RED_SUMSQ ? "mf_sumsq" : "mf_sum";
}

/* in's shape with 1 on reduced dims */
static void kept_shape(const red_attrs *a, const mfi_meta *in, int64_t *shape)
{
    for (int i = 0; i < in->ndim; i++) shape[i] = a->axis[i] ? 1 : in->shape[i];
}

static mf_status red_infer(mfi_call *c, mfi_meta *out)
{
    const red_attrs *a = c->attrs;
    const mfi_meta *in = &c->in_meta[0];
    if (a->op != MFI_RED_MAX && !mf_dtype_is_float(in->dtype) && (a->mean || a->op == MFI_RED_SUMSQ))
        MF_FAIL(MF_ERR_DTYPE, "%s: input is %s, not a float dtype", red_name(a), mf_dtype_name(in->dtype));
    out->dtype = in->dtype;
    out->ndim = 0;
    for (int i = 0; i < in->ndim; i++) {
        if (a->axis[i] && in->shape[i] == 0 && a->op == MFI_RED_MAX)
            MF_FAIL(MF_ERR_SHAPE, "mf_max: axis %d is empty", i);
        if (a->axis[i] && !a->keepdim) continue;
        out->shape[out->ndim++] = a->axis[i] ? 1 : in->shape[i];
    }
    return MF_OK;
}

static mf_status red_forward(mfi_call *c, mf_tensor **out)
{
    const red_attrs *a = c->attrs;
    mf_tensor *x = c->in[0];
    int64_t ks[MF_MAX_DIMS];
    kept_shape(a, &c->in_meta[0], ks);
    mfi_view o = mfi_view_as(*out, x->ndim, ks), i = mfi_view_of(x);
    mf_status st;
    const mfi_backend *be = mfi_backend_of(x);
    MFI_KERNEL(st, MF_PROF_REDUCE, be, reduce, a->op, &o, &i);
    MF_TRY(st);
    if (a->mean) {
        int64_t n = red_count(a, &c->in_meta[0]);
        MFI_KERNEL(st, MF_PROF_REDUCE, be, unary_fwd, MFI_UN_SCALE, &o, &o, n ? 1.0 / (double)n : NAN);
        MF_TRY(st);
    }
    if (a->op == MFI_RED_MAX) {
        MF_TRY(mfi_save(c, x));
        MF_TRY(mfi_save(c, *out));
    }
    if (a->op == MFI_RED_SUMSQ) MF_TRY(mfi_save(c, x));
    return MF_OK;
}

static mf_status red_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const red_attrs *a = c->attrs;
    const mfi_meta *in = &c->in_meta[0];
    int64_t ks[MF_MAX_DIMS];
    kept_shape(a, in, ks);
    mf_status st = MF_OK;
    mf_tensor *g = mf_reshape(gy, in->ndim, ks), *e = NULL, *mask = NULL, *cnt = NULL, *t = NULL;
    if (!g) return mf_last_status();
    e = mf_expand(g, in->ndim, in->shape);
    if (!e) MF_TRY_OUT(mf_last_status());
    if (a->op == MFI_RED_SUM && !a->mean) {
        gx[0] = mf_tensor_retain(e);
    } else if (a->mean) {
        int64_t n = red_count(a, in);
        gx[0] = mf_scale(e, 1.0 / (double)n);
    } else if (a->op == MFI_RED_SUMSQ) {
        mf_tensor *x = mfi_saved(c, 0);
        t = x ? mf_mul(x, e) : NULL;
        gx[0] = t ? mf_scale(t, 2.0) : NULL;
    } else {
        mf_tensor *x = mfi_saved(c, 0), *y = mfi_saved(c, 1);
        if (!x || !y) MF_TRY_OUT(mf_last_status());
        mf_tensor *yk = mf_reshape(y, in->ndim, ks);
        mask = yk ? mf_eq(x, yk) : NULL;
        mf_tensor_destroy(yk);
        int axes[MF_MAX_DIMS], na = 0;
        for (int d = 0; d < in->ndim; d++)
            if (a->axis[d]) axes[na++] = d;
        cnt = mask ? mf_sum(mask, na, axes, true) : NULL;
        t = cnt ? mf_div(g, cnt) : NULL;
        gx[0] = t ? mf_mul(mask, t) : NULL;
    }
    if (!gx[0]) st = mf_last_status();
out:
    mf_tensor_destroy(g);
    mf_tensor_destroy(e);
    mf_tensor_destroy(mask);
    mf_tensor_destroy(cnt);
    mf_tensor_destroy(t);
    return st;
}

/* The output axis of input axis i (-1 if it is reduced away). */
static int out_axis(const bool *axis, bool keepdim, int i)
{
    if (keepdim) return i;
    if (axis[i]) return -1;
    int k = 0;
    for (int j = 0; j < i; j++) k += !axis[j];
    return k;
}

/* a split kept axis stays split; a split reduced axis gives P (sums and
 * means; a max would need a max-reduction); P stays P for linear ones */
static int red_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const red_attrs *a = c->attrs;
    bool linear = a->op == MFI_RED_SUM;
    int n = 0;
    for (int i = 0; i < c->in_meta[0].ndim; i++) {
        mf_sbp in = mfi_S(i);
        if (a->axis[i] && !a->keepdim) {
            if (linear || a->op == MFI_RED_SUMSQ) n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_P());
        } else if (a->axis[i]) {
            if (linear || a->op == MFI_RED_SUMSQ) n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_P());
        } else {
            n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(out_axis(a->axis, a->keepdim, i)));
        }
    }
    mf_sbp p = mfi_P();
    if (linear) n = mfi_sig_add(sigs, n, cap, 1, &p, mfi_P());
    return n;
}

static void red_localize(const mfi_call *c, void *attrs, const mfi_box *ob)
{
    red_attrs *a = attrs;
    (void)ob;
    if (a->mean) a->count = red_count(a, &c->in_meta[0]);   /* the global count */
}

static const mfi_op red_ops[4] = {
    {"mf_sum", 0, red_infer, red_forward, red_backward, red_sbp, NULL},
    {"mf_mean", 0, red_infer, red_forward, red_backward, red_sbp, red_localize},
    {"mf_max", 0, red_infer, red_forward, red_backward, red_sbp, NULL},
    {"mf_sumsq", 0, red_infer, red_forward, red_backward, red_sbp, NULL},
};

static mf_tensor *reduce(mfi_redop op, bool mean, mf_tensor *x, int naxes, const int *axes, bool keepdim)
{
    red_attrs a;
    memset(&a, 0, sizeof a);
    a.op = op;
    a.mean = mean;
    a.keepdim = keepdim;
    const char *name = red_name(&a);
    if (mfi_check_input(name, "x", x) != MF_OK) return NULL;
    if (naxes == 0 || !axes) {
        for (int i = 0; i < x->ndim; i++) a.axis[i] = true;
    }
    for (int i = 0; axes && i < naxes; i++) {
        int ax = axes[i];
        if (mfi_norm_axis(name, &ax, x->ndim) != MF_OK) return NULL;
        if (x->ndim == 0) continue;
        if (a.axis[ax]) {
            mfi_error(MF_ERR_ARG, "%s: axis %d is given twice", name, axes[i]);
            return NULL;
        }
        a.axis[ax] = true;
    }
    int which = mean ? 1 : op == MFI_RED_MAX ? 2 : op == MFI_RED_SUMSQ ? 3 : 0;
    return mfi_apply(&red_ops[which], 1, &x, &a, sizeof a);
}

mf_tensor *mfi_reduce(mfi_redop op, mf_tensor *x, int naxes, const int *axes, bool keepdim)
{
    return reduce(op, false, x, naxes, axes, keepdim);
}

mf_tensor *mf_sum(mf_tensor *x, int naxes, const int *axes, bool keepdim)
{
    return reduce(MFI_RED_SUM, false, x, naxes, axes, keepdim);
}

mf_tensor *mf_mean(mf_tensor *x, int naxes, const int *axes, bool keepdim)
{
    return reduce(MFI_RED_SUM, true, x, naxes, axes, keepdim);
}

mf_tensor *mf_max(mf_tensor *x, int naxes, const int *axes, bool keepdim)
{
    return reduce(MFI_RED_MAX, false, x, naxes, axes, keepdim);
}

mf_tensor *mf_sum_all(mf_tensor *x) { return reduce(MFI_RED_SUM, false, x, 0, NULL, false); }
mf_tensor *mf_mean_all(mf_tensor *x) { return reduce(MFI_RED_SUM, true, x, 0, NULL, false); }

/* ---------------------------------------------------------------- argmax */
typedef struct argmax_attrs {
    int axis;
    bool keepdim;
} argmax_attrs;

static mf_status argmax_infer(mfi_call *c, mfi_meta *out)
{
    const argmax_attrs *a = c->attrs;
    const mfi_meta *in = &c->in_meta[0];
    if (in->ndim == 0 || in->shape[a->axis] == 0)
        MF_FAIL(MF_ERR_SHAPE, "mf_argmax: axis %d is empty", a->axis);
    out->dtype = MF_I64;
    out->ndim = 0;
    for (int i = 0; i < in->ndim; i++) {
        if (i == a->axis && !a->keepdim) continue;
        out->shape[out->ndim++] = i == a->axis ? 1 : in->shape[i];
    }
    return MF_OK;
}

static mf_status argmax_forward(mfi_call *c, mf_tensor **out)
{
    const argmax_attrs *a = c->attrs;
    mf_tensor *x = c->in[0];
    int64_t ks[MF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ks[i] = i == a->axis ? 1 : x->shape[i];
    mfi_view o = mfi_view_as(*out, x->ndim, ks), i = mfi_view_of(x);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_REDUCE, mfi_backend_of(x), argmax, &o, &i, a->axis);
    return st;
}

static int argmax_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const argmax_attrs *a = c->attrs;
    bool axis[MF_MAX_DIMS] = {false};
    axis[a->axis] = true;
    int n = 0;
    for (int i = 0; i < c->in_meta[0].ndim; i++) {
        if (i == a->axis) continue;
        mf_sbp in = mfi_S(i);
        n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(out_axis(axis, a->keepdim, i)));
    }
    return n;
}

static const mfi_op argmax_op = {"mf_argmax", MFI_OP_NO_GRAD, argmax_infer, argmax_forward, NULL, argmax_sbp, NULL};

mf_tensor *mf_argmax(mf_tensor *x, int axis, bool keepdim)
{
    if (mfi_check_input("mf_argmax", "x", x) != MF_OK) return NULL;
    if (mfi_norm_axis("mf_argmax", &axis, x->ndim) != MF_OK) return NULL;
    argmax_attrs a = {axis, keepdim};
    return mfi_apply(&argmax_op, 1, &x, &a, sizeof a);
}
