/*
 * backends/cpu/cpu_gemm.c - matrix products: oneDNN when it is the CPU
 * engine (backends/cpu/cpu_onednn.c), OpenBLAS sgemm/dgemm otherwise and
 * for what oneDNN declines.
 *
 * Row-major C = alpha op(A) op(B) + beta C, looped over a batch.
 */
#include <cblas.h>
#include "backends/cpu/cpu_engine.h"
#include "backends/cpu/cpu_kernels.h"

mf_status mfi_cpu_gemm(const mfi_gemm *g)
{
    if (g->m == 0 || g->n == 0) return MF_OK;
    if (mfi_cpu_engine() == MF_CPU_ONEDNN) {
        mf_status st = mfi_dnnl_gemm(g);
        if (st != MFI_DNNL_DECLINED) return st;
    }
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
