/*
 * backends/cpu/cpu_engine.h - which library runs the CPU backend's
 * matrix products and convolutions: OpenBLAS (always built) or oneDNN
 * (when configure found it). See doc/cpu.md.
 */
#ifndef MPIFLOW_CPU_ENGINE_H
#define MPIFLOW_CPU_ENGINE_H

#include <signal.h>
#include <stdbool.h>
#include "backends/backend.h"
#include "mpiflow/runtime.h"

/* The engine in use now (mf_cpu_engine_set, MF_CPU_ENGINE). */
mf_cpu_engine mfi_cpu_engine(void);

/* Whether this build has oneDNN (cpu_onednn.c; cpu_onednn_none.c). */
extern const bool mfi_dnnl_built;

/* oneDNN kernels (cpu_onednn.c). Each returns MF_OK when it ran the
 * work, MFI_DNNL_DECLINED (no error set) when oneDNN has no
 * implementation for the case and the caller should run its own, and an
 * error otherwise. Built without oneDNN, they all decline. */
#define MFI_DNNL_DECLINED ((mf_status) - 1)
mf_status mfi_dnnl_gemm(const mfi_gemm *g);
/* An f32 GEMM (no bias) as dnnl_sgemm on the calling thread
 * alone, for kernels that run many small ones inside their own parallel
 * loops (backends/cpu/cpu_attention.c). */
mf_status mfi_dnnl_sgemm_serial(const mfi_gemm *g);
/* g with its bias written into C's rows, as a GEMM with beta 1 (for the
 * paths that add no bias themselves; backends/cpu/cpu_gemm.c) */
mfi_gemm mfi_cpu_bias_rows(const mfi_gemm *g);
/* n contiguous floats to bfloat16, ties to even (native bfloat16 only) */
mf_status mfi_dnnl_bf16_image(void *dst, const float *src, int64_t n);
/* a convolution operand's bfloat16 image in the layout oneDNN's
 * primitives read (mfi_backend.conv_image; 0 bytes: none) */
int64_t mfi_dnnl_conv_image_bytes(const mfi_conv2d *p, int which);
mf_status mfi_dnnl_conv_image(const mfi_conv2d *p, int which, void *dst, const float *src);
mf_status mfi_dnnl_conv_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias);
mf_status mfi_dnnl_conv_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w);
mf_status mfi_dnnl_conv_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x);
/* The temporaries oneDNN's pass (MFI_CONV_PASS_*) takes from the caching
 * allocator (bytes[0..n), n returned), or -1 where it declines. */
int mfi_dnnl_conv_temps(const mfi_conv2d *p, int pass, bool bias, size_t *bytes, int max);

/* oneDNN's instruction set on this CPU ("avx512_core_bf16"), or NULL
 * when it is not built; whether it multiplies bfloat16 natively. */
const char *mfi_dnnl_isa(void);
bool mfi_dnnl_bf16_native(void);
/* The implementation oneDNN picks for a probe convolution and GEMM
 * ("brg:avx512_core"), written into buf. */
void mfi_dnnl_impls(char *buf, size_t size);
/* Asynchronous signals kept off oneDNN's generated code
 * (cpu_signals.c): blocked in the calling thread for one call (restored
 * from *old after it), and for good in the OpenMP pool's n - 1 workers. */
void mfi_signals_block(sigset_t *old);
void mfi_signals_restore(const sigset_t *old);
void mfi_signals_pool(int n);
/* Frees the cached primitives (mf_finalize). */
void mfi_dnnl_shutdown(void);

#endif
