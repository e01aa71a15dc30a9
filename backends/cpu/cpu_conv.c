/*
 * backends/cpu/cpu_conv.c - conv2d forward, backward-data and
 * backward-filter on the CPU: im2col + OpenBLAS GEMM (see
 * cpu_conv_tmpl.h for the algorithm and its cost).
 */
#include <cblas.h>
#include <string.h>
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "lib/alloc.h"

/* Images per chunk: a column buffer of about 4 MiB of floats. */
static int64_t conv_chunk(int64_t n, int64_t K, int64_t L, int64_t ocg)
{
    int64_t per = (K + ocg) * L;
    int64_t nb = per > 0 ? (int64_t)(1 << 20) / per : n;
    if (nb < 1) nb = 1;
    return nb < n ? nb : (n > 0 ? n : 1);
}

#define T float
#define SFX f32
#define GEMM_T cblas_sgemm
#include "backends/cpu/cpu_conv_tmpl.h"
#undef T
#undef SFX
#undef GEMM_T

#define T double
#define SFX f64
#define GEMM_T cblas_dgemm
#include "backends/cpu/cpu_conv_tmpl.h"
#undef T
#undef SFX
#undef GEMM_T

mf_status mf_cpu_conv2d_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    if (x->dtype == MF_F32)
        return conv_fwd_f32(p, out->data, x->data, w->data, bias ? bias->data : NULL);
    if (x->dtype == MF_F64)
        return conv_fwd_f64(p, out->data, x->data, w->data, bias ? bias->data : NULL);
    MF_FAIL(MF_ERR_DTYPE, "conv2d: not a float dtype");
}

mf_status mf_cpu_conv2d_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    if (gx->dtype == MF_F32) return conv_bwd_data_f32(p, gx->data, gy->data, w->data);
    if (gx->dtype == MF_F64) return conv_bwd_data_f64(p, gx->data, gy->data, w->data);
    MF_FAIL(MF_ERR_DTYPE, "conv2d backward: not a float dtype");
}

mf_status mf_cpu_conv2d_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    if (gw->dtype == MF_F32) return conv_bwd_filter_f32(p, gw->data, gy->data, x->data);
    if (gw->dtype == MF_F64) return conv_bwd_filter_f64(p, gw->data, gy->data, x->data);
    MF_FAIL(MF_ERR_DTYPE, "conv2d backward: not a float dtype");
}
