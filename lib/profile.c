/*
 * lib/profile.c - time per kernel class (MF_PROFILE=1).
 *
 * MFI_KERNEL brackets each kernel call with mf_time() when profiling is
 * on; the benchmark reads the GEMM share of a training step from here.
 */
#include "lib/internal.h"

bool mfi_prof_on;
static double prof_seconds[MF_PROF_COUNT];
static int64_t prof_calls[MF_PROF_COUNT];
static double prof_flops[MF_PROF_COUNT];

static const char *const class_names[MF_PROF_COUNT] = {
    "gemm", "conv", "elementwise", "reduce", "norm", "pool", "optim", "data", "attention", "other"};

void mfi_prof_add(mf_prof_class c, double seconds)
{
    prof_seconds[c] += seconds;
    prof_calls[c]++;
}

void mfi_prof_gemm_flops(const mfi_gemm *g)
{
    if (mfi_prof_on) prof_flops[MF_PROF_GEMM] += 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)g->batch;
}

/* Output positions times kernel taps along one dimension that land on
 * the input: a tap on the zero padding multiplies nothing, and a direct
 * convolution (oneDNN's) skips it, so it is not counted. */
static double conv_taps(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dil)
{
    double n = 0;
    for (int64_t o = 0; o < out; o++)
        for (int64_t j = 0; j < k; j++) {
            int64_t i = o * stride - pad + j * dil;
            n += i >= 0 && i < in;
        }
    return n;
}

void mfi_prof_conv_flops(const mfi_conv2d *p)
{
    if (mfi_prof_on)
        prof_flops[MF_PROF_CONV] += 2.0 * (double)p->n * (double)p->oc * (double)(p->c / p->groups) *
                                    conv_taps(p->h, p->oh, p->kh, p->stride[0], p->padding[0], p->dilation[0]) *
                                    conv_taps(p->w, p->ow, p->kw, p->stride[1], p->padding[1], p->dilation[1]);
}

double mf_profile_flops(mf_prof_class c) { return (unsigned)c < MF_PROF_COUNT ? prof_flops[c] : 0.0; }

void mf_profile_enable(bool on) { mfi_prof_on = on; }
bool mf_profile_enabled(void) { return mfi_prof_on; }

void mf_profile_reset(void)
{
    memset(prof_seconds, 0, sizeof prof_seconds);
    memset(prof_calls, 0, sizeof prof_calls);
    memset(prof_flops, 0, sizeof prof_flops);
}

double mf_profile_seconds(mf_prof_class c, int64_t *calls)
{
    if ((unsigned)c >= MF_PROF_COUNT) return 0.0;
    if (calls) *calls = prof_calls[c];
    return prof_seconds[c];
}

_Atomic int64_t mfi_kernel_calls[2][MFI_K_COUNT];

#define KERNEL_NAME(name, args) #name,
static const char *const kernel_names[MFI_K_COUNT] = {MFI_KERNELS(KERNEL_NAME)};
#undef KERNEL_NAME

const char *mf_kernel_name(int i) { return i >= 0 && i < MFI_K_COUNT ? kernel_names[i] : NULL; }

int64_t mf_kernel_calls(mf_device_type dev, const char *kernel)
{
    for (int i = 0; kernel && i < MFI_K_COUNT; i++)
        if (!strcmp(kernel, kernel_names[i]))
            return atomic_load_explicit(&mfi_kernel_calls[dev != MF_DEV_CPU][i], memory_order_relaxed);
    return -1;
}

const char *mf_profile_class_name(mf_prof_class c)
{
    return (unsigned)c < MF_PROF_COUNT ? class_names[c] : "?";
}
