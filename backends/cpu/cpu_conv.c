/*
 * backends/cpu/cpu_conv.c - conv2d forward, backward-data and
 * backward-filter on the CPU: im2col + OpenBLAS GEMM per image (see
 * cpu_conv_tmpl.h for the algorithm and its cost).
 */
#include <cblas.h>
#include <string.h>
#include "backends/cpu/cpu_engine.h"
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "base/alloc.h"

/* Threads to spread images over: all of them when there are enough
 * images, else one (and BLAS is threaded instead). */
static int conv_threads(int64_t n)
{
#ifdef _OPENMP
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    return n >= nt ? nt : 1;
#else
    (void)n;
    return 1;
#endif
}

static int conv_thread(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* One group's GEMM sizes per image (K = C/g*KH*KW, L = OH*OW) and the
 * threads the images are spread over. */
typedef struct conv_dims {
    int64_t cg, ocg, K, L;
    int nt;
} conv_dims;

static conv_dims conv_dims_of(const mfi_conv2d *p)
{
    conv_dims d;
    d.cg = p->c / p->groups;
    d.ocg = p->oc / p->groups;
    d.K = d.cg * p->kh * p->kw;
    d.L = p->oh * p->ow;
    d.nt = conv_threads(p->n);
    return d;
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

/* oneDNN first when it is the engine; its declines fall through */
#define DNNL_FIRST(call)                                       \
    do {                                                       \
        if (mfi_cpu_engine() == MF_CPU_ONEDNN) {               \
            mf_status st_ = (call);                            \
            if (st_ != MFI_DNNL_DECLINED) return st_;          \
        }                                                      \
    } while (0)

mf_status mfi_cpu_conv2d_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    DNNL_FIRST(mfi_dnnl_conv_fwd(p, out, x, w, bias));
    if (x->dtype == MF_F32)
        return conv_fwd_f32(p, out->data, x->data, w->data, bias ? bias->data : NULL);
    if (x->dtype == MF_F64)
        return conv_fwd_f64(p, out->data, x->data, w->data, bias ? bias->data : NULL);
    MF_FAIL(MF_ERR_DTYPE, "conv2d: not a float dtype");
}

mf_status mfi_cpu_conv2d_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    DNNL_FIRST(mfi_dnnl_conv_bwd_data(p, gx, gy, w));
    if (gx->dtype == MF_F32) return conv_bwd_data_f32(p, gx->data, gy->data, w->data);
    if (gx->dtype == MF_F64) return conv_bwd_data_f64(p, gx->data, gy->data, w->data);
    MF_FAIL(MF_ERR_DTYPE, "conv2d backward: not a float dtype");
}

mf_status mfi_cpu_conv2d_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    DNNL_FIRST(mfi_dnnl_conv_bwd_filter(p, gw, gy, x));
    if (gw->dtype == MF_F32) return conv_bwd_filter_f32(p, gw->data, gy->data, x->data);
    if (gw->dtype == MF_F64) return conv_bwd_filter_f64(p, gw->data, gy->data, x->data);
    MF_FAIL(MF_ERR_DTYPE, "conv2d backward: not a float dtype");
}
