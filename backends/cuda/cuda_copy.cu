/*
 * backends/cuda/cuda_copy.cu - fill, strided copy with casting, Philox
 * random fills and the dropout mask on the GPU.
 *
 * The random values are those of the CPU backend, element for element:
 * both use base/philox.h's mapping (element i takes word i%4 of
 * philox4x32-10 at counter (i/4, key) under the key (seed)), compiled
 * for the GPU here.
 */
#include "backends/cuda/cuda_common.cuh"
#include "base/philox.h"

/* ------------------------------------------------------------------ fill */
template <typename T>
__global__ void k_fill(mfc_iter it, T v, T *o)
{
    int64_t off[3];
    MFC_FOR(i, it.n) {
        mfc_offsets(it, i, off);
        o[off[0]] = v;
    }
}

extern "C" mf_status mfc_fill(mfi_cv *out, double value)
{
    const int64_t *st[1] = {out->stride};
    mfc_iter it = mfc_iter_make(1, out->ndim, out->shape, st);
    if (it.n == 0) return MF_OK;
    MFC_ALL_CASES(out->dtype, "fill",
                  k_fill<T><<<mfc_blocks(it.n), MFC_THREADS, 0, mfc_stream>>>(it, (T)value, (T *)out->data));
    MFC_LAUNCHED("fill");
    return MF_OK;
}

/* ------------------------------------------------------------------ copy */
template <typename TO, typename TI>
__global__ void k_copy(mfc_iter it, TO *o, const TI *a)
{
    int64_t off[3];
    MFC_FOR(i, it.n) {
        mfc_offsets(it, i, off);
        o[off[0]] = (TO)a[off[1]];
    }
}

template <typename TO>
static mf_status copy_from(const mfc_iter &it, TO *o, mfi_cv *in)
{
    unsigned nb = mfc_blocks(it.n);
    switch (in->dtype) {
    case MF_F32: k_copy<TO, float><<<nb, MFC_THREADS, 0, mfc_stream>>>(it, o, (const float *)in->data); break;
    case MF_F64: k_copy<TO, double><<<nb, MFC_THREADS, 0, mfc_stream>>>(it, o, (const double *)in->data); break;
    case MF_I32: k_copy<TO, int32_t><<<nb, MFC_THREADS, 0, mfc_stream>>>(it, o, (const int32_t *)in->data); break;
    case MF_I64: k_copy<TO, int64_t><<<nb, MFC_THREADS, 0, mfc_stream>>>(it, o, (const int64_t *)in->data); break;
    default: MF_FAIL(MF_ERR_DTYPE, "copy: unknown dtype (cuda)");
    }
    MFC_LAUNCHED("copy");
    return MF_OK;
}

extern "C" mf_status mfc_copy(mfi_cv *out, mfi_cv *in)
{
    const int64_t *st[2] = {out->stride, in->stride};
    mfc_iter it = mfc_iter_make(2, out->ndim, out->shape, st);
    if (it.n == 0) return MF_OK;
    if (out->dtype == in->dtype && it.flat) {
        MFC_CALL("copy", cudaMemcpyAsync(out->data, in->data, (size_t)it.n * mf_dtype_size(out->dtype),
                                         cudaMemcpyDeviceToDevice, mfc_stream));
        return MF_OK;
    }
    MFC_ALL_CASES(out->dtype, "copy", return copy_from<T>(it, (T *)out->data, in));
    return MF_OK;
}

/* ---------------------------------------------------------------- random */
template <typename T>
__global__ void k_philox(int64_t n, T *o, bool uniform, double a, double b, uint64_t seed, uint64_t key,
                         uint64_t index0)
{
    MFC_FOR(i, n) {
        uint64_t idx = index0 + (uint64_t)i;
        double v = uniform ? a + (b - a) * mfi_u01(mfi_philox_u32(seed, key, idx))
                           : a + b * mfi_philox_normal(seed, key, idx);
        o[i] = (T)v;
    }
}

extern "C" mf_status mfc_philox_fill(mfi_cv *out, mfi_dist d, double a, double b, uint64_t seed, uint64_t key,
                                     uint64_t index0)
{
    int64_t n = mfc_numel(out);
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(out->dtype, "philox_fill",
                    k_philox<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        n, (T *)out->data, d == MFI_DIST_UNIFORM, a, b, seed, key, index0));
    MFC_LAUNCHED("philox_fill");
    return MF_OK;
}

template <typename T>
__global__ void k_dropout(int64_t n, T *o, T *m, const T *x, double p, T scale, uint64_t seed, uint64_t key,
                          uint64_t index0)
{
    MFC_FOR(i, n) {
        T keep = mfi_u01(mfi_philox_u32(seed, key, index0 + (uint64_t)i)) >= p ? scale : (T)0;
        m[i] = keep;
        o[i] = x[i] * keep;
    }
}

extern "C" mf_status mfc_dropout_fwd(mfi_cv *out, mfi_cv *mask, mfi_cv *x, double p, uint64_t seed, uint64_t key,
                                     uint64_t index0)
{
    int64_t n = mfc_numel(x);
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(x->dtype, "dropout",
                    k_dropout<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        n, (T *)out->data, (T *)mask->data, (const T *)x->data, p, (T)(1.0 / (1.0 - p)), seed,
                        key, index0));
    MFC_LAUNCHED("dropout");
    return MF_OK;
}
