/*
 * lib/op/attention.c - fused causal self-attention:
 *   out = softmax(q k^T / sqrt(D), masked to keys j <= i) v,
 * on q, k, v [B, H, T, D], as PyTorch's scaled_dot_product_attention
 * with is_causal=True.
 *
 * The kernel works in tiles with an online softmax (flash attention), so
 * no [T, T] matrix exists: forward saves the output and one log-sum-exp
 * per row, and backward recomputes the weights tile by tile from them.
 * q, k and v may be strided views (the heads of one fused qkv
 * projection) as long as their last dim is contiguous.
 *
 * SBP: split over the batch (S(0)) or over the heads (S(1), Megatron's
 * tensor-parallel attention); each piece is independent.
 *
 * mf_causal_self_attention takes GPT's fused projection qkv [B, T, 3C]
 * as it comes and gives [B, T, C] as the output projection wants it:
 * the kernel reads and writes the heads in place through strides, so no
 * head is copied out or back, forward or backward.
 */
#include <math.h>
#include "lib/internal.h"

static mf_status at_infer(mfi_call *c, mfi_meta *out)
{
    const mfi_meta *q = &c->in_meta[0];
    char a[128], b[128];
    if (!mf_dtype_is_float(q->dtype))
        MF_FAIL(MF_ERR_DTYPE, "mf_causal_attention: q is %s, not a float dtype", mf_dtype_name(q->dtype));
    if (q->ndim != 4) MF_FAIL(MF_ERR_SHAPE, "mf_causal_attention: q %s is not [B, H, T, D]", mfi_meta_str(q, a, sizeof a));
    for (int i = 1; i < 3; i++) {
        const mfi_meta *m = &c->in_meta[i];
        bool same = m->ndim == 4 && m->dtype == q->dtype && !memcmp(m->shape, q->shape, 4 * sizeof *q->shape);
        if (!same)
            MF_FAIL(MF_ERR_SHAPE, "mf_causal_attention: %s %s does not match q %s", i == 1 ? "k" : "v",
                    mfi_meta_str(m, a, sizeof a), mfi_meta_str(q, b, sizeof b));
    }
    *out = *q;
    return MF_OK;
}

/* t itself when its last dim is contiguous, else a contiguous copy */
static mf_tensor *rows_contiguous(mf_tensor *t)
{
    if (t->shape[3] <= 1 || t->stride[3] == 1) return mf_tensor_retain(t);
    return mfi_contiguous_raw(t);
}

static mfi_attn params_of(const mfi_meta *q)
{
    return (mfi_attn){q->shape[0], q->shape[1], q->shape[2], q->shape[3], q->shape[3] ? 1.0 / sqrt((double)q->shape[3]) : 1.0};
}

static mf_status at_forward(mfi_call *c, mf_tensor **out)
{
    mfi_attn p = params_of(&c->in_meta[0]);
    mf_tensor *in[3] = {NULL, NULL, NULL}, *lse = NULL;
    mf_status st = MF_OK;
    for (int i = 0; i < 3; i++)
        if (!(in[i] = rows_contiguous(c->in[i]))) MF_TRY_OUT(mf_last_status());
    lse = mfi_tensor_new(c->in_meta[0].dtype, 3, c->in_meta[0].shape);
    if (!lse) MF_TRY_OUT(mf_last_status());
    mfi_view vo = mfi_view_of(*out), vl = mfi_view_of(lse), vq = mfi_view_of(in[0]), vk = mfi_view_of(in[1]),
             vv = mfi_view_of(in[2]);
    MFI_KERNEL(st, MF_PROF_ATTENTION, mfi_backend_of(in[0]), attention_fwd, &p, &vo, &vl, &vq, &vk, &vv);
    MF_TRY_OUT(st);
    for (int i = 0; i < 3; i++) MF_TRY_OUT(mfi_save(c, in[i]));
    MF_TRY_OUT(mfi_save(c, *out));
    MF_TRY_OUT(mfi_save(c, lse));
out:
    for (int i = 0; i < 3; i++) mf_tensor_destroy(in[i]);
    mf_tensor_destroy(lse);
    return st;
}

static mf_status at_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    mfi_attn p = params_of(&c->in_meta[0]);
    mf_tensor *s[5];
    for (int i = 0; i < 5; i++)
        if (!(s[i] = mfi_saved(c, i))) return mf_last_status();
    mf_tensor *g = mfi_contiguous_raw(gy), *d[3] = {NULL, NULL, NULL};
    if (!g) return mf_last_status();
    mf_status st = MF_OK;
    for (int i = 0; i < 3; i++)   /* the kernel makes all three in one pass */
        if (!(d[i] = mfi_tensor_new(c->in_meta[i].dtype, 4, c->in_meta[i].shape))) MF_TRY_OUT(mf_last_status());
    mfi_view vd[3], vs[5], vg = mfi_view_of(g);
    for (int i = 0; i < 3; i++) vd[i] = mfi_view_of(d[i]);
    for (int i = 0; i < 5; i++) vs[i] = mfi_view_of(s[i]);
    MFI_KERNEL(st, MF_PROF_ATTENTION, mfi_backend_of(g), attention_bwd, &p, &vd[0], &vd[1], &vd[2], &vg, &vs[0],
               &vs[1], &vs[2], &vs[3], &vs[4]);
    MF_TRY_OUT(st);
    for (int i = 0; i < 3; i++)
        if (c->needs_grad[i]) {
            gx[i] = d[i];
            d[i] = NULL;
        }
out:
    for (int i = 0; i < 3; i++) mf_tensor_destroy(d[i]);
    mf_tensor_destroy(g);
    return st;
}

/* split over the batch or the heads, all three alike */
static int at_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    (void)c;
    int n = 0;
    for (int a = 0; a < 2; a++) {
        mf_sbp in[3] = {mfi_S(a), mfi_S(a), mfi_S(a)};
        n = mfi_sig_add(sigs, n, cap, 3, in, mfi_S(a));
    }
    return n;
}

static const mfi_op at_op = {"mf_causal_attention", 0, at_infer, at_forward, at_backward, at_sbp, NULL};

mf_tensor *mf_causal_attention(mf_tensor *q, mf_tensor *k, mf_tensor *v)
{
    if (mfi_check_input("mf_causal_attention", "q", q) != MF_OK || mfi_check_input("mf_causal_attention", "k", k) != MF_OK ||
        mfi_check_input("mf_causal_attention", "v", v) != MF_OK)
        return NULL;
    mf_tensor *in[3] = {q, k, v};
    return mfi_apply(&at_op, 3, in, NULL, 0);
}

/* ------------------------------------------------ from a fused projection */
typedef struct qkv_attrs {
    int n_head;
    int64_t head_dim;   /* C / n_head of the global tensor */
} qkv_attrs;

/* C of qkv [B, T, 3C] or [B, T, 3, C] */
static int64_t qkv_width(const mfi_meta *x) { return x->ndim == 4 ? x->shape[3] : x->shape[2] / 3; }

static mf_status qkv_infer(mfi_call *c, mfi_meta *out)
{
    const qkv_attrs *a = c->attrs;
    const mfi_meta *x = &c->in_meta[0];
    char s1[128];
    if (!mf_dtype_is_float(x->dtype))
        MF_FAIL(MF_ERR_DTYPE, "mf_causal_self_attention: qkv is %s, not a float dtype", mf_dtype_name(x->dtype));
    bool ok = x->ndim == 3 ? x->shape[2] % 3 == 0 : x->ndim == 4 && x->shape[2] == 3;
    if (!ok || qkv_width(x) % a->n_head)
        MF_FAIL(MF_ERR_SHAPE, "mf_causal_self_attention: qkv %s is not [B, T, 3C] or [B, T, 3, C] with C divisible by "
                "%d heads", mfi_meta_str(x, s1, sizeof s1), a->n_head);
    *out = *x;
    out->ndim = 3;
    out->shape[2] = qkv_width(x);
    return MF_OK;
}

/* q, k or v (which) of [B, T, 3C] data, or the [B, T, C] output (which
 * -1), as a [B, H, T, D] view */
static mfi_view heads(void *data, mf_dtype dt, int64_t B, int64_t T, int64_t H, int64_t D, int which)
{
    int64_t row = which < 0 ? H * D : 3 * H * D;   /* elements per token */
    mfi_view v;
    memset(&v, 0, sizeof v);
    v.data = (char *)data + (size_t)(which > 0 ? which * H * D : 0) * mf_dtype_size(dt);
    v.dtype = dt;
    v.ndim = 4;
    const int64_t shape[4] = {B, H, T, D}, stride[4] = {T * row, D, row, 1};
    memcpy(v.shape, shape, sizeof shape);
    memcpy(v.stride, stride, sizeof stride);
    return v;
}

static mfi_attn qkv_params(const mfi_call *c)
{
    const qkv_attrs *a = c->attrs;
    const int64_t *s = c->in_meta[0].shape, D = a->head_dim;
    return (mfi_attn){s[0], a->n_head, s[1], D, D ? 1.0 / sqrt((double)D) : 1.0};
}

static mf_status qkv_forward(mfi_call *c, mf_tensor **out)
{
    mfi_attn p = qkv_params(c);
    mf_tensor *x = mfi_contiguous_raw(c->in[0]), *lse = NULL;
    mf_status st = MF_OK;
    if (!x) return mf_last_status();
    lse = mfi_tensor_new(x->dtype, 3, (const int64_t[]){p.b, p.h, p.t});
    if (!lse) MF_TRY_OUT(mf_last_status());
    mfi_view vq = heads(mf_tensor_data(x), x->dtype, p.b, p.t, p.h, p.d, 0);
    mfi_view vk = heads(mf_tensor_data(x), x->dtype, p.b, p.t, p.h, p.d, 1);
    mfi_view vv = heads(mf_tensor_data(x), x->dtype, p.b, p.t, p.h, p.d, 2);
    mfi_view vo = heads(mf_tensor_data(*out), x->dtype, p.b, p.t, p.h, p.d, -1), vl = mfi_view_of(lse);
    MFI_KERNEL(st, MF_PROF_ATTENTION, mfi_backend_of(x), attention_fwd, &p, &vo, &vl, &vq, &vk, &vv);
    MF_TRY_OUT(st);
    MF_TRY_OUT(mfi_save(c, x));
    MF_TRY_OUT(mfi_save(c, *out));
    MF_TRY_OUT(mfi_save(c, lse));
out:
    mf_tensor_destroy(x);
    mf_tensor_destroy(lse);
    return st;
}

static mf_status qkv_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    mfi_attn p = qkv_params(c);
    mf_tensor *x = mfi_saved(c, 0), *o = mfi_saved(c, 1), *lse = mfi_saved(c, 2);
    if (!x || !o || !lse) return mf_last_status();
    mf_tensor *g = mfi_contiguous_raw(gy), *d = NULL;
    if (!g) return mf_last_status();
    mf_status st = MF_OK;
    if (!(d = mfi_tensor_new(x->dtype, x->ndim, x->shape))) MF_TRY_OUT(mf_last_status());
    mf_dtype dt = x->dtype;
    mfi_view vq = heads(mf_tensor_data(x), dt, p.b, p.t, p.h, p.d, 0), vk = heads(mf_tensor_data(x), dt, p.b, p.t, p.h, p.d, 1);
    mfi_view vv = heads(mf_tensor_data(x), dt, p.b, p.t, p.h, p.d, 2), vo = heads(mf_tensor_data(o), dt, p.b, p.t, p.h, p.d, -1);
    mfi_view dq = heads(mf_tensor_data(d), dt, p.b, p.t, p.h, p.d, 0), dk = heads(mf_tensor_data(d), dt, p.b, p.t, p.h, p.d, 1);
    mfi_view dv = heads(mf_tensor_data(d), dt, p.b, p.t, p.h, p.d, 2), vg = heads(mf_tensor_data(g), dt, p.b, p.t, p.h, p.d, -1);
    mfi_view vl = mfi_view_of(lse);
    MFI_KERNEL(st, MF_PROF_ATTENTION, mfi_backend_of(g), attention_bwd, &p, &dq, &dk, &dv, &vg, &vq, &vk, &vv, &vo, &vl);
    MF_TRY_OUT(st);
    gx[0] = d;
    d = NULL;
out:
    mf_tensor_destroy(d);
    mf_tensor_destroy(g);
    return st;
}

/* split over the batch; [B, T, 3, C] also over the heads (S(3), Megatron's
 * tensor-parallel attention: each rank holds q, k and v of its heads) */
static int qkv_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    mf_sbp in[1] = {mfi_S(0)};
    int n = mfi_sig_add(sigs, 0, cap, 1, in, mfi_S(0));
    in[0] = mfi_S(3);
    return c->in_meta[0].ndim == 4 ? mfi_sig_add(sigs, n, cap, 1, in, mfi_S(2)) : n;
}

/* this rank's heads: its share of C */
static void qkv_localize(const mfi_call *c, void *attrs, const mfi_box *ob)
{
    qkv_attrs *a = attrs;
    (void)c;
    if (!a->head_dim) return;
    a->n_head = (int)(ob->count[2] / a->head_dim);
    if (ob->count[2] % a->head_dim) a->n_head = -1;   /* refused in forward */
}

static mf_status qkv_check(const mfi_call *c)
{
    const qkv_attrs *a = c->attrs;
    if (a->n_head < 0)
        MF_FAIL(MF_ERR_SHAPE, "mf_causal_self_attention: the heads (%lld wide) do not split evenly over the ranks: "
                "a rank holds %lld channels; the head count must divide by the tensor-parallel degree",
                (long long)a->head_dim, (long long)qkv_width(&c->in_meta[0]));
    return MF_OK;
}

static mf_status qkv_forward_checked(mfi_call *c, mf_tensor **out)
{
    MF_TRY(qkv_check(c));
    return qkv_forward(c, out);
}

static const mfi_op qkv_op = {"mf_causal_self_attention", 0, qkv_infer, qkv_forward_checked, qkv_backward, qkv_sbp,
                              qkv_localize};

mf_tensor *mf_causal_self_attention(mf_tensor *qkv, int n_head)
{
    if (mfi_check_input("mf_causal_self_attention", "qkv", qkv) != MF_OK) return NULL;
    if (n_head < 1) {
        mfi_error(MF_ERR_ARG, "mf_causal_self_attention: %d heads", n_head);
        return NULL;
    }
    int64_t C = qkv->ndim == 4 ? qkv->shape[3] : qkv->ndim == 3 ? qkv->shape[2] / 3 : 0;
    qkv_attrs a = {n_head, C / n_head};
    return mfi_apply(&qkv_op, 1, &qkv, &a, sizeof a);
}
