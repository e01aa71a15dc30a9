/*
 * backends/cuda/cuda_reduce.cu - sum/max/sum-of-squares over axes,
 * argmax, softmax and log-softmax, the loss kernels on [N, C] rows and
 * embedding lookups, on the GPU.
 *
 * A reduction gives each output one block (or, for short reductions,
 * one thread) and accumulates in double, in a fixed order for a fixed
 * shape. Targets and indices are checked on the device; the first bad
 * one is reported as the CPU backend reports it.
 */
#include <math.h>
#include "backends/cuda/cuda_common.cuh"
#include "backends/plan.h"

__device__ static inline double combine(int op, double acc, double v)
{
    if (op == MFI_RED_SUM) return acc + v;
    if (op == MFI_RED_SUMSQ) return acc + v * v;
    return (v > acc || v != v || acc != acc) ? (acc != acc ? acc : v) : acc;   /* a NaN wins */
}

__device__ static inline double merge(int op, double a, double b)
{
    if (op != MFI_RED_MAX) return a + b;
    return (b > a || b != b) && a == a ? b : a;
}

template <typename T>
__global__ void k_reduce_block(mfi_red_plan p, int op, T *out, const T *in)
{
    __shared__ double sh[256];
    for (int64_t o = blockIdx.x; o < p.nout; o += gridDim.x) {
        const T *base = in + mfi_offset_of(o, p.nk, p.kshape, p.kstride);
        double acc = op == MFI_RED_MAX ? -INFINITY : 0.0;
        for (int64_t q = threadIdx.x; q < p.nred; q += blockDim.x)
            acc = combine(op, acc, (double)base[mfi_offset_of(q, p.nr, p.rshape, p.rstride)]);
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) sh[threadIdx.x] = merge(op, sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) out[o] = (T)sh[0];
        __syncthreads();
    }
}

template <typename T>
__global__ void k_reduce_thread(mfi_red_plan p, int op, T *out, const T *in)
{
    MFC_FOR(o, p.nout) {
        const T *base = in + mfi_offset_of(o, p.nk, p.kshape, p.kstride);
        double acc = op == MFI_RED_MAX ? -INFINITY : 0.0;
        for (int64_t q = 0; q < p.nred; q++) acc = combine(op, acc, (double)base[mfi_offset_of(q, p.nr, p.rshape, p.rstride)]);
        out[o] = (T)acc;
    }
}

extern "C" mf_status mfc_reduce(mfi_redop op, mfi_cv *out, mfi_cv *in)
{
    if (out->dtype != in->dtype) MF_FAIL(MF_ERR_DTYPE, "reduce: dtypes differ");
    mfi_red_plan p;
    mfi_plan_reduce(&p, out, in);
    if (p.nout == 0) return MF_OK;
    bool small = p.nred <= 64 && p.nout >= 1024;
    unsigned blocks = p.nout < 65535 * 16 ? (unsigned)p.nout : 65535 * 16;
    unsigned threads = mfc_red_threads(p.nred);
    MFC_ALL_CASES(in->dtype, "reduce",
        if (small)
            k_reduce_thread<T><<<mfc_blocks(p.nout), MFC_THREADS, 0, mfc_stream>>>(p, (int)op, (T *)out->data,
                                                                                   (const T *)in->data);
        else
            k_reduce_block<T><<<blocks, threads, 0, mfc_stream>>>(p, (int)op, (T *)out->data, (const T *)in->data));
    MFC_LAUNCHED("reduce");
    return MF_OK;
}

/* ------------------------------------------------------------------ argmax */
template <typename T>
__global__ void k_argmax(mfi_red_plan p, int64_t len, int64_t s, int64_t *out, const T *in)
{
    MFC_FOR(o, p.nout) {
        const T *a = in + mfi_offset_of(o, p.nk, p.kshape, p.kstride);
        int64_t best = 0;
        for (int64_t k = 1; k < len; k++)
            if (a[k * s] > a[best * s]) best = k;
        out[o] = best;
    }
}

extern "C" mf_status mfc_argmax(mfi_cv *out, mfi_cv *in, int axis)
{
    if (out->dtype != MF_I64) MF_FAIL(MF_ERR_DTYPE, "argmax: output must be i64");
    mfi_red_plan p;
    memset(&p, 0, sizeof p);
    int64_t len = in->shape[axis], s = in->stride[axis];
    if (len == 0) MF_FAIL(MF_ERR_SHAPE, "argmax: the axis is empty");
    p.nout = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (d == axis || in->shape[d] == 1) continue;
        p.kshape[p.nk] = in->shape[d];
        p.kstride[p.nk++] = in->stride[d];
        p.nout *= in->shape[d];
    }
    if (p.nout == 0) return MF_OK;
    MFC_ALL_CASES(in->dtype, "argmax",
                  k_argmax<T><<<mfc_blocks(p.nout), MFC_THREADS, 0, mfc_stream>>>(p, len, s, (int64_t *)out->data,
                                                                                  (const T *)in->data));
    MFC_LAUNCHED("argmax");
    return MF_OK;
}

/* ----------------------------------------------------------------- softmax */
template <typename T>
__global__ void k_softmax(bool lg, T *y, const T *x, int64_t outer, int64_t D, int64_t inner)
{
    MFC_FOR(oi, outer * inner) {
        int64_t o = oi / inner, i = oi % inner;
        const T *a = x + o * D * inner + i;
        T *b = y + o * D * inner + i;
        T mx = -INFINITY;
        for (int64_t k = 0; k < D; k++)
            if (a[k * inner] > mx) mx = a[k * inner];
        double sum = 0;
        for (int64_t k = 0; k < D; k++) {
            T e = (T)exp(a[k * inner] - mx);
            sum += e;
            if (!lg) b[k * inner] = e;
        }
        if (lg) {
            T lse = mx + (T)log(sum);
            for (int64_t k = 0; k < D; k++) b[k * inner] = a[k * inner] - lse;
        } else {
            T inv = (T)(1.0 / sum);
            for (int64_t k = 0; k < D; k++) b[k * inner] *= inv;
        }
    }
}

template <typename T>
__global__ void k_softmax_bwd(bool lg, T *gx, const T *gy, const T *y, int64_t outer, int64_t D, int64_t inner)
{
    MFC_FOR(oi, outer * inner) {
        int64_t o = oi / inner, i = oi % inner, base = o * D * inner + i;
        double dot = 0;
        for (int64_t k = 0; k < D; k++)
            dot += lg ? (double)gy[base + k * inner] : (double)gy[base + k * inner] * y[base + k * inner];
        for (int64_t k = 0; k < D; k++) {
            int64_t j = base + k * inner;
            gx[j] = lg ? gy[j] - (T)exp(y[j]) * (T)dot : y[j] * (gy[j] - (T)dot);
        }
    }
}

extern "C" mf_status mfc_softmax_fwd(bool log, mfi_cv *out, mfi_cv *x, int axis)
{
    int64_t outer, D, inner;
    mfi_split_axis(x, axis, &outer, &D, &inner);
    if (outer * inner == 0) return MF_OK;
    MFC_FLOAT_CASES(x->dtype, "softmax",
                    k_softmax<T><<<mfc_blocks(outer * inner), MFC_THREADS, 0, mfc_stream>>>(
                        log, (T *)out->data, (const T *)x->data, outer, D, inner));
    MFC_LAUNCHED("softmax");
    return MF_OK;
}

extern "C" mf_status mfc_softmax_bwd(bool log, mfi_cv *gx, mfi_cv *gy, mfi_cv *y, int axis)
{
    int64_t outer, D, inner;
    mfi_split_axis(y, axis, &outer, &D, &inner);
    if (outer * inner == 0) return MF_OK;
    MFC_FLOAT_CASES(y->dtype, "softmax backward",
                    k_softmax_bwd<T><<<mfc_blocks(outer * inner), MFC_THREADS, 0, mfc_stream>>>(
                        log, (T *)gx->data, (const T *)gy->data, (const T *)y->data, outer, D, inner));
    MFC_LAUNCHED("softmax backward");
    return MF_OK;
}

/* ------------------------------------------------------------------ losses */
/* Target i, or -1 after flagging it when out of range. */
__device__ static inline int64_t target_at(const void *t, mf_dtype dt, int64_t stride, int64_t i, int64_t classes,
                                           mfc_badidx *bad)
{
    int64_t v = mfc_load_index(t, dt, i * stride);
    if (v < 0 || v >= classes) {
        mfc_flag_bad(bad, i, v);
        return -1;
    }
    return v;
}

template <typename T>
__global__ void k_nll(int64_t n, int64_t c, T *loss, const T *logp, const void *t, mf_dtype tdt, int64_t ts,
                      mfc_badidx *bad)
{
    MFC_FOR(i, n) {
        int64_t k = target_at(t, tdt, ts, i, c, bad);
        loss[i] = k < 0 ? (T)0 : -logp[i * c + k];
    }
}

extern "C" mf_status mfc_nll_fwd(mfi_cv *loss, mfi_cv *logp, mfi_cv *target)
{
    int64_t n = logp->shape[0], c = logp->shape[1];
    if (n == 0) return MF_OK;
    mfc_badidx *bad;
    MF_TRY(mfc_badidx_reset(&bad));
    MFC_FLOAT_CASES(logp->dtype, "nll_loss",
                    k_nll<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        n, c, (T *)loss->data, (const T *)logp->data, target->data, target->dtype,
                        target->stride[0], bad));
    MFC_LAUNCHED("nll_loss");
    return mfc_badidx_check(bad, "target", c);
}

/* One thread per element of gx: -gloss at the target, else 0 (nll); or
 * gloss * (softmax - onehot) (cross entropy from log-probabilities). */
template <typename T>
__global__ void k_loss_bwd(bool xent, int64_t n, int64_t c, T *gx, const T *gl, int64_t gs, const T *logp,
                           const void *t, mf_dtype tdt, int64_t ts, mfc_badidx *bad)
{
    MFC_FOR(e, n * c) {
        int64_t i = e / c, j = e % c;
        int64_t v = mfc_load_index(t, tdt, i * ts);
        if (v < 0 || v >= c) {
            if (j == 0) mfc_flag_bad(bad, i, v);
            gx[e] = (T)0;
            continue;
        }
        T s = gl[i * gs];
        if (xent) gx[e] = s * (T)exp(logp[e]) - (j == v ? s : (T)0);
        else gx[e] = j == v ? -s : (T)0;
    }
}

static mf_status loss_bwd(bool xent, mfi_cv *gx, mfi_cv *gloss, mfi_cv *logp, mfi_cv *target)
{
    int64_t n = gx->shape[0], c = gx->shape[1];
    if (n * c == 0) return MF_OK;
    int64_t gs = gloss->ndim > 0 ? gloss->stride[0] : 0;
    mfc_badidx *bad;
    MF_TRY(mfc_badidx_reset(&bad));
    MFC_FLOAT_CASES(gx->dtype, "loss backward",
                    k_loss_bwd<T><<<mfc_blocks(n * c), MFC_THREADS, 0, mfc_stream>>>(
                        xent, n, c, (T *)gx->data, (const T *)gloss->data, gs,
                        logp ? (const T *)logp->data : (const T *)NULL, target->data, target->dtype,
                        target->stride[0], bad));
    MFC_LAUNCHED("loss backward");
    return mfc_badidx_check(bad, "target", c);
}

extern "C" mf_status mfc_nll_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *target)
{
    return loss_bwd(false, gx, gloss, NULL, target);
}

extern "C" mf_status mfc_xent_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *logp, mfi_cv *target)
{
    return loss_bwd(true, gx, gloss, logp, target);
}

/* --------------------------------------------------------------- embedding */
template <typename T>
__global__ void k_embed(int64_t n, int64_t d, int64_t v, T *out, const T *w, const void *idx, mf_dtype idt,
                        mfc_badidx *bad)
{
    MFC_FOR(e, n * d) {
        int64_t i = e / d, j = e % d;
        int64_t k = mfc_load_index(idx, idt, i);
        if (k < 0 || k >= v) {
            if (j == 0) mfc_flag_bad(bad, i, k);
            out[e] = (T)0;
        } else {
            out[e] = w[k * d + j];
        }
    }
}

/* Deterministic: each thread owns one column and adds the rows in order. */
template <typename T>
__global__ void k_embed_bwd(int64_t n, int64_t d, int64_t v, T *gw, const T *gy, const void *idx, mf_dtype idt,
                            mfc_badidx *bad)
{
    MFC_FOR(j, d) {
        for (int64_t i = 0; i < n; i++) {
            int64_t k = mfc_load_index(idx, idt, i);
            if (k < 0 || k >= v) {
                if (j == 0) mfc_flag_bad(bad, i, k);
                continue;
            }
            gw[k * d + j] += gy[i * d + j];
        }
    }
}

extern "C" mf_status mfc_embedding_fwd(mfi_cv *out, mfi_cv *weight, mfi_cv *index)
{
    int64_t v = weight->shape[0], d = weight->shape[1], n = mfc_numel(index);
    if (n * d == 0) return MF_OK;
    mfc_badidx *bad;
    MF_TRY(mfc_badidx_reset(&bad));
    MFC_FLOAT_CASES(weight->dtype, "embedding",
                    k_embed<T><<<mfc_blocks(n * d), MFC_THREADS, 0, mfc_stream>>>(
                        n, d, v, (T *)out->data, (const T *)weight->data, index->data, index->dtype, bad));
    MFC_LAUNCHED("embedding");
    return mfc_badidx_check(bad, "target", v);
}

extern "C" mf_status mfc_embedding_bwd(mfi_cv *gweight, mfi_cv *gy, mfi_cv *index)
{
    int64_t v = gweight->shape[0], d = gweight->shape[1], n = mfc_numel(index);
    if (n * d == 0) return MF_OK;
    mfc_badidx *bad;
    MF_TRY(mfc_badidx_reset(&bad));
    MFC_FLOAT_CASES(gweight->dtype, "embedding backward",
                    k_embed_bwd<T><<<mfc_blocks(d), MFC_THREADS, 0, mfc_stream>>>(
                        n, d, v, (T *)gweight->data, (const T *)gy->data, index->data, index->dtype, bad));
    MFC_LAUNCHED("embedding backward");
    return mfc_badidx_check(bad, "target", v);
}
