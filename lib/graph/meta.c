/*
 * lib/graph/meta.c - the meta device: tensors with shapes and no bytes
 * (doc/planning.md).
 *
 * A program run on MF_DEV_META does everything a real step does (shape
 * rules, autograd, the allocator's size classes, the optimizer's state)
 * except the arithmetic: each kernel only counts what it would cost
 * (lib/graph/cost.c). Its memory is address space that is never mapped,
 * so the caching allocator's statistics on it are those of the real step
 * while nothing is allocated, and a host read of its bytes (a bug: the
 * same one a GPU would hit) faults at once. Copies to the host give
 * zeros; staging for communication leaves host buffers untouched.
 */
#include <stdint.h>
#include "base/alloc.h"
#include "lib/graph/graph_internal.h"

/* Unmapped user address space from 64 TiB up, handed out once and never
 * reused: a trace of a few hundred GiB of requests fits many times. */
static uintptr_t next_addr = (uintptr_t)1 << 46;
static const uintptr_t last_addr = (uintptr_t)1 << 47;

static void *meta_raw_alloc(size_t nbytes)
{
    uintptr_t n = ((uintptr_t)nbytes + 4095) & ~(uintptr_t)4095;
    if (n == 0 || n > last_addr - next_addr) return NULL;
    void *p = (void *)next_addr;
    next_addr += n;
    return p;
}

static void meta_raw_free(void *p) { (void)p; }

static int meta_device_count(void) { return 1; }

static mf_status meta_select(int local_rank, int local_size, char *desc, size_t size)
{
    (void)local_rank, (void)local_size;
    snprintf(desc, size, "meta (shapes only: no data, kernels counted)");
    return MF_OK;
}

static mf_status meta_to_host(void *dst, const void *src, size_t nbytes)
{
    (void)src;
    memset(dst, 0, nbytes);
    return MF_OK;
}

static mf_status meta_from_host(void *dst, const void *src, size_t nbytes)
{
    (void)dst, (void)src, (void)nbytes;
    return MF_OK;
}

static mf_status meta_synchronize(void) { return MF_OK; }

/* staging for communication: what a simulated world's calls never read,
 * so the host buffer is left untouched (no pages faulted in for a
 * model's worth of gradients) */
static mf_status meta_stage(void *dst, const void *src, size_t nbytes)
{
    (void)dst, (void)src, (void)nbytes;
    return MF_OK;
}

/* The host engine's temporaries of a convolution pass, taken from this
 * arena and given back: the peak of a simulated step has them, as the
 * real one does (an op's own buffers are tensors and need nothing). */
static mf_status host_temps(const mfi_conv2d *p, int pass, mf_dtype dt, bool bias)
{
    const mfi_backend *host = mfi_backend_for(MF_DEV_CPU);
    size_t bytes[16];
    void *bufs[16];
    int n = host && host->conv_temps ? host->conv_temps(p, pass, dt, bias, bytes, 16) : 0;
    mf_status st = MF_OK;
    for (int i = 0; i < n; i++)
        if (!(bufs[i] = mfi_alloc_on(MF_DEV_META, bytes[i] ? bytes[i] : 1)) && st == MF_OK)
            st = mfi_error(MF_ERR_NOMEM, "conv2d: out of memory for a %zu-byte workspace", bytes[i]);
    for (int i = 0; i < n; i++)
        if (bufs[i]) mfi_free_on(MF_DEV_META, bufs[i], bytes[i] ? bytes[i] : 1);
    return st;
}

static mf_status meta_conv2d_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    MF_TRY(host_temps(p, MFI_CONV_PASS_FWD, x->dtype, bias != NULL));
    return mfi_cost_table.conv2d_fwd(p, out, x, w, bias);
}

static mf_status meta_conv2d_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    MF_TRY(host_temps(p, MFI_CONV_PASS_BWD_DATA, gx->dtype, false));
    return mfi_cost_table.conv2d_bwd_data(p, gx, gy, w);
}

static mf_status meta_conv2d_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    MF_TRY(host_temps(p, MFI_CONV_PASS_BWD_FILTER, gw->dtype, false));
    return mfi_cost_table.conv2d_bwd_filter(p, gw, gy, x);
}

static mfi_backend make_table(void)
{
    mfi_backend b;
    memset(&b, 0, sizeof b);
    b.name = "meta";
    b.device = MF_DEV_META;
    b.bf16_in_kernel = true;
    b.gemm_bias = true;
    b.device_count = meta_device_count;
    b.select = meta_select;
    b.raw_alloc = meta_raw_alloc;
    b.raw_free = meta_raw_free;
    b.to_host = meta_to_host;
    b.from_host = meta_from_host;
    b.synchronize = meta_synchronize;
    b.comm_download = meta_stage;
    b.comm_upload = meta_stage;
#define MFI_META_SLOT(name, args) b.name = mfi_cost_table.name;
    MFI_KERNELS(MFI_META_SLOT)
#undef MFI_META_SLOT
    b.conv2d_fwd = meta_conv2d_fwd;
    b.conv2d_bwd_data = meta_conv2d_bwd_data;
    b.conv2d_bwd_filter = meta_conv2d_bwd_filter;
    return b;
}

static mfi_backend table;
static bool ready;

const mfi_backend *mfi_meta_backend(void)
{
    if (!ready) {
        table = make_table();
        mfi_arena_ops ops = {meta_raw_alloc, meta_raw_free};
        mfi_arena_register(MF_DEV_META, &ops);
        ready = true;
    }
    return &table;
}
