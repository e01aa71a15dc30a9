/*
 * lib/op/loss.c - cross entropy, negative log-likelihood, MSE and L1.
 *
 * cross_entropy fuses log_softmax and NLL; its gradient is
 * g_i * (softmax(x_i) - onehot(t_i)). The mean reduction divides by N.
 * MSE and L1 are compositions of elementwise ops and a reduction.
 */
#include <math.h>
#include "lib/internal.h"

typedef struct loss_attrs {
    mf_reduction r;
    bool fused;          /* cross entropy: input holds logits */
    int64_t count;       /* mean: the divisor; 0 = N here */
} loss_attrs;

static mf_status loss_infer(mfi_call *c, mfi_meta *out)
{
    const loss_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0], *t = &c->in_meta[1];
    char s1[128], s2[128];
    if (x->ndim != 2)
        MF_FAIL(MF_ERR_SHAPE, "%s: input %s must be [N, C]", c->op->name, mfi_meta_str(x, s1, sizeof s1));
    if (!mf_dtype_is_float(x->dtype)) MF_FAIL(MF_ERR_DTYPE, "%s: input is not a float tensor", c->op->name);
    if (t->dtype != MF_I32 && t->dtype != MF_I64)
        MF_FAIL(MF_ERR_DTYPE, "%s: target is %s; class indices must be i32 or i64", c->op->name, mf_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != x->shape[0])
        MF_FAIL(MF_ERR_SHAPE, "%s: input is %s but target is %s: need target [N]", c->op->name,
                mfi_meta_str(x, s1, sizeof s1), mfi_meta_str(t, s2, sizeof s2));
    out->dtype = x->dtype;
    out->ndim = a->r == MF_REDUCTION_NONE ? 1 : 0;
    out->shape[0] = x->shape[0];
    return MF_OK;
}

static mf_status loss_forward(mfi_call *c, mf_tensor **out)
{
    const loss_attrs *a = c->attrs;
    mf_tensor *x = mfi_contiguous_raw(c->in[0]), *t = mfi_contiguous_raw(c->in[1]), *logp = NULL, *per = NULL;
    mf_status st = MF_OK;
    const mfi_backend *be = NULL;
    if (!x || !t) MF_TRY_OUT(mf_last_status());
    be = mfi_backend_of(x);
    if (a->fused) {
        logp = mfi_tensor_new(x->dtype, 2, x->shape);
        if (!logp) MF_TRY_OUT(mf_last_status());
        mfi_view vl = mfi_view_of(logp), vx = mfi_view_of(x);
        MFI_KERNEL(st, MF_PROF_REDUCE, be, softmax_fwd, true, &vl, &vx, 1);
        MF_TRY_OUT(st);
    } else {
        logp = mf_tensor_retain(x);
    }
    per = a->r == MF_REDUCTION_NONE ? mf_tensor_retain(*out) : mfi_tensor_new(x->dtype, 1, x->shape);
    if (!per) MF_TRY_OUT(mf_last_status());
    mfi_view vp = mfi_view_of(per), vl = mfi_view_of(logp), vt = mfi_view_of(t);
    MFI_KERNEL(st, MF_PROF_REDUCE, be, nll_fwd, &vp, &vl, &vt);
    if (st != MF_OK) {
        mfi_error_context("%s", c->op->name);
        goto out;
    }
    if (a->r != MF_REDUCTION_NONE) {
        mfi_view vo = mfi_view_of(*out);
        int64_t one = 1;
        vo.ndim = 1;
        vo.shape[0] = one;
        vo.stride[0] = 1;
        vp.ndim = 1;
        MFI_KERNEL(st, MF_PROF_REDUCE, be, reduce, MFI_RED_SUM, &vo, &vp);
        MF_TRY_OUT(st);
        if (a->r == MF_REDUCTION_MEAN)
            MFI_KERNEL(st, MF_PROF_REDUCE, be, unary_fwd, MFI_UN_SCALE, &vo, &vo,
                       a->count ? 1.0 / (double)a->count : x->shape[0] ? 1.0 / (double)x->shape[0] : NAN);
        MF_TRY_OUT(st);
    }
    if (a->fused) MF_TRY_OUT(mfi_save(c, logp));
    MF_TRY_OUT(mfi_save(c, t));
out:
    mf_tensor_destroy(x);
    mf_tensor_destroy(t);
    mf_tensor_destroy(logp);
    mf_tensor_destroy(per);
    return st;
}

/* gradient op: (g [N], target[, logp]) -> [N, C] */
typedef struct lossg_attrs {
    bool fused;
    int64_t n, c;
    mf_dtype dtype;
} lossg_attrs;

static mf_status lossg_infer(mfi_call *c, mfi_meta *out)
{
    const lossg_attrs *a = c->attrs;
    out->dtype = a->dtype;
    out->ndim = 2;
    out->shape[0] = a->n;
    out->shape[1] = a->c;
    return MF_OK;
}

static mf_status lossg_forward(mfi_call *c, mf_tensor **out)
{
    const lossg_attrs *a = c->attrs;
    mfi_view vo = mfi_view_of(*out), vg = mfi_view_of(c->in[0]), vt = mfi_view_of(c->in[1]);
    mf_status st;
    if (a->fused) {
        mfi_view vl = mfi_view_of(c->in[2]);
        MFI_KERNEL(st, MF_PROF_REDUCE, mfi_backend_of(*out), xent_bwd, &vo, &vg, &vl, &vt);
    } else {
        MFI_KERNEL(st, MF_PROF_REDUCE, mfi_backend_of(*out), nll_bwd, &vo, &vg, &vt);
    }
    return st;
}

static const mfi_op lossg_op = {"mf_loss_grad", MFI_OP_NO_GRAD, lossg_infer, lossg_forward, NULL, NULL, NULL};

static mf_status loss_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const loss_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0];
    mf_tensor *logp = a->fused ? mfi_saved(c, 0) : NULL, *t = mfi_saved(c, a->fused ? 1 : 0);
    if ((a->fused && !logp) || !t) return mf_last_status();
    /* the per-sample gradient g [N] */
    mf_tensor *g;
    if (a->r == MF_REDUCTION_NONE) {
        g = mf_tensor_retain(gy);
    } else {
        int64_t cnt = a->count ? a->count : x->shape[0];
        mf_tensor *s = a->r == MF_REDUCTION_MEAN ? mf_scale(gy, cnt ? 1.0 / (double)cnt : 0.0)
                                                 : mf_tensor_retain(gy);
        g = s ? mf_expand(s, 1, x->shape) : NULL;
        mf_tensor_destroy(s);
    }
    if (!g) return mf_last_status();
    lossg_attrs ga = {a->fused, x->shape[0], x->shape[1], x->dtype};
    mf_tensor *in[3] = {g, t, logp};
    gx[0] = mfi_apply(&lossg_op, a->fused ? 3 : 2, in, &ga, sizeof ga);
    mf_tensor_destroy(g);
    return gx[0] ? MF_OK : mf_last_status();
}

/* samples split: a reduced loss is then the sum of per-rank partials */
static int loss_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const loss_attrs *a = c->attrs;
    mf_sbp in[2] = {mfi_S(0), mfi_S(0)};
    return mfi_sig_add(sigs, 0, cap, 2, in, a->r == MF_REDUCTION_NONE ? mfi_S(0) : mfi_P());
}

static void loss_localize(const mfi_call *c, void *attrs, const mfi_box *ob)
{
    loss_attrs *a = attrs;
    (void)ob;
    a->count = c->in_meta[0].shape[0];
}

static const mfi_op xent_op = {"mf_cross_entropy", 0, loss_infer, loss_forward, loss_backward, loss_sbp,
                               loss_localize};
static const mfi_op nll_op = {"mf_nll_loss", 0, loss_infer, loss_forward, loss_backward, loss_sbp, loss_localize};

static mf_tensor *class_loss(const mfi_op *op, mf_tensor *x, mf_tensor *target, mf_reduction r, bool fused)
{
    if (mfi_check_input(op->name, "input", x) != MF_OK || mfi_check_input(op->name, "target", target) != MF_OK)
        return NULL;
    if ((unsigned)r > MF_REDUCTION_NONE) {
        mfi_error(MF_ERR_ARG, "%s: unknown reduction %d", op->name, (int)r);
        return NULL;
    }
    loss_attrs a = {r, fused, 0};
    mf_tensor *in[2] = {x, target};
    return mfi_apply(op, 2, in, &a, sizeof a);
}

mf_tensor *mf_cross_entropy(mf_tensor *logits, mf_tensor *target, mf_reduction r)
{
    return class_loss(&xent_op, logits, target, r, true);
}

mf_tensor *mf_nll_loss(mf_tensor *logp, mf_tensor *target, mf_reduction r)
{
    return class_loss(&nll_op, logp, target, r, false);
}

/* ------------------------------------------------ regression losses */
static mf_tensor *regression_loss(const char *name, bool l1, mf_tensor *x, mf_tensor *y, mf_reduction r)
{
    if (mfi_check_input(name, "input", x) != MF_OK || mfi_check_input(name, "target", y) != MF_OK) return NULL;
    mfi_meta mx, my;
    mfi_meta_of(x, &mx);
    mfi_meta_of(y, &my);
    if (!mfi_meta_same_shape(&mx, &my)) {
        char s1[128], s2[128];
        mfi_error(MF_ERR_SHAPE, "%s: input %s and target %s differ in shape", name, mfi_meta_str(&mx, s1, sizeof s1),
                  mfi_meta_str(&my, s2, sizeof s2));
        return NULL;
    }
    if ((unsigned)r > MF_REDUCTION_NONE) {
        mfi_error(MF_ERR_ARG, "%s: unknown reduction %d", name, (int)r);
        return NULL;
    }
    mf_tensor *d = mf_sub(x, y);
    mf_tensor *e = d ? (l1 ? mf_abs(d) : mf_mul(d, d)) : NULL;
    mf_tensor *out = NULL;
    if (e) out = r == MF_REDUCTION_MEAN ? mf_mean_all(e) : r == MF_REDUCTION_SUM ? mf_sum_all(e) : mf_tensor_retain(e);
    mf_tensor_destroy(d);
    mf_tensor_destroy(e);
    return out;
}

mf_tensor *mf_mse_loss(mf_tensor *x, mf_tensor *y, mf_reduction r) { return regression_loss("mf_mse_loss", false, x, y, r); }
mf_tensor *mf_l1_loss(mf_tensor *x, mf_tensor *y, mf_reduction r) { return regression_loss("mf_l1_loss", true, x, y, r); }
