/*
 * backends/cuda/cuda_elementwise.cu - unary and binary elementwise
 * kernels on the GPU, with the CPU backend's formulas
 * (backends/cpu/cpu_elementwise.c). The op is a kernel argument: every
 * thread of a launch takes the same branch.
 */
#include <cuda_bf16.h>
#include "backends/cuda/cuda_common.cuh"

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define SQRT_2_OVER_PI 0.79788456080286535588
#define GELU_C 0.044715

template <typename T>
__device__ static inline T unary_value(int op, T v, T alpha)
{
    switch (op) {
    case MFI_UN_NEG: return -v;
    case MFI_UN_SCALE: return alpha * v;
    case MFI_UN_ADD_SCALAR: return v + alpha;
    case MFI_UN_POW: return alpha == (T)2 ? v * v : pow(v, alpha);
    case MFI_UN_EXP: return exp(v);
    case MFI_UN_LOG: return log(v);
    case MFI_UN_SQRT: return sqrt(v);
    case MFI_UN_ABS: return fabs(v);
    case MFI_UN_RELU: return v > (T)0 ? v : (T)0;
    case MFI_UN_GELU: return (T)0.5 * v * ((T)1 + erf(v * (T)SQRT1_2));
    case MFI_UN_SIGMOID: return (T)1 / ((T)1 + exp(-v));
    case MFI_UN_TANH: return tanh(v);
    case MFI_UN_ROUND_BF16: return (T)__bfloat162float(__float2bfloat16_rn((float)v));
    case MFI_UN_GELU_TANH: return (T)0.5 * v * ((T)1 + tanh((T)SQRT_2_OVER_PI * (v + (T)GELU_C * v * v * v)));
    default: return v;
    }
}

template <typename T>
__global__ void k_unary(mfc_iter it, int op, T alpha, T *o, const T *x)
{
    int64_t off[3];
    MFC_FOR(i, it.n) {
        mfc_offsets(it, i, off);
        o[off[0]] = unary_value<T>(op, x[off[1]], alpha);
    }
}

extern "C" mf_status mfc_unary_fwd(mfi_unop op, mfi_cv *out, mfi_cv *x, double alpha)
{
    if (out->dtype != x->dtype) MF_FAIL(MF_ERR_DTYPE, "unary_fwd: dtypes differ");
    if ((unsigned)op >= MFI_UN_COUNT) MF_FAIL(MF_ERR_BACKEND, "unary_fwd: unknown op %d", (int)op);
    const int64_t *st[2] = {out->stride, x->stride};
    mfc_iter it = mfc_iter_make(2, out->ndim, out->shape, st);
    if (it.n == 0) return MF_OK;
    MFC_FLOAT_CASES(x->dtype, "unary_fwd",
                    k_unary<T><<<mfc_blocks(it.n), MFC_THREADS, 0, mfc_stream>>>(it, (int)op, (T)alpha,
                                                                                 (T *)out->data, (const T *)x->data));
    MFC_LAUNCHED("unary_fwd");
    return MF_OK;
}

template <typename T>
__device__ static inline T unary_grad(int op, T g, T xv, T yv, T alpha)
{
    switch (op) {
    case MFI_UN_NEG: return -g;
    case MFI_UN_SCALE: return alpha * g;
    case MFI_UN_ADD_SCALAR: return g;
    case MFI_UN_POW: return g * alpha * pow(xv, alpha - (T)1);
    case MFI_UN_EXP: return g * yv;
    case MFI_UN_LOG: return g / xv;
    case MFI_UN_SQRT: return g * (T)0.5 / yv;
    case MFI_UN_ABS: return xv > (T)0 ? g : xv < (T)0 ? -g : (T)0;
    case MFI_UN_RELU: return yv > (T)0 ? g : (T)0;
    case MFI_UN_GELU:
        return g * ((T)0.5 * ((T)1 + erf(xv * (T)SQRT1_2)) + xv * (T)INV_SQRT_2PI * exp((T)-0.5 * xv * xv));
    case MFI_UN_SIGMOID: return g * yv * ((T)1 - yv);
    case MFI_UN_TANH: return g * ((T)1 - yv * yv);
    case MFI_UN_ROUND_BF16: return g;   /* straight through */
    case MFI_UN_GELU_TANH: {
        T th = tanh((T)SQRT_2_OVER_PI * (xv + (T)GELU_C * xv * xv * xv));
        return g * ((T)0.5 * ((T)1 + th) +
                    (T)0.5 * xv * ((T)1 - th * th) * (T)SQRT_2_OVER_PI * ((T)1 + (T)3 * (T)GELU_C * xv * xv));
    }
    default: return g;
    }
}

template <typename T>
__global__ void k_unary_bwd(int64_t n, int op, T alpha, T *gx, const T *gy, const T *x, const T *y)
{
    MFC_FOR(i, n) {
        T xv = x ? x[i] : (T)0, yv = y ? y[i] : (T)0;
        gx[i] = unary_grad<T>(op, gy[i], xv, yv, alpha);
    }
}

extern "C" mf_status mfc_unary_bwd(mfi_unop op, mfi_cv *gx, mfi_cv *gy, mfi_cv *x, mfi_cv *y, double alpha)
{
    if ((unsigned)op >= MFI_UN_COUNT) MF_FAIL(MF_ERR_BACKEND, "unary_bwd: unknown op %d", (int)op);
    int64_t n = mfc_numel(gx);
    if (n == 0) return MF_OK;
    const void *xp = x ? x->data : NULL, *yp = y ? y->data : NULL;
    MFC_FLOAT_CASES(gx->dtype, "unary_bwd",
                    k_unary_bwd<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        n, (int)op, (T)alpha, (T *)gx->data, (const T *)gy->data, (const T *)xp, (const T *)yp));
    MFC_LAUNCHED("unary_bwd");
    return MF_OK;
}

template <typename T>
__device__ static inline T binary_value(int op, T u, T v)
{
    switch (op) {
    case MFI_BIN_ADD: return u + v;
    case MFI_BIN_SUB: return u - v;
    case MFI_BIN_MUL: return u * v;
    case MFI_BIN_DIV: return u / v;
    case MFI_BIN_MAX: return u >= v || v != v ? (v != v ? v : u) : v;   /* a NaN wins */
    case MFI_BIN_EQ: return (T)(u == v);
    case MFI_BIN_GT: return (T)(u > v);
    case MFI_BIN_LT: return (T)(u < v);
    default: return u;
    }
}

template <typename T>
__global__ void k_binary(mfc_iter it, int op, T *o, const T *a, const T *b)
{
    int64_t off[3];
    MFC_FOR(i, it.n) {
        mfc_offsets(it, i, off);
        o[off[0]] = binary_value<T>(op, a[off[1]], b[off[2]]);
    }
}

extern "C" mf_status mfc_binary_fwd(mfi_binop op, mfi_cv *out, mfi_cv *a, mfi_cv *b)
{
    if (a->dtype != b->dtype || out->dtype != a->dtype) MF_FAIL(MF_ERR_DTYPE, "binary_fwd: dtypes differ");
    if ((a->dtype == MF_I32 || a->dtype == MF_I64) && op == MFI_BIN_DIV)
        MF_FAIL(MF_ERR_DTYPE, "binary_fwd: integer division is not supported");
    if ((unsigned)op >= MFI_BIN_COUNT) MF_FAIL(MF_ERR_BACKEND, "binary_fwd: unknown op %d", (int)op);
    const int64_t *st[3] = {out->stride, a->stride, b->stride};
    mfc_iter it = mfc_iter_make(3, out->ndim, out->shape, st);
    if (it.n == 0) return MF_OK;
    MFC_ALL_CASES(a->dtype, "binary_fwd",
                  k_binary<T><<<mfc_blocks(it.n), MFC_THREADS, 0, mfc_stream>>>(
                      it, (int)op, (T *)out->data, (const T *)a->data, (const T *)b->data));
    MFC_LAUNCHED("binary_fwd");
    return MF_OK;
}
