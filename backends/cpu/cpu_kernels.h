/*
 * backends/cpu/cpu_kernels.h - the CPU kernels that fill mfi_cpu_backend.
 */
#ifndef MPIFLOW_CPU_KERNELS_H
#define MPIFLOW_CPU_KERNELS_H

#include "lib/backend.h"
#include "lib/error.h"

mf_status mf_cpu_fill(mfi_cv *out, double value);
mf_status mf_cpu_copy(mfi_cv *out, mfi_cv *in);
mf_status mf_cpu_philox_fill(mfi_cv *out, mfi_dist d, double a, double b, uint64_t seed, uint64_t key,
                             uint64_t index0);
mf_status mf_cpu_dropout_fwd(mfi_cv *out, mfi_cv *mask, mfi_cv *x, double p, uint64_t seed, uint64_t key,
                             uint64_t index0);

mf_status mf_cpu_unary_fwd(mfi_unop op, mfi_cv *out, mfi_cv *x, double alpha);
mf_status mf_cpu_unary_bwd(mfi_unop op, mfi_cv *gx, mfi_cv *gy, mfi_cv *x, mfi_cv *y, double alpha);
mf_status mf_cpu_binary_fwd(mfi_binop op, mfi_cv *out, mfi_cv *a, mfi_cv *b);

mf_status mf_cpu_reduce(mfi_redop op, mfi_cv *out, mfi_cv *in);
mf_status mf_cpu_argmax(mfi_cv *out, mfi_cv *in, int axis);
mf_status mf_cpu_softmax_fwd(bool log, mfi_cv *out, mfi_cv *x, int axis);
mf_status mf_cpu_softmax_bwd(bool log, mfi_cv *gx, mfi_cv *gy, mfi_cv *y, int axis);
mf_status mf_cpu_nll_fwd(mfi_cv *loss, mfi_cv *logp, mfi_cv *target);
mf_status mf_cpu_nll_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *target);
mf_status mf_cpu_xent_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *logp, mfi_cv *target);
mf_status mf_cpu_embedding_fwd(mfi_cv *out, mfi_cv *weight, mfi_cv *index);
mf_status mf_cpu_embedding_bwd(mfi_cv *gweight, mfi_cv *gy, mfi_cv *index);

mf_status mf_cpu_gemm(const mfi_gemm *g);

mf_status mf_cpu_conv2d_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias);
mf_status mf_cpu_conv2d_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w);
mf_status mf_cpu_conv2d_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x);

mf_status mf_cpu_maxpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *idx, mfi_cv *x);
mf_status mf_cpu_maxpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *idx);
mf_status mf_cpu_avgpool2d_fwd(const mfi_pool2d *p, mfi_cv *out, mfi_cv *x);
mf_status mf_cpu_avgpool2d_bwd(const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy);

mf_status mf_cpu_batchnorm_fwd(const mfi_bnorm *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *b,
                               mfi_cv *rmean, mfi_cv *rvar, mfi_cv *smean, mfi_cv *sinvstd);
mf_status mf_cpu_batchnorm_bwd(const mfi_bnorm *p, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy,
                               mfi_cv *x, mfi_cv *w, mfi_cv *smean, mfi_cv *sinvstd);
mf_status mf_cpu_layernorm_fwd(int64_t rows, int64_t cols, double eps, mfi_cv *out, mfi_cv *x,
                               mfi_cv *w, mfi_cv *b, mfi_cv *mean, mfi_cv *rstd);
mf_status mf_cpu_layernorm_bwd(int64_t rows, int64_t cols, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb,
                               mfi_cv *gy, mfi_cv *x, mfi_cv *w, mfi_cv *mean, mfi_cv *rstd);

mf_status mf_cpu_sgd_step(const mfi_sgd_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *buf);
mf_status mf_cpu_adam_step(const mfi_adam_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *m, mfi_cv *v,
                           mfi_cv *vmax);
mf_status mf_cpu_rmsprop_step(const mfi_rmsprop_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *square_avg,
                              mfi_cv *momentum_buf, mfi_cv *grad_avg);

/* Elements of a view (product of its shape). */
static inline int64_t cpu_numel(mfi_cv *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

#endif
