/*
 * lib/op/pool.c - max, average and adaptive-average 2-D pooling, NCHW.
 *
 * Max pooling keeps the argmax of each window (an i32 index into the
 * H*W plane) for its gradient; average pooling spreads gy evenly over
 * each window. Output size: (H + 2*pad - kernel) / stride + 1 (floor).
 */
#include "lib/internal.h"

typedef struct pool_attrs {
    mfi_pool2d g;
    bool is_max;
} pool_attrs;

mf_pool2d_params mf_pool2d_defaults(int kernel)
{
    mf_pool2d_params p = {{kernel, kernel}, {kernel, kernel}, {0, 0}, true};
    return p;
}

static mf_status pool_infer(mfi_call *c, mfi_meta *out)
{
    pool_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0];
    char s[128];
    if (x->ndim != 4)
        MF_FAIL(MF_ERR_SHAPE, "%s: input %s must be 4-D [N, C, H, W]", c->op->name, mfi_meta_str(x, s, sizeof s));
    if (!mf_dtype_is_float(x->dtype)) MF_FAIL(MF_ERR_DTYPE, "%s: input is not a float tensor", c->op->name);
    mfi_pool2d *g = &a->g;
    g->n = x->shape[0];
    g->c = x->shape[1];
    g->h = x->shape[2];
    g->w = x->shape[3];
    if (!g->adaptive) {
        g->oh = (g->h + 2 * g->padding[0] - g->kernel[0]) / g->stride[0] + 1;
        g->ow = (g->w + 2 * g->padding[1] - g->kernel[1]) / g->stride[1] + 1;
        if (g->h + 2 * g->padding[0] < g->kernel[0] || g->w + 2 * g->padding[1] < g->kernel[1])
            MF_FAIL(MF_ERR_SHAPE, "%s: input %s is smaller than the window %dx%d", c->op->name,
                    mfi_meta_str(x, s, sizeof s), g->kernel[0], g->kernel[1]);
    } else if (g->h == 0 || g->w == 0) {
        MF_FAIL(MF_ERR_SHAPE, "%s: input %s has an empty plane", c->op->name, mfi_meta_str(x, s, sizeof s));
    }
    *out = *x;
    out->shape[2] = g->oh;
    out->shape[3] = g->ow;
    return MF_OK;
}

static mf_status pool_forward(mfi_call *c, mf_tensor **out)
{
    const pool_attrs *a = c->attrs;
    mf_tensor *x = mfi_contiguous_raw(c->in[0]), *idx = NULL;
    if (!x) return mf_last_status();
    mfi_view vo = mfi_view_of(*out), vx = mfi_view_of(x);
    mf_status st = MF_OK;
    const mfi_backend *be = mfi_backend_of(x);
    if (a->is_max) {
        idx = mfi_tensor_new(MF_I32, 4, (*out)->shape);
        if (!idx) MF_TRY_OUT(mf_last_status());
        mfi_view vi = mfi_view_of(idx);
        MFI_KERNEL(st, MF_PROF_POOL, be, maxpool2d_fwd, &a->g, &vo, &vi, &vx);
        MF_TRY_OUT(st);
        MF_TRY_OUT(mfi_save(c, idx));
    } else {
        MFI_KERNEL(st, MF_PROF_POOL, be, avgpool2d_fwd, &a->g, &vo, &vx);
    }
out:
    mf_tensor_destroy(x);
    mf_tensor_destroy(idx);
    return st;
}

/* gradient op: (gy[, idx]) -> gx */
static mf_status pg_infer(mfi_call *c, mfi_meta *out)
{
    const pool_attrs *a = c->attrs;
    *out = c->in_meta[0];
    out->shape[2] = a->g.h;
    out->shape[3] = a->g.w;
    return MF_OK;
}

static mf_status pg_forward(mfi_call *c, mf_tensor **out)
{
    const pool_attrs *a = c->attrs;
    mf_tensor *gy = mfi_contiguous_raw(c->in[0]);
    if (!gy) return mf_last_status();
    mfi_view vo = mfi_view_of(*out), vg = mfi_view_of(gy);
    mf_status st;
    if (a->is_max) {
        mfi_view vi = mfi_view_of(c->in[1]);
        MFI_KERNEL(st, MF_PROF_POOL, mfi_backend_of(gy), maxpool2d_bwd, &a->g, &vo, &vg, &vi);
    } else {
        MFI_KERNEL(st, MF_PROF_POOL, mfi_backend_of(gy), avgpool2d_bwd, &a->g, &vo, &vg);
    }
    mf_tensor_destroy(gy);
    return st;
}

static const mfi_op pg_op = {"mf_pool2d_grad", MFI_OP_NO_GRAD, pg_infer, pg_forward, NULL, NULL, NULL};

static mf_status pool_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const pool_attrs *a = c->attrs;
    mf_tensor *in[2] = {gy, NULL};
    if (a->is_max && !(in[1] = mfi_saved(c, 0))) return mf_last_status();
    gx[0] = mfi_apply(&pg_op, a->is_max ? 2 : 1, in, a, sizeof *a);
    return gx[0] ? MF_OK : mf_last_status();
}

/* batch or channel split; averages are linear, so P passes them */
static int pool_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const pool_attrs *a = c->attrs;
    mf_sbp in = mfi_S(0);
    int n = mfi_sig_add(sigs, 0, cap, 1, &in, mfi_S(0));
    in = mfi_S(1);
    n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(1));
    in = mfi_P();
    if (!a->is_max) n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_P());
    return n;
}

static const mfi_op maxpool_op = {"mf_max_pool2d", 0, pool_infer, pool_forward, pool_backward, pool_sbp, NULL};
static const mfi_op avgpool_op = {"mf_avg_pool2d", 0, pool_infer, pool_forward, pool_backward, pool_sbp, NULL};
static const mfi_op adaptive_op = {"mf_adaptive_avg_pool2d", 0, pool_infer, pool_forward, pool_backward, pool_sbp,
                                   NULL};

static mf_tensor *pool(const char *name, bool is_max, mf_tensor *x, const mf_pool2d_params *p)
{
    if (mfi_check_input(name, "x", x) != MF_OK) return NULL;
    if (!p) {
        mfi_error(MF_ERR_ARG, "%s: params are NULL", name);
        return NULL;
    }
    pool_attrs a;
    memset(&a, 0, sizeof a);
    a.is_max = is_max;
    for (int i = 0; i < 2; i++) {
        a.g.kernel[i] = p->kernel[i];
        a.g.stride[i] = p->stride[i] ? p->stride[i] : p->kernel[i];
        a.g.padding[i] = p->padding[i];
        if (a.g.kernel[i] < 1 || a.g.stride[i] < 1 || a.g.padding[i] < 0 || a.g.padding[i] > a.g.kernel[i] / 2) {
            mfi_error(MF_ERR_ARG, "%s: kernel %dx%d, stride %dx%d, padding %dx%d: need kernel >= 1, stride >= 1 "
                      "and 0 <= padding <= kernel/2", name, p->kernel[0], p->kernel[1], a.g.stride[0], a.g.stride[1],
                      p->padding[0], p->padding[1]);
            return NULL;
        }
    }
    a.g.count_include_pad = p->count_include_pad;
    return mfi_apply(is_max ? &maxpool_op : &avgpool_op, 1, &x, &a, sizeof a);
}

mf_tensor *mf_max_pool2d(mf_tensor *x, const mf_pool2d_params *p) { return pool("mf_max_pool2d", true, x, p); }
mf_tensor *mf_avg_pool2d(mf_tensor *x, const mf_pool2d_params *p) { return pool("mf_avg_pool2d", false, x, p); }

mf_tensor *mf_adaptive_avg_pool2d(mf_tensor *x, int out_h, int out_w)
{
    if (mfi_check_input("mf_adaptive_avg_pool2d", "x", x) != MF_OK) return NULL;
    if (out_h < 1 || out_w < 1) {
        mfi_error(MF_ERR_ARG, "mf_adaptive_avg_pool2d: output size %dx%d must be at least 1x1", out_h, out_w);
        return NULL;
    }
    pool_attrs a;
    memset(&a, 0, sizeof a);
    a.g.adaptive = true;
    a.g.oh = out_h;
    a.g.ow = out_w;
    return mfi_apply(&adaptive_op, 1, &x, &a, sizeof a);
}
