/*
 * lib/op/softmax.c - softmax and log-softmax along one dim.
 *
 * Forward subtracts the maximum for stability. Gradients:
 *   softmax:     gx = y * (gy - sum(gy * y))
 *   log_softmax: gx = gy - exp(y) * sum(gy)
 */
#include "lib/internal.h"

typedef struct sm_attrs {
    int dim;
    bool log;
} sm_attrs;

static mf_status sm_infer(mfi_call *c, mfi_meta *out)
{
    if (!mf_dtype_is_float(c->in_meta[0].dtype))
        MF_FAIL(MF_ERR_DTYPE, "%s: input is %s, not a float dtype", c->op->name, mf_dtype_name(c->in_meta[0].dtype));
    *out = c->in_meta[0];
    return MF_OK;
}

static mf_status sm_forward(mfi_call *c, mf_tensor **out)
{
    const sm_attrs *a = c->attrs;
    mf_tensor *x = mfi_contiguous_raw(c->in[0]);
    if (!x) return mf_last_status();
    mfi_view o = mfi_view_of(*out), i = mfi_view_of(x);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_REDUCE, mfi_backend_of(x), softmax_fwd, a->log, &o, &i, a->dim);
    mf_tensor_destroy(x);
    if (st == MF_OK) st = mfi_save(c, *out);
    return st;
}

/* the gradient kernel as a (non-differentiable) op of its own */
static mf_status smg_infer(mfi_call *c, mfi_meta *out)
{
    *out = c->in_meta[0];
    return MF_OK;
}

static mf_status smg_forward(mfi_call *c, mf_tensor **out)
{
    const sm_attrs *a = c->attrs;
    mf_tensor *gy = mfi_contiguous_raw(c->in[0]);
    if (!gy) return mf_last_status();
    mfi_view o = mfi_view_of(*out), g = mfi_view_of(gy), y = mfi_view_of(c->in[1]);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_REDUCE, mfi_backend_of(gy), softmax_bwd, a->log, &o, &g, &y, a->dim);
    mf_tensor_destroy(gy);
    return st;
}

static const mfi_op smg_op = {"mf_softmax_grad", MFI_OP_NO_GRAD, smg_infer, smg_forward, NULL, NULL, NULL};

static mf_status sm_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    mf_tensor *y = mfi_saved(c, 0);
    if (!y) return mf_last_status();
    mf_tensor *in[2] = {gy, y};
    gx[0] = mfi_apply(&smg_op, 2, in, c->attrs, sizeof(sm_attrs));
    return gx[0] ? MF_OK : mf_last_status();
}

/* split on any axis but the normalised one */
static int sm_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const sm_attrs *a = c->attrs;
    int n = 0;
    for (int i = 0; i < c->in_meta[0].ndim; i++) {
        if (i == a->dim) continue;
        mf_sbp in = mfi_S(i);
        n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(i));
    }
    return n;
}

static const mfi_op sm_op = {"mf_softmax", 0, sm_infer, sm_forward, sm_backward, sm_sbp, NULL};
static const mfi_op lsm_op = {"mf_log_softmax", 0, sm_infer, sm_forward, sm_backward, sm_sbp, NULL};

static mf_tensor *softmax(mf_tensor *x, int dim, bool log)
{
    const char *name = log ? "mf_log_softmax" : "mf_softmax";
    if (mfi_check_input(name, "x", x) != MF_OK) return NULL;
    if (mfi_norm_axis(name, &dim, x->ndim) != MF_OK) return NULL;
    sm_attrs a = {x->ndim ? dim : 0, log};
    if (x->ndim == 0) {
        /* a 0-dim tensor is one row of one element */
        mf_tensor *one = mf_reshape(x, MF_DIMS(1));
        mf_tensor *y = one ? softmax(one, 0, log) : NULL;
        mf_tensor *r = y ? mf_reshape(y, 0, NULL) : NULL;
        mf_tensor_destroy(one);
        mf_tensor_destroy(y);
        return r;
    }
    return mfi_apply(log ? &lsm_op : &sm_op, 1, &x, &a, sizeof a);
}

mf_tensor *mf_softmax(mf_tensor *x, int dim) { return softmax(x, dim, false); }
mf_tensor *mf_log_softmax(mf_tensor *x, int dim) { return softmax(x, dim, true); }
