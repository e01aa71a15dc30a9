/*
 * backends/cpu/cpu_gemm.c - matrix products: oneDNN when it is the CPU
 * engine (backends/cpu/cpu_onednn.c), OpenBLAS sgemm/dgemm otherwise and
 * for what oneDNN declines.
 *
 * Row-major C = alpha op(A) op(B) + beta C, looped over a batch.
 */
#include <cblas.h>
#include <string.h>
#include "backends/cpu/cpu_engine.h"
#include "backends/cpu/cpu_kernels.h"
#include "base/alloc.h"

/* Elements of a batch of stored rows x cols matrices (leading dimension
 * ld, one every stride apart, or one for all when stride is 0). */
static int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch)
{
    if (rows == 0 || cols == 0) return 0;
    return (stride ? (batch - 1) * stride : 0) + (rows - 1) * ld + cols;
}

/* bf16 without native bfloat16 products: the same GEMM in f32 on copies
 * of A and B rounded to bfloat16 values. */
static mf_status gemm_rounded(const mfi_gemm *g)
{
    int64_t na = span(g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->stride_a, g->batch);
    int64_t nb = span(g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->stride_b, g->batch);
    float *a = mfi_cpu_bf16_rounded(g->a, na), *b = a ? mfi_cpu_bf16_rounded(g->b, nb) : NULL;
    mf_status st;
    if (!a || !b) {
        st = mfi_error(MF_ERR_NOMEM, "gemm: out of memory rounding bfloat16 operands");
    } else {
        mfi_gemm r = *g;
        r.a = a;
        r.b = b;
        r.bf16 = false;
        st = mfi_cpu_gemm(&r);
    }
    if (a) mfi_free(a, (size_t)(na > 0 ? na : 1) * sizeof(float));
    if (b) mfi_free(b, (size_t)(nb > 0 ? nb : 1) * sizeof(float));
    return st;
}

/* A GEMM with a bias as one that adds C: the bias written into every row
 * of C, then beta 1. */
mfi_gemm mfi_cpu_bias_rows(const mfi_gemm *g)
{
    mfi_gemm r = *g;
    if (!g->bias) return r;
    size_t es = g->dtype == MF_F64 ? sizeof(double) : sizeof(float);
#pragma omp parallel for schedule(static) if (g->m * g->n >= 262144)
    for (int64_t i = 0; i < g->m; i++) memcpy((char *)g->c + (size_t)(i * g->ldc) * es, g->bias, (size_t)g->n * es);
    r.bias = NULL;
    r.beta = 1.0;
    return r;
}

mf_status mfi_cpu_gemm(const mfi_gemm *g)
{
    if (g->m == 0 || g->n == 0) return MF_OK;
    if (mfi_cpu_engine() == MF_CPU_ONEDNN) {
        mf_status st = mfi_dnnl_gemm(g);
        if (st != MFI_DNNL_DECLINED) return st;
    }
    if (g->bias) {
        mfi_gemm r = mfi_cpu_bias_rows(g);
        return mfi_cpu_gemm(&r);
    }
    if (g->bf16 && g->dtype == MF_F32) return gemm_rounded(g);
    CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
    CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX)
        MF_FAIL(MF_ERR_SHAPE, "gemm: a dimension exceeds the BLAS int range");
    for (int64_t i = 0; i < g->batch; i++) {
        if (g->dtype == MF_F32) {
            cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha,
                        (const float *)g->a + i * g->stride_a, (int)g->lda,
                        (const float *)g->b + i * g->stride_b, (int)g->ldb, (float)g->beta,
                        (float *)g->c + i * g->stride_c, (int)g->ldc);
        } else if (g->dtype == MF_F64) {
            cblas_dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha,
                        (const double *)g->a + i * g->stride_a, (int)g->lda,
                        (const double *)g->b + i * g->stride_b, (int)g->ldb, g->beta,
                        (double *)g->c + i * g->stride_c, (int)g->ldc);
        } else {
            MF_FAIL(MF_ERR_DTYPE, "gemm: dtype %s is not f32 or f64", mf_dtype_name(g->dtype));
        }
    }
    return MF_OK;
}
