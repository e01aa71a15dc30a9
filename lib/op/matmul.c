/*
 * lib/op/matmul.c - matmul (batched, with transposes) and linear, on the
 * backend's GEMM.
 *
 * A strided operand whose last two dims are row- or column-major goes to
 * GEMM as is (a column-major one flips the transpose flag); anything
 * else is copied first. For C = op(A) op(B) the gradients are
 *   dA = G op(B)^T  (or op(B) G^T when A was transposed),
 *   dB = op(A)^T G  (or G^T op(A) when B was transposed),
 * summed over the batch when the operand was shared by it.
 * SBP (doc/design.md section 4): S(0)xB->S(0), BxS(1)->S(1), S(1)xS(0)->P.
 */
#include "lib/internal.h"

typedef struct mm_attrs {
    bool ta, tb;
    bool bf16;           /* autocast (lib/op/autocast.c) at the forward */
} mm_attrs;

typedef struct lin_attrs {
    bool bf16;
} lin_attrs;

/* How one operand enters GEMM. */
typedef struct gemm_arg {
    mf_tensor *t;        /* the tensor (maybe a contiguous copy) */
    bool trans;          /* pass CblasTrans */
    int64_t ld, bstride;
    const void *data;
} gemm_arg;

static bool batch_collapsible(const mf_tensor *t, int64_t *bstride)
{
    int nb = t->ndim - 2;
    *bstride = 0;
    if (nb <= 0) return true;
    int64_t expect = -1;
    for (int i = nb - 1; i >= 0; i--) {
        if (t->shape[i] == 1) continue;
        if (expect >= 0 && t->stride[i] != expect) return false;
        if (expect < 0) *bstride = t->stride[i];
        expect = t->stride[i] * t->shape[i];
    }
    return true;
}

/* trans: whether op() transposes the operand. */
static mf_status gemm_prepare(mf_tensor *t, bool trans, gemm_arg *g)
{
    int64_t r = t->shape[t->ndim - 2], c = t->shape[t->ndim - 1];
    int64_t sr = t->stride[t->ndim - 2], sc = t->stride[t->ndim - 1];
    int64_t bs;
    g->t = mf_tensor_retain(t);
    if (batch_collapsible(t, &bs)) {
        if ((c <= 1 || sc == 1) && (r <= 1 || sr >= c)) {
            g->trans = trans;
            g->ld = r <= 1 ? (c > 1 ? c : 1) : sr;
            g->bstride = bs;
            g->data = mf_tensor_data(t);
            return MF_OK;
        }
        if ((r <= 1 || sr == 1) && (c <= 1 || sc >= r)) {
            g->trans = !trans;
            g->ld = c <= 1 ? (r > 1 ? r : 1) : sc;
            g->bstride = bs;
            g->data = mf_tensor_data(t);
            return MF_OK;
        }
    }
    mf_tensor_destroy(g->t);
    g->t = mfi_contiguous_raw(t);
    if (!g->t) return mf_last_status();
    g->trans = trans;
    g->ld = c > 1 ? c : 1;
    g->bstride = t->ndim > 2 ? r * c : 0;
    g->data = mf_tensor_data(g->t);
    return MF_OK;
}

static mf_status mm_infer(mfi_call *c, mfi_meta *out)
{
    const mm_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0], *y = &c->in_meta[1];
    char s1[128], s2[128];
    if (x->dtype != y->dtype)
        MF_FAIL(MF_ERR_DTYPE, "mf_matmul: dtypes %s and %s differ", mf_dtype_name(x->dtype), mf_dtype_name(y->dtype));
    if (!mf_dtype_is_float(x->dtype))
        MF_FAIL(MF_ERR_DTYPE, "mf_matmul: dtype %s is not a float dtype", mf_dtype_name(x->dtype));
    if (x->ndim < 2 || y->ndim < 2)
        MF_FAIL(MF_ERR_SHAPE, "mf_matmul: operands %s and %s need at least 2 dims", mfi_meta_str(x, s1, sizeof s1),
                mfi_meta_str(y, s2, sizeof s2));
    int64_t m = x->shape[x->ndim - (a->ta ? 1 : 2)], k1 = x->shape[x->ndim - (a->ta ? 2 : 1)];
    int64_t k2 = y->shape[y->ndim - (a->tb ? 1 : 2)], n = y->shape[y->ndim - (a->tb ? 2 : 1)];
    if (k1 != k2)
        MF_FAIL(MF_ERR_SHAPE, "mf_matmul: a is %s%s but b is %s%s: inner dims differ (%lld vs %lld)",
                mfi_meta_str(x, s1, sizeof s1), a->ta ? " (transposed)" : "", mfi_meta_str(y, s2, sizeof s2),
                a->tb ? " (transposed)" : "", (long long)k1, (long long)k2);
    int bx = x->ndim - 2, by = y->ndim - 2;
    if (bx && by) {
        bool same = bx == by;
        for (int i = 0; same && i < bx; i++) same = x->shape[i] == y->shape[i];
        if (!same)
            MF_FAIL(MF_ERR_SHAPE, "mf_matmul: batch dims of %s and %s differ", mfi_meta_str(x, s1, sizeof s1),
                    mfi_meta_str(y, s2, sizeof s2));
    }
    const mfi_meta *b = bx >= by ? x : y;
    int nb = bx >= by ? bx : by;
    out->dtype = x->dtype;
    out->ndim = nb + 2;
    for (int i = 0; i < nb; i++) out->shape[i] = b->shape[i];
    out->shape[nb] = m;
    out->shape[nb + 1] = n;
    return MF_OK;
}

static mf_status mm_forward(mfi_call *c, mf_tensor **out)
{
    const mm_attrs *a = c->attrs;
    mf_tensor *y = *out;
    gemm_arg A = {0}, B = {0};
    mf_status st = MF_OK;
    /* autocast: the operands' bfloat16 values */
    mf_tensor *ra = a->bf16 ? mfi_bf16_operand(c->in[0], false) : mf_tensor_retain(c->in[0]);
    mf_tensor *rb = a->bf16 ? mfi_bf16_operand(c->in[1], false) : mf_tensor_retain(c->in[1]);
    if (!ra || !rb) MF_TRY_OUT(mf_last_status());
    MF_TRY_OUT(gemm_prepare(ra, a->ta, &A));
    MF_TRY_OUT(gemm_prepare(rb, a->tb, &B));
    const mfi_meta *x = &c->in_meta[0];
    int64_t m = y->shape[y->ndim - 2], n = y->shape[y->ndim - 1];
    int64_t k = x->shape[x->ndim - (a->ta ? 2 : 1)];
    mfi_gemm g = {
        .dtype = y->dtype, .trans_a = A.trans, .trans_b = B.trans, .m = m, .n = n, .k = k,
        .alpha = 1.0, .beta = 0.0,
        .a = A.data, .lda = A.ld, .stride_a = A.bstride,
        .b = B.data, .ldb = B.ld, .stride_b = B.bstride,
        .c = mf_tensor_data(y), .ldc = n > 1 ? n : 1, .stride_c = m * n,
        .batch = mfi_numel(y->ndim - 2, y->shape), .bf16 = a->bf16,
    };
    if (k == 0) {
        MF_TRY_OUT(mf_fill_(y, 0.0));
    } else {
        MFI_KERNEL(st, MF_PROF_GEMM, mfi_backend_of(y), gemm, &g);
        MF_TRY_OUT(st);
    }
    if (c->needs_grad[1]) MF_TRY_OUT(mfi_save(c, c->in[0]));
    if (c->needs_grad[0]) MF_TRY_OUT(mfi_save(c, c->in[1]));
out:
    mf_tensor_destroy(A.t);
    mf_tensor_destroy(B.t);
    mf_tensor_destroy(ra);
    mf_tensor_destroy(rb);
    return st;
}

static mf_status mm_grads(mfi_call *c, mf_tensor *gy, mf_tensor **gx);

/* the gradient GEMMs in the forward's precision */
static mf_status mm_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    int prev = mfi_autocast_push(((const mm_attrs *)c->attrs)->bf16);
    mf_status st = mm_grads(c, gy, gx);
    mfi_autocast_pop(prev);
    return st;
}

static mf_status mm_grads(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const mm_attrs *a = c->attrs;
    int i = 0;
    mf_tensor *A = c->needs_grad[1] ? mfi_saved(c, i++) : NULL;
    mf_tensor *B = c->needs_grad[0] ? mfi_saved(c, i++) : NULL;
    if ((c->needs_grad[1] && !A) || (c->needs_grad[0] && !B)) return mf_last_status();
    if (c->needs_grad[0]) {
        mf_tensor *d = a->ta ? mf_matmul_t(B, gy, a->tb, true) : mf_matmul_t(gy, B, false, !a->tb);
        if (!d) return mf_last_status();
        gx[0] = mfi_sum_to(d, &c->in_meta[0]);
        mf_tensor_destroy(d);
        if (!gx[0]) return mf_last_status();
    }
    if (c->needs_grad[1]) {
        mf_tensor *d = a->tb ? mf_matmul_t(gy, A, true, a->ta) : mf_matmul_t(A, gy, !a->ta, false);
        if (!d) return mf_last_status();
        gx[1] = mfi_sum_to(d, &c->in_meta[1]);
        mf_tensor_destroy(d);
        if (!gx[1]) return mf_last_status();
    }
    return MF_OK;
}

/* doc/design.md section 4's table, with the transposes folded in, plus batch splits */
static int mm_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const mm_attrs *a = c->attrs;
    const mfi_meta *A = &c->in_meta[0], *B = &c->in_meta[1], *o = &c->out_meta;
    int ra = A->ndim - (a->ta ? 1 : 2), ca = A->ndim - (a->ta ? 2 : 1);
    int rb = B->ndim - (a->tb ? 1 : 2), cb = B->ndim - (a->tb ? 2 : 1);
    int n = 0;
    mf_sbp in[2];
    for (int i = 0; i < o->ndim - 2; i++) {   /* batch */
        int ia = i - (o->ndim - A->ndim), ib = i - (o->ndim - B->ndim);
        bool sa = ia >= 0 && A->shape[ia] == o->shape[i], sb = ib >= 0 && B->shape[ib] == o->shape[i];
        if (!sa && !sb) continue;
        in[0] = sa ? mfi_S(ia) : mfi_B();
        in[1] = sb ? mfi_S(ib) : mfi_B();
        n = mfi_sig_add(sigs, n, cap, 2, in, mfi_S(i));
    }
    in[0] = mfi_S(ra), in[1] = mfi_B();
    n = mfi_sig_add(sigs, n, cap, 2, in, mfi_S(o->ndim - 2));
    in[0] = mfi_B(), in[1] = mfi_S(cb);
    n = mfi_sig_add(sigs, n, cap, 2, in, mfi_S(o->ndim - 1));
    in[0] = mfi_S(ca), in[1] = mfi_S(rb);
    n = mfi_sig_add(sigs, n, cap, 2, in, mfi_P());
    in[0] = mfi_P(), in[1] = mfi_B();
    n = mfi_sig_add(sigs, n, cap, 2, in, mfi_P());
    in[0] = mfi_B(), in[1] = mfi_P();
    return mfi_sig_add(sigs, n, cap, 2, in, mfi_P());
}

static const mfi_op mm_op = {"mf_matmul", 0, mm_infer, mm_forward, mm_backward, mm_sbp, NULL};

mf_tensor *mf_matmul_t(mf_tensor *a, mf_tensor *b, bool trans_a, bool trans_b)
{
    if (mfi_check_input("mf_matmul", "a", a) != MF_OK || mfi_check_input("mf_matmul", "b", b) != MF_OK)
        return NULL;
    mm_attrs at = {trans_a, trans_b, mfi_autocast_bf16(a->dtype)};
    mf_tensor *in[2] = {a, b};
    return mfi_apply(&mm_op, 2, in, &at, sizeof at);
}

mf_tensor *mf_matmul(mf_tensor *a, mf_tensor *b)
{
    if (mfi_check_input("mf_matmul", "a", a) != MF_OK || mfi_check_input("mf_matmul", "b", b) != MF_OK)
        return NULL;
    if (a->ndim >= 2 && b->ndim >= 2) return mf_matmul_t(a, b, false, false);
    /* vectors: [K] as [1, K] on the left, [K, 1] on the right */
    mf_tensor *a2 = a->ndim == 1 ? mf_unsqueeze(a, 0) : mf_tensor_retain(a);
    mf_tensor *b2 = b->ndim == 1 ? mf_unsqueeze(b, 1) : mf_tensor_retain(b);
    mf_tensor *y = a2 && b2 ? mf_matmul_t(a2, b2, false, false) : NULL;
    mf_tensor *r = y;
    if (y && b->ndim == 1) {
        r = mf_squeeze(y, -1);
        mf_tensor_destroy(y);
        y = r;
    }
    if (y && a->ndim == 1) {
        r = mf_squeeze(y, -2 + (b->ndim == 1 ? 1 : 0));
        mf_tensor_destroy(y);
    }
    mf_tensor_destroy(a2);
    mf_tensor_destroy(b2);
    return r;
}

/* ---------------------------------------------------------------- linear */
static mf_status lin_infer(mfi_call *c, mfi_meta *out)
{
    const mfi_meta *x = &c->in_meta[0], *w = &c->in_meta[1], *b = &c->in_meta[2];
    char s1[128], s2[128];
    if (x->dtype != w->dtype || (b->ndim >= 0 && b->dtype != x->dtype))
        MF_FAIL(MF_ERR_DTYPE, "mf_linear: x is %s but weight is %s", mf_dtype_name(x->dtype), mf_dtype_name(w->dtype));
    if (!mf_dtype_is_float(x->dtype)) MF_FAIL(MF_ERR_DTYPE, "mf_linear: x is not a float tensor");
    if (w->ndim < 2 || x->ndim + w->ndim - 2 > MF_MAX_DIMS)
        MF_FAIL(MF_ERR_SHAPE, "mf_linear: weight %s must be [out, in] or [out0, ..., in]", mfi_meta_str(w, s1, sizeof s1));
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[w->ndim - 1])
        MF_FAIL(MF_ERR_SHAPE, "mf_linear: x is %s but weight is %s: inner dims differ",
                mfi_meta_str(x, s1, sizeof s1), mfi_meta_str(w, s2, sizeof s2));
    bool bias_ok = b->ndim < 0 || b->ndim == w->ndim - 1;
    for (int i = 0; bias_ok && b->ndim > 0 && i < b->ndim; i++) bias_ok = b->shape[i] == w->shape[i];
    if (!bias_ok)
        MF_FAIL(MF_ERR_SHAPE, "mf_linear: bias %s does not match weight %s", mfi_meta_str(b, s1, sizeof s1),
                mfi_meta_str(w, s2, sizeof s2));
    *out = *x;
    out->ndim = x->ndim - 1;
    for (int i = 0; i < w->ndim - 1; i++) out->shape[out->ndim++] = w->shape[i];
    return MF_OK;
}

/* a contiguous N-D weight (bias) as [out, in] ([out]): a view */
static mf_tensor *flat_weight(mf_tensor *t, bool bias)
{
    int64_t in = bias ? 1 : t->shape[t->ndim - 1], outf = in ? mf_tensor_numel(t) / in : 0;
    if (t->ndim == (bias ? 1 : 2)) return mf_tensor_retain(t);
    if (!in) outf = mfi_numel(t->ndim - 1, t->shape);
    mf_tensor *c = mfi_contiguous_raw(t), *v = c ? mf_reshape(c, bias ? 1 : 2, (const int64_t[]){outf, in}) : NULL;
    mf_tensor_destroy(c);
    return v;
}

static mf_status lin_forward(mfi_call *c, mf_tensor **out)
{
    const lin_attrs *la = c->attrs;
    mf_tensor *y = *out, *x = c->in[0], *w = c->in[1], *b = c->in[2];
    int64_t in = w->shape[w->ndim - 1], outf = mfi_numel(w->ndim - 1, w->shape), rows = mfi_numel(x->ndim - 1, x->shape);
    gemm_arg X = {0}, W = {0};
    mf_status st = MF_OK;
    mf_tensor *br = NULL, *wf = flat_weight(w, false), *bf = b ? flat_weight(b, true) : NULL, *xi = NULL, *wi = NULL;
    /* x as [rows, in]: contiguous (under autocast, its bfloat16 values) */
    mf_tensor *xc = la->bf16 ? mfi_bf16_operand(x, true) : mfi_contiguous_raw(x);
    mf_tensor *wr = !wf ? NULL : la->bf16 ? mfi_bf16_operand(wf, false) : mf_tensor_retain(wf);
    if (!xc || !wr || (b && !bf)) MF_TRY_OUT(mf_last_status());
    b = bf;
    MF_TRY_OUT(gemm_prepare(wr, true, &W));
    const mfi_backend *be = mfi_backend_of(y);
    br = b && la->bf16 ? mfi_bf16_copy(b) : NULL;   /* PyTorch's autocast casts the bias too */
    if (b && la->bf16 && !br) MF_TRY_OUT(mf_last_status());
    if (br) b = br;
    /* the bias: added by the GEMM where the backend can, else written
     * into y first for a GEMM that adds to it */
    const void *bias = b && in > 0 && be->gemm_bias && (outf == 1 || b->stride[0] == 1) ? mf_tensor_data(b) : NULL;
    if (b && !bias) {
        int64_t shp[2] = {rows, outf};
        mfi_view o = mfi_view_as(y, 2, shp), bv = mfi_view_of(b);
        bv.ndim = 2;
        bv.shape[0] = rows;
        bv.shape[1] = outf;
        bv.stride[1] = b->stride[0];
        bv.stride[0] = 0;
        MFI_KERNEL(st, MF_PROF_ELEMENTWISE, be, copy, &o, &bv);
        MF_TRY_OUT(st);
    }
    /* bfloat16 images of x and the weight, made once and kept for the
     * backward (lib/op/autocast.c): only of the tensors it saves */
    if (la->bf16 && xc == x && W.t->storage == w->storage && mf_tensor_is_contiguous(w)) {
        xi = mfi_bf16_image(xc, MF_PROF_GEMM);
        wi = xi ? mfi_bf16_image(W.t, MF_PROF_GEMM) : NULL;
    }
    mfi_gemm g = {
        .dtype = y->dtype, .trans_a = false, .trans_b = W.trans, .m = rows, .n = outf, .k = in,
        .alpha = 1.0, .beta = b && !bias ? 1.0 : 0.0, .bias = bias,
        .a = mf_tensor_data(xc), .lda = in > 1 ? in : 1,
        .b = W.data, .ldb = W.ld,
        .c = mf_tensor_data(y), .ldc = outf > 1 ? outf : 1, .batch = 1, .bf16 = la->bf16,
        .a16 = xi ? mf_tensor_data(xi) : NULL, .b16 = wi ? mf_tensor_data(wi) : NULL,
    };
    if (in == 0 && !b) {
        MF_TRY_OUT(mf_fill_(y, 0.0));
    } else if (in > 0) {
        MFI_KERNEL(st, MF_PROF_GEMM, be, gemm, &g);
        MF_TRY_OUT(st);
    }
    if (c->needs_grad[1]) MF_TRY_OUT(mfi_save(c, x));
    if (c->needs_grad[0]) MF_TRY_OUT(mfi_save(c, w));
    /* the images too, in the same order, when there are both; not for a
     * weight whose bytes are made again for the backward (none kept) */
    if (wi && !mfi_rebuilds(w)) {
        if (c->needs_grad[1]) MF_TRY_OUT(mfi_save(c, xi));
        if (c->needs_grad[0]) MF_TRY_OUT(mfi_save(c, wi));
    }
out:
    mf_tensor_destroy(xi);
    mf_tensor_destroy(wi);
    mf_tensor_destroy(xc);
    mf_tensor_destroy(wr);
    mf_tensor_destroy(wf);
    mf_tensor_destroy(bf);
    mf_tensor_destroy(br);
    mf_tensor_destroy(X.t);
    mf_tensor_destroy(W.t);
    return st;
}

static mf_status lin_grads(mfi_call *c, mf_tensor *gy, mf_tensor **gx);

/* One GEMM into a new [m, n] tensor on gy's device, counted like the
 * forward's. */
static mf_tensor *gemm_new(mf_tensor *like, mfi_gemm *g)
{
    mf_tensor *o = mfi_tensor_new_on(mf_tensor_device(like), MF_F32, 2, (const int64_t[]){g->m, g->n});
    if (!o) return NULL;
    g->c = mf_tensor_data(o);
    g->ldc = g->n > 1 ? g->n : 1;
    g->batch = 1;
    mf_status st;
    MFI_KERNEL(st, MF_PROF_GEMM, mfi_backend_of(o), gemm, g);
    if (st != MF_OK) {
        mf_tensor_destroy(o);
        return NULL;
    }
    return o;
}

/* gx = gy W and gW = gy^T x on the forward's images of x and W and one
 * image gi of the contiguous gradient gc (the f32 operands stay for a
 * kernel that converts them itself) */
static mf_status lin_grads_images(mfi_call *c, mf_tensor *gc, mf_tensor *gi, mf_tensor *x, mf_tensor *xi, mf_tensor *w,
                                  mf_tensor *wi, mf_tensor **gx)
{
    const mfi_meta *xm = &c->in_meta[0], *wm = &c->in_meta[1];
    int64_t in = wm->shape[wm->ndim - 1], outf = mfi_numel(wm->ndim - 1, wm->shape), rows = gc->shape[0];
    if (c->needs_grad[0]) {
        mfi_gemm g = {.dtype = MF_F32, .m = rows, .n = in, .k = outf, .alpha = 1.0,
                      .a = mf_tensor_data(gc), .lda = outf > 1 ? outf : 1, .b = mf_tensor_data(w), .ldb = in > 1 ? in : 1,
                      .bf16 = true, .a16 = mf_tensor_data(gi), .b16 = mf_tensor_data(wi)};
        mf_tensor *d = gemm_new(gc, &g);
        gx[0] = d ? mf_reshape(d, xm->ndim, xm->shape) : NULL;
        mf_tensor_destroy(d);
        if (!gx[0]) return mf_last_status();
    }
    if (c->needs_grad[1]) {
        mfi_gemm g = {.dtype = MF_F32, .trans_a = true, .m = outf, .n = in, .k = rows, .alpha = 1.0,
                      .a = mf_tensor_data(gc), .lda = outf > 1 ? outf : 1, .b = mf_tensor_data(x), .ldb = in > 1 ? in : 1,
                      .bf16 = true, .a16 = mf_tensor_data(gi), .b16 = mf_tensor_data(xi)};
        mf_tensor *d = gemm_new(gc, &g);
        gx[1] = d ? mf_reshape(d, wm->ndim, wm->shape) : NULL;
        mf_tensor_destroy(d);
        if (!gx[1]) return mf_last_status();
    }
    return MF_OK;
}

static mf_status lin_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    int prev = mfi_autocast_push(((const lin_attrs *)c->attrs)->bf16);
    mf_status st = lin_grads(c, gy, gx);
    mfi_autocast_pop(prev);
    return st;
}

static mf_status lin_grads(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const mfi_meta *xm = &c->in_meta[0], *wm = &c->in_meta[1];
    int64_t in = wm->shape[wm->ndim - 1], outf = mfi_numel(wm->ndim - 1, wm->shape), rows = mfi_numel(xm->ndim - 1, xm->shape);
    int64_t s2[2] = {rows, outf};
    mf_status st = MF_OK;
    int si = 0;
    mf_tensor *x = c->needs_grad[1] ? mfi_saved(c, si++) : NULL;
    mf_tensor *w = c->needs_grad[0] ? mfi_saved(c, si++) : NULL;
    if ((c->needs_grad[1] && !x) || (c->needs_grad[0] && !w)) return mf_last_status();
    mf_tensor *g2 = mf_reshape(gy, 2, s2), *x2 = NULL, *d = NULL, *w2 = NULL, *p = NULL;
    if (!g2) return mf_last_status();
    if (c->n_saved == 2 * si && si > 0) {   /* the forward kept bfloat16 images */
        mf_tensor *xi = c->needs_grad[1] ? mfi_saved(c, si) : NULL;
        mf_tensor *wi = c->needs_grad[0] ? mfi_saved(c, 2 * si - 1) : NULL;
        if ((c->needs_grad[1] && !xi) || (c->needs_grad[0] && !wi)) MF_TRY_OUT(mf_last_status());
        mf_tensor *gc = mfi_contiguous_raw(g2);
        if (!gc) MF_TRY_OUT(mf_last_status());
        mf_tensor *gi = mfi_bf16_image(gc, MF_PROF_GEMM);
        if (gi) st = lin_grads_images(c, gc, gi, x, xi, w, wi, gx);
        mf_tensor_destroy(gi);
        mf_tensor_destroy(gc);
        MF_TRY_OUT(st);
        if (gi) goto bias;
    }
    if (c->needs_grad[0]) {            /* gx = gy W */
        w2 = flat_weight(w, false);
        d = w2 ? mf_matmul_t(g2, w2, false, false) : NULL;
        if (!d) MF_TRY_OUT(mf_last_status());
        gx[0] = mf_reshape(d, xm->ndim, xm->shape);
        if (!gx[0]) MF_TRY_OUT(mf_last_status());
    }
    if (c->needs_grad[1]) {            /* gW = gy^T x */
        int64_t xs[2] = {rows, in};
        x2 = mf_reshape(x, 2, xs);
        p = x2 ? mf_matmul_t(g2, x2, true, false) : NULL;
        gx[1] = p ? mf_reshape(p, wm->ndim, wm->shape) : NULL;
        if (!gx[1]) MF_TRY_OUT(mf_last_status());
    }
bias:
    if (c->n_in > 2 && c->needs_grad[2]) {   /* gb = sum of gy over rows */
        int ax = 0;
        mf_tensor *r = mfi_reduce(MFI_RED_SUM, g2, 1, &ax, false);
        gx[2] = r ? mf_reshape(r, wm->ndim - 1, wm->shape) : NULL;
        mf_tensor_destroy(r);
        if (!gx[2]) MF_TRY_OUT(mf_last_status());
    }
out:
    mf_tensor_destroy(g2);
    mf_tensor_destroy(x2);
    mf_tensor_destroy(d);
    mf_tensor_destroy(w2);
    mf_tensor_destroy(p);
    return st;
}

/* data parallel on any batch axis; column parallel (weight S(j) on an
 * output axis: the output's axis for it); row parallel (x S(last),
 * weight S(last), bias added once as P); P through */
static int lin_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    int xl = c->in_meta[0].ndim, wl = c->in_meta[1].ndim, n = 0;
    mf_sbp in[3];
    for (int i = 0; i < xl - 1; i++) {
        in[0] = mfi_S(i), in[1] = mfi_B(), in[2] = mfi_B();
        n = mfi_sig_add(sigs, n, cap, 3, in, mfi_S(i));
    }
    for (int j = 0; j < wl - 1; j++) {
        in[0] = mfi_B(), in[1] = mfi_S(j), in[2] = mfi_S(j);
        n = mfi_sig_add(sigs, n, cap, 3, in, mfi_S(xl - 1 + j));
    }
    in[0] = mfi_S(xl - 1), in[1] = mfi_S(wl - 1), in[2] = mfi_P();
    n = mfi_sig_add(sigs, n, cap, 3, in, mfi_P());
    in[0] = mfi_P(), in[1] = mfi_B(), in[2] = mfi_P();
    return mfi_sig_add(sigs, n, cap, 3, in, mfi_P());
}

static const mfi_op lin_op = {"mf_linear", 0, lin_infer, lin_forward, lin_backward, lin_sbp, NULL};

mf_tensor *mf_linear(mf_tensor *x, mf_tensor *weight, mf_tensor *bias)
{
    if (mfi_check_input("mf_linear", "x", x) != MF_OK || mfi_check_input("mf_linear", "weight", weight) != MF_OK)
        return NULL;
    mf_tensor *in[3] = {x, weight, bias};
    lin_attrs at = {mfi_autocast_bf16(x->dtype)};
    return mfi_apply(&lin_op, 3, in, &at, sizeof at);
}
