/*
 * backends/cuda/cuda_backend.cu - the CUDA backend table: choosing this
 * rank's GPU, its streams and cuBLAS handle, raw device memory for the
 * core's caching arena, copies to and from the host, and the staging
 * copies of the communication stream.
 *
 * One rank drives one GPU: the one of its local rank among the GPUs it
 * can see. Under Slurm with --gpus-per-task (or --gpu-bind) each task
 * sees only its own GPU, as CUDA_VISIBLE_DEVICES, and takes device 0.
 * MF_CUDA_DEVICE=n overrides the choice.
 */
#include <stdio.h>
#include <stdlib.h>
#include "backends/cuda/cuda_common.cuh"

cudaStream_t mfc_stream;
cudaStream_t mfc_comm_stream;
cublasHandle_t mfc_blas;
static int dev_id = -1;
static mfc_badidx *bad_flag;

mf_status mfc_fail(const char *what, cudaError_t e)
{
    cudaGetLastError();   /* clears a non-sticky error */
    return mfi_error(MF_ERR_BACKEND, "cuda: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

mf_status mfc_blas_fail(const char *what, cublasStatus_t s)
{
    return mfi_error(MF_ERR_BACKEND, "cuda: %s failed: cuBLAS status %d (%s)", what, (int)s,
                     mfc_cublas.status_string ? mfc_cublas.status_string(s) : "?");
}

static int cuda_device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice) {
        cudaGetLastError();
        return 0;
    }
    if (e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        mfi_error(MF_ERR_BACKEND, "no NVIDIA driver, or one too old for this CUDA runtime (%s)", cudaGetErrorName(e));
        return -1;
    }
    if (e != cudaSuccess) {
        mfc_fail("cudaGetDeviceCount", e);
        return -1;
    }
    return n;
}

static void cuda_shutdown(void)
{
    if (dev_id < 0) return;
    cudaDeviceSynchronize();
    if (bad_flag) cudaFree(bad_flag);
    bad_flag = NULL;
    if (mfc_blas) mfc_cublas.destroy(mfc_blas);
    mfc_blas = NULL;
    if (mfc_stream) cudaStreamDestroy(mfc_stream);
    if (mfc_comm_stream) cudaStreamDestroy(mfc_comm_stream);
    mfc_stream = mfc_comm_stream = NULL;
    dev_id = -1;
}

static mf_status cuda_select(int local_rank, int local_size, char *desc, size_t size)
{
    int n = cuda_device_count();
    if (n < 0) return mf_last_status();
    if (n == 0) MF_FAIL(MF_ERR_BACKEND, "cuda: no GPU is visible (CUDA_VISIBLE_DEVICES='%s')",
                        getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
    int d = local_rank % n;
    const char *env = getenv("MF_CUDA_DEVICE");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v >= n)
            MF_FAIL(MF_ERR_ARG, "MF_CUDA_DEVICE='%s' is not a device number below %d", env, n);
        d = (int)v;
    }
    MFC_CALL("cudaSetDevice", cudaSetDevice(d));
    MFC_CALL("cudaStreamCreate", cudaStreamCreateWithFlags(&mfc_stream, cudaStreamNonBlocking));
    MFC_CALL("cudaStreamCreate", cudaStreamCreateWithFlags(&mfc_comm_stream, cudaStreamNonBlocking));
    MF_TRY(mfc_blas_open());
    cublasStatus_t bs = mfc_cublas.create(&mfc_blas);
    if (bs != CUBLAS_STATUS_SUCCESS) return mfc_blas_fail("cublasCreate", bs);
    mfc_cublas.set_stream(mfc_blas, mfc_stream);
    /* FP32 stays FP32: no TF32 unless asked for, as PyTorch's default */
    mfc_cublas.set_math_mode(mfc_blas, CUBLAS_DEFAULT_MATH);
    MFC_CALL("cudaMalloc", cudaMalloc((void **)&bad_flag, sizeof *bad_flag));
    dev_id = d;
    cudaDeviceProp prop;
    MFC_CALL("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, d));
    const char *shared = local_size > n ? ", shared with other ranks" : "";
    snprintf(desc, size, "%s (device %d of %d%s, %.1f GiB, sm_%d%d)", prop.name, d, n, shared,
             (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024), prop.major, prop.minor);
    return MF_OK;
}

static void *cuda_raw_alloc(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_raw_free(void *p) { cudaFree(p); }

static mf_status cuda_to_host(void *dst, const void *src, size_t n)
{
    MFC_CALL("copy to the host", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, mfc_stream));
    MFC_CALL("copy to the host (a kernel before it may have failed)", cudaStreamSynchronize(mfc_stream));
    return MF_OK;
}

static mf_status cuda_from_host(void *dst, const void *src, size_t n)
{
    /* from pageable memory the call returns once src has been read */
    MFC_CALL("copy to the device", cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, mfc_stream));
    MFC_CALL("copy to the device", cudaStreamSynchronize(mfc_stream));
    return MF_OK;
}

static mf_status cuda_synchronize(void)
{
    MFC_CALL("synchronize (a kernel may have failed)", cudaStreamSynchronize(mfc_stream));
    MFC_CALL("synchronize the communication stream", cudaStreamSynchronize(mfc_comm_stream));
    return MF_OK;
}

/* The communication stream waits for the compute stream's queued work
 * (an event), copies, and the host waits for that copy alone: compute
 * kernels queued meanwhile keep running. */
static mf_status cuda_comm_download(void *host, const void *dev, size_t n)
{
    cudaEvent_t ev;
    MFC_CALL("cudaEventCreate", cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, mfc_stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(mfc_comm_stream, ev, 0);
    if (e == cudaSuccess) e = cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, mfc_comm_stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(mfc_comm_stream);
    cudaEventDestroy(ev);
    if (e != cudaSuccess) return mfc_fail("staging a buffer for MPI", e);
    return MF_OK;
}

/* The copy runs on the communication stream and has finished when this
 * returns, so kernels queued later see it. */
static mf_status cuda_comm_upload(void *dev, const void *host, size_t n)
{
    MFC_CALL("staging a buffer from MPI", cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, mfc_comm_stream));
    MFC_CALL("staging a buffer from MPI", cudaStreamSynchronize(mfc_comm_stream));
    return MF_OK;
}

static void *cuda_host_alloc(size_t n)
{
    void *p = NULL;
    if (cudaMallocHost(&p, n) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(void *p) { cudaFreeHost(p); }

mf_status mfc_badidx_reset(mfc_badidx **flag)
{
    MFC_CALL("cudaMemsetAsync", cudaMemsetAsync(bad_flag, 0xff, sizeof *bad_flag, mfc_stream));
    *flag = bad_flag;
    return MF_OK;
}

mf_status mfc_badidx_check(mfc_badidx *flag, const char *what, int64_t limit)
{
    mfc_badidx h;
    MFC_CALL("reading an index check", cudaMemcpyAsync(&h, flag, sizeof h, cudaMemcpyDeviceToHost, mfc_stream));
    MFC_CALL("reading an index check", cudaStreamSynchronize(mfc_stream));
    if (h.pos == ~0ULL) return MF_OK;
    MF_FAIL(MF_ERR_ARG, "%s %lld of sample %llu is out of range for %lld classes", what, (long long)h.value,
            (unsigned long long)h.pos, (long long)limit);
}

static mfi_backend make_table(void)
{
    mfi_backend b;
    memset(&b, 0, sizeof b);
    b.name = "cuda";
    b.device = MF_DEV_CUDA;
    b.device_count = cuda_device_count;
    b.select = cuda_select;
    b.shutdown = cuda_shutdown;
    b.raw_alloc = cuda_raw_alloc;
    b.raw_free = cuda_raw_free;
    b.to_host = cuda_to_host;
    b.from_host = cuda_from_host;
    b.synchronize = cuda_synchronize;
    b.comm_download = cuda_comm_download;
    b.comm_upload = cuda_comm_upload;
    b.host_alloc = cuda_host_alloc;
    b.host_free = cuda_host_free;
#define MFC_SLOT(name, args) b.name = mfc_##name;
    MFI_KERNELS(MFC_SLOT)
#undef MFC_SLOT
    return b;
}

extern "C" const mfi_backend mfi_cuda_backend = make_table();
