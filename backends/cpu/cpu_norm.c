/*
 * backends/cpu/cpu_norm.c - batch-norm and layer-norm kernels (see
 * cpu_norm_tmpl.h for the formulas).
 */
#include <math.h>
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_math.h"
#include "base/clones.h"

#define T float
#define SFX f32
#include "backends/cpu/cpu_norm_tmpl.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "backends/cpu/cpu_norm_tmpl.h"
#undef T
#undef SFX

#define D(v) ((v) ? (v)->data : NULL)

mf_status mfi_cpu_batchnorm_fwd(const mfi_bnorm *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *b,
                               mfi_cv *rmean, mfi_cv *rvar, mfi_cv *smean, mfi_cv *sinvstd)
{
    if (!p->training && (!D(rmean) || !D(rvar)))
        MF_FAIL(MF_ERR_ARG, "batch_norm: eval mode needs running_mean and running_var");
    if (x->dtype == MF_F32)
        bn_fwd_f32(p, out->data, x->data, D(w), D(b), D(rmean), D(rvar), smean->data, sinvstd->data);
    else if (x->dtype == MF_F64)
        bn_fwd_f64(p, out->data, x->data, D(w), D(b), D(rmean), D(rvar), smean->data, sinvstd->data);
    else MF_FAIL(MF_ERR_DTYPE, "batch_norm: not a float dtype");
    return MF_OK;
}

mf_status mfi_cpu_batchnorm_bwd(const mfi_bnorm *p, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy,
                               mfi_cv *x, mfi_cv *w, mfi_cv *smean, mfi_cv *sinvstd)
{
    if (gy->dtype == MF_F32)
        bn_bwd_f32(p, D(gx), D(gw), D(gb), gy->data, x->data, D(w), smean->data, sinvstd->data);
    else if (gy->dtype == MF_F64)
        bn_bwd_f64(p, D(gx), D(gw), D(gb), gy->data, x->data, D(w), smean->data, sinvstd->data);
    else MF_FAIL(MF_ERR_DTYPE, "batch_norm backward: not a float dtype");
    return MF_OK;
}

mf_status mfi_cpu_layernorm_fwd(int64_t rows, int64_t cols, double eps, mfi_cv *out, mfi_cv *x, mfi_cv *w,
                               mfi_cv *b, mfi_cv *mean, mfi_cv *rstd)
{
    if (x->dtype == MF_F32)
        ln_fwd_f32(rows, cols, eps, out->data, x->data, D(w), D(b), mean->data, rstd->data);
    else if (x->dtype == MF_F64)
        ln_fwd_f64(rows, cols, eps, out->data, x->data, D(w), D(b), mean->data, rstd->data);
    else MF_FAIL(MF_ERR_DTYPE, "layer_norm: not a float dtype");
    return MF_OK;
}

mf_status mfi_cpu_layernorm_bwd(int64_t rows, int64_t cols, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy,
                               mfi_cv *x, mfi_cv *w, mfi_cv *mean, mfi_cv *rstd)
{
    if (gy->dtype == MF_F32)
        ln_bwd_f32(rows, cols, D(gx), D(gw), D(gb), gy->data, x->data, D(w), mean->data, rstd->data);
    else if (gy->dtype == MF_F64)
        ln_bwd_f64(rows, cols, D(gx), D(gw), D(gb), gy->data, x->data, D(w), mean->data, rstd->data);
    else MF_FAIL(MF_ERR_DTYPE, "layer_norm backward: not a float dtype");
    return MF_OK;
}
