/*
 * lib/optim/bucket_sum.c - the allreduce kinds of gradient bucket
 * (buckets.h): every rank gets the whole summed gradient back.
 *
 * On the host the gradients are packed into one buffer (pinned when they
 * come from a GPU) and summed by our algorithms (doc/collectives.md).
 * When the gradients are on a GPU and MPI is CUDA-aware, the buffer stays
 * in GPU memory, is packed on the communication stream while backward
 * goes on, and MPI's own allreduce sums it.
 */
#include "lib/optim/buckets.h"

static size_t bytes_of(const mfi_bucket *b) { return (size_t)b->numel * mf_dtype_size(b->dt) + 1; }

static mf_status host_setup(const mf_optim *o, mfi_bucket *b)
{
    (void)o;
    b->buf = mfi_host_buffer(bytes_of(b), &b->pinned);
    return b->buf ? MF_OK : mfi_error(MF_ERR_NOMEM, "gradient buckets: out of memory");
}

static void host_release(mfi_bucket *b) { mfi_host_buffer_free(b->buf, bytes_of(b), b->pinned); }

static mf_status host_pack(mfi_bucket *b, int slot, const mfi_opt_param *p, mf_tensor *g)
{
    size_t es = mf_dtype_size(b->dt);
    char *dst = (char *)b->buf + (size_t)b->off[slot] * es;
    size_t bytes = (size_t)mf_tensor_numel(p->p->global->local) * es;
    if (!g) {
        memset(dst, 0, bytes);
        return MF_OK;
    }
    return mfi_stage_out(mf_tensor_device(g), dst, mf_tensor_data(g), bytes);
}

static mf_status host_start(mfi_bucket *b) { return mfi_iallreduce(b->comm, b->buf, b->numel, b->dt, MF_COLL_AUTO, &b->req); }
static mf_status host_sum(mfi_bucket *b) { return mfi_allreduce(b->comm, b->buf, b->buf, b->numel, b->dt); }

/* The sum of slot as a fresh gradient tensor (the old gradient's storage
 * may be shared), recorded as having the parameter's own SBP. */
static mf_status install(mfi_bucket *b, int slot, mfi_opt_param *p, bool from_gpu)
{
    mf_tensor *l = p->p->global->local;
    size_t es = mf_dtype_size(b->dt);
    const char *src = (const char *)b->buf + (size_t)b->off[slot] * es;
    mf_tensor *g = mfi_tensor_new_on(mf_tensor_device(l), b->dt, l->ndim, l->shape);
    if (!g) return mf_last_status();
    mf_status st = from_gpu ? mfi_device_memcpy(MF_DEV_CUDA, b->dt, mf_tensor_data(g), src, mf_tensor_numel(g))
                            : mfi_stage_in(mf_tensor_device(l), mf_tensor_data(g), src, (size_t)mf_tensor_numel(g) * es);
    if (st == MF_OK) st = mf_tensor_set_grad(l, g);
    mf_tensor_destroy(g);
    MF_TRY(st);
    return mfi_global_set_grad_synced(p->p, true);
}

static mf_status host_unpack(mfi_bucket *b, int slot, mfi_opt_param *p) { return install(b, slot, p, false); }

const mfi_bucket_kind mfi_bucket_allreduce = {
    .what = "gradient", .trace = "allreduce",
    .setup = host_setup, .release = host_release, .pack = host_pack,
    .start = host_start, .sum = host_sum, .unpack = host_unpack,
};

static mf_status gpu_setup(const mf_optim *o, mfi_bucket *b)
{
    (void)o;
    b->buf = mfi_alloc_use(MF_DEV_CUDA, bytes_of(b), MF_MEM_COMM);
    return b->buf ? MF_OK : mfi_error(MF_ERR_NOMEM, "gradient buckets: out of GPU memory");
}

static void gpu_release(mfi_bucket *b) { mfi_free_use(MF_DEV_CUDA, b->buf, bytes_of(b), MF_MEM_COMM); }

static mf_status gpu_pack(mfi_bucket *b, int slot, const mfi_opt_param *p, mf_tensor *g)
{
    char *dst = (char *)b->buf + (size_t)b->off[slot] * mf_dtype_size(b->dt);
    int64_t numel = mf_tensor_numel(p->p->global->local);
    if (g) return mfi_device_memcpy(mf_tensor_device(g), b->dt, dst, mf_tensor_data(g), numel);
    mfi_view z;
    memset(&z, 0, sizeof z);
    z.data = dst;
    z.dtype = b->dt;
    z.ndim = 1;
    z.shape[0] = numel;
    z.stride[0] = 1;
    const mfi_backend *be = mfi_backend_for(MF_DEV_CUDA);
    if (!be) return mf_last_status();
    mf_status st = MF_OK;
    MFI_KERNEL(st, MF_PROF_OTHER, be, fill, &z, 0.0);
    return st;
}

/* MPI reads the buffer outside the stream's order: the packing must be
 * done first */
static mf_status gpu_start(mfi_bucket *b)
{
    MF_TRY(mf_synchronize());
    return mfi_iallreduce(b->comm, b->buf, b->numel, b->dt, MF_COLL_MPI, &b->req);
}

static mf_status gpu_sum(mfi_bucket *b)
{
    MF_TRY(mf_synchronize());
    return mfi_allreduce_algo(b->comm, b->buf, b->buf, b->numel, b->dt, MF_COLL_MPI);
}

static mf_status gpu_unpack(mfi_bucket *b, int slot, mfi_opt_param *p) { return install(b, slot, p, true); }

const mfi_bucket_kind mfi_bucket_allreduce_gpu = {
    .what = "gradient", .trace = "allreduce",
    .setup = gpu_setup, .release = gpu_release, .pack = gpu_pack,
    .start = gpu_start, .sum = gpu_sum, .unpack = gpu_unpack,
};
