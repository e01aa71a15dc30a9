/*
 * mpiflow/autograd.h - reverse-mode automatic differentiation.
 *
 * Ops on tensors that require grad record a node in a graph (the tape).
 * mf_backward walks it in reverse creation order, accumulates gradients
 * into the .grad of leaf tensors, and frees each node's saved tensors as
 * it goes, so the tape is gone after the call.
 */
#ifndef MPIFLOW_AUTOGRAD_H
#define MPIFLOW_AUTOGRAD_H

#include "mpiflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* d(out)/d(leaves) for a one-element out. */
MF_API mf_status mf_backward(mf_tensor *out);
/* grad: the gradient of out (same shape), or NULL for a one-element out.
 * retain_graph keeps the saved tensors so backward can run again. */
MF_API mf_status mf_backward_ex(mf_tensor *out, mf_tensor *grad, bool retain_graph);

/* Grad mode is per thread. mf_set_grad_enabled returns the old mode. */
MF_API bool mf_grad_enabled(void);
MF_API bool mf_set_grad_enabled(bool on);
/* A no-grad scope; scopes nest. */
MF_API void mf_no_grad_begin(void);
MF_API void mf_no_grad_end(void);

/* Called once per leaf during mf_backward, as soon as its gradient for
 * this backward pass is complete (gradient buckets start from here). */
typedef void (*mf_grad_ready_fn)(mf_tensor *leaf, void *user);
MF_API void mf_autograd_set_grad_ready_hook(mf_grad_ready_fn fn, void *user);

/* ---- user-defined ops
 * forward computes the output from the inputs (with any mf_ op; nothing
 * inside it is recorded) and may save tensors for backward. backward gets
 * the gradient of the output and stores a new reference in grad_in[i]
 * for every input i with mf_custom_needs_grad(ctx, i); others stay NULL. */
typedef struct mf_custom_ctx mf_custom_ctx;
typedef struct mf_custom_op {
    const char *name;
    mf_tensor *(*forward)(mf_custom_ctx *ctx, int n, mf_tensor *const *in);
    mf_status (*backward)(mf_custom_ctx *ctx, mf_tensor *grad_out, mf_tensor **grad_in);
} mf_custom_op;

MF_API mf_tensor *mf_custom_apply(const mf_custom_op *op, int n, mf_tensor *const *in, void *user);
MF_API mf_status mf_custom_save(mf_custom_ctx *ctx, mf_tensor *t);
MF_API mf_tensor *mf_custom_saved(mf_custom_ctx *ctx, int i);     /* borrowed */
MF_API void *mf_custom_user(mf_custom_ctx *ctx);
MF_API bool mf_custom_needs_grad(mf_custom_ctx *ctx, int i);

/* The bytes the graph behind out keeps for backward (each storage once;
 * requested sizes, before the allocator's rounding), leaving out the
 * storages of its leaves (the parameters): the activations of a training
 * step, measured at the end of its forward. Not collective. */
MF_API int64_t mf_autograd_saved_bytes(const mf_tensor *out);

/* ---- activation recompute (doc/gpt.md, "Recompute")
 * out = fn(user, n, in), keeping only the inputs for backward: nothing
 * inside fn is recorded, and backward runs fn again from the inputs,
 * with the random state and autocast mode of the first run (the same
 * dropout masks), and back-propagates through it. The gradients are the
 * ones without recompute; parameters fn uses get theirs as usual. fn
 * must not consume its inputs, and user must stay valid until backward.
 * Inputs may be global (all of them, or none). */
typedef mf_tensor *(*mf_recompute_fn)(void *user, int n, mf_tensor *const *in);
MF_API mf_tensor *mf_recompute(mf_recompute_fn fn, void *user, int n, mf_tensor *const *in);

#ifdef __cplusplus
}
#endif
#endif
