/*
 * lib/optim/grad_sync.c - gradient sync for global parameters.
 *
 * Backward leaves each global parameter's local gradient laid out as
 * dual(SBP): a B (data-parallel) parameter gets a P gradient. Before the
 * update each one is boxed to the parameter's own SBP, so for data
 * parallel this is the allreduce of DDP, and for a split (model-parallel)
 * parameter nothing moves. One parameter at a time for now: the
 * collectives issue packs them into buckets that start during backward
 * (the grad-ready hook of autograd.c is where they will hook in).
 */
#include "lib/global/global_internal.h"
#include "lib/optim/optim_internal.h"

mf_status mfi_grad_sync_one(mf_tensor *param)
{
    if (!mfi_is_global(param)) return MF_OK;
    mfi_global *g = param->global;
    mf_tensor *l = g->local;
    if (!l || !l->grad || l->grad_synced) return MF_OK;
    mf_tensor *dual = mf_tensor_grad(param);   /* the wrapper, laid out as dual(sbp) */
    if (!dual) return mf_last_status();
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *synced = mfi_redistribute(dual, g->placement, &g->sbp);
    mf_set_grad_enabled(prev);
    if (!synced) return mfi_error_context("gradient sync of '%s'", mf_tensor_name(param));
    mf_status st = mf_tensor_set_grad(l, synced->global->local);
    l->grad_synced = st == MF_OK;
    mf_tensor_destroy(synced);
    return st;
}

mf_status mf_optim_sync_grads(mf_optim *o)
{
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_sync_grads: optimizer is NULL");
    /* reverse order, as the gradients become ready in backward */
    for (int i = o->n - 1; i >= 0; i--) MF_TRY(mfi_grad_sync_one(o->params[i].p));
    return MF_OK;
}
