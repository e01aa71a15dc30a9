/*
 * backends/cpu/cpu_kernels.h - the CPU kernels that fill mfi_cpu_backend.
 */
#ifndef MPIFLOW_CPU_KERNELS_H
#define MPIFLOW_CPU_KERNELS_H

#include "backends/backend.h"
#include "base/error.h"

/* mfi_cpu_<name> for every kernel of the set (backends/backend.h) */
#define MFI_CPU_PROTO(name, args) mf_status mfi_cpu_##name args;
MFI_KERNELS(MFI_CPU_PROTO)
#undef MFI_CPU_PROTO

/* Elements of a view (product of its shape). */
static inline int64_t cpu_numel(mfi_cv *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

/* A copy of x[0..n) rounded to bfloat16 values (ties to even) as floats,
 * from the host allocator (mfi_free with n floats); NULL when out of
 * memory. For the bf16 operands of the OpenBLAS path. */
float *mfi_cpu_bf16_rounded(const float *x, int64_t n);
/* the temporaries of a convolution pass (backends/backend.h, conv_temps) */
int mfi_cpu_conv2d_temps(const mfi_conv2d *p, int pass, mf_dtype dt, bool bias, size_t *bytes, int max);

#endif
