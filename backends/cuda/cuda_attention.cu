/*
 * backends/cuda/cuda_attention.cu - fused causal attention on the GPU,
 * with the CPU backend's formulas (backends/cpu/cpu_attention_tmpl.h).
 *
 * One warp per row: each lane holds up to ATT_PER_LANE elements of the
 * head dimension, scores are warp sums, and the online softmax keeps a
 * running maximum and sum per row, so nothing of size t x t is stored.
 * Backward runs two passes without atomics, so it is deterministic: one
 * warp per query row sums dQ (and keeps delta = dO.O), then one warp per
 * key row sums dK and dV over the rows that attend to it.
 */
#include <math.h>
#include "backends/cuda/cuda_common.cuh"

#define ATT_PER_LANE 8   /* head dims up to 256 */
#define ATT_WARPS 4      /* rows per block */

struct att_views {
    /* strides of b, h, t: q, k, v, out, and in backward gout, gq, gk, gv */
    int64_t qs[3], ks[3], vs[3], os[3], gos[3], gqs[3], gks[3], gvs[3];
};

#define AT3(base, st, b, h, t) ((base) + (b) * (st)[0] + (h) * (st)[1] + (t) * (st)[2])

template <typename T>
__device__ static inline T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* the lane's elements of row t of a [b, h, t, d] view */
template <typename T>
__device__ static inline void load_row(T *dst, const T *base, int64_t d, int lane)
{
    for (int e = 0; e < ATT_PER_LANE; e++) {
        int64_t x = lane + 32 * e;
        dst[e] = x < d ? base[x] : (T)0;
    }
}

template <typename T>
__device__ static inline T row_dot(const T *mine, const T *row, int64_t d, int lane)
{
    T s = 0;
    for (int e = 0; e < ATT_PER_LANE; e++) {
        int64_t x = lane + 32 * e;
        if (x < d) s += mine[e] * row[x];
    }
    return warp_sum(s);
}

template <typename T>
__global__ void k_attn_fwd(mfi_attn p, att_views sv, T *out, T *lse, const T *q, const T *k, const T *v)
{
    const int lane = threadIdx.x & 31;
    const int64_t rows = p.b * p.h * p.t, D = p.d;
    for (int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * ATT_WARPS) {
        const int64_t b = row / (p.h * p.t), h = row / p.t % p.h, i = row % p.t;
        const T *kb = k + b * sv.ks[0] + h * sv.ks[1], *vb = v + b * sv.vs[0] + h * sv.vs[1];
        T qi[ATT_PER_LANE], acc[ATT_PER_LANE];
        load_row(qi, q + b * sv.qs[0] + h * sv.qs[1] + i * sv.qs[2], D, lane);
        for (int e = 0; e < ATT_PER_LANE; e++) acc[e] = 0;
        T m = -INFINITY, l = 0;
        for (int64_t j = 0; j <= i; j++) {
            T s = (T)p.scale * row_dot(qi, kb + j * sv.ks[2], D, lane);
            T mx = s > m ? s : m, alpha = exp(m - mx), e = exp(s - mx);
            const T *vj = vb + j * sv.vs[2];
            for (int x = 0; x < ATT_PER_LANE; x++) {
                int64_t c = lane + 32 * x;
                acc[x] = acc[x] * alpha + (c < D ? e * vj[c] : (T)0);
            }
            l = l * alpha + e;
            m = mx;
        }
        T *o = AT3(out, sv.os, b, h, i);
        for (int x = 0; x < ATT_PER_LANE; x++) {
            int64_t c = lane + 32 * x;
            if (c < D) o[c] = acc[x] / l;
        }
        if (lane == 0) lse[row] = m + log(l);
    }
}

/* pass 1: dQ_i and delta_i, one warp per query row */
template <typename T>
__global__ void k_attn_bwd_q(mfi_attn p, att_views sv, T *gq, T *delta, const T *gout, const T *q, const T *k,
                             const T *v, const T *out, const T *lse)
{
    const int lane = threadIdx.x & 31;
    const int64_t rows = p.b * p.h * p.t, D = p.d;
    for (int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * ATT_WARPS) {
        const int64_t b = row / (p.h * p.t), h = row / p.t % p.h, i = row % p.t;
        const T *kb = k + b * sv.ks[0] + h * sv.ks[1], *vb = v + b * sv.vs[0] + h * sv.vs[1];
        T qi[ATT_PER_LANE], goi[ATT_PER_LANE], dq[ATT_PER_LANE];
        load_row(qi, q + b * sv.qs[0] + h * sv.qs[1] + i * sv.qs[2], D, lane);
        load_row(goi, AT3(gout, sv.gos, b, h, i), D, lane);
        T dl = row_dot(goi, AT3(out, sv.os, b, h, i), D, lane);
        for (int e = 0; e < ATT_PER_LANE; e++) dq[e] = 0;
        for (int64_t j = 0; j <= i; j++) {
            const T *kj = kb + j * sv.ks[2];
            T pw = exp((T)p.scale * row_dot(qi, kj, D, lane) - lse[row]);
            T ds = pw * (row_dot(goi, vb + j * sv.vs[2], D, lane) - dl) * (T)p.scale;
            for (int x = 0; x < ATT_PER_LANE; x++) {
                int64_t c = lane + 32 * x;
                if (c < D) dq[x] += ds * kj[c];
            }
        }
        for (int x = 0; x < ATT_PER_LANE; x++) {
            int64_t c = lane + 32 * x;
            if (c < D) AT3(gq, sv.gqs, b, h, i)[c] = dq[x];
        }
        if (lane == 0) delta[row] = dl;
    }
}

/* pass 2: dK_j and dV_j, one warp per key row, over the rows i >= j */
template <typename T>
__global__ void k_attn_bwd_kv(mfi_attn p, att_views sv, T *gk, T *gv, const T *delta, const T *gout, const T *q,
                              const T *k, const T *v, const T *lse)
{
    const int lane = threadIdx.x & 31;
    const int64_t rows = p.b * p.h * p.t, D = p.d;
    for (int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * ATT_WARPS) {
        const int64_t b = row / (p.h * p.t), h = row / p.t % p.h, j = row % p.t, head = row - j;   /* lse, delta: contiguous */
        const T *qb = q + b * sv.qs[0] + h * sv.qs[1];
        T kj[ATT_PER_LANE], vj[ATT_PER_LANE], dk[ATT_PER_LANE], dv[ATT_PER_LANE];
        load_row(kj, k + b * sv.ks[0] + h * sv.ks[1] + j * sv.ks[2], D, lane);
        load_row(vj, v + b * sv.vs[0] + h * sv.vs[1] + j * sv.vs[2], D, lane);
        for (int e = 0; e < ATT_PER_LANE; e++) dk[e] = dv[e] = 0;
        for (int64_t i = j; i < p.t; i++) {
            const T *qi = qb + i * sv.qs[2], *goi = AT3(gout, sv.gos, b, h, i);
            T pw = exp((T)p.scale * row_dot(kj, qi, D, lane) - lse[head + i]);
            T ds = pw * (row_dot(vj, goi, D, lane) - delta[head + i]) * (T)p.scale;
            for (int x = 0; x < ATT_PER_LANE; x++) {
                int64_t c = lane + 32 * x;
                if (c < D) {
                    dv[x] += pw * goi[c];
                    dk[x] += ds * qi[c];
                }
            }
        }
        for (int x = 0; x < ATT_PER_LANE; x++) {
            int64_t c = lane + 32 * x;
            if (c < D) {
                AT3(gk, sv.gks, b, h, j)[c] = dk[x];
                AT3(gv, sv.gvs, b, h, j)[c] = dv[x];
            }
        }
    }
}

static void strides_of(int64_t *dst, mfi_cv *v)
{
    for (int i = 0; i < 3; i++) dst[i] = v ? v->stride[i] : 0;
}

static mf_status att_prepare(const char *what, const mfi_attn *p, mfi_cv *q, mfi_cv *k, mfi_cv *v, mfi_cv *out,
                             mfi_cv *gout, mfi_cv *gq, mfi_cv *gk, mfi_cv *gv, att_views *sv, unsigned *blocks)
{
    if (p->d > 32 * ATT_PER_LANE) MF_FAIL(MF_ERR_SHAPE, "%s: head size %lld is above %d on cuda", what, (long long)p->d, 32 * ATT_PER_LANE);
    if (q->stride[3] != 1 || k->stride[3] != 1 || v->stride[3] != 1)
        MF_FAIL(MF_ERR_INTERNAL, "%s: the last dim of q, k and v must be contiguous", what);
    strides_of(sv->qs, q);
    strides_of(sv->ks, k);
    strides_of(sv->vs, v);
    strides_of(sv->os, out);
    strides_of(sv->gos, gout);
    strides_of(sv->gqs, gq);
    strides_of(sv->gks, gk);
    strides_of(sv->gvs, gv);
    int64_t rows = p->b * p->h * p->t, nb = (rows + ATT_WARPS - 1) / ATT_WARPS;
    *blocks = (unsigned)(nb < 1 ? 1 : nb > 65535 * 16 ? 65535 * 16 : nb);
    return MF_OK;
}

extern "C" mf_status mfc_attention_fwd(const mfi_attn *p, mfi_cv *out, mfi_cv *lse, mfi_cv *q, mfi_cv *k, mfi_cv *v)
{
    att_views sv;
    unsigned nb;
    MF_TRY(att_prepare("attention", p, q, k, v, out, NULL, NULL, NULL, NULL, &sv, &nb));
    if (p->b * p->h * p->t == 0) return MF_OK;
    MFC_FLOAT_CASES(q->dtype, "attention",
                    k_attn_fwd<T><<<nb, 32 * ATT_WARPS, 0, mfc_stream>>>(*p, sv, (T *)out->data, (T *)lse->data,
                                                                      (const T *)q->data, (const T *)k->data,
                                                                      (const T *)v->data));
    MFC_LAUNCHED("attention");
    return MF_OK;
}

extern "C" mf_status mfc_attention_bwd(const mfi_attn *p, mfi_cv *gq, mfi_cv *gk, mfi_cv *gv, mfi_cv *gout, mfi_cv *q,
                                       mfi_cv *k, mfi_cv *v, mfi_cv *out, mfi_cv *lse)
{
    att_views sv;
    unsigned nb;
    MF_TRY(att_prepare("attention backward", p, q, k, v, out, gout, gq, gk, gv, &sv, &nb));
    int64_t rows = p->b * p->h * p->t;
    if (rows == 0) return MF_OK;
    void *delta = NULL;
    MFC_CALL("attention backward: scratch", cudaMallocAsync(&delta, (size_t)rows * mf_dtype_size(q->dtype), mfc_stream));
    MFC_FLOAT_CASES(q->dtype, "attention backward", {
        k_attn_bwd_q<T><<<nb, 32 * ATT_WARPS, 0, mfc_stream>>>(*p, sv, (T *)gq->data, (T *)delta,
                                                            (const T *)gout->data, (const T *)q->data,
                                                            (const T *)k->data, (const T *)v->data,
                                                            (const T *)out->data, (const T *)lse->data);
        k_attn_bwd_kv<T><<<nb, 32 * ATT_WARPS, 0, mfc_stream>>>(*p, sv, (T *)gk->data, (T *)gv->data,
                                                             (const T *)delta, (const T *)gout->data,
                                                             (const T *)q->data, (const T *)k->data,
                                                             (const T *)v->data, (const T *)lse->data);
    });
    cudaError_t e = cudaGetLastError();
    cudaFreeAsync(delta, mfc_stream);
    if (e != cudaSuccess) return mfc_fail("attention backward", e);
    return MF_OK;
}
