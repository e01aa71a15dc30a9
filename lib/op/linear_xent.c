/*
 * lib/op/linear_xent.c - a language model's head and loss in one op:
 *   loss = cross_entropy(x weight^T, target),
 * x [N, C], weight [V, C] (the tied token embedding of GPT), target [N].
 *
 * Over a large vocabulary the logits are the biggest tensor of a step
 * (GPT-2 at 4 x 1024 tokens: 4096 x 50257 floats, 0.8 GB). The unfused
 * head keeps the logits, the log-probabilities for backward and, in
 * backward, the gradient: three such copies. Here the rows go through in
 * chunks: each chunk's logits are made, turned into log-probabilities,
 * losses and, when backward will run, into the gradient of the logits
 * for a unit upstream gradient (softmax - onehot), which is the one
 * [N, V] tensor kept. Backward scales it by the upstream gradient and
 * makes the two products, dx = g dlogits weight and dweight = (g
 * dlogits)^T x. So one copy instead of three, and no logits are
 * recomputed (the scheme of llm.c's fused classifier).
 *
 * SBP: rows split (x and target S(0), weight B): the loss is partial
 * per rank, as mf_cross_entropy. Or the vocabulary split (weight S(0),
 * x and target B: Megatron-LM's vocabulary-parallel cross-entropy):
 * each rank makes the logits of its rows of the vocabulary only; the
 * row maxima are gathered (N values per rank) and the sums of exp
 * summed (N values), so each rank knows every row's log-sum-exp
 * without any rank holding all logits. The loss is then P: the rank
 * that holds a row's target subtracts its logit, the first rank adds
 * the log-sum-exp. Its backward communicates nothing: dx is partial, as
 * x is B, and each rank's weight gradient is its own rows'.
 */
#include <math.h>
#include "lib/global/global_internal.h"

enum { CHUNK_BYTES = 32 << 20 };   /* logits of one chunk, and as much again for its log-probabilities */

typedef struct lx_attrs {
    mf_reduction r;
    int64_t count;    /* mean: the divisor; 0 = N here */
    /* the vocabulary split over a mesh dimension (lx_localize) */
    mfi_comm *vcomm;  /* the ranks that share the rows; NULL: all rows here */
    int64_t vfirst;   /* this rank's first row of the vocabulary */
    int vroot;        /* this rank adds the log-sum-exp terms */
    int vdims;        /* mesh dimensions the vocabulary is split over (> 1: refused) */
} lx_attrs;

static mf_status lx_infer(mfi_call *c, mfi_meta *out)
{
    const lx_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0], *w = &c->in_meta[1], *t = &c->in_meta[2];
    char s1[128], s2[128];
    if (!mf_dtype_is_float(x->dtype) || w->dtype != x->dtype)
        MF_FAIL(MF_ERR_DTYPE, "mf_linear_cross_entropy: x is %s and weight %s: both must be the same float dtype",
                mf_dtype_name(x->dtype), mf_dtype_name(w->dtype));
    if (x->ndim != 2 || w->ndim != 2 || w->shape[1] != x->shape[1])
        MF_FAIL(MF_ERR_SHAPE, "mf_linear_cross_entropy: x %s and weight %s: need x [N, C] and weight [V, C]",
                mfi_meta_str(x, s1, sizeof s1), mfi_meta_str(w, s2, sizeof s2));
    if (t->dtype != MF_I32 && t->dtype != MF_I64)
        MF_FAIL(MF_ERR_DTYPE, "mf_linear_cross_entropy: target is %s; class indices must be i32 or i64",
                mf_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != x->shape[0])
        MF_FAIL(MF_ERR_SHAPE, "mf_linear_cross_entropy: x is %s but target is %s: need target [N]",
                mfi_meta_str(x, s1, sizeof s1), mfi_meta_str(t, s2, sizeof s2));
    out->dtype = x->dtype;
    out->ndim = a->r == MF_REDUCTION_NONE ? 1 : 0;
    out->shape[0] = x->shape[0];
    return MF_OK;
}

/* rows [r0, r0+n) of a 2-D contiguous tensor as a view */
static mfi_view rows_view(const mf_tensor *t, int64_t r0, int64_t n)
{
    mfi_view v = mfi_view_of(t);
    v.data = (char *)v.data + (size_t)(r0 * t->shape[1]) * mf_dtype_size(t->dtype);
    v.shape[0] = n;
    return v;
}

/* the vocabulary-parallel forward (see the top of this file) */
static mf_status lx_forward_vocab(mfi_call *c, mf_tensor *x, mf_tensor *w, mf_tensor *t, mf_tensor *out)
{
    const lx_attrs *a = c->attrs;
    const int64_t N = x->shape[0], V = w->shape[0];
    const int n = mfi_comm_size_of(a->vcomm);
    int ax1 = 1, ax0 = 0;
    mf_status st = MF_OK;
    int64_t *cnt = malloc((size_t)n * sizeof *cnt);
    mf_tensor *z = mf_matmul_t(x, w, false, true), *m = z ? mfi_reduce(MFI_RED_MAX, z, 1, &ax1, false) : NULL;
    mf_tensor *all = m ? mfi_tensor_new(x->dtype, 2, (const int64_t[]){n, N}) : NULL, *gm = NULL, *gm1 = NULL;
    mf_tensor *e = NULL, *sum = NULL, *lse = NULL, *safe = NULL, *mask = NULL, *ar = NULL, *oh = NULL, *zt = NULL;
    mf_tensor *per = NULL, *tmp = NULL;
    if (!cnt || !all) MF_TRY_OUT(cnt ? mf_last_status() : MF_ERR_NOMEM);
    for (int i = 0; i < n; i++) cnt[i] = N;
    MF_TRY_OUT(mfi_allgather(a->vcomm, mf_tensor_data(m), mf_tensor_data(all), cnt, x->dtype));
    gm = mfi_reduce(MFI_RED_MAX, all, 1, &ax0, false);       /* every row's maximum */
    gm1 = gm ? mf_unsqueeze(gm, 1) : NULL;
    tmp = gm1 ? mf_sub(z, gm1) : NULL;
    e = tmp ? mf_exp(tmp) : NULL;
    sum = e ? mfi_reduce(MFI_RED_SUM, e, 1, &ax1, false) : NULL;
    if (!sum) MF_TRY_OUT(mf_last_status());
    MF_TRY_OUT(mfi_allreduce(a->vcomm, mf_tensor_data(sum), mf_tensor_data(sum), N, x->dtype));
    mf_tensor_destroy(tmp);
    tmp = mf_log(sum);
    lse = tmp ? mf_add(tmp, gm) : NULL;
    /* the target's logit, on the rank that holds its row */
    if (!lse || mfi_local_rows(t, a->vfirst, V, x->dtype, &safe, &mask) != MF_OK) MF_TRY_OUT(mf_last_status());
    mf_tensor_destroy(tmp);
    tmp = mf_arange(t->dtype, V);
    if (tmp && mf_tensor_device(t) != MF_DEV_CPU) {
        ar = mf_to_device(tmp, mf_tensor_device(t));
        mf_tensor_destroy(tmp);
        tmp = ar;
        ar = NULL;
    }
    mf_tensor *s1 = tmp ? mf_unsqueeze(safe, 1) : NULL, *eq = s1 ? mf_eq(s1, tmp) : NULL;
    ar = eq ? mf_cast(eq, x->dtype) : NULL;
    mf_tensor_destroy(s1);
    mf_tensor_destroy(eq);
    oh = ar ? mf_mul(ar, mask) : NULL;                         /* one-hot of the local targets */
    mf_tensor_destroy(tmp);
    tmp = oh ? mf_mul(z, oh) : NULL;
    zt = tmp ? mfi_reduce(MFI_RED_SUM, tmp, 1, &ax1, false) : NULL;
    per = zt ? (a->vroot ? mf_sub(lse, zt) : mf_neg(zt)) : NULL;
    if (!per) MF_TRY_OUT(mf_last_status());
    if (a->r == MF_REDUCTION_NONE) {
        MF_TRY_OUT(mf_copy_(out, per));
    } else {
        mf_tensor_destroy(tmp);
        tmp = mf_sum_all(per);
        mf_tensor *sc = tmp && a->r == MF_REDUCTION_MEAN ? mf_scale(tmp, a->count ? 1.0 / (double)a->count : NAN)
                                                         : mf_tensor_retain(tmp);
        st = sc ? mf_copy_(out, sc) : mf_last_status();
        mf_tensor_destroy(sc);
        MF_TRY_OUT(st);
    }
    if (c->recording) {   /* softmax - onehot, for a unit upstream gradient */
        mf_tensor *s2 = mf_unsqueeze(sum, 1), *p = s2 ? mf_div(e, s2) : NULL, *d = p ? mf_sub(p, oh) : NULL;
        mf_tensor_destroy(s2);
        mf_tensor_destroy(p);
        if (!d) MF_TRY_OUT(mf_last_status());
        st = mfi_save(c, x);
        if (st == MF_OK) st = mfi_save(c, w);
        if (st == MF_OK) st = mfi_save(c, d);
        mf_tensor_destroy(d);
        MF_TRY_OUT(st);
    }
out:
    free(cnt);
    mf_tensor *all_t[] = {z, m, all, gm, gm1, e, sum, lse, safe, mask, ar, oh, zt, per, tmp};
    for (size_t i = 0; i < sizeof all_t / sizeof *all_t; i++) mf_tensor_destroy(all_t[i]);
    return st;
}

static mf_status lx_forward_(mfi_call *c, mf_tensor **out)
{
    const lx_attrs *a = c->attrs;
    mf_tensor *x = mfi_contiguous_raw(c->in[0]), *w = mfi_contiguous_raw(c->in[1]), *t = mfi_contiguous_raw(c->in[2]);
    mf_tensor *per = NULL, *logits = NULL, *logp = NULL, *dlogits = NULL, *ones = NULL;
    mf_status st = MF_OK;
    if (!x || !w || !t) MF_TRY_OUT(mf_last_status());
    if (a->vdims > 1)
        MF_FAIL_OUT(MF_ERR_ARG, "mf_linear_cross_entropy: the weight's rows are split over %d mesh dimensions; "
                    "split the vocabulary over one", a->vdims);
    if (a->vcomm) {
        st = lx_forward_vocab(c, x, w, t, *out);
        goto out;
    }
    const int64_t N = x->shape[0], C = x->shape[1], V = w->shape[0];
    const size_t es = mf_dtype_size(x->dtype);
    int64_t rows = V ? (int64_t)(CHUNK_BYTES / ((size_t)V * es)) : N;
    if (rows < 1) rows = 1;
    if (rows > N) rows = N;
    const mfi_backend *be = mfi_backend_of(x);
    per = a->r == MF_REDUCTION_NONE ? mf_tensor_retain(*out) : mfi_tensor_new(x->dtype, 1, &N);
    logits = mfi_tensor_new(x->dtype, 2, (const int64_t[]){rows, V});
    logp = mfi_tensor_new(x->dtype, 2, (const int64_t[]){rows, V});
    if (c->recording) {
        dlogits = mfi_tensor_new(x->dtype, 2, (const int64_t[]){N, V});
        ones = mfi_tensor_new(x->dtype, 1, &rows);
    }
    if (!per || !logits || !logp || (c->recording && (!dlogits || !ones))) MF_TRY_OUT(mf_last_status());
    if (ones) {
        mfi_view vo = mfi_view_of(ones);
        MFI_KERNEL(st, MF_PROF_OTHER, be, fill, &vo, 1.0);
        MF_TRY_OUT(st);
    }
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        const int64_t n = N - r0 < rows ? N - r0 : rows;
        mfi_view vx = rows_view(x, r0, n), vl = rows_view(logits, 0, n), vp = rows_view(logp, 0, n);
        mfi_gemm g = {.dtype = x->dtype, .trans_b = true, .m = n, .n = V, .k = C, .alpha = 1.0, .beta = 0.0,
                      .a = vx.data, .lda = C, .b = mf_tensor_data(w), .ldb = C,
                      .c = vl.data, .ldc = V, .batch = 1};
        MFI_KERNEL(st, MF_PROF_GEMM, be, gemm, &g);
        MF_TRY_OUT(st);
        MFI_KERNEL(st, MF_PROF_REDUCE, be, softmax_fwd, true, &vp, &vl, 1);
        MF_TRY_OUT(st);
        mfi_view vper = mfi_view_of(per), vt = mfi_view_of(t);
        vper.data = (char *)vper.data + (size_t)r0 * es;
        vper.shape[0] = n;
        vt.data = (char *)vt.data + (size_t)r0 * mf_dtype_size(t->dtype);
        vt.shape[0] = n;
        MFI_KERNEL(st, MF_PROF_REDUCE, be, nll_fwd, &vper, &vp, &vt);
        if (st != MF_OK) MF_TRY_OUT(mfi_error_context("mf_linear_cross_entropy"));
        if (dlogits) {
            mfi_view vd = rows_view(dlogits, r0, n), vone = mfi_view_of(ones);
            vone.shape[0] = n;
            MFI_KERNEL(st, MF_PROF_REDUCE, be, xent_bwd, &vd, &vone, &vp, &vt);
            MF_TRY_OUT(st);
        }
    }
    if (a->r != MF_REDUCTION_NONE) {
        mfi_view vo = mfi_view_of(*out), vper = mfi_view_of(per);
        vo.ndim = 1;
        vo.shape[0] = 1;
        vo.stride[0] = 1;
        MFI_KERNEL(st, MF_PROF_REDUCE, be, reduce, MFI_RED_SUM, &vo, &vper);
        MF_TRY_OUT(st);
        if (a->r == MF_REDUCTION_MEAN)
            MFI_KERNEL(st, MF_PROF_REDUCE, be, unary_fwd, MFI_UN_SCALE, &vo, &vo,
                       a->count ? 1.0 / (double)a->count : N ? 1.0 / (double)N : NAN);
        MF_TRY_OUT(st);
    }
    if (dlogits) {
        MF_TRY_OUT(mfi_save(c, x));
        MF_TRY_OUT(mfi_save(c, w));
        MF_TRY_OUT(mfi_save(c, dlogits));
    }
out:
    mf_tensor_destroy(x);
    mf_tensor_destroy(w);
    mf_tensor_destroy(t);
    mf_tensor_destroy(per);
    mf_tensor_destroy(logits);
    mf_tensor_destroy(logp);
    mf_tensor_destroy(dlogits);
    mf_tensor_destroy(ones);
    return st;
}

/* its logits chunks and the saved gradient of the logits: the head's
 * memory (MF_MEM_LOGITS) */
static mf_status lx_forward(mfi_call *c, mf_tensor **out)
{
    mf_memory_use was = mf_memory_use_begin(MF_MEM_LOGITS);
    mf_status st = lx_forward_(c, out);
    mf_memory_use_begin(was);
    return st;
}

static mf_status lx_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const lx_attrs *a = c->attrs;
    mf_tensor *x = mfi_saved(c, 0), *w = mfi_saved(c, 1), *d = mfi_saved(c, 2);
    if (!x || !w || !d) return mf_last_status();
    const int64_t N = x->shape[0];
    mf_tensor *g = NULL, *dg = NULL;   /* the per-row or overall scale, and dlogits scaled by it */
    if (a->r == MF_REDUCTION_NONE) {
        g = mf_unsqueeze(gy, 1);
        mf_memory_use was = mf_memory_use_begin(MF_MEM_LOGITS);
        dg = g ? mf_mul(d, g) : NULL;
        mf_memory_use_begin(was);
    } else {
        int64_t cnt = a->count ? a->count : N;
        g = a->r == MF_REDUCTION_MEAN ? mf_scale(gy, cnt ? 1.0 / (double)cnt : 0.0) : mf_tensor_retain(gy);
        dg = g ? mf_tensor_retain(d) : NULL;   /* the scalar goes on the two products, which are smaller */
    }
    mf_status st = MF_OK;
    if (!dg) MF_TRY_OUT(mf_last_status());
    for (int i = 0; i < 2; i++) {
        if (!c->needs_grad[i]) continue;
        mf_tensor *p = i == 0 ? mf_matmul(dg, w) : mf_matmul_t(dg, x, true, false);
        mf_tensor *s = p && a->r != MF_REDUCTION_NONE ? mf_mul(p, g) : p ? mf_tensor_retain(p) : NULL;
        mf_tensor_destroy(p);
        if (!s) MF_TRY_OUT(mf_last_status());
        gx[i] = s;
    }
out:
    mf_tensor_destroy(g);
    mf_tensor_destroy(dg);
    return st;
}

/* rows split: the reduced loss is then the sum of per-rank partials;
 * or the vocabulary split, the loss partial too */
static int lx_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const lx_attrs *a = c->attrs;
    mf_sbp in[3] = {mfi_S(0), mfi_B(), mfi_S(0)};
    int n = mfi_sig_add(sigs, 0, cap, 3, in, a->r == MF_REDUCTION_NONE ? mfi_S(0) : mfi_P());
    in[0] = mfi_B(), in[1] = mfi_S(0), in[2] = mfi_B();
    return mfi_sig_add(sigs, n, cap, 3, in, mfi_P());
}

static void lx_localize(const mfi_call *c, void *attrs, const mfi_box *ob)
{
    lx_attrs *a = attrs;
    const mf_placement *p = c->placement;
    (void)ob;
    a->count = c->in_meta[0].shape[0];
    for (int d = 0; d < p->mesh_ndim; d++) {
        mf_sbp s = c->in_sbp[1].d[d];
        if (s.kind != MF_SBP_S || s.axis != 0 || p->mesh[d] == 1) continue;
        a->vdims++;
        a->vcomm = p->dim_comm[d];
        a->vroot = p->coord[d] == 0;
    }
    if (a->vcomm) {
        mfi_box wb;
        mfi_region(&c->in_meta[1], &c->in_sbp[1], p, p->coord, &wb);
        a->vfirst = wb.start[0];
    }
}

static const mfi_op lx_op = {"mf_linear_cross_entropy", 0, lx_infer, lx_forward, lx_backward, lx_sbp, lx_localize};

mf_tensor *mf_linear_cross_entropy(mf_tensor *x, mf_tensor *weight, mf_tensor *target, mf_reduction r)
{
    const char *fn = "mf_linear_cross_entropy";
    if (mfi_check_input(fn, "x", x) != MF_OK || mfi_check_input(fn, "weight", weight) != MF_OK ||
        mfi_check_input(fn, "target", target) != MF_OK)
        return NULL;
    if ((unsigned)r > MF_REDUCTION_NONE) {
        mfi_error(MF_ERR_ARG, "%s: unknown reduction %d", fn, (int)r);
        return NULL;
    }
    lx_attrs a = {r, 0, NULL, 0, 0, 0};
    mf_tensor *in[3] = {x, weight, target};
    return mfi_apply(&lx_op, 3, in, &a, sizeof a);
}
