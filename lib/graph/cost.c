/*
 * lib/graph/cost.c - what one kernel call costs, from its arguments
 * alone: floating-point operations and bytes moved (doc/planning.md).
 *
 * One function per kernel of the set (backends/backend.h), with the
 * kernel's own arguments. The meta device's kernels are these functions
 * (lib/graph/meta.c), so a traced step costs exactly what the same step
 * would on a real device; with profiling on, MFI_KERNEL calls them after
 * each real kernel as well, which is how the profiler's FLOP and byte
 * counts and a trace's are the same measure.
 *
 * Conventions: a GEMM or convolution counts 2 per multiply-add (a
 * convolution's taps on the zero padding are not counted: they multiply
 * nothing); fused causal attention counts its matrix products over the
 * causal half; other kernels count their arithmetic per element as
 * written below. Bytes are what a kernel must read and write once: a
 * broadcast operand counts its distinct elements.
 */
#include "lib/graph/graph_internal.h"

_Thread_local mf_prof_class mfi_cost_cls = MF_PROF_OTHER;

/* distinct elements of a view (stride 0 broadcasts: read once) */
static double distinct(mfi_cv *v)
{
    if (!v) return 0;
    double n = 1;
    for (int i = 0; i < v->ndim; i++)
        if (v->stride[i] != 0 || v->shape[i] == 0) n *= (double)v->shape[i];
    return n;
}

static double elems(mfi_cv *v)
{
    if (!v) return 0;
    double n = 1;
    for (int i = 0; i < v->ndim; i++) n *= (double)v->shape[i];
    return n;
}

static double vbytes(mfi_cv *v) { return v ? distinct(v) * (double)mf_dtype_size(v->dtype) : 0; }

static mf_status note(int kernel, double flops, double bytes)
{
    mfi_cost_note(kernel, mfi_cost_cls, flops, bytes);
    return MF_OK;
}

/* ------------------------------------------------------ memory, random */
mf_status mfi_cost_fill(mfi_cv *out, double value)
{
    (void)value;
    return note(MFI_K_fill, 0, vbytes(out));
}

mf_status mfi_cost_copy(mfi_cv *out, mfi_cv *in) { return note(MFI_K_copy, 0, vbytes(out) + vbytes(in)); }

mf_status mfi_cost_philox_fill(mfi_cv *out, mfi_dist d, double a, double b, uint64_t seed, uint64_t key,
                               uint64_t index0)
{
    (void)d, (void)a, (void)b, (void)seed, (void)key, (void)index0;
    return note(MFI_K_philox_fill, elems(out), vbytes(out));
}

/* ---------------------------------------------------------- elementwise */
mf_status mfi_cost_unary_fwd(mfi_unop op, mfi_cv *out, mfi_cv *x, double alpha)
{
    (void)op, (void)alpha;
    return note(MFI_K_unary_fwd, elems(out), vbytes(out) + vbytes(x));
}

mf_status mfi_cost_unary_bwd(mfi_unop op, mfi_cv *gx, mfi_cv *gy, mfi_cv *x, mfi_cv *y, double alpha)
{
    (void)op, (void)alpha;
    return note(MFI_K_unary_bwd, 2 * elems(gx), vbytes(gx) + vbytes(gy) + vbytes(x) + vbytes(y));
}

mf_status mfi_cost_binary_fwd(mfi_binop op, mfi_cv *out, mfi_cv *a, mfi_cv *b)
{
    (void)op;
    return note(MFI_K_binary_fwd, elems(out), vbytes(out) + vbytes(a) + vbytes(b));
}

mf_status mfi_cost_reduce(mfi_redop op, mfi_cv *out, mfi_cv *in)
{
    return note(MFI_K_reduce, (op == MFI_RED_SUMSQ ? 2 : 1) * elems(in), vbytes(out) + vbytes(in));
}

mf_status mfi_cost_argmax(mfi_cv *out, mfi_cv *in, int axis)
{
    (void)axis;
    return note(MFI_K_argmax, elems(in), vbytes(out) + vbytes(in));
}

/* ------------------------------------------------------------- products */
mf_status mfi_cost_gemm(const mfi_gemm *g)
{
    double sz = (double)mf_dtype_size(g->dtype), batch = (double)g->batch;
    double m = (double)g->m, n = (double)g->n, k = (double)g->k;
    double bytes = batch * sz * (m * k + k * n + m * n * (g->beta != 0 ? 2 : 1));
    if (g->bias) bytes += n * sz;
    return note(MFI_K_gemm, 2.0 * m * n * k * batch, bytes);
}

double mfi_cost_conv_taps(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dil)
{
    double n = 0;
    for (int64_t o = 0; o < out; o++)
        for (int64_t j = 0; j < k; j++) {
            int64_t i = o * stride - pad + j * dil;
            n += i >= 0 && i < in;
        }
    return n;
}

/* one pass of a convolution: forward, data or filter gradient alike */
static double conv_flops(const mfi_conv2d *p)
{
    return 2.0 * (double)p->n * (double)p->oc * (double)(p->c / p->groups) *
           mfi_cost_conv_taps(p->h, p->oh, p->kh, p->stride[0], p->padding[0], p->dilation[0]) *
           mfi_cost_conv_taps(p->w, p->ow, p->kw, p->stride[1], p->padding[1], p->dilation[1]);
}

static double conv_bytes(const mfi_conv2d *p)
{
    double x = (double)p->n * p->c * p->h * p->w, y = (double)p->n * p->oc * p->oh * p->ow;
    double w = (double)p->oc * (p->c / p->groups) * p->kh * p->kw;
    return 4.0 * (x + y + w);
}

mf_status mfi_cost_conv2d_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    (void)out, (void)x, (void)w;
    return note(MFI_K_conv2d_fwd, conv_flops(p), conv_bytes(p) + vbytes(bias));
}

mf_status mfi_cost_conv2d_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    (void)gx, (void)gy, (void)w;
    return note(MFI_K_conv2d_bwd_data, conv_flops(p), conv_bytes(p));
}

mf_status mfi_cost_conv2d_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    (void)gw, (void)gy, (void)x;
    return note(MFI_K_conv2d_bwd_filter, conv_flops(p), conv_bytes(p));
}

/* causal attention: a product over the causal half is b h d t (t+1) flops */
static double attn_half(const mfi_attn *p) { return (double)p->b * p->h * p->d * (double)p->t * (p->t + 1); }

mf_status mfi_cost_attention_fwd(const mfi_attn *p, mfi_cv *out, mfi_cv *lse, mfi_cv *q, mfi_cv *k, mfi_cv *v)
{
    /* q k^T and the weights times v */
    return note(MFI_K_attention_fwd, 2 * attn_half(p), vbytes(out) + vbytes(lse) + vbytes(q) + vbytes(k) + vbytes(v));
}

mf_status mfi_cost_attention_bwd(const mfi_attn *p, mfi_cv *gq, mfi_cv *gk, mfi_cv *gv, mfi_cv *gout, mfi_cv *q,
                                 mfi_cv *k, mfi_cv *v, mfi_cv *out, mfi_cv *lse)
{
    /* q k^T again, then the gradients of v, of the weights, of q and of k */
    return note(MFI_K_attention_bwd, 5 * attn_half(p),
                vbytes(gq) + vbytes(gk) + vbytes(gv) + vbytes(gout) + vbytes(q) + vbytes(k) + vbytes(v) +
                    vbytes(out) + vbytes(lse));
}

/* -------------------------------------------------------- softmax, loss */
mf_status mfi_cost_softmax_fwd(bool log, mfi_cv *out, mfi_cv *x, int axis)
{
    (void)log, (void)axis;
    return note(MFI_K_softmax_fwd, 4 * elems(x), vbytes(out) + vbytes(x));
}

mf_status mfi_cost_softmax_bwd(bool log, mfi_cv *gx, mfi_cv *gy, mfi_cv *y, int axis)
{
    (void)log, (void)axis;
    return note(MFI_K_softmax_bwd, 3 * elems(gx), vbytes(gx) + vbytes(gy) + vbytes(y));
}

/* the losses read one element per row of logp */
mf_status mfi_cost_nll_fwd(mfi_cv *loss, mfi_cv *logp, mfi_cv *target)
{
    double rows = logp && logp->ndim ? elems(logp) / (double)logp->shape[logp->ndim - 1] : 1;
    return note(MFI_K_nll_fwd, rows, vbytes(loss) + vbytes(target) + 4 * rows);
}

mf_status mfi_cost_nll_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *target)
{
    return note(MFI_K_nll_bwd, elems(gx), vbytes(gx) + vbytes(gloss) + vbytes(target));
}

mf_status mfi_cost_xent_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *logp, mfi_cv *target)
{
    return note(MFI_K_xent_bwd, 3 * elems(gx), vbytes(gx) + vbytes(gloss) + vbytes(logp) + vbytes(target));
}

/* ------------------------------------------------------------ embedding */
mf_status mfi_cost_embedding_fwd(mfi_cv *out, mfi_cv *weight, mfi_cv *index)
{
    (void)weight;
    return note(MFI_K_embedding_fwd, 0, 2 * vbytes(out) + vbytes(index));
}

mf_status mfi_cost_embedding_bwd(mfi_cv *gweight, mfi_cv *gy, mfi_cv *index)
{
    (void)gweight;
    return note(MFI_K_embedding_bwd, elems(gy), 3 * vbytes(gy) + vbytes(index));
}

/* -------------------------------------------------------------- pooling */
static double pool_in(const mfi_pool2d *p) { return (double)p->n * p->c * p->h * p->w; }
static double pool_out(const mfi_pool2d *p) { return (double)p->n * p->c * p->oh * p->ow; }

mf_status mfi_cost_maxpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *idx, mfi_cv *x)
{
    (void)x;
    return note(MFI_K_maxpool2d_fwd, pool_in(p), 4 * pool_in(p) + vbytes(out) + vbytes(idx));
}

mf_status mfi_cost_maxpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *idx)
{
    (void)gy;
    return note(MFI_K_maxpool2d_bwd, pool_out(p), vbytes(gx) + 4 * pool_out(p) + vbytes(idx));
}

mf_status mfi_cost_avgpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *x)
{
    (void)x;
    return note(MFI_K_avgpool2d_fwd, pool_in(p), 4 * pool_in(p) + vbytes(out));
}

mf_status mfi_cost_avgpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy)
{
    (void)gy;
    return note(MFI_K_avgpool2d_bwd, pool_in(p), vbytes(gx) + 4 * pool_out(p));
}

/* -------------------------------------------------------- normalisation */
mf_status mfi_cost_batchnorm_fwd(const mfi_bnorm *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *b, mfi_cv *rmean,
                                 mfi_cv *rvar, mfi_cv *smean, mfi_cv *sinvstd)
{
    double n = (double)p->n * p->c * p->s;
    return note(MFI_K_batchnorm_fwd, 6 * n,
                vbytes(out) + 2 * vbytes(x) + vbytes(w) + vbytes(b) + 2 * (vbytes(rmean) + vbytes(rvar)) +
                    vbytes(smean) + vbytes(sinvstd));
}

mf_status mfi_cost_batchnorm_bwd(const mfi_bnorm *p, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy, mfi_cv *x,
                                 mfi_cv *w, mfi_cv *smean, mfi_cv *sinvstd)
{
    double n = (double)p->n * p->c * p->s;
    return note(MFI_K_batchnorm_bwd, 8 * n,
                vbytes(gx) + vbytes(gw) + vbytes(gb) + 2 * (vbytes(gy) + vbytes(x)) + vbytes(w) + vbytes(smean) +
                    vbytes(sinvstd));
}

mf_status mfi_cost_layernorm_fwd(int64_t rows, int64_t cols, double eps, mfi_cv *out, mfi_cv *x, mfi_cv *w,
                                 mfi_cv *b, mfi_cv *mean, mfi_cv *rstd)
{
    (void)eps;
    return note(MFI_K_layernorm_fwd, 7.0 * (double)rows * (double)cols,
                vbytes(out) + vbytes(x) + vbytes(w) + vbytes(b) + vbytes(mean) + vbytes(rstd));
}

mf_status mfi_cost_layernorm_bwd(int64_t rows, int64_t cols, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy,
                                 mfi_cv *x, mfi_cv *w, mfi_cv *mean, mfi_cv *rstd)
{
    return note(MFI_K_layernorm_bwd, 10.0 * (double)rows * (double)cols,
                vbytes(gx) + vbytes(gw) + vbytes(gb) + vbytes(gy) + vbytes(x) + vbytes(w) + vbytes(mean) +
                    vbytes(rstd));
}

/* -------------------------------------------------------------- dropout */
mf_status mfi_cost_dropout_fwd(mfi_cv *out, mfi_cv *mask, mfi_cv *x, double p, uint64_t seed, uint64_t key,
                               uint64_t index0)
{
    (void)p, (void)seed, (void)key, (void)index0;
    return note(MFI_K_dropout_fwd, 2 * elems(out), vbytes(out) + vbytes(mask) + vbytes(x));
}

/* ----------------------------------------------------------- optimizers */
mf_status mfi_cost_sgd_step(const mfi_sgd_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *buf)
{
    double n = elems(param);
    return note(MFI_K_sgd_step, (h->momentum != 0 ? 4 : 2) * n, 2 * vbytes(param) + vbytes(grad) + 2 * vbytes(buf));
}

mf_status mfi_cost_adam_step(const mfi_adam_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *m, mfi_cv *v, mfi_cv *vmax)
{
    (void)h;
    return note(MFI_K_adam_step, 12 * elems(param),
                2 * (vbytes(param) + vbytes(m) + vbytes(v) + vbytes(vmax)) + vbytes(grad));
}

mf_status mfi_cost_rmsprop_step(const mfi_rmsprop_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *square_avg,
                                mfi_cv *momentum_buf, mfi_cv *grad_avg)
{
    (void)h;
    return note(MFI_K_rmsprop_step, 8 * elems(param),
                2 * (vbytes(param) + vbytes(square_avg) + vbytes(momentum_buf) + vbytes(grad_avg)) + vbytes(grad));
}

const mfi_cost_fns mfi_cost_table = {
#define MFI_COST_SLOT(name, args) .name = mfi_cost_##name,
    MFI_KERNELS(MFI_COST_SLOT)
#undef MFI_COST_SLOT
};
