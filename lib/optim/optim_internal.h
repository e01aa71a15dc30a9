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
#include "collectives/coll.h"

#define MFI_OPT_MAX_STATE 3

typedef struct mfi_opt_param {
    char *name;
    mf_tensor *p;
    mf_tensor *state[MFI_OPT_MAX_STATE];
    int64_t step;
    /* ZeRO-1 (zero.c): this rank updates rows [row0, row0 + rows) of
     * the parameter's first axis (inner elements per row), with state of
     * that shape; zgrad points at the summed gradient of those rows
     * after the sync (in its bucket), NULL before. */
    bool zero;
    int64_t row0, rows, inner;
    void *zgrad;
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
    int zero;            /* ZeRO stage (0 or 1) */
    struct mfi_grad_buckets *buckets;   /* built on first use (buckets.c) */
};

typedef struct mfi_grad_buckets mfi_grad_buckets;
void mfi_grad_buckets_free(mfi_grad_buckets *gb);
/* Before a backward (mf_optim_zero_grad): finishes a round left open,
 * and points autograd's grad-ready hook at o's buckets. */
mf_status mfi_grad_buckets_prepare(mf_optim *o);
/* Finishes the open round of every optimizer's buckets that hold one of
 * params: their gradients are synced after it (mf_clip_grad_norm calls
 * it first). Collective. */
mf_status mfi_grad_buckets_flush(const mf_tensor_list *params);
/* After mf_clip_grad_norm scaled params' gradients by coef: the ZeRO
 * shards the flush made for them are scaled too. */
void mfi_grad_buckets_scaled(const mf_tensor_list *params, double coef);
/* mf_clip_grad_norm's squared norm from ZeRO buckets' summed shards, in
 * one allreduce (buckets.c); false where they do not hold every gradient. */
bool mfi_grad_buckets_zero_sumsq(const mf_tensor_list *params, double *sq, mf_status *st);

/* ---- ZeRO-1 (zero.c) */
/* The communicator over which parameter i's state is split, or NULL
 * when it is not (only B parameters on 1-D placements are). */
mfi_comm *mfi_zero_comm(const mf_optim *o, int i);
/* A zero state tensor for parameter i: the shard's shape under ZeRO,
 * else the local piece's. */
mf_tensor *mfi_optim_state_new(mf_optim *o, int i);
/* The state's nd-SBP as a global tensor: S(0) under ZeRO, else the
 * parameter's. */
mf_nd_sbp mfi_optim_state_sbp(const mf_optim *o, int i);
/* The ZeRO part of mf_optim_step: update the shards, then allgather the
 * parameters (collective over the buckets' communicators). */
mf_status mfi_zero_step(mf_optim *o);
/* Allgathers the ZeRO buckets' updated rows into every rank's
 * parameters. */
mf_status mfi_zero_gather(mf_optim *o);

/* A new optimizer over params with the given state names (unused ones
 * NULL); NULL with an error on failure. */
mf_optim *mfi_optim_new(const char *type, const mf_tensor_list *params, double lr, int nstate,
                        const char *const *state_names);

#endif
