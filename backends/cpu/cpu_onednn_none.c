/*
 * backends/cpu/cpu_onednn_none.c - the oneDNN entry points of a build
 * without oneDNN: every kernel declines, so the CPU backend runs
 * OpenBLAS and its own loops (doc/cpu.md).
 */
#include <stdio.h>
#include "backends/cpu/cpu_engine.h"

const bool mfi_dnnl_built = false;

mf_status mfi_dnnl_gemm(const mfi_gemm *g) { (void)g; return MFI_DNNL_DECLINED; }
mf_status mfi_dnnl_sgemm_serial(const mfi_gemm *g) { (void)g; return MFI_DNNL_DECLINED; }
mf_status mfi_dnnl_bf16_image(void *dst, const float *src, int64_t n)
{
    (void)dst, (void)src, (void)n;
    return MFI_DNNL_DECLINED;
}
int64_t mfi_dnnl_conv_image_bytes(const mfi_conv2d *p, int which)
{
    (void)p, (void)which;
    return 0;
}
mf_status mfi_dnnl_conv_image(const mfi_conv2d *p, int which, void *dst, const float *src)
{
    (void)p, (void)which, (void)dst, (void)src;
    return MFI_DNNL_DECLINED;
}
mf_status mfi_dnnl_conv_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    (void)p, (void)out, (void)x, (void)w, (void)bias;
    return MFI_DNNL_DECLINED;
}
mf_status mfi_dnnl_conv_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    (void)p, (void)gx, (void)gy, (void)w;
    return MFI_DNNL_DECLINED;
}
mf_status mfi_dnnl_conv_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    (void)p, (void)gw, (void)gy, (void)x;
    return MFI_DNNL_DECLINED;
}
int mfi_dnnl_conv_temps(const mfi_conv2d *p, int pass, bool bias, size_t *bytes, int max)
{
    (void)p, (void)pass, (void)bias, (void)bytes, (void)max;
    return -1;
}
const char *mfi_dnnl_isa(void) { return NULL; }
bool mfi_dnnl_bf16_native(void) { return false; }
void mfi_dnnl_impls(char *buf, size_t size) { snprintf(buf, size, "-"); }
void mfi_dnnl_shutdown(void) {}
