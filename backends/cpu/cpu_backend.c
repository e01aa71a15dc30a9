/*
 * backends/cpu/cpu_backend.c - the CPU backend table: oneDNN or OpenBLAS
 * for GEMM and convolution (cpu_engine.c), OpenMP loops for everything else. Storage comes from the core's
 * caching allocator (base/alloc.c).
 */
#include <cblas.h>
#include <stdlib.h>
#include "backends/cpu/cpu_engine.h"
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
    if (mfi_dnnl_built) mfi_signals_pool(n);   /* oneDNN's code runs on them */
}

const mfi_backend mfi_cpu_backend = {
    .name = "cpu",
    .device = MF_DEV_CPU,
    .set_threads = cpu_set_threads,
    .shutdown = mfi_dnnl_shutdown,
    .bf16_in_kernel = true,
    .bf16_images = mf_cpu_bf16_native,
    .bf16_image = mfi_dnnl_bf16_image,
    .conv_image_bytes = mfi_dnnl_conv_image_bytes,
    .conv_image = mfi_dnnl_conv_image,
    .conv_temps = mfi_cpu_conv2d_temps,
    .gemm_bias = true,
#define MFI_CPU_SLOT(name, args) .name = mfi_cpu_##name,
    MFI_KERNELS(MFI_CPU_SLOT)
#undef MFI_CPU_SLOT
};
