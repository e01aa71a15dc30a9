/*
 * backends/cpu/cpu_pool.c - max, average and adaptive-average pooling
 * over NCHW planes, one plane per OpenMP iteration.
 *
 * Average pooling divides as PyTorch does: by the window clipped to the
 * padded input when count_include_pad, else by the in-image elements.
 * Adaptive windows run from floor(i*H/OH) to ceil((i+1)*H/OH).
 *
 * 2x2 stride-2 max pooling in f32 (every CNN's) runs 16 windows at a
 * time on CPUs with AVX-512: the same comparisons in the same order as
 * the scalar loop, so the same values and indices (doc/cpu.md).
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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define POOL_AVX512 __attribute__((target("avx512f")))

/* the even and the odd elements of the 32 floats lo:hi */
POOL_AVX512 static inline __m512 evens(__m512 lo, __m512 hi)
{
    return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), hi);
}

POOL_AVX512 static inline __m512 odds(__m512 lo, __m512 hi)
{
    return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), hi);
}

/* where b replaces a as the maximum: greater, or a NaN (as the scalar loop) */
POOL_AVX512 static inline __mmask16 wins(__m512 b, __m512 a)
{
    return _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
}

/* masks of a chunk of n <= 16 windows: the outputs, and the first and
 * second 16 of the 2n inputs in a row */
static inline void chunk_masks(int64_t n, __mmask16 *m, __mmask16 *lo, __mmask16 *hi)
{
    *m = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
    *lo = (__mmask16)(n >= 8 ? 0xffff : (1u << 2 * n) - 1);
    *hi = (__mmask16)(n >= 16 ? 0xffff : n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
}

POOL_AVX512 static void max2x2_fwd_avx512(const float *restrict a, float *restrict o, int32_t *restrict ix, int64_t W,
                                          int64_t OH, int64_t OW)
{
    const __m512i iota2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i one = _mm512_set1_epi32(1), w0 = _mm512_set1_epi32((int32_t)W), w1 = _mm512_set1_epi32((int32_t)W + 1);
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *r0 = a + 2 * oh * W, *r1 = r0 + W;
        for (int64_t ow = 0; ow < OW; ow += 16) {
            __mmask16 m, lo, hi;
            chunk_masks(OW - ow, &m, &lo, &hi);
            __m512 t0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), t1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
            __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
            __m512 v0 = evens(t0, t1), v1 = odds(t0, t1), v2 = evens(b0, b1), v3 = odds(b0, b1);
            __mmask16 c01 = wins(v1, v0), c23 = wins(v3, v2);
            __m512 m01 = _mm512_mask_blend_ps(c01, v0, v1), m23 = _mm512_mask_blend_ps(c23, v2, v3);
            __mmask16 c = wins(m23, m01);
            __m512i k = _mm512_mask_blend_epi32(c, _mm512_maskz_mov_epi32(c01, one), _mm512_mask_blend_epi32(c23, w0, w1));
            __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * oh * W + 2 * ow)), iota2);
            _mm512_mask_storeu_ps(o + oh * OW + ow, m, _mm512_mask_blend_ps(c, m01, m23));
            _mm512_mask_storeu_epi32(ix + oh * OW + ow, m, _mm512_add_epi32(at, k));
        }
    }
}

POOL_AVX512 static void max2x2_bwd_avx512(float *restrict g, const float *restrict gy, const int32_t *restrict ix,
                                          int64_t H, int64_t W, int64_t OH, int64_t OW)
{
    const __m512i iota2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    /* interleaving two vectors of 16: the first 16 of the 32, the second */
    const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512i one = _mm512_set1_epi32(1), w0 = _mm512_set1_epi32((int32_t)W), w1 = _mm512_set1_epi32((int32_t)W + 1);
    for (int64_t ih = 2 * OH; ih < H; ih++)
        for (int64_t iw = 0; iw < W; iw++) g[ih * W + iw] = 0;
    for (int64_t oh = 0; oh < OH; oh++) {
        float *r0 = g + 2 * oh * W, *r1 = r0 + W;
        for (int64_t iw = 2 * OW; iw < W; iw++) r0[iw] = r1[iw] = 0;
        for (int64_t ow = 0; ow < OW; ow += 16) {
            __mmask16 m, lo, hi;
            chunk_masks(OW - ow, &m, &lo, &hi);
            __m512 v = _mm512_maskz_loadu_ps(m, gy + oh * OW + ow);
            __m512i at = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, ix + oh * OW + ow),
                                          _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * oh * W + 2 * ow)), iota2));
            __m512 te = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_setzero_si512()), v);
            __m512 to = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, one), v);
            __m512 be = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, w0), v);
            __m512 bo = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, w1), v);
            _mm512_mask_storeu_ps(r0 + 2 * ow, lo, _mm512_permutex2var_ps(te, ilo, to));
            _mm512_mask_storeu_ps(r0 + 2 * ow + 16, hi, _mm512_permutex2var_ps(te, ihi, to));
            _mm512_mask_storeu_ps(r1 + 2 * ow, lo, _mm512_permutex2var_ps(be, ilo, bo));
            _mm512_mask_storeu_ps(r1 + 2 * ow + 16, hi, _mm512_permutex2var_ps(be, ihi, bo));
        }
    }
}

static bool pool_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#else
#define max2x2_fwd_avx512 max2x2_fwd_f32
#define max2x2_bwd_avx512 max2x2_bwd_f32
static bool pool_avx512(void) { return false; }
#endif

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
    if (two_by_two(p) && x->dtype == MF_F32 && pool_avx512()) {
        PLANES(max2x2_fwd_avx512, float, x, out, idx, p->w, p->oh, p->ow);
        return MF_OK;
    }
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
    if (two_by_two(p) && gx->dtype == MF_F32 && pool_avx512()) {
        PLANES(max2x2_bwd_avx512, float, gx, gy, idx, p->h, p->w, p->oh, p->ow);
        return MF_OK;
    }
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
