/*
 * backends/cuda/cuda_pool.cu - max, average and adaptive-average pooling
 * over NCHW planes on the GPU, with the CPU backend's windows
 * (backends/cpu/cpu_pool.c): one thread per output forward; backward
 * gathers, each input element summing the windows that cover it in a
 * fixed order, so that overlapping windows need no atomics.
 */
#include <math.h>
#include "backends/cuda/cuda_common.cuh"

typedef struct window { int64_t h0, h1, w0, w1; double div; } window;

__device__ static inline window pool_window(const mfi_pool2d &p, int64_t oh, int64_t ow)
{
    window w;
    if (p.adaptive) {
        w.h0 = oh * p.h / p.oh;
        w.h1 = ((oh + 1) * p.h + p.oh - 1) / p.oh;
        w.w0 = ow * p.w / p.ow;
        w.w1 = ((ow + 1) * p.w + p.ow - 1) / p.ow;
        w.div = (double)((w.h1 - w.h0) * (w.w1 - w.w0));
        return w;
    }
    int64_t hs = oh * p.stride[0] - p.padding[0], ws = ow * p.stride[1] - p.padding[1];
    int64_t he = hs + p.kernel[0], we = ws + p.kernel[1];
    int64_t hp = he < p.h + p.padding[0] ? he : p.h + p.padding[0];
    int64_t wp = we < p.w + p.padding[1] ? we : p.w + p.padding[1];
    double padded = (double)((hp - hs) * (wp - ws));
    w.h0 = hs < 0 ? 0 : hs;
    w.w0 = ws < 0 ? 0 : ws;
    w.h1 = he < p.h ? he : p.h;
    w.w1 = we < p.w ? we : p.w;
    w.div = p.count_include_pad ? padded : (double)((w.h1 - w.h0) * (w.w1 - w.w0));
    return w;
}

/* The output rows (or columns) whose windows may cover input row i of
 * n, for outputs no of kernel k, stride s, padding pd: a superset,
 * checked against pool_window by the caller. */
__device__ static inline void cover(const mfi_pool2d &p, int64_t i, int64_t n, int64_t no, int k, int s, int pd,
                                    int64_t *lo, int64_t *hi)
{
    if (p.adaptive) {
        *lo = i * no / n - 1;
        *hi = (i + 1) * no / n + 1;
    } else {
        int64_t t = i + pd - k + 1;
        *lo = t <= 0 ? 0 : (t + s - 1) / s;
        *hi = (i + pd) / s;
    }
    if (*lo < 0) *lo = 0;
    if (*hi > no - 1) *hi = no - 1;
}

template <typename T>
__global__ void k_maxpool(mfi_pool2d p, T *out, int32_t *idx, const T *x)
{
    int64_t L = p.oh * p.ow;
    MFC_FOR(e, p.n * p.c * L) {
        int64_t pl = e / L, oh = (e % L) / p.ow, ow = e % p.ow;
        const T *a = x + pl * p.h * p.w;
        window w = pool_window(p, oh, ow);
        T best = -INFINITY;
        int32_t bi = (int32_t)(w.h0 * p.w + w.w0);
        for (int64_t ih = w.h0; ih < w.h1; ih++)
            for (int64_t iw = w.w0; iw < w.w1; iw++) {
                T v = a[ih * p.w + iw];
                if (v > best || v != v) {
                    best = v;
                    bi = (int32_t)(ih * p.w + iw);
                }
            }
        out[e] = best;
        idx[e] = bi;
    }
}

extern "C" mf_status mfc_maxpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *idx, mfi_cv *x)
{
    int64_t n = p->n * p->c * p->oh * p->ow;
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(x->dtype, "max_pool2d",
                    k_maxpool<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(*p, (T *)out->data,
                                                                                (int32_t *)idx->data, (const T *)x->data));
    MFC_LAUNCHED("max_pool2d");
    return MF_OK;
}

/* max: the windows covering the element whose argmax it is; avg: every
 * window covering it, each its share. */
template <typename T>
__global__ void k_pool_bwd(mfi_pool2d p, bool max, T *gx, const T *gy, const int32_t *idx)
{
    int64_t HW = p.h * p.w, L = p.oh * p.ow;
    MFC_FOR(e, p.n * p.c * HW) {
        int64_t pl = e / HW, ih = (e % HW) / p.w, iw = e % p.w;
        int64_t h0, h1, w0, w1;
        cover(p, ih, p.h, p.oh, p.kernel[0], p.stride[0], p.padding[0], &h0, &h1);
        cover(p, iw, p.w, p.ow, p.kernel[1], p.stride[1], p.padding[1], &w0, &w1);
        double s = 0;
        for (int64_t oh = h0; oh <= h1; oh++)
            for (int64_t ow = w0; ow <= w1; ow++) {
                int64_t o = pl * L + oh * p.ow + ow;
                if (max) {
                    if (idx[o] == (int32_t)(ih * p.w + iw)) s += (double)gy[o];
                    continue;
                }
                window w = pool_window(p, oh, ow);
                if (w.div <= 0 || ih < w.h0 || ih >= w.h1 || iw < w.w0 || iw >= w.w1) continue;
                s += (double)(T)(gy[o] / w.div);
            }
        gx[e] = (T)s;
    }
}

extern "C" mf_status mfc_maxpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *idx)
{
    int64_t n = p->n * p->c * p->h * p->w;
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(gx->dtype, "max_pool2d backward",
                    k_pool_bwd<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        *p, true, (T *)gx->data, (const T *)gy->data, (const int32_t *)idx->data));
    MFC_LAUNCHED("max_pool2d backward");
    return MF_OK;
}

template <typename T>
__global__ void k_avgpool(mfi_pool2d p, T *out, const T *x)
{
    int64_t L = p.oh * p.ow;
    MFC_FOR(e, p.n * p.c * L) {
        int64_t pl = e / L, oh = (e % L) / p.ow, ow = e % p.ow;
        const T *a = x + pl * p.h * p.w;
        window w = pool_window(p, oh, ow);
        double s = 0;
        for (int64_t ih = w.h0; ih < w.h1; ih++)
            for (int64_t iw = w.w0; iw < w.w1; iw++) s += a[ih * p.w + iw];
        out[e] = (T)(w.div > 0 ? s / w.div : 0);
    }
}

extern "C" mf_status mfc_avgpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *x)
{
    int64_t n = p->n * p->c * p->oh * p->ow;
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(x->dtype, "avg_pool2d",
                    k_avgpool<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(*p, (T *)out->data, (const T *)x->data));
    MFC_LAUNCHED("avg_pool2d");
    return MF_OK;
}

extern "C" mf_status mfc_avgpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy)
{
    int64_t n = p->n * p->c * p->h * p->w;
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(gx->dtype, "avg_pool2d backward",
                    k_pool_bwd<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        *p, false, (T *)gx->data, (const T *)gy->data, (const int32_t *)NULL));
    MFC_LAUNCHED("avg_pool2d backward");
    return MF_OK;
}
