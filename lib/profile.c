/*
 * lib/profile.c - time per kernel class (MF_PROFILE=1).
 *
 * MFI_KERNEL brackets each kernel call with mf_time() when profiling is
 * on, and counts its floating-point operations and bytes with the
 * kernel's cost function (lib/graph/cost.c); the benchmarks read the
 * GEMM share of a training step from here.
 */
#include "lib/internal.h"

bool mfi_prof_on;
static double prof_seconds[MF_PROF_COUNT];
static int64_t prof_calls[MF_PROF_COUNT];
static double prof_flops[MF_PROF_COUNT];
static double prof_bytes[MF_PROF_COUNT];

static const char *const class_names[MF_PROF_COUNT] = {
    "gemm", "conv", "elementwise", "reduce", "norm", "pool", "optim", "data", "attention", "other"};

void mfi_prof_add(mf_prof_class c, double seconds)
{
    prof_seconds[c] += seconds;
    prof_calls[c]++;
}

void mfi_cost_note(int kernel, mf_prof_class cls, double flops, double bytes)
{
    if (mfi_prof_on) {
        prof_flops[cls] += flops;
        prof_bytes[cls] += bytes;
    }
    if (mfi_graph_rec) mfi_graph_kernel(kernel, cls, flops, bytes);
}

double mf_profile_flops(mf_prof_class c) { return (unsigned)c < MF_PROF_COUNT ? prof_flops[c] : 0.0; }
double mf_profile_bytes(mf_prof_class c) { return (unsigned)c < MF_PROF_COUNT ? prof_bytes[c] : 0.0; }

void mf_profile_enable(bool on) { mfi_prof_on = on; }
bool mf_profile_enabled(void) { return mfi_prof_on; }

void mf_profile_reset(void)
{
    memset(prof_seconds, 0, sizeof prof_seconds);
    memset(prof_calls, 0, sizeof prof_calls);
    memset(prof_flops, 0, sizeof prof_flops);
    memset(prof_bytes, 0, sizeof prof_bytes);
}

double mf_profile_seconds(mf_prof_class c, int64_t *calls)
{
    if ((unsigned)c >= MF_PROF_COUNT) return 0.0;
    if (calls) *calls = prof_calls[c];
    return prof_seconds[c];
}

_Atomic int64_t mfi_kernel_calls[MFI_DEV_COUNT][MFI_K_COUNT];

#define KERNEL_NAME(name, args) #name,
static const char *const kernel_names[MFI_K_COUNT] = {MFI_KERNELS(KERNEL_NAME)};
#undef KERNEL_NAME

const char *mf_kernel_name(int i) { return i >= 0 && i < MFI_K_COUNT ? kernel_names[i] : NULL; }

int64_t mf_kernel_calls(mf_device_type dev, const char *kernel)
{
    for (int i = 0; kernel && i < MFI_K_COUNT; i++)
        if (!strcmp(kernel, kernel_names[i]))
            return (unsigned)dev < MFI_DEV_COUNT ? atomic_load_explicit(&mfi_kernel_calls[dev][i], memory_order_relaxed) : 0;
    return -1;
}

const char *mf_profile_class_name(mf_prof_class c)
{
    return (unsigned)c < MF_PROF_COUNT ? class_names[c] : "?";
}
