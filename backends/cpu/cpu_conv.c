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

/* bf16 without native bfloat16 products: the operands' elements (sizes
 * n0 and n1) rounded to bfloat16 values in copies, for the f32 kernels */
typedef struct rounded2 {
    float *r[2];
    int64_t n[2];
} rounded2;

static mf_status round2(rounded2 *rr, const void *a, int64_t na, const void *b, int64_t nb)
{
    rr->n[0] = na;
    rr->n[1] = nb;
    rr->r[0] = mfi_cpu_bf16_rounded(a, na);
    rr->r[1] = rr->r[0] ? mfi_cpu_bf16_rounded(b, nb) : NULL;
    return rr->r[1] ? MF_OK : mfi_error(MF_ERR_NOMEM, "conv2d: out of memory rounding bfloat16 operands");
}

static void round2_free(rounded2 *rr)
{
    for (int i = 0; i < 2; i++)
        if (rr->r[i]) mfi_free(rr->r[i], (size_t)(rr->n[i] > 0 ? rr->n[i] : 1) * sizeof(float));
}

static int64_t nx(const mfi_conv2d *p) { return p->n * p->c * p->h * p->w; }
static int64_t nw(const mfi_conv2d *p) { return p->oc * (p->c / p->groups) * p->kh * p->kw; }
static int64_t ny(const mfi_conv2d *p) { return p->n * p->oc * p->oh * p->ow; }

mf_status mfi_cpu_conv2d_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    DNNL_FIRST(mfi_dnnl_conv_fwd(p, out, x, w, bias));
    if (x->dtype == MF_F32 && p->bf16) {
        rounded2 rr = {0};
        mf_status st = round2(&rr, x->data, nx(p), w->data, nw(p));
        if (st == MF_OK) st = conv_fwd_f32(p, out->data, rr.r[0], rr.r[1], bias ? bias->data : NULL);
        round2_free(&rr);
        return st;
    }
    if (x->dtype == MF_F32)
        return conv_fwd_f32(p, out->data, x->data, w->data, bias ? bias->data : NULL);
    if (x->dtype == MF_F64)
        return conv_fwd_f64(p, out->data, x->data, w->data, bias ? bias->data : NULL);
    MF_FAIL(MF_ERR_DTYPE, "conv2d: not a float dtype");
}

mf_status mfi_cpu_conv2d_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    DNNL_FIRST(mfi_dnnl_conv_bwd_data(p, gx, gy, w));
    if (gx->dtype == MF_F32 && p->bf16) {
        rounded2 rr = {0};
        mf_status st = round2(&rr, gy->data, ny(p), w->data, nw(p));
        if (st == MF_OK) st = conv_bwd_data_f32(p, gx->data, rr.r[0], rr.r[1]);
        round2_free(&rr);
        return st;
    }
    if (gx->dtype == MF_F32) return conv_bwd_data_f32(p, gx->data, gy->data, w->data);
    if (gx->dtype == MF_F64) return conv_bwd_data_f64(p, gx->data, gy->data, w->data);
    MF_FAIL(MF_ERR_DTYPE, "conv2d backward: not a float dtype");
}

mf_status mfi_cpu_conv2d_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    DNNL_FIRST(mfi_dnnl_conv_bwd_filter(p, gw, gy, x));
    if (gw->dtype == MF_F32 && p->bf16) {
        rounded2 rr = {0};
        mf_status st = round2(&rr, gy->data, ny(p), x->data, nx(p));
        if (st == MF_OK) st = conv_bwd_filter_f32(p, gw->data, rr.r[0], rr.r[1]);
        round2_free(&rr);
        return st;
    }
    if (gw->dtype == MF_F32) return conv_bwd_filter_f32(p, gw->data, gy->data, x->data);
    if (gw->dtype == MF_F64) return conv_bwd_filter_f64(p, gw->data, gy->data, x->data);
    MF_FAIL(MF_ERR_DTYPE, "conv2d backward: not a float dtype");
}

/* The buffers the passes above take from the caching allocator, all
 * held at once: oneDNN's when it runs the pass, else the bfloat16
 * roundings and the im2col columns (and backward-filter's partial sums
 * of the threads past the first). */
int mfi_cpu_conv2d_temps(const mfi_conv2d *p, int pass, mf_dtype dt, bool bias, size_t *bytes, int max)
{
    if (max < 4) return 0;
    if (mfi_cpu_engine() == MF_CPU_ONEDNN && dt == MF_F32) {
        int n = mfi_dnnl_conv_temps(p, pass, bias, bytes, max);
        if (n >= 0) return n;
    }
    const conv_dims d = conv_dims_of(p);
    const size_t el = dt == MF_F64 ? sizeof(double) : sizeof(float);
    int n = 0;
    if (dt == MF_F32 && p->bf16) {   /* round2's copies, each of at least one float */
        const int64_t a = pass == MFI_CONV_PASS_FWD ? nx(p) : ny(p), b = pass == MFI_CONV_PASS_BWD_FILTER ? nx(p) : nw(p);
        bytes[n++] = (size_t)(a > 0 ? a : 1) * sizeof(float);
        bytes[n++] = (size_t)(b > 0 ? b : 1) * sizeof(float);
    }
    bytes[n++] = (size_t)d.nt * (size_t)(d.K * d.L) * el;
    if (pass == MFI_CONV_PASS_BWD_FILTER && d.nt > 1) bytes[n++] = (size_t)(d.nt - 1) * (size_t)(p->oc * d.K) * el;
    return n;
}
