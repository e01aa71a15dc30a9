/*
 * backends/backend.h - the backend table (not installed).
 *
 * A backend implements kernels on raw buffers described by mfi_view:
 * no shape inference, no autograd, no MPI (doc/design.md section 1). The
 * core reaches every kernel through this table; a backend that lacks a
 * kernel leaves it NULL and the core reports which one is missing.
 * Adding a backend = one folder in backends/ that fills an mfi_backend.
 */
#ifndef MPIFLOW_BACKENDS_BACKEND_H
#define MPIFLOW_BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include "mpiflow/tensor.h"

/* A strided buffer: element (i0..in) lives at data + sum(ik*stride[k])
 * elements. Stride 0 broadcasts. */
typedef struct mfi_view {
    void *data;
    mf_dtype dtype;
    int ndim;
    int64_t shape[MF_MAX_DIMS];
    int64_t stride[MF_MAX_DIMS];
} mfi_view;

typedef enum mfi_binop {
    MFI_BIN_ADD, MFI_BIN_SUB, MFI_BIN_MUL, MFI_BIN_DIV, MFI_BIN_MAX,
    MFI_BIN_EQ, MFI_BIN_GT, MFI_BIN_LT, MFI_BIN_COUNT
} mfi_binop;

typedef enum mfi_unop {
    MFI_UN_NEG, MFI_UN_SCALE, MFI_UN_ADD_SCALAR, MFI_UN_POW, MFI_UN_EXP,
    MFI_UN_LOG, MFI_UN_SQRT, MFI_UN_ABS, MFI_UN_RELU, MFI_UN_GELU,
    MFI_UN_SIGMOID, MFI_UN_TANH,
    MFI_UN_ROUND_BF16,   /* to the nearest bfloat16 (ties to even), kept in the float type */
    MFI_UN_GELU_TANH,    /* GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    MFI_UN_COUNT
} mfi_unop;

typedef enum mfi_redop { MFI_RED_SUM, MFI_RED_MAX, MFI_RED_SUMSQ } mfi_redop;

typedef enum mfi_dist { MFI_DIST_UNIFORM, MFI_DIST_NORMAL } mfi_dist;

/* Row-major C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C, batch
 * times with the given element strides between matrices. */
typedef struct mfi_gemm {
    mf_dtype dtype;
    bool trans_a, trans_b;
    int64_t m, n, k;
    double alpha, beta;
    const void *a; int64_t lda, stride_a;
    const void *b; int64_t ldb, stride_b;
    void *c;       int64_t ldc, stride_c;
    int64_t batch;
    /* autocast: A and B hold bfloat16 values (already rounded); a backend
     * may multiply them as bfloat16 with fp32 accumulation (tensor cores) */
    bool bf16;
    /* NULL, or A's (B's) bfloat16 image (lib/op/autocast.c): the operand
     * converted once, contiguous in its stored orientation, used instead
     * of converting a (b) again; a and b stay valid for a fallback */
    const void *a16, *b16;
    /* NULL, or n contiguous values of dtype added to every row of C (a
     * linear layer's bias; batch 1 and beta 0). Only a backend with
     * gemm_bias set is given one. */
    const void *bias;
} mfi_gemm;

/* the passes of a convolution */
enum { MFI_CONV_PASS_FWD, MFI_CONV_PASS_BWD_DATA, MFI_CONV_PASS_BWD_FILTER };

typedef struct mfi_conv2d {
    int64_t n, c, h, w;          /* input */
    int64_t oc, oh, ow;          /* output */
    int kh, kw;
    int stride[2], padding[2], dilation[2], groups;
    bool bf16;                   /* as mfi_gemm.bf16, for the convolution's GEMMs */
    /* NULL, or bfloat16 images of x, w and gy, as mfi_gemm.a16: plain
     * (NCHW, OIHW), or in the engine's own layout where *_own is set
     * (mfi_backend.conv_image) */
    const void *x16, *w16, *gy16;
    bool x16_own, w16_own, gy16_own;
} mfi_conv2d;

/* A convolution's operands, for mfi_backend.conv_image */
enum { MFI_CONV_X, MFI_CONV_W, MFI_CONV_GY };

typedef struct mfi_pool2d {
    int64_t n, c, h, w, oh, ow;
    int kernel[2], stride[2], padding[2];
    bool count_include_pad;
    bool adaptive;               /* kernel/stride/padding unused */
} mfi_pool2d;

typedef struct mfi_bnorm {
    int64_t n, c, s;             /* x viewed as [n, c, s] */
    bool training;
    double momentum, eps;
} mfi_bnorm;

/* Causal self-attention over q, k, v [b, h, t, d]: out [b, h, t, d] and
 * in backward gq, gk, gv and gout too may have any strides on the first
 * three dims (the last one contiguous; a fused qkv projection's heads);
 * lse [b, h, t] is contiguous. Row i attends to keys 0..i with weights
 * softmax(scale * q_i . k_j); lse is that softmax's log-sum-exp, which
 * is all the backward needs to recompute the weights. */
typedef struct mfi_attn {
    int64_t b, h, t, d;
    double scale;
} mfi_attn;

typedef struct mfi_sgd_hp {
    double lr, momentum, dampening, weight_decay;
    bool nesterov, first;        /* first: momentum buffer not yet set */
} mfi_sgd_hp;

typedef struct mfi_adam_hp {
    double lr, beta1, beta2, eps, weight_decay;
    bool decoupled, amsgrad;     /* decoupled: AdamW */
    int64_t step;                /* 1 on the first update */
} mfi_adam_hp;

typedef struct mfi_rmsprop_hp {
    double lr, alpha, eps, weight_decay, momentum;
    bool centered;
} mfi_rmsprop_hp;

typedef const mfi_view mfi_cv;   /* shorthand for kernel arguments */

/* The kernel set, declared once: K(name, (arguments)) for every kernel.
 * The table below gets one pointer per entry, and each backend declares
 * its implementations from it (backends/cpu/cpu_kernels.h names them
 * mfi_cpu_<name>, backends/cuda/cuda_common.cuh mfc_<name>) and fills
 * its table from it too, so a kernel added here is a build error in
 * every backend that lacks it. */
#define MFI_KERNELS(K)                                                                                        \
    /* memory and random */                                                                                   \
    K(fill, (mfi_cv *out, double value))                                                                      \
    K(copy, (mfi_cv *out, mfi_cv *in)) /* casts; in may broadcast */                                          \
    K(philox_fill, (mfi_cv *out, mfi_dist d, double a, double b, uint64_t seed, uint64_t key, uint64_t index0)) \
    /* elementwise */                                                                                         \
    K(unary_fwd, (mfi_unop op, mfi_cv *out, mfi_cv *x, double alpha))                                          \
    K(unary_bwd, (mfi_unop op, mfi_cv *gx, mfi_cv *gy, mfi_cv *x, mfi_cv *y, double alpha))                    \
    K(binary_fwd, (mfi_binop op, mfi_cv *out, mfi_cv *a, mfi_cv *b))                                           \
    /* out has in's ndim with size 1 on reduced dims */                                                       \
    K(reduce, (mfi_redop op, mfi_cv *out, mfi_cv *in))                                                        \
    K(argmax, (mfi_cv *out, mfi_cv *in, int axis))                                                            \
    /* matrix products */                                                                                     \
    K(gemm, (const mfi_gemm *g))                                                                              \
    /* softmax over `axis` of a contiguous tensor */                                                          \
    K(softmax_fwd, (bool log, mfi_cv *out, mfi_cv *x, int axis))                                              \
    K(softmax_bwd, (bool log, mfi_cv *gx, mfi_cv *gy, mfi_cv *y, int axis))                                   \
    /* losses on [N, C] rows and [N] targets; gloss is [N] or one element */                                  \
    K(nll_fwd, (mfi_cv *loss, mfi_cv *logp, mfi_cv *target))                                                  \
    K(nll_bwd, (mfi_cv *gx, mfi_cv *gloss, mfi_cv *target))                                                   \
    K(xent_bwd, (mfi_cv *gx, mfi_cv *gloss, mfi_cv *logp, mfi_cv *target))                                    \
    /* embedding: gweight is accumulated into */                                                              \
    K(embedding_fwd, (mfi_cv *out, mfi_cv *weight, mfi_cv *index))                                            \
    K(embedding_bwd, (mfi_cv *gweight, mfi_cv *gy, mfi_cv *index))                                            \
    /* convolution (bias may be NULL) */                                                                      \
    K(conv2d_fwd, (const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias))                     \
    K(conv2d_bwd_data, (const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w))                              \
    K(conv2d_bwd_filter, (const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x))                            \
    /* pooling: idx holds the argmax (i32 flat index in the H*W plane) */                                     \
    K(maxpool2d_fwd, (const mfi_pool2d *p, mfi_cv *out, mfi_cv *idx, mfi_cv *x))                              \
    K(maxpool2d_bwd, (const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *idx))                              \
    K(avgpool2d_fwd, (const mfi_pool2d *p, mfi_cv *out, mfi_cv *x))                                           \
    K(avgpool2d_bwd, (const mfi_pool2d *p, mfi_cv *gx, mfi_cv *gy))                                           \
    /* normalisation: weight, bias and the running statistics may be NULL */                                  \
    K(batchnorm_fwd, (const mfi_bnorm *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *b, mfi_cv *rmean,        \
                      mfi_cv *rvar, mfi_cv *smean, mfi_cv *sinvstd))                                          \
    K(batchnorm_bwd, (const mfi_bnorm *p, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy, mfi_cv *x,          \
                      mfi_cv *w, mfi_cv *smean, mfi_cv *sinvstd))                                             \
    K(layernorm_fwd, (int64_t rows, int64_t cols, double eps, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *b,   \
                      mfi_cv *mean, mfi_cv *rstd))                                                            \
    K(layernorm_bwd, (int64_t rows, int64_t cols, mfi_cv *gx, mfi_cv *gw, mfi_cv *gb, mfi_cv *gy, mfi_cv *x,  \
                      mfi_cv *w, mfi_cv *mean, mfi_cv *rstd))                                                 \
    /* fused causal attention, in tiles with an online softmax (O(t) saved per row, not O(t^2)) */           \
    K(attention_fwd, (const mfi_attn *p, mfi_cv *out, mfi_cv *lse, mfi_cv *q, mfi_cv *k, mfi_cv *v))          \
    K(attention_bwd, (const mfi_attn *p, mfi_cv *gq, mfi_cv *gk, mfi_cv *gv, mfi_cv *gout, mfi_cv *q,         \
                      mfi_cv *k, mfi_cv *v, mfi_cv *out, mfi_cv *lse))                                        \
    /* dropout: mask gets 0 or 1/(1-p) */                                                                     \
    K(dropout_fwd, (mfi_cv *out, mfi_cv *mask, mfi_cv *x, double p, uint64_t seed, uint64_t key, uint64_t index0)) \
    /* optimizer updates on contiguous buffers of equal length */                                             \
    K(sgd_step, (const mfi_sgd_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *buf))                              \
    K(adam_step, (const mfi_adam_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *m, mfi_cv *v, mfi_cv *vmax))     \
    K(rmsprop_step, (const mfi_rmsprop_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *square_avg,                \
                     mfi_cv *momentum_buf, mfi_cv *grad_avg))

typedef struct mfi_backend {
    const char *name;
    mf_device_type device;

    void (*set_threads)(int n);
    /* Its gemm and conv2d kernels round f32 operands to bfloat16 values
     * themselves when .bf16 is set (packing them as bfloat16 where the
     * hardware multiplies those), so the ops pass them unrounded; false:
     * the ops make rounded copies first. */
    bool bf16_in_kernel;
    /* Whether the gemm and conv2d kernels multiply bfloat16 images
     * (mfi_gemm.a16) now (NULL: never), and the conversion of n
     * contiguous floats to one, ties to even. */
    bool (*bf16_images)(void);
    mf_status (*bf16_image)(void *dst, const float *src, int64_t n);
    /* Optional, with bf16_images: the bytes of a convolution operand's
     * (MFI_CONV_*) bfloat16 image in the layout the engine's kernels read
     * it in (0: none; the plain image then), and the conversion of the
     * contiguous f32 operand into one: the conversion and the engine's
     * reorder in one pass, made once for the passes that read it. */
    int64_t (*conv_image_bytes)(const mfi_conv2d *p, int which);
    mf_status (*conv_image)(const mfi_conv2d *p, int which, void *dst, const float *src);
    /* Optional: the temporaries one convolution pass (MFI_CONV_PASS_*)
     * of dtype dt takes from the caching allocator, all held at once:
     * their sizes in bytes[0..n) (n <= max). The meta device allocates
     * the host's, so that a simulated step's peak has them. */
    int (*conv_temps)(const mfi_conv2d *p, int pass, mf_dtype dt, bool bias, size_t *bytes, int max);
    /* Its gemm adds mfi_gemm.bias itself (else the op writes the bias
     * into C first and asks for beta 1). */
    bool gemm_bias;

    /* ---- the device and its memory. A host backend leaves these NULL:
     * its memory is the host's (base/alloc.c) and its kernels finish
     * before they return. A device backend's kernels run in order on
     * one compute stream and return once queued. */
    /* Devices this process sees (0: none, or no driver). */
    int (*device_count)(void);
    /* Binds this rank to a device chosen by its local rank among
     * local_size; writes a description ("H200 #1, 139 GiB"). */
    mf_status (*select)(int local_rank, int local_size, char *desc, size_t size);
    void (*shutdown)(void);
    /* Uncached device memory, for the core's caching arena (NULL: none). */
    void *(*raw_alloc)(size_t nbytes);
    void (*raw_free)(void *p);
    /* Blocking copies between device memory and the host, after the
     * queued kernels. */
    mf_status (*to_host)(void *dst, const void *src, size_t nbytes);
    mf_status (*from_host)(void *dst, const void *src, size_t nbytes);
    /* Waits for every queued kernel. */
    mf_status (*synchronize)(void);
    /* Communication staging (doc/design.md section 6). comm_download copies device
     * memory into host memory on the communication stream, after the
     * compute stream's queued work, and waits for that copy only;
     * comm_upload copies host memory to the device on the communication
     * stream and makes the compute stream's later work wait for it.
     * host_alloc/host_free give pinned host buffers for them. */
    mf_status (*comm_download)(void *host, const void *dev, size_t nbytes);
    mf_status (*comm_upload)(void *dev, const void *host, size_t nbytes);
    void *(*host_alloc)(size_t nbytes);
    void (*host_free)(void *p);

    /* the kernels: one pointer per entry of MFI_KERNELS */
#define MFI_KERNEL_SLOT(name, args) mf_status(*name) args;
    MFI_KERNELS(MFI_KERNEL_SLOT)
#undef MFI_KERNEL_SLOT
} mfi_backend;

/* The CPU backend (backends/cpu). Its shutdown frees the cached oneDNN
 * primitives. */
extern const mfi_backend mfi_cpu_backend;
/* Chooses the CPU engine from MF_CPU_ENGINE (openblas|onednn; unset:
 * oneDNN where it is built in). See doc/cpu.md. */
mf_status mfi_cpu_engine_from_env(void);
/* The CUDA backend (backends/cuda), when configure found the toolkit. */
extern const mfi_backend mfi_cuda_backend;

/* The backend of a device type: NULL, with an error saying why, when
 * this build or this machine has none (lib/device.c). */
const mfi_backend *mfi_backend_for(mf_device_type dev);

#endif
