/*
 * lib/op/embedding.c - embedding lookup: out[..., :] = weight[index[...], :].
 * The weight's gradient scatters gy rows back with addition.
 *
 * SBP: the index split with the table B; the table split on the
 * embedding dimension (the output's last axis); or the table split over
 * its rows (the vocabulary-parallel embedding of Megatron-LM): each rank
 * looks up the indices that fall in its rows, zeros elsewhere, so the
 * output is P, and its gradient rows land only in its own rows.
 */
#include "lib/global/global_internal.h"

typedef struct emb_attrs {
    int64_t first;   /* a table split over rows: this rank's first row */
    int ranged;      /* indices outside [first, first + rows) give zeros */
} emb_attrs;

mf_tensor *mfi_scalar_on(const mf_tensor *t, mf_dtype dt, double v)
{
    mf_tensor *s = mf_full(dt, 1, (const int64_t[]){1}, v);
    if (!s || mf_tensor_device(t) == MF_DEV_CPU) return s;
    mf_tensor *d = mf_to_device(s, mf_tensor_device(t));
    mf_tensor_destroy(s);
    return d;
}

mf_status mfi_local_rows(mf_tensor *ix, int64_t first, int64_t rows, mf_dtype dt, mf_tensor **safe, mf_tensor **mask)
{
    mf_tensor *off = mfi_scalar_on(ix, ix->dtype, (double)first), *top = mfi_scalar_on(ix, ix->dtype, (double)rows);
    mf_tensor *zero = mfi_scalar_on(ix, ix->dtype, 0.0), *one = mfi_scalar_on(ix, ix->dtype, 1.0);
    mf_tensor *sh = off ? mf_sub(ix, off) : NULL, *neg = sh && zero ? mf_lt(sh, zero) : NULL;
    mf_tensor *below = sh && top ? mf_lt(sh, top) : NULL, *pos = neg && one ? mf_sub(one, neg) : NULL;
    mf_tensor *in = pos && below ? mf_mul(pos, below) : NULL;
    *safe = in ? mf_mul(sh, in) : NULL;
    mf_tensor *m = in ? mf_cast(in, dt) : NULL;
    *mask = m ? mf_unsqueeze(m, m->ndim) : NULL;
    mf_tensor *tmp[] = {off, top, zero, one, sh, neg, below, pos, in, m};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) mf_tensor_destroy(tmp[i]);
    if (!*safe || !*mask) {
        mf_tensor_destroy(*safe);
        mf_tensor_destroy(*mask);
        *safe = *mask = NULL;
        return mf_last_status();
    }
    return MF_OK;
}

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
    const emb_attrs *a = c->attrs;
    mf_tensor *w = mfi_contiguous_raw(c->in[0]), *ix = mfi_contiguous_raw(c->in[1]), *mask = NULL, *safe = NULL;
    mf_status st = MF_OK;
    if (!w || !ix) MF_TRY_OUT(mf_last_status());
    if (a && a->ranged) {
        MF_TRY_OUT(mfi_local_rows(ix, a->first, w->shape[0], w->dtype, &safe, &mask));
        mf_tensor_destroy(ix);
        ix = safe;
        safe = NULL;
    }
    mfi_view o = mfi_view_of(*out), vw = mfi_view_of(w), vi = mfi_view_of(ix);
    MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(w), embedding_fwd, &o, &vw, &vi);
    if (st != MF_OK) {
        mfi_error_context("mf_embedding");
        goto out;
    }
    if (mask) {   /* zero the rows this rank does not hold */
        mf_tensor *z = mf_mul(*out, mask);
        st = z ? mf_copy_(*out, z) : mf_last_status();
        mf_tensor_destroy(z);
        MF_TRY_OUT(st);
    }
    MF_TRY_OUT(mfi_save(c, ix));
    if (mask) MF_TRY_OUT(mfi_save(c, mask));
out:
    mf_tensor_destroy(w);
    mf_tensor_destroy(ix);
    mf_tensor_destroy(mask);
    return st;
}

static mf_status emb_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const mfi_meta *wm = &c->in_meta[0];
    const emb_attrs *a = c->attrs;
    mf_tensor *ix = mfi_saved(c, 0), *mask = a && a->ranged ? mfi_saved(c, 1) : NULL;
    if (!ix || (a && a->ranged && !mask)) return mf_last_status();
    mf_tensor *g = mf_zeros(wm->dtype, wm->ndim, wm->shape);
    mf_tensor *gyc = mask ? mf_mul(gy, mask) : mfi_contiguous_raw(gy);
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

/* indices split on any axis with the table B; the table split on the
 * embedding dimension, giving the output's last axis; or over its rows,
 * giving partial sums */
static int emb_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    int n = 0, ni = c->in_meta[1].ndim;
    mf_sbp in[2];
    for (int i = 0; i < ni; i++) {
        in[0] = mfi_B(), in[1] = mfi_S(i);
        n = mfi_sig_add(sigs, n, cap, 2, in, mfi_S(i));
    }
    in[0] = mfi_S(1), in[1] = mfi_B();
    n = mfi_sig_add(sigs, n, cap, 2, in, mfi_S(ni));
    in[0] = mfi_S(0), in[1] = mfi_B();
    return mfi_sig_add(sigs, n, cap, 2, in, mfi_P());
}

static void emb_localize(const mfi_call *c, void *attrs, const mfi_box *ob)
{
    emb_attrs *a = attrs;
    mfi_box wb;
    (void)ob;
    mfi_region(&c->in_meta[0], &c->in_sbp[0], c->placement, c->placement->coord, &wb);
    a->first = wb.start[0];
    a->ranged = wb.count[0] != c->in_meta[0].shape[0];
}

static const mfi_op emb_op = {"mf_embedding", 0, emb_infer, emb_forward, emb_backward, emb_sbp, emb_localize};

mf_tensor *mf_embedding(mf_tensor *weight, mf_tensor *index)
{
    if (mfi_check_input("mf_embedding", "weight", weight) != MF_OK ||
        mfi_check_input("mf_embedding", "index", index) != MF_OK)
        return NULL;
    mf_tensor *in[2] = {weight, index};
    emb_attrs a = {0, 0};
    return mfi_apply(&emb_op, 2, in, &a, sizeof a);
}
