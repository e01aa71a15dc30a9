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

/* Windows without padding never leave the image: no clipping needed.
 * The 2x2 stride-2 case (every CNN's pooling) gets its own loop. */
static bool unpadded(const mfi_pool2d *p)
{
    return !p->adaptive && p->padding[0] == 0 && p->padding[1] == 0;
}

/* c ? a : b on the bits, so that the compiler cannot turn the select
 * into a branch: on random data such branches mispredict half the time
 * (measured: 11 ms -> 2 ms for lenet's first pooling layer). */
static inline float sel_f32(int c, float a, float b)
{
    uint32_t x, y, m = (uint32_t)-(int32_t)(c != 0);
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    x = (x & m) | (y & ~m);
    memcpy(&a, &x, 4);
    return a;
}

static inline double sel_f64(int c, double a, double b)
{
    uint64_t x, y, m = (uint64_t)-(int64_t)(c != 0);
    memcpy(&x, &a, 8);
    memcpy(&y, &b, 8);
    x = (x & m) | (y & ~m);
    memcpy(&a, &x, 8);
    return a;
}

static inline int32_t sel_i32(int c, int32_t a, int32_t b)
{
    int32_t m = -(int32_t)(c != 0);
    return (a & m) | (b & ~m);
}

/* One plane of 2x2, stride-2 max pooling, with restrict pointers so
 * that everything stays in registers. */
#define MAX2X2_FNS(T, SFX)                                                             \
    static void max2x2_fwd_##SFX(const T *restrict a, T *restrict o, int32_t *restrict ix, \
                                 int64_t W, int64_t OH, int64_t OW)                    \
    {                                                                                  \
        for (int64_t oh = 0; oh < OH; oh++) {                                          \
            const T *r0 = a + 2 * oh * W, *r1 = r0 + W;                                \
            T *orow = o + oh * OW;                                                     \
            int32_t *irow = ix + oh * OW, base = (int32_t)(2 * oh * W);                \
            for (int64_t ow = 0; ow < OW; ow++) {                                      \
                T v0 = r0[2 * ow], v1 = r0[2 * ow + 1], v2 = r1[2 * ow], v3 = r1[2 * ow + 1]; \
                /* a NaN wins, as on the general path and in PyTorch */             \
                int c01 = (v1 > v0) | (v1 != v1), c23 = (v3 > v2) | (v3 != v3);        \
                T m01 = sel_##SFX(c01, v1, v0), m23 = sel_##SFX(c23, v3, v2);          \
                int32_t k01 = c01, k23 = (int32_t)W + c23;                             \
                int c = (m23 > m01) | (m23 != m23);                                    \
                orow[ow] = sel_##SFX(c, m23, m01);                                     \
                irow[ow] = base + 2 * (int32_t)ow + sel_i32(c, k23, k01);              \
            }                                                                          \
        }                                                                              \
    }                                                                                  \
    static void max2x2_bwd_##SFX(T *restrict g, const T *restrict gy, const int32_t *restrict ix, \
                                 int64_t H, int64_t W, int64_t OH, int64_t OW)         \
    {                                                                                  \
        for (int64_t ih = 2 * OH; ih < H; ih++)                                        \
            for (int64_t iw = 0; iw < W; iw++) g[ih * W + iw] = 0;                     \
        for (int64_t oh = 0; oh < OH; oh++) {                                          \
            T *r0 = g + 2 * oh * W, *r1 = r0 + W;                                      \
            const T *grow = gy + oh * OW;                                              \
            const int32_t *irow = ix + oh * OW;                                        \
            int32_t base = (int32_t)(2 * oh * W);                                      \
            for (int64_t iw = 2 * OW; iw < W; iw++) r0[iw] = r1[iw] = 0;               \
            for (int64_t ow = 0; ow < OW; ow++) {                                      \
                int32_t at = irow[ow] - base - 2 * (int32_t)ow;                        \
                T v = grow[ow];                                                        \
                r0[2 * ow] = at == 0 ? v : (T)0;                                       \
                r0[2 * ow + 1] = at == 1 ? v : (T)0;                                   \
                r1[2 * ow] = at == (int32_t)W ? v : (T)0;                              \
                r1[2 * ow + 1] = at == (int32_t)W + 1 ? v : (T)0;                      \
            }                                                                          \
        }                                                                              \
    }

MAX2X2_FNS(float, f32)
MAX2X2_FNS(double, f64)

static bool two_by_two(const mfi_pool2d *p)
{
    return unpadded(p) && p->kernel[0] == 2 && p->kernel[1] == 2 && p->stride[0] == 2 && p->stride[1] == 2;
}

#define MAXPOOL_FWD(T)                                                                 \
    do {                                                                               \
        const T *xv = x->data;                                                         \
        T *ov = out->data;                                                             \
        int32_t *iv = idx->data;                                                       \
        const bool fast = unpadded(p);                                                 \
        _Pragma("omp parallel for if (cpu_par(planes * L)) schedule(static)")          \
        for (int64_t pl = 0; pl < planes; pl++) {                                      \
            const T *a = xv + pl * p->h * p->w;                                        \
            T *o = ov + pl * L;                                                        \
            int32_t *ix = iv + pl * L;                                                 \
            for (int64_t oh = 0; oh < p->oh; oh++)                                     \
                for (int64_t ow = 0; ow < p->ow; ow++) {                               \
                    T best;                                                            \
                    int32_t bi;                                                        \
                    {                                                                  \
                        window w;                                                      \
                        if (fast) {                                                    \
                            w.h0 = oh * p->stride[0];                                  \
                            w.w0 = ow * p->stride[1];                                  \
                            w.h1 = w.h0 + p->kernel[0];                                \
                            w.w1 = w.w0 + p->kernel[1];                                \
                        } else {                                                       \
                            w = pool_window(p, oh, ow);                                \
                        }                                                              \
                        best = -INFINITY;                                              \
                        bi = (int32_t)(w.h0 * p->w + w.w0);                            \
                        for (int64_t ih = w.h0; ih < w.h1; ih++)                       \
                            for (int64_t iw = w.w0; iw < w.w1; iw++) {                 \
                                T v = a[ih * p->w + iw];                               \
                                if (v > best || v != v) { best = v; bi = (int32_t)(ih * p->w + iw); } \
                            }                                                          \
                    }                                                                  \
                    o[oh * p->ow + ow] = best;                                         \
                    ix[oh * p->ow + ow] = bi;                                          \
                }                                                                      \
        }                                                                              \
    } while (0)

#define PLANES(FN, T, A, B, C, ...)                                                    \
    do {                                                                               \
        _Pragma("omp parallel for if (cpu_par(planes * L)) schedule(static)")          \
        for (int64_t pl = 0; pl < planes; pl++)                                        \
            FN((T *)(A)->data + pl * HW, (T *)(B)->data + pl * L, (int32_t *)(C)->data + pl * L, __VA_ARGS__); \
    } while (0)

mf_status mfi_cpu_maxpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *idx, mfi_cv *x)
{
    int64_t planes = p->n * p->c, L = p->oh * p->ow, HW = p->h * p->w;
    if (two_by_two(p) && x->dtype == MF_F32) {
        PLANES(max2x2_fwd_f32, float, x, out, idx, p->w, p->oh, p->ow);
        return MF_OK;
    }
    if (two_by_two(p) && x->dtype == MF_F64) {
        PLANES(max2x2_fwd_f64, double, x, out, idx, p->w, p->oh, p->ow);
        return MF_OK;
    }
    if (x->dtype == MF_F32) MAXPOOL_FWD(float);
    else if (x->dtype == MF_F64) MAXPOOL_FWD(double);
    else MF_FAIL(MF_ERR_DTYPE, "max_pool2d: not a float dtype");
    return MF_OK;
}

/* Windows that tile the image without overlap (stride == kernel, no
 * padding): each input element has at most one window, so gx is written
 * in one pass, without clearing it first. */
static bool tiled(const mfi_pool2d *p)
{
    return unpadded(p) && p->stride[0] == p->kernel[0] && p->stride[1] == p->kernel[1];
}

#define MAXPOOL_BWD(T)                                                                 \
    do {                                                                               \
        T *g = gx->data;                                                               \
        const T *gv = gy->data;                                                        \
        const int32_t *iv = idx->data;                                                 \
        const bool one_pass = tiled(p);                                                \
        _Pragma("omp parallel for if (cpu_par(planes * L)) schedule(static)")          \
        for (int64_t pl = 0; pl < planes; pl++) {                                      \
            T *a = g + pl * HW;                                                        \
            const T *gp = gv + pl * L;                                                 \
            const int32_t *ip = iv + pl * L;                                           \
            if (!one_pass) {                                                           \
                for (int64_t i = 0; i < HW; i++) a[i] = 0;                             \
                for (int64_t i = 0; i < L; i++) a[ip[i]] += gp[i];                     \
                continue;                                                              \
            }                                                                          \
            /* rows and columns beyond the last window get no gradient */              \
            int64_t kh = p->kernel[0], kw = p->kernel[1];                              \
            for (int64_t ih = p->oh * kh; ih < p->h; ih++)                             \
                for (int64_t iw = 0; iw < p->w; iw++) a[ih * p->w + iw] = 0;           \
            for (int64_t oh = 0; oh < p->oh; oh++) {                                   \
                const int32_t *io = ip + oh * p->ow;                                   \
                const T *go = gp + oh * p->ow;                                         \
                for (int64_t r = 0; r < kh; r++) {                                     \
                    T *row = a + (oh * kh + r) * p->w;                                 \
                    int32_t base = (int32_t)((oh * kh + r) * p->w);                    \
                    for (int64_t iw = p->ow * kw; iw < p->w; iw++) row[iw] = 0;        \
                    if (kw == 2) {                                                     \
                        for (int64_t ow = 0; ow < p->ow; ow++) {                       \
                            int32_t at = io[ow] - base - (int32_t)(2 * ow);            \
                            row[2 * ow] = at == 0 ? go[ow] : (T)0;                     \
                            row[2 * ow + 1] = at == 1 ? go[ow] : (T)0;                 \
                        }                                                              \
                        continue;                                                      \
                    }                                                                  \
                    for (int64_t ow = 0; ow < p->ow; ow++) {                           \
                        int32_t at = io[ow] - base - (int32_t)(ow * kw);               \
                        for (int64_t c = 0; c < kw; c++) row[ow * kw + c] = at == c ? go[ow] : (T)0; \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    } while (0)

mf_status mfi_cpu_maxpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *idx)
{
    int64_t planes = p->n * p->c, L = p->oh * p->ow, HW = p->h * p->w;
    if (two_by_two(p) && gx->dtype == MF_F32) {
        PLANES(max2x2_bwd_f32, float, gx, gy, idx, p->h, p->w, p->oh, p->ow);
        return MF_OK;
    }
    if (two_by_two(p) && gx->dtype == MF_F64) {
        PLANES(max2x2_bwd_f64, double, gx, gy, idx, p->h, p->w, p->oh, p->ow);
        return MF_OK;
    }
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

mf_status mfi_cpu_avgpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *x)
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

mf_status mfi_cpu_avgpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy)
{
    int64_t planes = p->n * p->c, L = p->oh * p->ow;
    if (gx->dtype == MF_F32) AVGPOOL_BWD(float);
    else if (gx->dtype == MF_F64) AVGPOOL_BWD(double);
    else MF_FAIL(MF_ERR_DTYPE, "avg_pool2d backward: not a float dtype");
    return MF_OK;
}
