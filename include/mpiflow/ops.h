/*
 * mpiflow/ops.h - differentiable operations on tensors.
 *
 * Every op takes its tensor arguments as borrowed references and returns
 * a new reference (or NULL with mf_last_error() set). When grad mode is
 * on and an input requires grad, the op records itself in the autograd
 * graph. Elementwise binary ops broadcast like NumPy and PyTorch.
 * A negative axis counts from the end. Functions ending in '_' work in
 * place and record nothing.
 */
#ifndef MPIFLOW_OPS_H
#define MPIFLOW_OPS_H

#include "mpiflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise, broadcasting */
MF_API mf_tensor *mf_add(mf_tensor *a, mf_tensor *b);
MF_API mf_tensor *mf_sub(mf_tensor *a, mf_tensor *b);
MF_API mf_tensor *mf_mul(mf_tensor *a, mf_tensor *b);
MF_API mf_tensor *mf_div(mf_tensor *a, mf_tensor *b);
MF_API mf_tensor *mf_maximum(mf_tensor *a, mf_tensor *b);
/* Comparisons give 1 or 0 in a's dtype and are not differentiable. */
MF_API mf_tensor *mf_eq(mf_tensor *a, mf_tensor *b);
MF_API mf_tensor *mf_gt(mf_tensor *a, mf_tensor *b);
MF_API mf_tensor *mf_lt(mf_tensor *a, mf_tensor *b);

/* ---- elementwise, one input */
MF_API mf_tensor *mf_neg(mf_tensor *x);
MF_API mf_tensor *mf_scale(mf_tensor *x, double s);          /* s * x */
MF_API mf_tensor *mf_add_scalar(mf_tensor *x, double s);     /* x + s */
MF_API mf_tensor *mf_pow(mf_tensor *x, double p);            /* x ^ p */
MF_API mf_tensor *mf_exp(mf_tensor *x);
MF_API mf_tensor *mf_log(mf_tensor *x);
MF_API mf_tensor *mf_sqrt(mf_tensor *x);
MF_API mf_tensor *mf_abs(mf_tensor *x);
MF_API mf_tensor *mf_relu(mf_tensor *x);
MF_API mf_tensor *mf_gelu(mf_tensor *x);      /* exact, with erf */
/* GPT-2's tanh approximation (PyTorch's gelu(approximate="tanh")). */
MF_API mf_tensor *mf_gelu_tanh(mf_tensor *x);
MF_API mf_tensor *mf_sigmoid(mf_tensor *x);
MF_API mf_tensor *mf_tanh(mf_tensor *x);

/* ---- matrix products (OpenBLAS sgemm/dgemm on the CPU) */
/* [.., M, K] x [.., K, N] -> [.., M, N]. Batch dims must be equal, or one
 * side is 2-D and is shared by the whole batch. 1-D b is a vector. */
MF_API mf_tensor *mf_matmul(mf_tensor *a, mf_tensor *b);
/* As mf_matmul with the last two dims of a and/or b transposed. */
MF_API mf_tensor *mf_matmul_t(mf_tensor *a, mf_tensor *b, bool trans_a, bool trans_b);
/* y = x W^T + b: x [.., in], weight [out, in], bias [out] or NULL. */
MF_API mf_tensor *mf_linear(mf_tensor *x, mf_tensor *weight, mf_tensor *bias);

/* ---- reductions */
MF_API mf_tensor *mf_sum(mf_tensor *x, int naxes, const int *axes, bool keepdim);
MF_API mf_tensor *mf_mean(mf_tensor *x, int naxes, const int *axes, bool keepdim);
/* Maximum over axes; the gradient is shared among tied maxima. */
MF_API mf_tensor *mf_max(mf_tensor *x, int naxes, const int *axes, bool keepdim);
MF_API mf_tensor *mf_sum_all(mf_tensor *x);    /* 0-dim result */
MF_API mf_tensor *mf_mean_all(mf_tensor *x);
/* Index of the maximum along one axis, as MF_I64; not differentiable. */
MF_API mf_tensor *mf_argmax(mf_tensor *x, int axis, bool keepdim);

/* ---- shape and views (views share storage) */
/* One entry may be -1 and is inferred. A view when the strides allow,
 * otherwise a copy. */
MF_API mf_tensor *mf_reshape(mf_tensor *x, int ndim, const int64_t *shape);
MF_API mf_tensor *mf_flatten(mf_tensor *x, int start_dim, int end_dim);
MF_API mf_tensor *mf_permute(mf_tensor *x, const int *perm);
MF_API mf_tensor *mf_transpose(mf_tensor *x, int dim0, int dim1);
MF_API mf_tensor *mf_narrow(mf_tensor *x, int dim, int64_t start, int64_t length);
/* Elements start, start+step, ... below end along dim (step >= 1). */
MF_API mf_tensor *mf_slice(mf_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
/* Size-1 dims (or new leading dims) broadcast to shape, stride 0. */
MF_API mf_tensor *mf_expand(mf_tensor *x, int ndim, const int64_t *shape);
MF_API mf_tensor *mf_unsqueeze(mf_tensor *x, int dim);
MF_API mf_tensor *mf_squeeze(mf_tensor *x, int dim);
MF_API mf_tensor *mf_contiguous(mf_tensor *x);   /* x itself if already */
MF_API mf_tensor *mf_clone(mf_tensor *x);        /* always a copy */
MF_API mf_tensor *mf_cast(mf_tensor *x, mf_dtype dt);
MF_API mf_tensor *mf_concat(int n, mf_tensor *const *xs, int dim);

/* ---- softmax family */
MF_API mf_tensor *mf_softmax(mf_tensor *x, int dim);
MF_API mf_tensor *mf_log_softmax(mf_tensor *x, int dim);

/* ---- attention */
/* Causal self-attention, as PyTorch's scaled_dot_product_attention(q, k,
 * v, is_causal=True): q, k, v [B, H, T, D] -> [B, H, T, D], row i =
 * softmax over keys j <= i of q_i.k_j / sqrt(D), times v. Fused in tiles
 * with an online softmax (flash attention): no [T, T] matrix is stored,
 * forward keeps one log-sum-exp per row, backward recomputes the rest.
 * q, k, v may be strided views whose last dim is contiguous. */
MF_API mf_tensor *mf_causal_attention(mf_tensor *q, mf_tensor *k, mf_tensor *v);
/* The same for GPT's fused projection: qkv [B, T, 3C] holds q, k, v one
 * after the other (each C = n_head heads of C / n_head) per token, as
 * nanoGPT's c_attn gives them; the result is [B, T, C], the heads side
 * by side. No head is copied out or back. */
MF_API mf_tensor *mf_causal_self_attention(mf_tensor *qkv, int n_head);

/* ---- embedding: weight [V, D], index (i32/i64) [...] -> [..., D] */
MF_API mf_tensor *mf_embedding(mf_tensor *weight, mf_tensor *index);

/* ---- convolution and pooling, NCHW */
typedef struct mf_conv2d_params {
    int stride[2];     /* default 1 */
    int padding[2];    /* default 0 */
    int dilation[2];   /* default 1 */
    int groups;        /* default 1 */
} mf_conv2d_params;
MF_API mf_conv2d_params mf_conv2d_defaults(void);
/* x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O] or NULL. */
MF_API mf_tensor *mf_conv2d(mf_tensor *x, mf_tensor *weight, mf_tensor *bias,
                            const mf_conv2d_params *p);

typedef struct mf_pool2d_params {
    int kernel[2];
    int stride[2];             /* 0: equal to kernel */
    int padding[2];
    bool count_include_pad;    /* avg pool only; PyTorch's default is true */
} mf_pool2d_params;
MF_API mf_pool2d_params mf_pool2d_defaults(int kernel);
MF_API mf_tensor *mf_max_pool2d(mf_tensor *x, const mf_pool2d_params *p);
MF_API mf_tensor *mf_avg_pool2d(mf_tensor *x, const mf_pool2d_params *p);
MF_API mf_tensor *mf_adaptive_avg_pool2d(mf_tensor *x, int out_h, int out_w);

/* ---- normalisation and dropout */
/* x [N, C, ...]. training: normalise with batch statistics and update
 * running_mean/var (may be NULL) with momentum; eval: use running stats.
 * weight/bias [C] or NULL. */
MF_API mf_tensor *mf_batch_norm(mf_tensor *x, mf_tensor *running_mean, mf_tensor *running_var,
                                mf_tensor *weight, mf_tensor *bias, bool training,
                                double momentum, double eps);
/* Normalises over the last `nnorm` dims; weight/bias of those dims or NULL. */
MF_API mf_tensor *mf_layer_norm(mf_tensor *x, int nnorm, mf_tensor *weight, mf_tensor *bias,
                                double eps);
/* Zeroes each element with probability p and scales the rest by
 * 1/(1-p); the identity when !training. The mask comes from Philox. */
MF_API mf_tensor *mf_dropout(mf_tensor *x, double p, bool training);

/* ---- losses */
typedef enum mf_reduction { MF_REDUCTION_MEAN = 0, MF_REDUCTION_SUM, MF_REDUCTION_NONE } mf_reduction;
/* logits [N, C], target [N] of class indices (i32/i64). */
MF_API mf_tensor *mf_cross_entropy(mf_tensor *logits, mf_tensor *target, mf_reduction r);
/* cross_entropy(x weight^T, target): a language model's head and loss,
 * x [N, C], weight [V, C], target [N]. The logits never exist whole:
 * rows go through in chunks, and only the logits' gradient [N, V] is
 * kept for backward (one copy of that size instead of three). */
MF_API mf_tensor *mf_linear_cross_entropy(mf_tensor *x, mf_tensor *weight, mf_tensor *target, mf_reduction r);
/* logp [N, C] log-probabilities, target [N]. */
MF_API mf_tensor *mf_nll_loss(mf_tensor *logp, mf_tensor *target, mf_reduction r);
MF_API mf_tensor *mf_mse_loss(mf_tensor *x, mf_tensor *y, mf_reduction r);
MF_API mf_tensor *mf_l1_loss(mf_tensor *x, mf_tensor *y, mf_reduction r);

/* ---- mixed precision (autocast). While autocast is bf16, matmul,
 * linear and conv2d round their f32 operands to bfloat16 and accumulate
 * in f32 (on a GPU, on its bfloat16 tensor cores), forward and backward;
 * their outputs, all other ops, the parameters (f32 master weights) and
 * the optimizer state stay f32. Per thread, like PyTorch's
 * torch.autocast(dtype=torch.bfloat16); doc/cuda.md. */
typedef enum mf_precision { MF_PRECISION_FP32 = 0, MF_PRECISION_BF16 } mf_precision;
MF_API mf_status mf_autocast_set(mf_precision p);
MF_API mf_precision mf_autocast_get(void);
MF_API const char *mf_precision_name(mf_precision p);   /* "fp32", "bf16" */
MF_API mf_status mf_precision_parse(const char *s, mf_precision *p);

/* ---- in place, never recorded (optimizers, initialisation) */
MF_API mf_status mf_fill_(mf_tensor *t, double value);
MF_API mf_status mf_copy_(mf_tensor *dst, mf_tensor *src);      /* broadcasting, casting */
MF_API mf_status mf_add_(mf_tensor *a, mf_tensor *b, double alpha); /* a += alpha * b */
MF_API mf_status mf_scale_(mf_tensor *t, double s);
/* Uniform [lo, hi) or normal (mean, std) values keyed by (seed, key, i):
 * the same values for a name on any rank count. */
MF_API mf_status mf_uniform_keyed_(mf_tensor *t, double lo, double hi, uint64_t seed, const char *key);
MF_API mf_status mf_normal_keyed_(mf_tensor *t, double mean, double std, uint64_t seed, const char *key);

#ifdef __cplusplus
}
#endif
#endif
