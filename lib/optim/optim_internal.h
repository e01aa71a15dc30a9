/*
 * lib/optim/optim_internal.h - the optimizer struct shared by lib/optim/.
 *
 * An optimizer keeps, per parameter, its name, the tensor and up to
 * three state tensors (created on the parameter's first update, with
 * the parameter's shape), and a per-parameter step count as PyTorch.
 */
#ifndef MPIFLOW_LIB_OPTIM_INTERNAL_H
#define MPIFLOW_LIB_OPTIM_INTERNAL_H

#include "lib/internal.h"

#define MFI_OPT_MAX_STATE 3

typedef struct mfi_opt_param {
    char *name;
    mf_tensor *p;
    mf_tensor *state[MFI_OPT_MAX_STATE];
    int64_t step;
} mfi_opt_param;

struct mf_optim {
    const char *type;
    int n;
    mfi_opt_param *params;
    double lr;
    int64_t steps;
    int nstate;
    const char *state_names[MFI_OPT_MAX_STATE];
    union {
        mf_sgd_opts sgd;
        mf_rmsprop_opts rms;
        mf_adam_opts adam;
    } h;
    bool decoupled;
    /* Which state tensors this configuration uses. */
    bool uses[MFI_OPT_MAX_STATE];
    mf_status (*update)(mf_optim *o, mfi_opt_param *p, mfi_view *param, mfi_view *grad, mfi_view *state);
    double bucket_mb;    /* gradient bucket size; 0: no buckets */
    struct mfi_grad_buckets *buckets;   /* built on first use (grad_sync.c) */
};

typedef struct mfi_grad_buckets mfi_grad_buckets;
void mfi_grad_buckets_free(mfi_grad_buckets *gb);
/* Before a backward (mf_optim_zero_grad): finishes a round left open,
 * and points autograd's grad-ready hook at o's buckets. */
mf_status mfi_grad_buckets_prepare(mf_optim *o);
/* Finishes the hooked buckets' round, if one is open: gradients are
 * synced after it (mf_clip_grad_norm calls it first). Collective. */
mf_status mfi_grad_buckets_flush(void);

/* A new optimizer over params with the given state names (unused ones
 * NULL); NULL with an error on failure. */
mf_optim *mfi_optim_new(const char *type, const mf_tensor_list *params, double lr, int nstate,
                        const char *const *state_names);

#endif
