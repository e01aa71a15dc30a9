/*
 * lib/device.c - device types, the backend registry, the device that
 * new tensors go to, and copies between devices.
 *
 * One rank drives one device (doc/design.md section 3). The CUDA backend is
 * started on first use: a program that never asks for CUDA never makes
 * a CUDA context, and a machine without a GPU reports why CUDA is
 * unavailable instead of failing at start. New tensors go to the
 * current device: the default (mf_set_default_device) outside ops, and
 * inside an op the device of its inputs, so that an op's temporaries
 * and gradients stay where its inputs are.
 */
#include <stdio.h>
#include "config.h"
#include "collectives/coll.h"
#include "lib/internal.h"

static mf_device_type default_dev = MF_DEV_CPU;
static _Thread_local int cur_dev = -1;   /* -1: the default */

/* The CUDA backend's state: tried once per process. */
static enum { CUDA_UNTRIED, CUDA_READY, CUDA_FAILED } cuda_state;
static char cuda_desc[256];
static char cuda_why[512];

const char *mf_device_name(mf_device_type d)
{
    switch (d) {
    case MF_DEV_CPU: return "cpu";
    case MF_DEV_CUDA: return "cuda";
    case MF_DEV_META: return "meta";
    default: return "?";
    }
}

mf_status mf_device_parse(const char *s, mf_device_type *d)
{
    if (s && !strcmp(s, "cpu")) *d = MF_DEV_CPU;
    else if (s && !strcmp(s, "cuda")) *d = MF_DEV_CUDA;
    else MF_FAIL(MF_ERR_ARG, "unknown device '%s' (cpu or cuda)", s ? s : "(null)");
    return MF_OK;
}

#ifdef MF_HAVE_CUDA
static const mfi_backend *cuda_backend(void) { return &mfi_cuda_backend; }
#else
static const mfi_backend *cuda_backend(void) { return NULL; }
#endif

/* Starts the CUDA backend on this rank's device (once). */
static bool cuda_start(void)
{
    if (cuda_state != CUDA_UNTRIED) return cuda_state == CUDA_READY;
    cuda_state = CUDA_FAILED;
    const mfi_backend *be = cuda_backend();
    if (!be) {
        snprintf(cuda_why, sizeof cuda_why, "this mpiflow was built without the CUDA backend "
                 "(configure found no CUDA toolkit; see ./configure --with-cuda)");
        return false;
    }
    int n = be->device_count();
    if (n < 0) {
        snprintf(cuda_why, sizeof cuda_why, "CUDA cannot start on rank %d: %s", mf_rank(), mf_last_error());
        return false;
    }
    if (n == 0) {
        snprintf(cuda_why, sizeof cuda_why, "no CUDA device is visible to rank %d (no GPU, or CUDA_VISIBLE_DEVICES "
                 "hides them)", mf_rank());
        return false;
    }
    if (be->select(mf_local_rank(), mf_local_size(), cuda_desc, sizeof cuda_desc) != MF_OK) {
        snprintf(cuda_why, sizeof cuda_why, "%s", mf_last_error());
        return false;
    }
    mfi_arena_ops ops = {be->raw_alloc, be->raw_free};
    mfi_arena_register(MF_DEV_CUDA, &ops);
    cuda_state = CUDA_READY;
    return true;
}

const mfi_backend *mfi_backend_for(mf_device_type dev)
{
    if (dev == MF_DEV_CPU) return &mfi_cpu_backend;
    if (dev == MF_DEV_CUDA) {
        if (cuda_start()) return cuda_backend();
        mfi_error(MF_ERR_BACKEND, "CUDA is unavailable: %s", cuda_why);
        return NULL;
    }
    if (dev == MF_DEV_META) return mfi_meta_backend();
    mfi_error(MF_ERR_ARG, "unknown device type %d", (int)dev);
    return NULL;
}

int mf_cuda_device_count(void)
{
    const mfi_backend *be = cuda_backend();
    if (!be) return 0;
    int n = be->device_count();
    return n > 0 ? n : 0;
}

bool mf_cuda_available(void) { return cuda_start(); }

const char *mf_device_describe(mf_device_type dev, char *buf, size_t size)
{
    if (dev == MF_DEV_CUDA) {
        if (cuda_start())
            snprintf(buf, size, "cuda: %s; MPI %s", cuda_desc,
                     mfi_coll_cuda_aware() ? "takes GPU buffers (CUDA-aware)" : "gets GPU data through pinned host buffers");
        else snprintf(buf, size, "cuda: unavailable (%s)", cuda_why);
    } else if (dev == MF_DEV_META) {
        snprintf(buf, size, "meta: shapes only (no data; kernels counted)");
    } else {
        snprintf(buf, size, "cpu: %d thread(s)", mf_threads());
    }
    return buf;
}

mf_status mf_set_default_device(mf_device_type dev)
{
    if (!mfi_backend_for(dev)) return mfi_error_context("mf_set_default_device(%s)", mf_device_name(dev));
    default_dev = dev;
    return MF_OK;
}

mf_device_type mf_default_device(void) { return default_dev; }

mf_device_type mfi_current_device(void) { return cur_dev < 0 ? default_dev : (mf_device_type)cur_dev; }

int mfi_device_push(mf_device_type dev)
{
    int prev = cur_dev;
    cur_dev = (int)dev;
    return prev;
}

void mfi_device_pop(int prev) { cur_dev = prev; }

mf_status mf_synchronize(void)
{
    if (cuda_state != CUDA_READY) return MF_OK;
    return cuda_backend()->synchronize();
}

void mfi_device_shutdown(void)
{
    if (cuda_state == CUDA_READY) {
        mfi_empty_cache_on(MF_DEV_CUDA);
        cuda_backend()->shutdown();
    }
    cuda_state = CUDA_UNTRIED;
    default_dev = MF_DEV_CPU;
}

/* ------------------------------------------------- copies between devices */
/* n bytes between host memory and dev's: blocking after the queued
 * kernels, or (staged) on the communication stream. */
static mf_status raw_copy(mf_device_type dev, bool to_host, bool staged, void *dst, const void *src, size_t n)
{
    if (n == 0) return MF_OK;
    if (dev == MF_DEV_CPU) {
        memcpy(dst, src, n);
        return MF_OK;
    }
    const mfi_backend *be = mfi_backend_for(dev);
    if (!be) return mf_last_status();
    if (staged) return to_host ? be->comm_download(dst, src, n) : be->comm_upload(dst, src, n);
    return to_host ? be->to_host(dst, src, n) : be->from_host(dst, src, n);
}

mf_status mfi_device_download(mf_device_type dev, void *host, const void *src, size_t nbytes)
{
    return raw_copy(dev, true, false, host, src, nbytes);
}

mf_status mfi_device_upload(mf_device_type dev, void *dst, const void *host, size_t nbytes)
{
    return raw_copy(dev, false, false, dst, host, nbytes);
}

mf_status mfi_stage_out(mf_device_type dev, void *host, const void *src, size_t nbytes)
{
    return raw_copy(dev, true, true, host, src, nbytes);
}

mf_status mfi_stage_in(mf_device_type dev, void *dst, const void *host, size_t nbytes)
{
    return raw_copy(dev, false, true, dst, host, nbytes);
}

/* One transfer from sd's memory to dd's, one of them the host. */
static mf_status transfer(mf_device_type sd, mf_device_type dd, void *dst, const void *src, size_t n)
{
    return sd == MF_DEV_CPU ? mfi_device_upload(dd, dst, src, n) : mfi_device_download(sd, dst, src, n);
}

mf_status mfi_copy_across(mf_tensor *dst, const mf_tensor *src)
{
    mf_device_type dd = mf_tensor_device(dst), sd = mf_tensor_device(src);
    mf_status st = MF_OK;
    if (dd == sd) {
        mfi_view o = mfi_view_of(dst), i = mfi_view_of(src);
        MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(dst), copy, &o, &i);
        return st;
    }
    /* contiguous, dst's dtype, on the source device (src itself when it
     * is); then one transfer; then into dst's layout on its device */
    mf_tensor *a = NULL, *b = NULL;
    int prev;
    if (src->dtype == dst->dtype && mf_tensor_is_contiguous(src)) {
        a = mf_tensor_retain((mf_tensor *)src);
    } else {
        prev = mfi_device_push(sd);
        a = mfi_tensor_new(dst->dtype, src->ndim, src->shape);
        mfi_device_pop(prev);
        if (!a) return mf_last_status();
        mfi_view av = mfi_view_of(a), sv = mfi_view_of(src);
        MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(a), copy, &av, &sv);
    }
    size_t nbytes = mf_tensor_nbytes(a);
    if (st == MF_OK && mf_tensor_is_contiguous(dst)) {
        st = transfer(sd, dd, mf_tensor_data(dst), mf_tensor_data(a), nbytes);
        mf_tensor_destroy(a);
        return st;
    }
    if (st == MF_OK) {
        prev = mfi_device_push(dd);
        b = mfi_tensor_new(dst->dtype, src->ndim, src->shape);
        mfi_device_pop(prev);
        if (!b) st = mf_last_status();
    }
    if (st == MF_OK)
        st = transfer(sd, dd, mf_tensor_data(b), mf_tensor_data(a), nbytes);
    if (st == MF_OK) {
        mfi_view o = mfi_view_of(dst), i = mfi_view_of(b);
        MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(dst), copy, &o, &i);
    }
    mf_tensor_destroy(a);
    mf_tensor_destroy(b);
    return st;
}

/* ------------------------------------------- staging for communication */
void *mfi_host_buffer(size_t nbytes, bool *pinned)
{
    *pinned = false;
    if (cuda_state == CUDA_READY) {
        void *p = cuda_backend()->host_alloc(nbytes);
        if (p) {
            *pinned = true;
            return p;
        }
    }
    return mfi_alloc_use(MF_DEV_CPU, nbytes, MF_MEM_COMM);   /* counted as host memory for communication */
}

void mfi_host_buffer_free(void *p, size_t nbytes, bool pinned)
{
    if (!p) return;
    if (pinned && cuda_state == CUDA_READY) cuda_backend()->host_free(p);
    else if (!pinned) mfi_free_use(MF_DEV_CPU, p, nbytes, MF_MEM_COMM);
}

mf_tensor *mfi_on_device(mf_tensor *t, mf_device_type dev)
{
    if (mf_tensor_device(t) == dev) return mf_tensor_retain(t);
    mf_tensor *c = mfi_tensor_new_on(dev, t->dtype, t->ndim, t->shape);
    if (c && mfi_copy_across(c, t) != MF_OK) {
        mf_tensor_destroy(c);
        return NULL;
    }
    return c;
}

mf_status mfi_device_memcpy(mf_device_type dev, mf_dtype dt, void *dst, const void *src, int64_t count)
{
    if (count <= 0) return MF_OK;
    if (dev == MF_DEV_CPU) {
        memcpy(dst, src, (size_t)count * mf_dtype_size(dt));
        return MF_OK;
    }
    const mfi_backend *be = mfi_backend_for(dev);
    if (!be) return mf_last_status();
    mfi_view o, i;
    memset(&o, 0, sizeof o);
    o.dtype = dt;
    o.ndim = 1;
    o.shape[0] = count;
    o.stride[0] = 1;
    i = o;
    o.data = dst;
    i.data = (void *)src;
    mf_status st = MF_OK;
    MFI_KERNEL(st, MF_PROF_OTHER, be, copy, &o, &i);
    return st;
}
