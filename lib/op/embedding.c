/*
 * lib/op/embedding.c - embedding lookup: out[..., :] = weight[index[...], :].
 * The weight's gradient scatters gy rows back with addition.
 */
#include "lib/internal.h"

static mf_status emb_infer(mfi_call *c, mfi_meta *out)
{
    const mfi_meta *w = &c->in_meta[0], *ix = &c->in_meta[1];
    char s[128];
    if (w->ndim != 2)
        MF_FAIL(MF_ERR_SHAPE, "mf_embedding: weight %s must be [num_embeddings, dim]", mfi_meta_str(w, s, sizeof s));
    if (!mf_dtype_is_float(w->dtype)) MF_FAIL(MF_ERR_DTYPE, "mf_embedding: weight is not a float tensor");
    if (ix->dtype != MF_I32 && ix->dtype != MF_I64)
        MF_FAIL(MF_ERR_DTYPE, "mf_embedding: index is %s, not i32 or i64", mf_dtype_name(ix->dtype));
    if (ix->ndim + 1 > MF_MAX_DIMS) MF_FAIL(MF_ERR_SHAPE, "mf_embedding: index has too many dims");
    *out = *ix;
    out->dtype = w->dtype;
    out->shape[out->ndim++] = w->shape[1];
    return MF_OK;
}

static mf_status emb_forward(mfi_call *c, mf_tensor **out)
{
    mf_tensor *w = mfi_contiguous_raw(c->in[0]), *ix = mfi_contiguous_raw(c->in[1]);
    mf_status st = MF_OK;
    if (!w || !ix) MF_TRY_OUT(mf_last_status());
    mfi_view o = mfi_view_of(*out), vw = mfi_view_of(w), vi = mfi_view_of(ix);
    MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(w), embedding_fwd, &o, &vw, &vi);
    if (st != MF_OK) {
        mfi_error_context("mf_embedding");
        goto out;
    }
    MF_TRY_OUT(mfi_save(c, ix));
out:
    mf_tensor_destroy(w);
    mf_tensor_destroy(ix);
    return st;
}

static mf_status emb_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const mfi_meta *wm = &c->in_meta[0];
    mf_tensor *ix = mfi_saved(c, 0);
    if (!ix) return mf_last_status();
    mf_tensor *g = mf_zeros(wm->dtype, wm->ndim, wm->shape), *gyc = mfi_contiguous_raw(gy);
    mf_status st = MF_OK;
    if (!g || !gyc) MF_TRY_OUT(mf_last_status());
    mfi_view vg = mfi_view_of(g), vy = mfi_view_of(gyc), vi = mfi_view_of(ix);
    MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(g), embedding_bwd, &vg, &vy, &vi);
out:
    mf_tensor_destroy(gyc);
    if (st != MF_OK) {
        mf_tensor_destroy(g);
        return st;
    }
    gx[0] = g;
    return MF_OK;
}

/* indices split on any axis with the table B; or the table split on the
 * embedding dimension, giving the output's last axis */
static int emb_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    int n = 0, ni = c->in_meta[1].ndim;
    mf_sbp in[2];
    for (int i = 0; i < ni; i++) {
        in[0] = mfi_B(), in[1] = mfi_S(i);
        n = mfi_sig_add(sigs, n, cap, 2, in, mfi_S(i));
    }
    in[0] = mfi_S(1), in[1] = mfi_B();
    return mfi_sig_add(sigs, n, cap, 2, in, mfi_S(ni));
}

static const mfi_op emb_op = {"mf_embedding", 0, emb_infer, emb_forward, emb_backward, emb_sbp, NULL};

mf_tensor *mf_embedding(mf_tensor *weight, mf_tensor *index)
{
    if (mfi_check_input("mf_embedding", "weight", weight) != MF_OK ||
        mfi_check_input("mf_embedding", "index", index) != MF_OK)
        return NULL;
    mf_tensor *in[2] = {weight, index};
    return mfi_apply(&emb_op, 2, in, NULL, 0);
}
