/*
 * lib/op/norm.c - batch norm and layer norm (formulas in
 * backends/cpu/cpu_norm_tmpl.h).
 *
 * batch_norm in training mode normalises with the batch statistics and
 * updates the running statistics in place (momentum 0.1 by default;
 * unbiased variance in the running estimate, as PyTorch). In eval mode
 * it uses the running statistics. The per-channel mean and 1/std used
 * by the forward pass are kept for the backward pass.
 */
#include "lib/internal.h"

typedef struct bn_attrs {
    mfi_bnorm g;
} bn_attrs;

static mf_status bn_infer(mfi_call *c, mfi_meta *out)
{
    bn_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0];
    char s1[128], s2[128];
    if (x->ndim < 2) MF_FAIL(MF_ERR_SHAPE, "mf_batch_norm: input %s needs at least 2 dims [N, C, ...]", mfi_meta_str(x, s1, sizeof s1));
    if (!mf_dtype_is_float(x->dtype)) MF_FAIL(MF_ERR_DTYPE, "mf_batch_norm: input is not a float tensor");
    static const char *const what[5] = {"input", "running_mean", "running_var", "weight", "bias"};
    for (int i = 1; i < 5; i++) {
        const mfi_meta *m = &c->in_meta[i];
        if (m->ndim < 0) continue;
        if (m->ndim != 1 || m->shape[0] != x->shape[1] || m->dtype != x->dtype)
            MF_FAIL(MF_ERR_SHAPE, "mf_batch_norm: %s is %s %s but input %s has %lld channels", what[i],
                    mf_dtype_name(m->dtype), mfi_meta_str(m, s1, sizeof s1), mfi_meta_str(x, s2, sizeof s2),
                    (long long)x->shape[1]);
    }
    a->g.n = x->shape[0];
    a->g.c = x->shape[1];
    a->g.s = mfi_numel(x->ndim - 2, x->shape + 2);
    if (a->g.training && a->g.n * a->g.s <= 1)
        MF_FAIL(MF_ERR_SHAPE, "mf_batch_norm: input %s has one value per channel; training needs more",
                mfi_meta_str(x, s1, sizeof s1));
    if (!a->g.training && (c->in_meta[1].ndim < 0 || c->in_meta[2].ndim < 0))
        MF_FAIL(MF_ERR_ARG, "mf_batch_norm: eval mode needs running_mean and running_var");
    *out = *x;
    return MF_OK;
}

static mf_status bn_forward(mfi_call *c, mf_tensor **out)
{
    const bn_attrs *a = c->attrs;
    mf_tensor *x = mfi_contiguous_raw(c->in[0]), *sm = NULL, *si = NULL;
    mf_status st = MF_OK;
    if (!x) return mf_last_status();
    int64_t C = a->g.c;
    sm = mfi_tensor_new(x->dtype, 1, &C);
    si = mfi_tensor_new(x->dtype, 1, &C);
    if (!sm || !si) MF_TRY_OUT(mf_last_status());
    mfi_view v[5], vo = mfi_view_of(*out), vsm = mfi_view_of(sm), vsi = mfi_view_of(si);
    for (int i = 1; i < 5; i++)
        if (c->in[i]) {
            if (!mf_tensor_is_contiguous(c->in[i]))
                MF_FAIL_OUT(MF_ERR_ARG, "mf_batch_norm: parameters and running statistics must be contiguous");
            v[i] = mfi_view_of(c->in[i]);
        }
    v[0] = mfi_view_of(x);
#define OPT(i) (c->in[i] ? &v[i] : NULL)
    MFI_KERNEL(st, MF_PROF_NORM, mfi_backend_of(x), batchnorm_fwd, &a->g, &vo, &v[0], OPT(3), OPT(4), OPT(1),
               OPT(2), &vsm, &vsi);
#undef OPT
    MF_TRY_OUT(st);
    if (a->g.training) {
        if (c->in[1]) mfi_bump_version(c->in[1]);
        if (c->in[2]) mfi_bump_version(c->in[2]);
    }
    MF_TRY_OUT(mfi_save(c, x));
    MF_TRY_OUT(mfi_save(c, sm));
    MF_TRY_OUT(mfi_save(c, si));
    if (c->in[3]) MF_TRY_OUT(mfi_save(c, c->in[3]));
out:
    mf_tensor_destroy(x);
    mf_tensor_destroy(sm);
    mf_tensor_destroy(si);
    return st;
}

static mf_status bn_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const bn_attrs *a = c->attrs;
    mf_tensor *x = mfi_saved(c, 0), *sm = mfi_saved(c, 1), *si = mfi_saved(c, 2);
    mf_tensor *w = c->in_meta[3].ndim >= 0 ? mfi_saved(c, 3) : NULL;
    if (!x || !sm || !si || (c->in_meta[3].ndim >= 0 && !w)) return mf_last_status();
    mf_tensor *g = mfi_contiguous_raw(gy);
    if (!g) return mf_last_status();
    mf_status st = MF_OK;
    int64_t C = a->g.c;
    if (c->needs_grad[0] && !(gx[0] = mfi_tensor_new(x->dtype, x->ndim, x->shape))) MF_TRY_OUT(mf_last_status());
    if (c->needs_grad[3] && !(gx[3] = mfi_tensor_new(x->dtype, 1, &C))) MF_TRY_OUT(mf_last_status());
    if (c->needs_grad[4] && !(gx[4] = mfi_tensor_new(x->dtype, 1, &C))) MF_TRY_OUT(mf_last_status());
    mfi_view vgx, vgw, vgb, vgy = mfi_view_of(g), vx = mfi_view_of(x), vw, vsm = mfi_view_of(sm), vsi = mfi_view_of(si);
    if (gx[0]) vgx = mfi_view_of(gx[0]);
    if (gx[3]) vgw = mfi_view_of(gx[3]);
    if (gx[4]) vgb = mfi_view_of(gx[4]);
    if (w) vw = mfi_view_of(w);
    MFI_KERNEL(st, MF_PROF_NORM, mfi_backend_of(g), batchnorm_bwd, &a->g, gx[0] ? &vgx : NULL, gx[3] ? &vgw : NULL,
               gx[4] ? &vgb : NULL, &vgy, &vx, w ? &vw : NULL, &vsm, &vsi);
out:
    mf_tensor_destroy(g);
    return st;
}

/* channels split (the statistics are per channel); a batch split would
 * need synchronised statistics, so S(0) inputs are gathered. The running
 * statistics are updated in place, so they keep their SBP: B statistics
 * (the usual) take the all-B signature, S(0) ones the channel split. */
static int bn_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    mf_sbp in[5] = {mfi_S(1), mfi_S(0), mfi_S(0), mfi_S(0), mfi_S(0)};
    (void)c;
    return mfi_sig_add(sigs, 0, cap, 5, in, mfi_S(1));
}

static const mfi_op bn_op = {"mf_batch_norm", MFI_OP_WRITES(1) | MFI_OP_WRITES(2), bn_infer, bn_forward, bn_backward,
                             bn_sbp, NULL};

mf_tensor *mf_batch_norm(mf_tensor *x, mf_tensor *running_mean, mf_tensor *running_var, mf_tensor *weight,
                         mf_tensor *bias, bool training, double momentum, double eps)
{
    if (mfi_check_input("mf_batch_norm", "x", x) != MF_OK) return NULL;
    if (eps <= 0 || momentum < 0 || momentum > 1) {
        mfi_error(MF_ERR_ARG, "mf_batch_norm: eps %g must be > 0 and momentum %g in [0, 1]", eps, momentum);
        return NULL;
    }
    bn_attrs a;
    memset(&a, 0, sizeof a);
    a.g.training = training;
    a.g.momentum = momentum;
    a.g.eps = eps;
    mf_tensor *in[5] = {x, running_mean, running_var, weight, bias};
    return mfi_apply(&bn_op, 5, in, &a, sizeof a);
}

/* ------------------------------------------------------------ layer norm */
typedef struct ln_attrs {
    int nnorm;
    double eps;
    int64_t rows, cols;
} ln_attrs;

static mf_status ln_infer(mfi_call *c, mfi_meta *out)
{
    ln_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0];
    char s1[128], s2[128];
    if (!mf_dtype_is_float(x->dtype)) MF_FAIL(MF_ERR_DTYPE, "mf_layer_norm: input is not a float tensor");
    if (a->nnorm < 1 || a->nnorm > x->ndim)
        MF_FAIL(MF_ERR_ARG, "mf_layer_norm: cannot normalise the last %d dims of %s", a->nnorm,
                mfi_meta_str(x, s1, sizeof s1));
    const int64_t *ns = x->shape + x->ndim - a->nnorm;
    for (int i = 1; i < 3; i++) {
        const mfi_meta *m = &c->in_meta[i];
        if (m->ndim < 0) continue;
        bool ok = m->ndim == a->nnorm && m->dtype == x->dtype;
        for (int d = 0; ok && d < a->nnorm; d++) ok = m->shape[d] == ns[d];
        if (!ok)
            MF_FAIL(MF_ERR_SHAPE, "mf_layer_norm: %s %s does not match the normalised shape %s",
                    i == 1 ? "weight" : "bias", mfi_meta_str(m, s1, sizeof s1), mfi_shape_str(a->nnorm, ns, s2, sizeof s2));
    }
    a->cols = mfi_numel(a->nnorm, ns);
    a->rows = mfi_numel(x->ndim - a->nnorm, x->shape);
    *out = *x;
    return MF_OK;
}

static mf_status ln_forward(mfi_call *c, mf_tensor **out)
{
    const ln_attrs *a = c->attrs;
    mf_tensor *x = mfi_contiguous_raw(c->in[0]), *w = NULL, *b = NULL, *mean = NULL, *rstd = NULL;
    mf_status st = MF_OK;
    if (!x) return mf_last_status();
    if (c->in[1] && !(w = mfi_contiguous_raw(c->in[1]))) MF_TRY_OUT(mf_last_status());
    if (c->in[2] && !(b = mfi_contiguous_raw(c->in[2]))) MF_TRY_OUT(mf_last_status());
    mean = mfi_tensor_new(x->dtype, 1, &a->rows);
    rstd = mfi_tensor_new(x->dtype, 1, &a->rows);
    if (!mean || !rstd) MF_TRY_OUT(mf_last_status());
    mfi_view vo = mfi_view_of(*out), vx = mfi_view_of(x), vw, vb, vm = mfi_view_of(mean), vr = mfi_view_of(rstd);
    if (w) vw = mfi_view_of(w);
    if (b) vb = mfi_view_of(b);
    MFI_KERNEL(st, MF_PROF_NORM, mfi_backend_of(x), layernorm_fwd, a->rows, a->cols, a->eps, &vo, &vx,
               w ? &vw : NULL, b ? &vb : NULL, &vm, &vr);
    MF_TRY_OUT(st);
    MF_TRY_OUT(mfi_save(c, x));
    MF_TRY_OUT(mfi_save(c, mean));
    MF_TRY_OUT(mfi_save(c, rstd));
    if (w) MF_TRY_OUT(mfi_save(c, w));
out:
    mf_tensor_destroy(x);
    mf_tensor_destroy(w);
    mf_tensor_destroy(b);
    mf_tensor_destroy(mean);
    mf_tensor_destroy(rstd);
    return st;
}

static mf_status ln_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const ln_attrs *a = c->attrs;
    bool has_w = c->in_meta[1].ndim >= 0;
    mf_tensor *x = mfi_saved(c, 0), *mean = mfi_saved(c, 1), *rstd = mfi_saved(c, 2);
    mf_tensor *w = has_w ? mfi_saved(c, 3) : NULL;
    if (!x || !mean || !rstd || (has_w && !w)) return mf_last_status();
    mf_tensor *g = mfi_contiguous_raw(gy);
    if (!g) return mf_last_status();
    mf_status st = MF_OK;
    for (int i = 0; i < 3; i++)
        if (c->needs_grad[i] && !(gx[i] = mfi_tensor_new(c->in_meta[i].dtype, c->in_meta[i].ndim, c->in_meta[i].shape)))
            MF_TRY_OUT(mf_last_status());
    mfi_view v[3], vg = mfi_view_of(g), vx = mfi_view_of(x), vw, vm = mfi_view_of(mean), vr = mfi_view_of(rstd);
    for (int i = 0; i < 3; i++)
        if (gx[i]) v[i] = mfi_view_of(gx[i]);
    if (w) vw = mfi_view_of(w);
    MFI_KERNEL(st, MF_PROF_NORM, mfi_backend_of(g), layernorm_bwd, a->rows, a->cols, gx[0] ? &v[0] : NULL,
               gx[1] ? &v[1] : NULL, gx[2] ? &v[2] : NULL, &vg, &vx, w ? &vw : NULL, &vm, &vr);
out:
    mf_tensor_destroy(g);
    return st;
}

/* split on the leading (not normalised) axes */
static int ln_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const ln_attrs *a = c->attrs;
    int n = 0;
    for (int i = 0; i < c->in_meta[0].ndim - a->nnorm; i++) {
        mf_sbp in[3] = {mfi_S(i), mfi_B(), mfi_B()};
        n = mfi_sig_add(sigs, n, cap, 3, in, mfi_S(i));
    }
    return n;
}

static const mfi_op ln_op = {"mf_layer_norm", 0, ln_infer, ln_forward, ln_backward, ln_sbp, NULL};

mf_tensor *mf_layer_norm(mf_tensor *x, int nnorm, mf_tensor *weight, mf_tensor *bias, double eps)
{
    if (mfi_check_input("mf_layer_norm", "x", x) != MF_OK) return NULL;
    if (eps <= 0) {
        mfi_error(MF_ERR_ARG, "mf_layer_norm: eps %g must be > 0", eps);
        return NULL;
    }
    ln_attrs a = {nnorm, eps, 0, 0};
    mf_tensor *in[3] = {x, weight, bias};
    return mfi_apply(&ln_op, 3, in, &a, sizeof a);
}
