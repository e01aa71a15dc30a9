/*
 * mpiflow/optim.h - optimizers, learning-rate schedules, gradient
 * clipping; the update rules and defaults are PyTorch's.
 */
#ifndef MPIFLOW_OPTIM_H
#define MPIFLOW_OPTIM_H

#include "mpiflow/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_optim mf_optim;

typedef struct mf_sgd_opts {
    double lr;            /* required (PyTorch has no default); 0.01 here */
    double momentum;      /* 0 */
    double dampening;     /* 0 */
    double weight_decay;  /* 0, L2 added to the gradient */
    bool nesterov;        /* false; needs momentum > 0 and dampening 0 */
} mf_sgd_opts;

typedef struct mf_rmsprop_opts {
    double lr;            /* 0.01 */
    double alpha;         /* 0.99 */
    double eps;           /* 1e-8 */
    double weight_decay;  /* 0 */
    double momentum;      /* 0 */
    bool centered;        /* false */
} mf_rmsprop_opts;

typedef struct mf_adam_opts {
    double lr;            /* 1e-3 */
    double beta1, beta2;  /* 0.9, 0.999 */
    double eps;           /* 1e-8 */
    double weight_decay;  /* Adam: 0 (L2); AdamW: 1e-2 (decoupled) */
    bool amsgrad;         /* false */
    /* GPT-2's recipe (nanoGPT's configure_optimizers): weight decay on
     * parameters of 2 or more dims only (weights and embeddings), none
     * on biases and norm parameters. false */
    bool decay_matrices_only;
} mf_adam_opts;

MF_API mf_sgd_opts mf_sgd_defaults(void);
MF_API mf_rmsprop_opts mf_rmsprop_defaults(void);
MF_API mf_adam_opts mf_adam_defaults(void);
MF_API mf_adam_opts mf_adamw_defaults(void);

/* Each takes references to the tensors of params (usually
 * mf_module_parameters) and keeps their names for its state. */
MF_API mf_optim *mf_sgd_create(const mf_tensor_list *params, const mf_sgd_opts *o);
MF_API mf_optim *mf_rmsprop_create(const mf_tensor_list *params, const mf_rmsprop_opts *o);
MF_API mf_optim *mf_adam_create(const mf_tensor_list *params, const mf_adam_opts *o);
MF_API mf_optim *mf_adamw_create(const mf_tensor_list *params, const mf_adam_opts *o);
MF_API void mf_optim_destroy(mf_optim *o);

/* One update from the parameters' .grad (parameters without a gradient
 * are skipped, as in PyTorch). Global parameters first get their
 * gradients synced (mf_optim_sync_grads), then their local pieces are
 * updated. */
MF_API mf_status mf_optim_step(mf_optim *o);
/* Boxes each global parameter's gradient from backward's layout (P for a
 * B parameter) to the parameter's SBP: the allreduce of data parallel.
 * Collective; a no-op for local parameters and for gradients already
 * synced. mf_optim_step calls it. */
MF_API mf_status mf_optim_sync_grads(mf_optim *o);
/* Drops every parameter's gradient (PyTorch's set_to_none=True), and
 * readies the gradient buckets for the next backward. Collective when a
 * backward ran without a step since (it finishes that round's sync). */
MF_API mf_status mf_optim_zero_grad(mf_optim *o);
/* Gradient buckets (data parallel): gradients of parameters replicated
 * (B) over ranks are packed in reverse parameter order into buckets of
 * about mb MiB; each bucket's allreduce starts on the progress thread as
 * soon as backward has produced all of its gradients, and the sync in
 * mf_optim_step waits for them. 0 turns buckets off (one blocking sync
 * per parameter at the step). Default 25, as PyTorch DDP. Buckets are
 * armed by mf_optim_zero_grad and by each sync, so call zero_grad before
 * backward. */
MF_API mf_status mf_optim_set_bucket_mb(mf_optim *o, double mb);
/* ZeRO stage 1 (stage 1) or none (0), before the first step: the state
 * of parameters replicated (B) on a 1-D placement is split S(0) over its
 * ranks; their gradient buckets are reduce-scattered, each rank updates
 * its rows, and the parameters are allgathered after the step. The
 * result equals plain data parallel; state memory drops by the rank
 * count. Checkpoints store the state as S(0), so they reshard. */
MF_API mf_status mf_optim_set_zero(mf_optim *o, int stage);
MF_API void mf_optim_set_lr(mf_optim *o, double lr);
MF_API double mf_optim_lr(const mf_optim *o);
MF_API int64_t mf_optim_steps(const mf_optim *o);
MF_API const char *mf_optim_type(const mf_optim *o);   /* "sgd", "adam", ... */
/* The state tensors, named "<param>/<state>" ("hidden.weight/exp_avg"),
 * created on the first step; each entry holds a reference. */
MF_API mf_tensor_list *mf_optim_state(const mf_optim *o);

/* ---- learning-rate schedules: lr as a function of the step (0-based) */
typedef struct mf_lr_schedule mf_lr_schedule;
/* values[0] before boundaries[0], values[i] from boundaries[i-1] on;
 * n boundaries, n+1 values (OneFlow's PiecewiseConstantScheduler). */
MF_API mf_lr_schedule *mf_lr_piecewise_create(int n, const int64_t *boundaries, const double *values);
/* base * gamma^(step / step_size) (PyTorch's StepLR). */
MF_API mf_lr_schedule *mf_lr_step_create(double base, int64_t step_size, double gamma);
/* Linear warmup from 0 to base over warmup steps, then cosine decay to
 * lr_min at total steps. */
MF_API mf_lr_schedule *mf_lr_cosine_create(double base, int64_t warmup, int64_t total, double lr_min);
MF_API double mf_lr_schedule_at(const mf_lr_schedule *s, int64_t step);
MF_API void mf_lr_schedule_destroy(mf_lr_schedule *s);

/* Scales all gradients so that their global L2 norm is at most max_norm
 * (PyTorch's clip_grad_norm_). total_norm (may be NULL) gets the norm
 * before clipping. */
MF_API mf_status mf_clip_grad_norm(const mf_tensor_list *params, double max_norm, double *total_norm);

#ifdef __cplusplus
}
#endif
#endif
