/*
 * backends/cpu/cpu_pool.c - max, average and adaptive-average pooling
 * over NCHW planes, one plane per OpenMP iteration.
 *
 * Average pooling divides as PyTorch does: by the window clipped to the
 * padded input when count_include_pad, else by the in-image elements.
 * Adaptive windows run from floor(i*H/OH) to ceil((i+1)*H/OH).
 */
#include <math.h>
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"

typedef struct window { int64_t h0, h1, w0, w1; double div; } window;

static window pool_window(const mfi_pool2d *p, int64_t oh, int64_t ow)
{
    window w;
    if (p->adaptive) {
        w.h0 = oh * p->h / p->oh;
        w.h1 = ((oh + 1) * p->h + p->oh - 1) / p->oh;
        w.w0 = ow * p->w / p->ow;
        w.w1 = ((ow + 1) * p->w + p->ow - 1) / p->ow;
        w.div = (double)((w.h1 - w.h0) * (w.w1 - w.w0));
        return w;
    }
    int64_t hs = oh * p->stride[0] - p->padding[0], ws = ow * p->stride[1] - p->padding[1];
    int64_t he = hs + p->kernel[0], we = ws + p->kernel[1];
    int64_t hp = he < p->h + p->padding[0] ? he : p->h + p->padding[0];
    int64_t wp = we < p->w + p->padding[1] ? we : p->w + p->padding[1];
    double padded = (double)((hp - hs) * (wp - ws));
    w.h0 = hs < 0 ? 0 : hs;
    w.w0 = ws < 0 ? 0 : ws;
    w.h1 = he < p->h ? he : p->h;
    w.w1 = we < p->w ? we : p->w;
    w.div = p->count_include_pad ? padded : (double)((w.h1 - w.h0) * (w.w1 - w.w0));
    return w;
}

#define MAXPOOL_FWD(T)                                                                 \
    do {                                                                               \
        const T *xv = x->data;                                                         \
        T *ov = out->data;                                                             \
        int32_t *iv = idx->data;                                                       \
        _Pragma("omp parallel for if (cpu_par(planes * L)) schedule(static)")          \
        for (int64_t pl = 0; pl < planes; pl++) {                                      \
            const T *a = xv + pl * p->h * p->w;                                        \
            for (int64_t oh = 0; oh < p->oh; oh++)                                     \
                for (int64_t ow = 0; ow < p->ow; ow++) {                               \
                    window w = pool_window(p, oh, ow);                                 \
                    T best = -INFINITY;                                                \
                    int32_t bi = (int32_t)(w.h0 * p->w + w.w0);                        \
                    for (int64_t ih = w.h0; ih < w.h1; ih++)                           \
                        for (int64_t iw = w.w0; iw < w.w1; iw++) {                     \
                            T v = a[ih * p->w + iw];                                   \
                            if (v > best || v != v) { best = v; bi = (int32_t)(ih * p->w + iw); } \
                        }                                                              \
                    ov[pl * L + oh * p->ow + ow] = best;                               \
                    iv[pl * L + oh * p->ow + ow] = bi;                                 \
                }                                                                      \
        }                                                                              \
    } while (0)

mf_status mf_cpu_maxpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *idx, mfi_cv *x)
{
    int64_t planes = p->n * p->c, L = p->oh * p->ow;
    if (x->dtype == MF_F32) MAXPOOL_FWD(float);
    else if (x->dtype == MF_F64) MAXPOOL_FWD(double);
    else MF_FAIL(MF_ERR_DTYPE, "max_pool2d: not a float dtype");
    return MF_OK;
}

#define MAXPOOL_BWD(T)                                                                 \
    do {                                                                               \
        T *g = gx->data;                                                               \
        const T *gv = gy->data;                                                        \
        const int32_t *iv = idx->data;                                                 \
        _Pragma("omp parallel for if (cpu_par(planes * L)) schedule(static)")          \
        for (int64_t pl = 0; pl < planes; pl++) {                                      \
            T *a = g + pl * HW;                                                        \
            for (int64_t i = 0; i < HW; i++) a[i] = 0;                                 \
            for (int64_t i = 0; i < L; i++) a[iv[pl * L + i]] += gv[pl * L + i];       \
        }                                                                              \
    } while (0)

mf_status mf_cpu_maxpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *idx)
{
    int64_t planes = p->n * p->c, L = p->oh * p->ow, HW = p->h * p->w;
    if (gx->dtype == MF_F32) MAXPOOL_BWD(float);
    else if (gx->dtype == MF_F64) MAXPOOL_BWD(double);
    else MF_FAIL(MF_ERR_DTYPE, "max_pool2d backward: not a float dtype");
    return MF_OK;
}

#define AVGPOOL_FWD(T)                                                                 \
    do {                                                                               \
        const T *xv = x->data;                                                         \
        T *ov = out->data;                                                             \
        _Pragma("omp parallel for if (cpu_par(planes * L)) schedule(static)")          \
        for (int64_t pl = 0; pl < planes; pl++) {                                      \
            const T *a = xv + pl * p->h * p->w;                                        \
            for (int64_t oh = 0; oh < p->oh; oh++)                                     \
                for (int64_t ow = 0; ow < p->ow; ow++) {                               \
                    window w = pool_window(p, oh, ow);                                 \
                    double s = 0;                                                      \
                    for (int64_t ih = w.h0; ih < w.h1; ih++)                           \
                        for (int64_t iw = w.w0; iw < w.w1; iw++) s += a[ih * p->w + iw]; \
                    ov[pl * L + oh * p->ow + ow] = (T)(w.div > 0 ? s / w.div : 0);     \
                }                                                                      \
        }                                                                              \
    } while (0)

mf_status mf_cpu_avgpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *x)
{
    int64_t planes = p->n * p->c, L = p->oh * p->ow;
    if (x->dtype == MF_F32) AVGPOOL_FWD(float);
    else if (x->dtype == MF_F64) AVGPOOL_FWD(double);
    else MF_FAIL(MF_ERR_DTYPE, "avg_pool2d: not a float dtype");
    return MF_OK;
}

#define AVGPOOL_BWD(T)                                                                 \
    do {                                                                               \
        T *g = gx->data;                                                               \
        const T *gv = gy->data;                                                        \
        _Pragma("omp parallel for if (cpu_par(planes * L)) schedule(static)")          \
        for (int64_t pl = 0; pl < planes; pl++) {                                      \
            T *a = g + pl * p->h * p->w;                                               \
            for (int64_t i = 0; i < p->h * p->w; i++) a[i] = 0;                        \
            for (int64_t oh = 0; oh < p->oh; oh++)                                     \
                for (int64_t ow = 0; ow < p->ow; ow++) {                               \
                    window w = pool_window(p, oh, ow);                                 \
                    if (w.div <= 0) continue;                                          \
                    T share = (T)(gv[pl * L + oh * p->ow + ow] / w.div);               \
                    for (int64_t ih = w.h0; ih < w.h1; ih++)                           \
                        for (int64_t iw = w.w0; iw < w.w1; iw++) a[ih * p->w + iw] += share; \
                }                                                                      \
        }                                                                              \
    } while (0)

mf_status mf_cpu_avgpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy)
{
    int64_t planes = p->n * p->c, L = p->oh * p->ow;
    if (gx->dtype == MF_F32) AVGPOOL_BWD(float);
    else if (gx->dtype == MF_F64) AVGPOOL_BWD(double);
    else MF_FAIL(MF_ERR_DTYPE, "avg_pool2d backward: not a float dtype");
    return MF_OK;
}
