/*
 * lib/op/concat.c - concatenation along one dim; the gradient of each
 * input is its slice of gy.
 */
#include "lib/internal.h"

typedef struct concat_attrs { int dim; } concat_attrs;

static mf_status concat_infer(mfi_call *c, mfi_meta *out)
{
    const concat_attrs *a = c->attrs;
    const mfi_meta *f = &c->in_meta[0];
    *out = *f;
    out->shape[a->dim] = 0;
    for (int i = 0; i < c->n_in; i++) {
        const mfi_meta *m = &c->in_meta[i];
        char s1[128], s2[128];
        if (m->dtype != f->dtype)
            MF_FAIL(MF_ERR_DTYPE, "mf_concat: input %d is %s but input 0 is %s", i, mf_dtype_name(m->dtype),
                    mf_dtype_name(f->dtype));
        bool ok = m->ndim == f->ndim;
        for (int d = 0; ok && d < f->ndim; d++) ok = d == a->dim || m->shape[d] == f->shape[d];
        if (!ok)
            MF_FAIL(MF_ERR_SHAPE, "mf_concat: input %d is %s but input 0 is %s: only dim %d may differ", i,
                    mfi_meta_str(m, s1, sizeof s1), mfi_meta_str(f, s2, sizeof s2), a->dim);
        out->shape[a->dim] += m->shape[a->dim];
    }
    return MF_OK;
}

static mf_status concat_forward(mfi_call *c, mf_tensor **out)
{
    const concat_attrs *a = c->attrs;
    int64_t off = 0;
    for (int i = 0; i < c->n_in; i++) {
        int64_t len = c->in[i]->shape[a->dim];
        bool prev = mf_set_grad_enabled(false);
        mf_tensor *v = mf_narrow(*out, a->dim, off, len);
        mf_set_grad_enabled(prev);
        mf_status st = v ? mf_copy_(v, c->in[i]) : mf_last_status();
        mf_tensor_destroy(v);
        MF_TRY(st);
        off += len;
    }
    return MF_OK;
}

static mf_status concat_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const concat_attrs *a = c->attrs;
    int64_t off = 0;
    for (int i = 0; i < c->n_in; i++) {
        int64_t len = c->in_meta[i].shape[a->dim];
        if (c->needs_grad[i]) {
            gx[i] = mf_narrow(gy, a->dim, off, len);
            if (!gx[i]) return mf_last_status();
        }
        off += len;
    }
    return MF_OK;
}

/* all inputs split on one axis other than dim, or all P */
static int concat_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const concat_attrs *a = c->attrs;
    int n = 0;
    mf_sbp in[MFI_SIG_MAX_IN];
    if (c->n_in > MFI_SIG_MAX_IN) return 0;
    for (int k = 0; k < c->out_meta.ndim; k++) {
        if (k == a->dim) continue;
        for (int i = 0; i < c->n_in; i++) in[i] = mfi_S(k);
        n = mfi_sig_add(sigs, n, cap, c->n_in, in, mfi_S(k));
    }
    for (int i = 0; i < c->n_in; i++) in[i] = mfi_P();
    return mfi_sig_add(sigs, n, cap, c->n_in, in, mfi_P());
}

static const mfi_op concat_op = {"mf_concat", 0, concat_infer, concat_forward, concat_backward, concat_sbp, NULL};

mf_tensor *mf_concat(int n, mf_tensor *const *xs, int dim)
{
    if (n < 1 || !xs) {
        mfi_error(MF_ERR_ARG, "mf_concat: needs at least one tensor");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (mfi_check_input("mf_concat", "an input", xs[i]) != MF_OK) return NULL;
    if (xs[0]->ndim == 0) {
        mfi_error(MF_ERR_ARG, "mf_concat: cannot concatenate 0-dim tensors");
        return NULL;
    }
    if (mfi_norm_axis("mf_concat", &dim, xs[0]->ndim) != MF_OK) return NULL;
    concat_attrs a = {dim};
    return mfi_apply(&concat_op, n, xs, &a, sizeof a);
}
