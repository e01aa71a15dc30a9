/*
 * lib/op/conv2d.c - 2-D convolution, NCHW, with stride, padding,
 * dilation and groups (PyTorch's Conv2d semantics).
 *
 *   OH = (H + 2*pad - dil*(KH-1) - 1) / stride + 1
 * Gradients: input by the backend's conv2d_bwd_data (the transposed
 * convolution), weight by conv2d_bwd_filter, bias by summing gy over
 * N, H and W. Both gradient kernels are ops of their own here, so the
 * global layer can give them SBP signatures.
 */
#include "lib/internal.h"

typedef struct conv_attrs {
    mf_conv2d_params p;
    mfi_conv2d g;        /* geometry, filled by infer */
    bool bf16;           /* autocast (lib/op/autocast.c) at the forward */
} conv_attrs;

mf_conv2d_params mf_conv2d_defaults(void)
{
    mf_conv2d_params p = {{1, 1}, {0, 0}, {1, 1}, 1};
    return p;
}

static mf_status geometry(const char *op, const mf_conv2d_params *p, const mfi_meta *x, const mfi_meta *w,
                          mfi_conv2d *g)
{
    char s1[128], s2[128];
    if (x->ndim != 4)
        MF_FAIL(MF_ERR_SHAPE, "%s: input %s must be 4-D [N, C, H, W]", op, mfi_meta_str(x, s1, sizeof s1));
    if (w->ndim != 4)
        MF_FAIL(MF_ERR_SHAPE, "%s: weight %s must be 4-D [out, in/groups, kh, kw]", op, mfi_meta_str(w, s1, sizeof s1));
    if (p->groups < 1 || x->shape[1] % p->groups || w->shape[0] % p->groups)
        MF_FAIL(MF_ERR_ARG, "%s: groups=%d must divide input channels %lld and output channels %lld", op, p->groups,
                (long long)x->shape[1], (long long)w->shape[0]);
    if (w->shape[1] * p->groups != x->shape[1])
        MF_FAIL(MF_ERR_SHAPE, "%s: input %s has %lld channels but weight %s expects %lld (groups=%d)", op,
                mfi_meta_str(x, s1, sizeof s1), (long long)x->shape[1], mfi_meta_str(w, s2, sizeof s2),
                (long long)(w->shape[1] * p->groups), p->groups);
    for (int i = 0; i < 2; i++)
        if (p->stride[i] < 1 || p->dilation[i] < 1 || p->padding[i] < 0)
            MF_FAIL(MF_ERR_ARG, "%s: stride %dx%d and dilation %dx%d must be >= 1 and padding %dx%d >= 0", op,
                    p->stride[0], p->stride[1], p->dilation[0], p->dilation[1], p->padding[0], p->padding[1]);
    g->n = x->shape[0];
    g->c = x->shape[1];
    g->h = x->shape[2];
    g->w = x->shape[3];
    g->oc = w->shape[0];
    g->kh = (int)w->shape[2];
    g->kw = (int)w->shape[3];
    g->oh = (g->h + 2 * p->padding[0] - (int64_t)p->dilation[0] * (g->kh - 1) - 1) / p->stride[0] + 1;
    g->ow = (g->w + 2 * p->padding[1] - (int64_t)p->dilation[1] * (g->kw - 1) - 1) / p->stride[1] + 1;
    if (g->kh < 1 || g->kw < 1 || g->h + 2 * p->padding[0] < (int64_t)p->dilation[0] * (g->kh - 1) + 1 ||
        g->w + 2 * p->padding[1] < (int64_t)p->dilation[1] * (g->kw - 1) + 1)
        MF_FAIL(MF_ERR_SHAPE, "%s: input %s (padding %dx%d) is smaller than the kernel %dx%d (dilation %dx%d)", op,
                mfi_meta_str(x, s1, sizeof s1), p->padding[0], p->padding[1], g->kh, g->kw, p->dilation[0],
                p->dilation[1]);
    for (int i = 0; i < 2; i++) {
        g->stride[i] = p->stride[i];
        g->padding[i] = p->padding[i];
        g->dilation[i] = p->dilation[i];
    }
    g->groups = p->groups;
    return MF_OK;
}

static mf_status conv_infer(mfi_call *c, mfi_meta *out)
{
    conv_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0], *w = &c->in_meta[1], *b = &c->in_meta[2];
    char s1[128], s2[128];
    if (x->dtype != w->dtype || !mf_dtype_is_float(x->dtype))
        MF_FAIL(MF_ERR_DTYPE, "mf_conv2d: input is %s and weight %s; both must be the same float dtype",
                mf_dtype_name(x->dtype), mf_dtype_name(w->dtype));
    MF_TRY(geometry("mf_conv2d", &a->p, x, w, &a->g));
    a->g.bf16 = a->bf16;
    if (b->ndim >= 0 && (b->ndim != 1 || b->shape[0] != w->shape[0] || b->dtype != x->dtype))
        MF_FAIL(MF_ERR_SHAPE, "mf_conv2d: bias %s does not match weight %s", mfi_meta_str(b, s1, sizeof s1),
                mfi_meta_str(w, s2, sizeof s2));
    out->dtype = x->dtype;
    out->ndim = 4;
    out->shape[0] = a->g.n;
    out->shape[1] = a->g.oc;
    out->shape[2] = a->g.oh;
    out->shape[3] = a->g.ow;
    return MF_OK;
}

static mf_status conv_forward(mfi_call *c, mf_tensor **out)
{
    conv_attrs *a = c->attrs;
    /* under autocast, the operands' bfloat16 values (contiguous copies) */
    mf_tensor *x = a->bf16 ? mfi_bf16_operand(c->in[0], true) : mfi_contiguous_raw(c->in[0]);
    mf_tensor *w = a->bf16 ? mfi_bf16_operand(c->in[1], true) : mfi_contiguous_raw(c->in[1]);
    mf_tensor *b = !c->in[2] ? NULL : a->bf16 ? mfi_bf16_copy(c->in[2]) : mfi_contiguous_raw(c->in[2]);
    mf_tensor *xi = NULL, *wi = NULL;
    mf_status st = MF_OK;
    if (!x || !w || (c->in[2] && !b)) MF_TRY_OUT(mf_last_status());
    mfi_view vo = mfi_view_of(*out), vx = mfi_view_of(x), vw = mfi_view_of(w), vb;
    if (b) vb = mfi_view_of(b);
    /* bfloat16 images of x and w, made once and kept for the gradient
     * ops (lib/op/autocast.c), when the saved tensors are these */
    mfi_conv2d g = a->g;
    if (a->bf16 && x == c->in[0] && w == c->in[1]) {
        xi = mfi_conv_image(x, &a->g, MFI_CONV_X, &g.x16_own);
        wi = xi ? mfi_conv_image(w, &a->g, MFI_CONV_W, &g.w16_own) : NULL;
        g.x16 = xi && wi ? mf_tensor_data(xi) : NULL;
        g.w16 = xi && wi ? mf_tensor_data(wi) : NULL;
        /* the gradient ops read the saved images in the same layouts */
        a->g.x16_own = g.x16_own;
        a->g.w16_own = g.w16_own;
    }
    MFI_KERNEL(st, MF_PROF_CONV, mfi_backend_of(x), conv2d_fwd, &g, &vo, &vx, &vw, b ? &vb : NULL);
    MF_TRY_OUT(st);
    /* saved as given: the gradient ops round them again under autocast */
    if (c->needs_grad[1]) MF_TRY_OUT(mfi_save(c, a->bf16 ? c->in[0] : x));
    if (c->needs_grad[0]) MF_TRY_OUT(mfi_save(c, a->bf16 ? c->in[1] : w));
    /* and the images after them, in the same order (none for a weight
     * whose bytes are made again for the backward: none kept) */
    if (wi && !mfi_rebuilds(w)) {
        if (c->needs_grad[1]) MF_TRY_OUT(mfi_save(c, xi));
        if (c->needs_grad[0]) MF_TRY_OUT(mfi_save(c, wi));
    }
out:
    mf_tensor_destroy(xi);
    mf_tensor_destroy(wi);
    mf_tensor_destroy(x);
    mf_tensor_destroy(w);
    mf_tensor_destroy(b);
    return st;
}

/* ---- gradient ops: input (gy, w) and weight (gy, x) */
static mf_status cgi_infer(mfi_call *c, mfi_meta *out)
{
    const conv_attrs *a = c->attrs;
    out->dtype = c->in_meta[0].dtype;
    out->ndim = 4;
    out->shape[0] = a->g.n;
    out->shape[1] = a->g.c;
    out->shape[2] = a->g.h;
    out->shape[3] = a->g.w;
    return MF_OK;
}

static mf_status cgw_infer(mfi_call *c, mfi_meta *out)
{
    const conv_attrs *a = c->attrs;
    out->dtype = c->in_meta[0].dtype;
    out->ndim = 4;
    out->shape[0] = a->g.oc;
    out->shape[1] = a->g.c / a->g.groups;
    out->shape[2] = a->g.kh;
    out->shape[3] = a->g.kw;
    return MF_OK;
}

static mf_status cg_forward(mfi_call *c, mf_tensor **out, bool weight)
{
    const conv_attrs *a = c->attrs;
    mf_tensor *gy = a->bf16 ? mfi_bf16_operand(c->in[0], true) : mfi_contiguous_raw(c->in[0]);
    mf_tensor *o1 = a->bf16 ? mfi_bf16_operand(c->in[1], true) : mf_tensor_retain(c->in[1]);
    if (!gy || !o1) {
        mf_tensor_destroy(gy);
        mf_tensor_destroy(o1);
        return mf_last_status();
    }
    mfi_view vo = mfi_view_of(*out), vg = mfi_view_of(gy), v1 = mfi_view_of(o1);
    mfi_conv2d g = a->g;
    if (c->n_in == 4) {   /* the images of gy and of x (w) */
        g.gy16 = mf_tensor_data(c->in[2]);
        *(weight ? &g.x16 : &g.w16) = mf_tensor_data(c->in[3]);
    }
    mf_status st;
    if (weight)
        MFI_KERNEL(st, MF_PROF_CONV, mfi_backend_of(gy), conv2d_bwd_filter, &g, &vo, &vg, &v1);
    else
        MFI_KERNEL(st, MF_PROF_CONV, mfi_backend_of(gy), conv2d_bwd_data, &g, &vo, &vg, &v1);
    mf_tensor_destroy(gy);
    mf_tensor_destroy(o1);
    return st;
}

static mf_status cgi_forward(mfi_call *c, mf_tensor **out) { return cg_forward(c, out, false); }
static mf_status cgw_forward(mfi_call *c, mf_tensor **out) { return cg_forward(c, out, true); }

static const mfi_op cgi_op = {"mf_conv2d_grad_input", MFI_OP_NO_GRAD, cgi_infer, cgi_forward, NULL, NULL, NULL};
static const mfi_op cgw_op = {"mf_conv2d_grad_weight", MFI_OP_NO_GRAD, cgw_infer, cgw_forward, NULL, NULL, NULL};

static mf_status conv_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    conv_attrs a = *(const conv_attrs *)c->attrs;   /* with the layout of gy's image */
    int si = 0;
    mf_tensor *x = c->needs_grad[1] ? mfi_saved(c, si++) : NULL;
    mf_tensor *w = c->needs_grad[0] ? mfi_saved(c, si++) : NULL;
    if ((c->needs_grad[1] && !x) || (c->needs_grad[0] && !w)) return mf_last_status();
    /* with the forward's images, gy is converted once for both passes */
    mf_tensor *xi = NULL, *wi = NULL, *gc = NULL, *gi = NULL;
    if (c->n_saved == 2 * si && si > 0) {
        xi = c->needs_grad[1] ? mfi_saved(c, si) : NULL;
        wi = c->needs_grad[0] ? mfi_saved(c, 2 * si - 1) : NULL;
        if ((c->needs_grad[1] && !xi) || (c->needs_grad[0] && !wi)) return mf_last_status();
        if (!(gc = mfi_contiguous_raw(gy))) return mf_last_status();
        gi = mfi_conv_image(gc, &a.g, MFI_CONV_GY, &a.g.gy16_own);
    }
    int n = gi ? 4 : 2;
    if (c->needs_grad[0]) {
        mf_tensor *in[4] = {gi ? gc : gy, w, gi, wi};
        gx[0] = mfi_apply(&cgi_op, n, in, &a, sizeof a);
    }
    if (c->needs_grad[1] && (gx[0] || !c->needs_grad[0])) {
        mf_tensor *in[4] = {gi ? gc : gy, x, gi, xi};
        gx[1] = mfi_apply(&cgw_op, n, in, &a, sizeof a);
    }
    mf_tensor_destroy(gi);
    mf_tensor_destroy(gc);
    if ((c->needs_grad[0] && !gx[0]) || (c->needs_grad[1] && !gx[1])) return mf_last_status();
    if (c->n_in > 2 && c->needs_grad[2]) {
        int axes[3] = {0, 2, 3};
        gx[2] = mf_sum(gy, 3, axes, false);
        if (!gx[2]) return mf_last_status();
    }
    return MF_OK;
}

/* batch split (data parallel); with one group also output channels
 * (weight S(0)) and input channels (x S(1), weight S(1), bias once) */
static int conv_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const conv_attrs *a = c->attrs;
    mf_sbp in[3] = {mfi_S(0), mfi_B(), mfi_B()};
    int n = mfi_sig_add(sigs, 0, cap, 3, in, mfi_S(0));
    if (a->p.groups == 1) {
        in[0] = mfi_B(), in[1] = mfi_S(0), in[2] = mfi_S(0);
        n = mfi_sig_add(sigs, n, cap, 3, in, mfi_S(1));
        in[0] = mfi_S(1), in[1] = mfi_S(1), in[2] = mfi_P();
        n = mfi_sig_add(sigs, n, cap, 3, in, mfi_P());
    }
    in[0] = mfi_P(), in[1] = mfi_B(), in[2] = mfi_P();
    return mfi_sig_add(sigs, n, cap, 3, in, mfi_P());
}

static const mfi_op conv_op = {"mf_conv2d", 0, conv_infer, conv_forward, conv_backward, conv_sbp, NULL};

mf_tensor *mf_conv2d(mf_tensor *x, mf_tensor *weight, mf_tensor *bias, const mf_conv2d_params *p)
{
    if (mfi_check_input("mf_conv2d", "x", x) != MF_OK || mfi_check_input("mf_conv2d", "weight", weight) != MF_OK)
        return NULL;
    conv_attrs a;
    memset(&a, 0, sizeof a);
    a.p = p ? *p : mf_conv2d_defaults();
    a.bf16 = mfi_autocast_bf16(x->dtype);
    mf_tensor *in[3] = {x, weight, bias};
    return mfi_apply(&conv_op, 3, in, &a, sizeof a);
}
