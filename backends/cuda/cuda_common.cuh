/*
 * backends/cuda/cuda_common.cuh - what every CUDA kernel file shares:
 * the streams and cuBLAS handle of this rank's device, launch sizes,
 * error checks, and walking up to three strided operands of one shape.
 *
 * Kernels run on one compute stream, in order, and return once queued;
 * an error inside a kernel surfaces at the next synchronising call
 * (a copy to the host), which reports it. No kernel uses atomics on
 * floating-point data: every sum has a fixed order for a fixed launch,
 * so a run repeats its bits (doc/design.md section 5).
 */
#ifndef MPIFLOW_CUDA_COMMON_CUH
#define MPIFLOW_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "base/alloc.h"
#include "backends/backend.h"
#include "base/error.h"
}

/* ---- cuBLAS, loaded at run time (cuda_blas.cu) */
#define MFC_STR_(x) #x
#define MFC_STR(x) MFC_STR_(x)
#define MFC_CUBLAS_MAJOR MFC_STR(CUBLAS_VER_MAJOR)
typedef struct mfc_blas_api {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemmStridedBatched) sgemm_sb;
    decltype(&cublasDgemmStridedBatched) dgemm_sb;
    cublasStatus_t (*gemm_sb_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                 const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
                                 const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t,
                                 cublasGemmAlgo_t);
    decltype(&cublasGetStatusString) status_string;
} mfc_blas_api;
extern mfc_blas_api mfc_cublas;
/* Opens libcublas (once); fails naming what is missing. */
mf_status mfc_blas_open(void);

/* ---- this rank's device (cuda_backend.cu) */
extern cudaStream_t mfc_stream;        /* compute */
extern cudaStream_t mfc_comm_stream;   /* communication staging */
extern cublasHandle_t mfc_blas;
/* Device workspaces come from the core's caching arena for the device
 * (mfi_alloc_on(MF_DEV_CUDA, n)): a block freed after the kernels that
 * use it were queued is safe to reuse, since every later kernel runs
 * after them on the same stream. */
/* A status for a failed CUDA call or launch, naming what failed. */
mf_status mfc_fail(const char *what, cudaError_t e);
mf_status mfc_blas_fail(const char *what, cublasStatus_t s);
/* Checks the last launch. */
#define MFC_LAUNCHED(what)                                     \
    do {                                                       \
        cudaError_t e_ = cudaGetLastError();                   \
        if (e_ != cudaSuccess) return mfc_fail((what), e_);    \
    } while (0)
#define MFC_CALL(what, expr)                                   \
    do {                                                       \
        cudaError_t e_ = (expr);                               \
        if (e_ != cudaSuccess) return mfc_fail((what), e_);    \
    } while (0)

#define MFC_THREADS 256

/* Blocks for a grid-stride loop over n items. */
static inline unsigned mfc_blocks(int64_t n)
{
    int64_t b = (n + MFC_THREADS - 1) / MFC_THREADS;
    if (b < 1) b = 1;
    if (b > 65535 * 16) b = 65535 * 16;
    return (unsigned)b;
}

#define MFC_FOR(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static inline int64_t mfc_numel(mfi_cv *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

/* ---- strided walks: size-1 dims dropped, dims contiguous in every
 * operand merged (as backends/cpu/cpu_iter.h), passed to kernels by value */
typedef struct mfc_iter {
    int nd, nop;
    bool flat;                 /* one dim, unit strides: offset = index */
    int64_t n;
    int64_t shape[MF_MAX_DIMS];
    int64_t st[3][MF_MAX_DIMS];
} mfc_iter;

static inline mfc_iter mfc_iter_make(int nop, int ndim, const int64_t *shape, const int64_t *const *strides)
{
    mfc_iter it;
    memset(&it, 0, sizeof it);
    int nd = 0;
    it.nop = nop;
    it.n = 1;
    for (int d = 0; d < ndim; d++) it.n *= shape[d];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < nop; k++)
                if (it.st[k][nd - 1] != strides[k][d] * shape[d]) merge = false;
            if (merge) {
                it.shape[nd - 1] *= shape[d];
                for (int k = 0; k < nop; k++) it.st[k][nd - 1] = strides[k][d];
                continue;
            }
        }
        it.shape[nd] = shape[d];
        for (int k = 0; k < nop; k++) it.st[k][nd] = strides[k][d];
        nd++;
    }
    if (nd == 0) {
        it.shape[0] = 1;
        nd = 1;
    }
    it.nd = nd;
    it.flat = nd == 1;
    for (int k = 0; k < nop; k++) it.flat = it.flat && it.st[k][0] == 1;
    return it;
}

/* Element offsets of flat index i in each operand. */
__device__ static inline void mfc_offsets(const mfc_iter &it, int64_t i, int64_t *off)
{
    if (it.flat) {
        off[0] = off[1] = off[2] = i;
        return;
    }
    off[0] = off[1] = off[2] = 0;
    for (int d = it.nd - 1; d >= 0; d--) {
        int64_t q = i % it.shape[d];
        i /= it.shape[d];
        off[0] += q * it.st[0][d];
        off[1] += q * it.st[1][d];
        off[2] += q * it.st[2][d];
    }
}

/* ---- block reductions in double (blockDim.x a power of two <= 1024) */
__device__ static inline double mfc_block_sum(double v, double *sh)
{
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* Threads for a block that reduces n values: a power of two, 32..256. */
static inline unsigned mfc_red_threads(int64_t n)
{
    unsigned t = 32;
    while (t < 256 && (int64_t)t < n) t <<= 1;
    return t;
}

/* ---- dtype dispatch: F(T) is called with the element type of dt */
#define MFC_FLOAT_CASES(dt, what, ...)                                                   \
    switch (dt) {                                                                        \
    case MF_F32: { typedef float T; __VA_ARGS__; } break;                               \
    case MF_F64: { typedef double T; __VA_ARGS__; } break;                              \
    default: MF_FAIL(MF_ERR_DTYPE, "%s: dtype %s is not f32 or f64 (cuda)", (what), mf_dtype_name(dt)); \
    }

#define MFC_ALL_CASES(dt, what, ...)                                                     \
    switch (dt) {                                                                        \
    case MF_F32: { typedef float T; __VA_ARGS__; } break;                               \
    case MF_F64: { typedef double T; __VA_ARGS__; } break;                              \
    case MF_I32: { typedef int32_t T; __VA_ARGS__; } break;                             \
    case MF_I64: { typedef int64_t T; __VA_ARGS__; } break;                             \
    default: MF_FAIL(MF_ERR_DTYPE, "%s: unknown dtype %d (cuda)", (what), (int)(dt));    \
    }

/* ---- index checks: a kernel records the first out-of-range index
 * (position and value) in a device flag; the host reads it back */
typedef struct mfc_badidx { unsigned long long pos; long long value; } mfc_badidx;
/* Clears the flag and returns its device address. */
mf_status mfc_badidx_reset(mfc_badidx **flag);
/* Reads the flag (waits for the queued kernels): MF_OK, or an error
 * naming the first bad index. */
mf_status mfc_badidx_check(mfc_badidx *flag, const char *what, int64_t limit);

__device__ static inline int64_t mfc_load_index(const void *p, mf_dtype dt, int64_t i)
{
    return dt == MF_I64 ? (int64_t)((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* Records index i with value v as bad if it is the first so far. */
__device__ static inline void mfc_flag_bad(mfc_badidx *f, int64_t i, int64_t v)
{
    unsigned long long old = atomicMin(&f->pos, (unsigned long long)i);
    if ((unsigned long long)i < old) f->value = (long long)v;   /* racy only between bad indices */
}

/* ---- the kernel entry points of each file, for the backend table */
extern "C" {
#define MFC_PROTO(name, args) mf_status mfc_##name args;
MFI_KERNELS(MFC_PROTO)
#undef MFC_PROTO
}

#endif
