/*
 * backends/cpu/cpu_copy.c - fill, strided copy with casting, Philox
 * random fills and the dropout mask.
 */
#include <math.h>
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "base/philox.h"

static const int esize[MF_DTYPE_COUNT] = {4, 8, 4, 8};

#define FILL_LOOP(T)                                                \
    CPU_ITER_FOR(&it, out->data, NULL, NULL, sizeof(T), 0, 0, {     \
        T *o = (T *)p0;                                             \
        T v = (T)value;                                             \
        if (s0 == 1)                                                \
            for (int64_t i = 0; i < n; i++) o[i] = v;               \
        else                                                        \
            for (int64_t i = 0; i < n; i++) o[i * s0] = v;          \
    })

mf_status mfi_cpu_fill(mfi_cv *out, double value)
{
    cpu_iter it;
    const int64_t *st[1] = {out->stride};
    cpu_iter_init(&it, 1, out->ndim, out->shape, st);
    switch (out->dtype) {
    case MF_F32: FILL_LOOP(float); break;
    case MF_F64: FILL_LOOP(double); break;
    case MF_I32: FILL_LOOP(int32_t); break;
    case MF_I64: FILL_LOOP(int64_t); break;
    default: MF_FAIL(MF_ERR_DTYPE, "fill: unknown dtype");
    }
    return MF_OK;
}

#define COPY_LOOP(TO, TI)                                                              \
    CPU_ITER_FOR(&it, out->data, in->data, NULL, sizeof(TO), sizeof(TI), 0, {          \
        TO *o = (TO *)p0;                                                              \
        const TI *a = (const TI *)p1;                                                  \
        if (s0 == 1 && s1 == 1)                                                        \
            for (int64_t i = 0; i < n; i++) o[i] = (TO)a[i];                           \
        else                                                                           \
            for (int64_t i = 0; i < n; i++) o[i * s0] = (TO)a[i * s1];                 \
    })

#define COPY_FROM(TO)                                   \
    switch (in->dtype) {                                \
    case MF_F32: COPY_LOOP(TO, float); break;           \
    case MF_F64: COPY_LOOP(TO, double); break;          \
    case MF_I32: COPY_LOOP(TO, int32_t); break;         \
    case MF_I64: COPY_LOOP(TO, int64_t); break;         \
    default: MF_FAIL(MF_ERR_DTYPE, "copy: unknown dtype"); \
    }

mf_status mfi_cpu_copy(mfi_cv *out, mfi_cv *in)
{
    cpu_iter it;
    const int64_t *st[2] = {out->stride, in->stride};
    cpu_iter_init(&it, 2, out->ndim, out->shape, st);
    if (out->dtype == in->dtype && it.nd == 1 && it.st[0][0] == 1 && it.st[1][0] == 1) {
        int64_t nbytes = it.inner * esize[out->dtype];
        if (nbytes == 0) return MF_OK;
        const char *src = in->data;
        char *dst = out->data;
        #pragma omp parallel if (cpu_par(it.inner))
        {
            int64_t lo, hi;
            cpu_share((nbytes + 63) / 64, &lo, &hi);
            lo *= 64;
            hi = hi * 64 < nbytes ? hi * 64 : nbytes;
            if (hi > lo) memmove(dst + lo, src + lo, (size_t)(hi - lo));
        }
        return MF_OK;
    }
    switch (out->dtype) {
    case MF_F32: COPY_FROM(float); break;
    case MF_F64: COPY_FROM(double); break;
    case MF_I32: COPY_FROM(int32_t); break;
    case MF_I64: COPY_FROM(int64_t); break;
    default: MF_FAIL(MF_ERR_DTYPE, "copy: unknown dtype");
    }
    return MF_OK;
}

mf_status mfi_cpu_philox_fill(mfi_cv *out, mfi_dist d, double a, double b, uint64_t seed, uint64_t key,
                             uint64_t index0)
{
    int64_t n = cpu_numel(out);
    if (out->dtype != MF_F32 && out->dtype != MF_F64)
        MF_FAIL(MF_ERR_DTYPE, "philox_fill: dtype %d is not a float dtype", (int)out->dtype);
    float *f = out->data;
    double *g = out->data;
    bool is32 = out->dtype == MF_F32;
    #pragma omp parallel for if (cpu_par(n / 8)) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t idx = index0 + (uint64_t)i;
        double v = d == MFI_DIST_UNIFORM ? a + (b - a) * mfi_u01(mfi_philox_u32(seed, key, idx))
                                         : a + b * mfi_philox_normal(seed, key, idx);
        if (is32) f[i] = (float)v;
        else g[i] = v;
    }
    return MF_OK;
}

#define DROPOUT_LOOP(T)                                                            \
    do {                                                                           \
        T *o = out->data, *m = mask->data;                                         \
        const T *xv = x->data;                                                     \
        const T scale = (T)(1.0 / (1.0 - p));                                      \
        _Pragma("omp parallel for if (cpu_par(n / 8)) schedule(static)")           \
        for (int64_t blk = 0; blk < (n + 3) / 4; blk++) {                          \
            uint32_t w[4];                                                         \
            uint64_t i0 = (uint64_t)blk * 4;                                       \
            mfi_philox4(seed, key, (index0 + i0) >> 2, w);                         \
            for (int j = 0; j < 4 && (int64_t)i0 + j < n; j++) {                   \
                uint64_t idx = index0 + i0 + (uint64_t)j;                          \
                uint32_t u = (index0 & 3) ? mfi_philox_u32(seed, key, idx) : w[j]; \
                T keep = mfi_u01(u) >= p ? scale : (T)0;                           \
                m[i0 + j] = keep;                                                  \
                o[i0 + j] = xv[i0 + j] * keep;                                     \
            }                                                                      \
        }                                                                          \
    } while (0)

mf_status mfi_cpu_dropout_fwd(mfi_cv *out, mfi_cv *mask, mfi_cv *x, double p, uint64_t seed, uint64_t key,
                             uint64_t index0)
{
    int64_t n = cpu_numel(x);
    if (x->dtype == MF_F32) DROPOUT_LOOP(float);
    else if (x->dtype == MF_F64) DROPOUT_LOOP(double);
    else MF_FAIL(MF_ERR_DTYPE, "dropout: not a float dtype");
    return MF_OK;
}
