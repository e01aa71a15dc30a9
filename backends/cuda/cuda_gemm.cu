/*
 * backends/cuda/cuda_gemm.cu - matrix products on cuBLAS, and conv2d as
 * im2col + cuBLAS GEMM on the GPU.
 *
 * cuBLAS is column-major: the row-major C = op(A) op(B) is computed as
 * the column-major C^T = op(B)^T op(A)^T, which is the same memory.
 * FP32 products stay FP32 (no TF32), as PyTorch's default.
 *
 * Convolution takes the images in chunks whose columns fit a 256 MiB
 * workspace. Forward: im2col of the chunk, then one strided-batched GEMM
 * W[O,K] x col[K,L] per group, writing straight into NCHW. Backward-data:
 * a batched W^T x gy into columns, then col2im as a gather (each input
 * element sums the columns that read it, in a fixed order: no atomics).
 * Backward-filter: the chunk's columns laid out [K, chunk*L] and gy as
 * [O, chunk*L], so one GEMM sums over the chunk's images; chunks add up.
 */
#include <cuda_bf16.h>
#include "backends/cuda/cuda_common.cuh"

#define CONV_WORKSPACE (256u << 20)

__global__ void k_to_bf16(int64_t n, __nv_bfloat16 *o, const float *a)
{
    MFC_FOR(i, n) o[i] = __float2bfloat16_rn(a[i]);
}

/* Elements an operand spans: batch matrices of rows x cols, ld apart. */
static int64_t span_of(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld)
{
    if (rows == 0 || cols == 0 || batch == 0) return 0;
    return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* Autocast's GEMM: A and B hold bfloat16 values, which convert exactly;
 * cuBLAS multiplies them on the tensor cores, accumulating in fp32. */
static mf_status gemm_bf16(const mfi_gemm *g, cublasOperation_t opa, cublasOperation_t opb)
{
    int64_t sa = span_of(g->batch, g->stride_a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda);
    int64_t sb = span_of(g->batch, g->stride_b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb);
    size_t bytes = (size_t)(sa + sb + 1) * sizeof(__nv_bfloat16);
    __nv_bfloat16 *ha = (__nv_bfloat16 *)mfi_alloc_on(MF_DEV_CUDA, bytes), *hb = ha ? ha + sa : NULL;
    if (!ha) MF_FAIL(MF_ERR_NOMEM, "gemm: out of GPU memory for %zu bytes of bfloat16 operands", bytes);
    if (sa) k_to_bf16<<<mfc_blocks(sa), MFC_THREADS, 0, mfc_stream>>>(sa, ha, (const float *)g->a);
    if (sb) k_to_bf16<<<mfc_blocks(sb), MFC_THREADS, 0, mfc_stream>>>(sb, hb, (const float *)g->b);
    cudaError_t e = cudaGetLastError();
    float alpha = (float)g->alpha, beta = (float)g->beta;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (e == cudaSuccess)
        s = mfc_cublas.gemm_sb_ex(mfc_blas, opb, opa, (int)g->n, (int)g->m, (int)g->k, &alpha, hb, CUDA_R_16BF,
                                       (int)g->ldb, g->stride_b, ha, CUDA_R_16BF, (int)g->lda, g->stride_a, &beta, g->c,
                                       CUDA_R_32F, (int)g->ldc, g->stride_c, (int)g->batch, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT);
    mfi_free_on(MF_DEV_CUDA, ha, bytes);   /* reused only by kernels queued after this GEMM */
    if (e != cudaSuccess) return mfc_fail("gemm (bf16 operands)", e);
    if (s != CUBLAS_STATUS_SUCCESS) return mfc_blas_fail("gemm (bf16)", s);
    return MF_OK;
}

extern "C" mf_status mfc_gemm(const mfi_gemm *g)
{
    if (g->m == 0 || g->n == 0 || g->batch == 0) return MF_OK;
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->lda > INT32_MAX || g->ldb > INT32_MAX ||
        g->ldc > INT32_MAX || g->batch > INT32_MAX)
        MF_FAIL(MF_ERR_SHAPE, "gemm: a dimension exceeds cuBLAS's int range");
    cublasOperation_t opb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opa = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s;
    if (g->dtype == MF_F32 && g->bf16) return gemm_bf16(g, opa, opb);
    if (g->dtype == MF_F32) {
        float alpha = (float)g->alpha, beta = (float)g->beta;
        s = mfc_cublas.sgemm_sb(mfc_blas, opb, opa, (int)g->n, (int)g->m, (int)g->k, &alpha,
                                      (const float *)g->b, (int)g->ldb, g->stride_b, (const float *)g->a, (int)g->lda,
                                      g->stride_a, &beta, (float *)g->c, (int)g->ldc, g->stride_c, (int)g->batch);
    } else if (g->dtype == MF_F64) {
        double alpha = g->alpha, beta = g->beta;
        s = mfc_cublas.dgemm_sb(mfc_blas, opb, opa, (int)g->n, (int)g->m, (int)g->k, &alpha,
                                      (const double *)g->b, (int)g->ldb, g->stride_b, (const double *)g->a,
                                      (int)g->lda, g->stride_a, &beta, (double *)g->c, (int)g->ldc, g->stride_c,
                                      (int)g->batch);
    } else {
        MF_FAIL(MF_ERR_DTYPE, "gemm: dtype %s is not f32 or f64 (cuda)", mf_dtype_name(g->dtype));
    }
    if (s != CUBLAS_STATUS_SUCCESS) return mfc_blas_fail("gemm", s);
    return MF_OK;
}

/* ------------------------------------------------------------ convolution */
typedef struct conv_geom {
    int64_t n, c, h, w, oc, oh, ow;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t cg, ocg, K, L;
} conv_geom;

static conv_geom geom_of(const mfi_conv2d *p)
{
    conv_geom g;
    g.n = p->n; g.c = p->c; g.h = p->h; g.w = p->w;
    g.oc = p->oc; g.oh = p->oh; g.ow = p->ow;
    g.kh = p->kh; g.kw = p->kw;
    g.sh = p->stride[0]; g.sw = p->stride[1];
    g.ph = p->padding[0]; g.pw = p->padding[1];
    g.dh = p->dilation[0]; g.dw = p->dilation[1];
    g.cg = p->c / p->groups;
    g.ocg = p->oc / p->groups;
    g.K = g.cg * p->kh * p->kw;
    g.L = p->oh * p->ow;
    return g;
}

/* col[i*sn + r*sr + l] for image n0+i, row r = (c, ki, kj) of channels
 * [c0, c0+cg), output position l. */
template <typename T>
__global__ void k_im2col(conv_geom g, const T *x, int64_t n0, int64_t nb, int64_t c0, T *col, int64_t sn, int64_t sr)
{
    MFC_FOR(e, nb * g.K * g.L) {
        int64_t l = e % g.L, r = (e / g.L) % g.K, i = e / (g.L * g.K);
        int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
        int64_t oh = l / g.ow, ow = l % g.ow;
        int64_t ih = oh * g.sh - g.ph + ki * g.dh, iw = ow * g.sw - g.pw + kj * g.dw;
        T v = (T)0;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) v = x[(((n0 + i) * g.c + c0 + c) * g.h + ih) * g.w + iw];
        col[i * sn + r * sr + l] = v;
    }
}

/* gx[n0+i, c0+c, ih, iw] = the sum of the columns that read it. */
template <typename T>
__global__ void k_col2im(conv_geom g, const T *col, int64_t n0, int64_t nb, int64_t c0, T *gx)
{
    MFC_FOR(e, nb * g.cg * g.h * g.w) {
        int64_t iw = e % g.w, ih = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.cg, i = e / (g.w * g.h * g.cg);
        double s = 0;
        for (int ki = 0; ki < g.kh; ki++) {
            int64_t th = ih + g.ph - ki * g.dh;
            if (th < 0 || th % g.sh) continue;
            int64_t oh = th / g.sh;
            if (oh >= g.oh) continue;
            for (int kj = 0; kj < g.kw; kj++) {
                int64_t tw = iw + g.pw - kj * g.dw;
                if (tw < 0 || tw % g.sw) continue;
                int64_t ow = tw / g.sw;
                if (ow >= g.ow) continue;
                int64_t r = (c * g.kh + ki) * g.kw + kj;
                s += (double)col[(i * g.K + r) * g.L + oh * g.ow + ow];
            }
        }
        gx[(((n0 + i) * g.c + c0 + c) * g.h + ih) * g.w + iw] = (T)s;
    }
}

template <typename T>
__global__ void k_add_bias(int64_t n, int64_t oc, int64_t L, T *y, const T *b)
{
    MFC_FOR(e, n * oc * L) y[e] += b[(e / L) % oc];
}

/* gyT[o, i*L + l] = gy[n0+i, o0+o, l] */
template <typename T>
__global__ void k_gy_rows(conv_geom g, const T *gy, int64_t n0, int64_t nb, int64_t o0, T *gyt)
{
    MFC_FOR(e, nb * g.ocg * g.L) {
        int64_t l = e % g.L, i = (e / g.L) % nb, o = e / (g.L * nb);
        gyt[e] = gy[((n0 + i) * g.oc + o0 + o) * g.L + l];
    }
}

/* Images per chunk so that `per_image` elements of each fit the workspace. */
static int64_t chunk_of(const conv_geom &g, int64_t per_image, size_t es)
{
    int64_t nb = per_image > 0 ? (int64_t)(CONV_WORKSPACE / ((size_t)per_image * es)) : g.n;
    if (nb < 1) nb = 1;
    return nb < g.n ? nb : g.n;
}

template <typename T>
static mf_status conv_fwd(const mfi_conv2d *p, T *y, const T *x, const T *w, const T *bias, mf_dtype dt)
{
    conv_geom g = geom_of(p);
    int64_t nb = chunk_of(g, g.K * g.L, sizeof(T));
    size_t bytes = (size_t)(nb * g.K * g.L) * sizeof(T);
    T *col = (T *)mfi_alloc_on(MF_DEV_CUDA, bytes);
    if (!col) MF_FAIL(MF_ERR_NOMEM, "conv2d: out of GPU memory for a %zu-byte workspace", bytes);
    mf_status st = MF_OK;
    for (int64_t n0 = 0; n0 < g.n && st == MF_OK; n0 += nb) {
        int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
        for (int grp = 0; grp < p->groups && st == MF_OK; grp++) {
            k_im2col<T><<<mfc_blocks(cnt * g.K * g.L), MFC_THREADS, 0, mfc_stream>>>(g, x, n0, cnt, grp * g.cg, col,
                                                                                    g.K * g.L, g.L);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) {
                st = mfc_fail("conv2d im2col", e);
                break;
            }
            mfi_gemm gm = {dt, false, false, g.ocg, g.L, g.K, 1.0, 0.0,
                           w + grp * g.ocg * g.K, g.K, 0,
                           col, g.L, g.K * g.L,
                           y + (n0 * g.oc + grp * g.ocg) * g.L, g.L, g.oc * g.L, cnt, p->bf16};
            st = mfc_gemm(&gm);
        }
    }
    mfi_free_on(MF_DEV_CUDA, col, bytes);
    if (st != MF_OK || !bias) return st;
    k_add_bias<T><<<mfc_blocks(g.n * g.oc * g.L), MFC_THREADS, 0, mfc_stream>>>(g.n, g.oc, g.L, y, bias);
    MFC_LAUNCHED("conv2d bias");
    return MF_OK;
}

template <typename T>
static mf_status conv_bwd_data(const mfi_conv2d *p, T *gx, const T *gy, const T *w, mf_dtype dt)
{
    conv_geom g = geom_of(p);
    int64_t nb = chunk_of(g, g.K * g.L, sizeof(T));
    size_t bytes = (size_t)(nb * g.K * g.L) * sizeof(T);
    T *col = (T *)mfi_alloc_on(MF_DEV_CUDA, bytes);
    if (!col) MF_FAIL(MF_ERR_NOMEM, "conv2d backward: out of GPU memory for a %zu-byte workspace", bytes);
    mf_status st = MF_OK;
    for (int64_t n0 = 0; n0 < g.n && st == MF_OK; n0 += nb) {
        int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
        for (int grp = 0; grp < p->groups && st == MF_OK; grp++) {
            mfi_gemm gm = {dt, true, false, g.K, g.L, g.ocg, 1.0, 0.0,
                           w + grp * g.ocg * g.K, g.K, 0,
                           gy + (n0 * g.oc + grp * g.ocg) * g.L, g.L, g.oc * g.L,
                           col, g.L, g.K * g.L, cnt, p->bf16};
            st = mfc_gemm(&gm);
            if (st != MF_OK) break;
            k_col2im<T><<<mfc_blocks(cnt * g.cg * g.h * g.w), MFC_THREADS, 0, mfc_stream>>>(g, col, n0, cnt,
                                                                                           grp * g.cg, gx);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) st = mfc_fail("conv2d col2im", e);
        }
    }
    mfi_free_on(MF_DEV_CUDA, col, bytes);
    return st;
}

template <typename T>
static mf_status conv_bwd_filter(const mfi_conv2d *p, T *gw, const T *gy, const T *x, mf_dtype dt)
{
    conv_geom g = geom_of(p);
    int64_t nb = chunk_of(g, (g.K + g.ocg) * g.L, sizeof(T));
    size_t cbytes = (size_t)(nb * g.K * g.L) * sizeof(T), gbytes = (size_t)(nb * g.ocg * g.L) * sizeof(T);
    T *col = (T *)mfi_alloc_on(MF_DEV_CUDA, cbytes);
    T *gyt = (T *)mfi_alloc_on(MF_DEV_CUDA, gbytes);
    mf_status st = MF_OK;
    if (!col || !gyt) st = mfi_error(MF_ERR_NOMEM, "conv2d backward: out of GPU memory for a workspace");
    if (g.n == 0 && st == MF_OK) {   /* no images: a zero gradient */
        MFC_CALL("conv2d backward", cudaMemsetAsync(gw, 0, (size_t)(g.oc * g.K) * sizeof(T), mfc_stream));
    }
    for (int64_t n0 = 0; n0 < g.n && st == MF_OK; n0 += nb) {
        int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
        for (int grp = 0; grp < p->groups && st == MF_OK; grp++) {
            k_im2col<T><<<mfc_blocks(cnt * g.K * g.L), MFC_THREADS, 0, mfc_stream>>>(g, x, n0, cnt, grp * g.cg, col,
                                                                                    g.L, cnt * g.L);
            k_gy_rows<T><<<mfc_blocks(cnt * g.ocg * g.L), MFC_THREADS, 0, mfc_stream>>>(g, gy, n0, cnt,
                                                                                       grp * g.ocg, gyt);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) {
                st = mfc_fail("conv2d backward im2col", e);
                break;
            }
            mfi_gemm gm = {dt, false, true, g.ocg, g.K, cnt * g.L, 1.0, n0 == 0 ? 0.0 : 1.0,
                           gyt, cnt * g.L, 0,
                           col, cnt * g.L, 0,
                           gw + grp * g.ocg * g.K, g.K, 0, 1, p->bf16};
            st = mfc_gemm(&gm);
        }
    }
    if (col) mfi_free_on(MF_DEV_CUDA, col, cbytes);
    if (gyt) mfi_free_on(MF_DEV_CUDA, gyt, gbytes);
    return st;
}

extern "C" mf_status mfc_conv2d_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    MFC_FLOAT_CASES(x->dtype, "conv2d",
                    return conv_fwd<T>(p, (T *)out->data, (const T *)x->data, (const T *)w->data,
                                       bias ? (const T *)bias->data : (const T *)NULL, x->dtype));
    return MF_OK;
}

extern "C" mf_status mfc_conv2d_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    MFC_FLOAT_CASES(gx->dtype, "conv2d backward",
                    return conv_bwd_data<T>(p, (T *)gx->data, (const T *)gy->data, (const T *)w->data, gx->dtype));
    return MF_OK;
}

extern "C" mf_status mfc_conv2d_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    MFC_FLOAT_CASES(gw->dtype, "conv2d backward",
                    return conv_bwd_filter<T>(p, (T *)gw->data, (const T *)gy->data, (const T *)x->data, gw->dtype));
    return MF_OK;
}
