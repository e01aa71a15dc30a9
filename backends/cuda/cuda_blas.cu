/*
 * backends/cuda/cuda_blas.cu - cuBLAS, opened when CUDA starts.
 *
 * libcublas and the libcublasLt it pulls in are over half a gigabyte:
 * linked into libmpiflow, they cost every process 0.35 s and 220 MB to
 * load, GPU or not, and a CPU job runs hundreds of ranks. So they are
 * loaded with dlopen by the first rank that selects a GPU, from the
 * library path (module load cuda, LD_LIBRARY_PATH) or else the toolkit
 * configure found, and the few calls the backend makes go through
 * mfc_cublas.
 */
#include <dlfcn.h>
#include <stdio.h>
#include "backends/cuda/cuda_common.cuh"

#ifndef MF_CUDA_LIBDIR
#define MF_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

mfc_blas_api mfc_cublas;
static void *lib;

#define SYM(field, name)                                                                       \
    do {                                                                                       \
        *(void **)&api.field = dlsym(lib, name);                                               \
        if (!api.field) MF_FAIL(MF_ERR_BACKEND, "cuda: %s lacks %s: %s", path, name, dlerror()); \
    } while (0)

mf_status mfc_blas_open(void)
{
    if (lib) return MF_OK;
    const char *tries[] = {"libcublas.so." MFC_CUBLAS_MAJOR, MF_CUDA_LIBDIR "/libcublas.so." MFC_CUBLAS_MAJOR,
                           "libcublas.so"};
    const char *path = NULL;
    char why[512] = "";
    for (size_t i = 0; i < sizeof tries / sizeof *tries && !lib; i++) {
        lib = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) path = tries[i];
        else if (!why[0]) snprintf(why, sizeof why, "%s", dlerror());
    }
    if (!lib)
        MF_FAIL(MF_ERR_BACKEND, "cuda: cannot load cuBLAS (%s); put the CUDA toolkit's lib64 on LD_LIBRARY_PATH "
                "(module load cuda)", why);
    mfc_blas_api api;
    SYM(create, "cublasCreate_v2");
    SYM(destroy, "cublasDestroy_v2");
    SYM(set_stream, "cublasSetStream_v2");
    SYM(set_math_mode, "cublasSetMathMode");
    SYM(sgemm_sb, "cublasSgemmStridedBatched");
    SYM(dgemm_sb, "cublasDgemmStridedBatched");
    SYM(gemm_sb_ex, "cublasGemmStridedBatchedEx");
    SYM(status_string, "cublasGetStatusString");
    mfc_cublas = api;
    return MF_OK;
}
