/*
 * backends/cpu/cpu_backend.c - the CPU backend table: OpenBLAS for GEMM,
 * OpenMP loops for everything else. Storage comes from the core's
 * caching allocator (lib/alloc.c).
 */
#include <cblas.h>
#include <stdlib.h>
#include "backends/cpu/cpu_kernels.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static void cpu_set_threads(int n)
{
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(n);
}

const mfi_backend mfi_cpu_backend = {
    .name = "cpu",
    .device = MF_DEV_CPU,
    .set_threads = cpu_set_threads,
    .fill = mf_cpu_fill,
    .copy = mf_cpu_copy,
    .philox_fill = mf_cpu_philox_fill,
    .unary_fwd = mf_cpu_unary_fwd,
    .unary_bwd = mf_cpu_unary_bwd,
    .binary_fwd = mf_cpu_binary_fwd,
    .reduce = mf_cpu_reduce,
    .argmax = mf_cpu_argmax,
    .gemm = mf_cpu_gemm,
    .softmax_fwd = mf_cpu_softmax_fwd,
    .softmax_bwd = mf_cpu_softmax_bwd,
    .nll_fwd = mf_cpu_nll_fwd,
    .nll_bwd = mf_cpu_nll_bwd,
    .xent_bwd = mf_cpu_xent_bwd,
    .embedding_fwd = mf_cpu_embedding_fwd,
    .embedding_bwd = mf_cpu_embedding_bwd,
    .conv2d_fwd = mf_cpu_conv2d_fwd,
    .conv2d_bwd_data = mf_cpu_conv2d_bwd_data,
    .conv2d_bwd_filter = mf_cpu_conv2d_bwd_filter,
    .maxpool2d_fwd = mf_cpu_maxpool2d_fwd,
    .maxpool2d_bwd = mf_cpu_maxpool2d_bwd,
    .avgpool2d_fwd = mf_cpu_avgpool2d_fwd,
    .avgpool2d_bwd = mf_cpu_avgpool2d_bwd,
    .batchnorm_fwd = mf_cpu_batchnorm_fwd,
    .batchnorm_bwd = mf_cpu_batchnorm_bwd,
    .layernorm_fwd = mf_cpu_layernorm_fwd,
    .layernorm_bwd = mf_cpu_layernorm_bwd,
    .dropout_fwd = mf_cpu_dropout_fwd,
    .sgd_step = mf_cpu_sgd_step,
    .adam_step = mf_cpu_adam_step,
    .rmsprop_step = mf_cpu_rmsprop_step,
};
