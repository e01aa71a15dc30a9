/*
 * backends/cuda/cuda_norm.cu - batch norm and layer norm on the GPU,
 * with the CPU backend's formulas (backends/cpu/cpu_norm_tmpl.h): one
 * block per channel (batch norm) or row (layer norm) sums in double,
 * then the same block writes the outputs. Layer norm's weight and bias
 * gradients take one thread per column, adding the rows in order.
 */
#include <math.h>
#include "backends/cuda/cuda_common.cuh"

#define NORM_THREADS 256

template <typename T>
__global__ void k_bn_fwd(mfi_bnorm p, T *y, const T *x, const T *w, const T *b, T *rm, T *rv, T *sm, T *si)
{
    __shared__ double sh[NORM_THREADS];
    const int64_t n = p.n, c = p.c, s = p.s, M = n * s;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double mean, invstd;
        if (p.training) {
            double sum = 0, sq = 0;
            for (int64_t q = threadIdx.x; q < M; q += blockDim.x) sum += (double)x[((q / s) * c + ch) * s + q % s];
            sum = mfc_block_sum(sum, sh);
            mean = M ? sum / (double)M : 0;
            for (int64_t q = threadIdx.x; q < M; q += blockDim.x) {
                double d = (double)x[((q / s) * c + ch) * s + q % s] - mean;
                sq += d * d;
            }
            sq = mfc_block_sum(sq, sh);
            double var = M ? sq / (double)M : 0;
            invstd = 1.0 / sqrt(var + p.eps);
            if (threadIdx.x == 0) {
                if (rm) rm[ch] = (T)((1 - p.momentum) * (double)rm[ch] + p.momentum * mean);
                if (rv) rv[ch] = (T)((1 - p.momentum) * (double)rv[ch] + p.momentum * (M > 1 ? sq / (double)(M - 1) : var));
            }
        } else {
            mean = (double)rm[ch];
            invstd = 1.0 / sqrt((double)rv[ch] + p.eps);
        }
        if (threadIdx.x == 0) {
            sm[ch] = (T)mean;
            si[ch] = (T)invstd;
        }
        double scale = invstd * (w ? (double)w[ch] : 1), shift = (b ? (double)b[ch] : 0) - mean * scale;
        for (int64_t q = threadIdx.x; q < M; q += blockDim.x) {
            int64_t at = ((q / s) * c + ch) * s + q % s;
            y[at] = (T)((double)x[at] * scale + shift);
        }
        __syncthreads();
    }
}

extern "C" mf_status mfc_batchnorm_fwd(const mfi_bnorm *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *b,
                                       mfi_cv *rmean, mfi_cv *rvar, mfi_cv *smean, mfi_cv *sinvstd)
{
    if (p->c == 0) return MF_OK;
    if (!p->training && (!rmean || !rvar))
        MF_FAIL(MF_ERR_ARG, "batch_norm: evaluation needs the running statistics");
    unsigned blocks = p->c < 65535 ? (unsigned)p->c : 65535;
#define P_(v) ((v) ? (T *)(v)->data : (T *)NULL)
    MFC_FLOAT_CASES(x->dtype, "batch_norm",
                    k_bn_fwd<T><<<blocks, NORM_THREADS, 0, mfc_stream>>>(
                        *p, (T *)out->data, (const T *)x->data, P_(w), P_(b), P_(rmean), P_(rvar), (T *)smean->data,
                        (T *)sinvstd->data));
    MFC_LAUNCHED("batch_norm");
    return MF_OK;
}

template <typename T>
__global__ void k_bn_bwd(mfi_bnorm p, T *gx, T *gw, T *gb, const T *gy, const T *x, const T *w, const T *sm,
                         const T *si)
{
    __shared__ double sh[NORM_THREADS];
    const int64_t n = p.n, c = p.c, s = p.s, M = n * s;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double mean = (double)sm[ch], invstd = (double)si[ch], sg = 0, sgx = 0;
        for (int64_t q = threadIdx.x; q < M; q += blockDim.x) {
            int64_t at = ((q / s) * c + ch) * s + q % s;
            sg += (double)gy[at];
            sgx += (double)gy[at] * ((double)x[at] - mean);
        }
        sg = mfc_block_sum(sg, sh);
        sgx = mfc_block_sum(sgx, sh) * invstd;   /* sum(gy * xhat) */
        if (threadIdx.x == 0) {
            if (gw) gw[ch] = (T)sgx;
            if (gb) gb[ch] = (T)sg;
        }
        if (gx) {
            double wv = w ? (double)w[ch] : 1;
            double k = wv * invstd / (double)M;
            for (int64_t q = threadIdx.x; q < M; q += blockDim.x) {
                int64_t at = ((q / s) * c + ch) * s + q % s;
                if (p.training) {
                    double xh = ((double)x[at] - mean) * invstd;
                    gx[at] = (T)(k * ((double)M * (double)gy[at] - sg - xh * sgx));
                } else {
                    gx[at] = (T)((double)gy[at] * wv * invstd);
                }
            }
        }
        __syncthreads();
    }
}

extern "C" mf_status mfc_batchnorm_bwd(const mfi_bnorm *p, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy,
                                       mfi_cv *x, mfi_cv *w, mfi_cv *smean, mfi_cv *sinvstd)
{
    if (p->c == 0) return MF_OK;
    unsigned blocks = p->c < 65535 ? (unsigned)p->c : 65535;
    MFC_FLOAT_CASES(gy->dtype, "batch_norm backward",
                    k_bn_bwd<T><<<blocks, NORM_THREADS, 0, mfc_stream>>>(
                        *p, P_(gx), P_(gw), P_(gb), (const T *)gy->data, (const T *)x->data, P_(w),
                        (const T *)smean->data, (const T *)sinvstd->data));
    MFC_LAUNCHED("batch_norm backward");
    return MF_OK;
}

template <typename T>
__global__ void k_ln_fwd(int64_t rows, int64_t cols, double eps, T *y, const T *x, const T *w, const T *b, T *mean,
                         T *rstd)
{
    __shared__ double sh[NORM_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *a = x + r * cols;
        double sum = 0, sq = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += (double)a[j];
        sum = mfc_block_sum(sum, sh);
        double mu = cols ? sum / (double)cols : 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sq += ((double)a[j] - mu) * ((double)a[j] - mu);
        sq = mfc_block_sum(sq, sh);
        double rs = 1.0 / sqrt((cols ? sq / (double)cols : 0) + eps);
        if (threadIdx.x == 0) {
            mean[r] = (T)mu;
            rstd[r] = (T)rs;
        }
        T *o = y + r * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            o[j] = (T)(((double)a[j] - mu) * rs * (w ? (double)w[j] : 1) + (b ? (double)b[j] : 0));
    }
}

extern "C" mf_status mfc_layernorm_fwd(int64_t rows, int64_t cols, double eps, mfi_cv *out, mfi_cv *x, mfi_cv *w,
                                       mfi_cv *b, mfi_cv *mean, mfi_cv *rstd)
{
    if (rows == 0) return MF_OK;
    unsigned blocks = rows < 65535 * 16 ? (unsigned)rows : 65535 * 16;
    MFC_FLOAT_CASES(x->dtype, "layer_norm",
                    k_ln_fwd<T><<<blocks, NORM_THREADS, 0, mfc_stream>>>(
                        rows, cols, eps, (T *)out->data, (const T *)x->data, P_(w), P_(b), (T *)mean->data,
                        (T *)rstd->data));
    MFC_LAUNCHED("layer_norm");
    return MF_OK;
}

template <typename T>
__global__ void k_ln_bwd_x(int64_t rows, int64_t cols, T *gx, const T *gy, const T *x, const T *w, const T *mean,
                           const T *rstd)
{
    __shared__ double sh[NORM_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *g = gy + r * cols, *a = x + r * cols;
        double mu = (double)mean[r], rs = (double)rstd[r], s1 = 0, s2 = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            double gw_ = (double)g[j] * (w ? (double)w[j] : 1);
            s1 += gw_;
            s2 += gw_ * ((double)a[j] - mu) * rs;
        }
        s1 = mfc_block_sum(s1, sh);
        s2 = mfc_block_sum(s2, sh);
        T *o = gx + r * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            double gw_ = (double)g[j] * (w ? (double)w[j] : 1), xh = ((double)a[j] - mu) * rs;
            o[j] = (T)(rs / (double)cols * ((double)cols * gw_ - s1 - xh * s2));
        }
    }
}

template <typename T>
__global__ void k_ln_bwd_w(int64_t rows, int64_t cols, T *gw, T *gb, const T *gy, const T *x, const T *mean,
                           const T *rstd)
{
    MFC_FOR(j, cols) {
        double sw = 0, sb = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = (double)gy[r * cols + j];
            sw += g * ((double)x[r * cols + j] - (double)mean[r]) * (double)rstd[r];
            sb += g;
        }
        if (gw) gw[j] = (T)sw;
        if (gb) gb[j] = (T)sb;
    }
}

extern "C" mf_status mfc_layernorm_bwd(int64_t rows, int64_t cols, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy,
                                       mfi_cv *x, mfi_cv *w, mfi_cv *mean, mfi_cv *rstd)
{
    unsigned blocks = rows < 65535 * 16 ? (unsigned)rows : 65535 * 16;
    MFC_FLOAT_CASES(gy->dtype, "layer_norm backward",
        if (gx && rows > 0)
            k_ln_bwd_x<T><<<blocks, NORM_THREADS, 0, mfc_stream>>>(rows, cols, (T *)gx->data, (const T *)gy->data,
                                                                   (const T *)x->data, P_(w), (const T *)mean->data,
                                                                   (const T *)rstd->data);
        if ((gw || gb) && cols > 0)
            k_ln_bwd_w<T><<<mfc_blocks(cols), MFC_THREADS, 0, mfc_stream>>>(rows, cols, P_(gw), P_(gb),
                                                                            (const T *)gy->data, (const T *)x->data,
                                                                            (const T *)mean->data,
                                                                            (const T *)rstd->data));
    MFC_LAUNCHED("layer_norm backward");
    return MF_OK;
}
#undef P_
