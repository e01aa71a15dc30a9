/*
 * lib/optim/grad_sync.c - mf_optim_sync_grads: every global parameter's
 * gradient turned from dual(SBP), as backward leaves it, into the
 * parameter's own SBP (doc/gradient-sync.md; doc/design.md section 6).
 *
 * Bucketed parameters (buckets.c) are summed by their buckets: the ones
 * backward filled are waited for, and when no backward filled them this
 * round (gradients set by hand, or ZeRO without overlap) they are summed
 * bucketed now. Every other parameter, and any that a mixed round left,
 * is boxed one at a time (a 3-D mesh's split partners, buckets off).
 */
#include "lib/optim/buckets.h"

mf_status mfi_grad_sync_one(mf_tensor *param)
{
    if (!mfi_is_global(param)) return MF_OK;
    mfi_global *g = param->global;
    mf_tensor *l = g->local;
    if (!l || !l->grad || mfi_global_grad_synced(param)) return MF_OK;
    mf_tensor *dual = mf_tensor_grad(param);   /* the wrapper, laid out as dual(sbp) */
    if (!dual) return mf_last_status();
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *synced = mfi_redistribute(dual, g->placement, &g->sbp);
    mf_set_grad_enabled(prev);
    if (!synced) return mfi_error_context("gradient sync of '%s'", mf_tensor_name(param));
    mf_status st = mf_tensor_set_grad(l, synced->global->local);
    if (st == MF_OK) st = mfi_global_set_grad_synced(param, true);
    mf_tensor_destroy(synced);
    return st;
}

mf_status mf_optim_sync_grads(mf_optim *o)
{
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_sync_grads: optimizer is NULL");
    mfi_grad_buckets *gb = o->buckets;
    mf_status st = MF_OK;
    if (gb && gb->active) st = mfi_grad_buckets_finish(gb);
    else if (o->bucket_mb > 0 || o->zero) {   /* no backward hook this round (grads set by hand, or
                                                  ZeRO without overlap) */
        gb = mfi_grad_buckets_of(o);
        if (!gb) return mf_last_status();
        bool fresh = false, synced = false;   /* the same on every rank: same program */
        for (int i = 0; i < o->n; i++) {
            const mf_tensor *l = gb->bucket_of[i] >= 0 ? o->params[i].p->global->local : NULL;
            bool done = l && (mfi_global_grad_synced(o->params[i].p) || o->params[i].zgrad);   /* ZeRO shards: summed already */
            if (l && l->grad) fresh |= !done, synced |= done;
        }
        if (fresh && !synced) {   /* sum them bucketed; a mix goes one by one below */
            gb->dirty = true;
            st = mfi_grad_buckets_finish(gb);
        }
    }
    /* the rest one by one, in reverse order */
    for (int i = o->n - 1; i >= 0 && st == MF_OK; i--)
        if (!o->params[i].zgrad) st = mfi_grad_sync_one(o->params[i].p);
    /* ZeRO parameters whose whole gradient was summed (one by one, or by
     * the pipeline's deterministic shards): their step takes this rank's
     * rows of it */
    for (int i = 0; i < o->n && st == MF_OK; i++) {
        mfi_opt_param *p = &o->params[i];
        mf_tensor *l = p->zero && !p->zgrad ? p->p->global->local : NULL;
        if (l && l->grad && mfi_global_grad_synced(p->p) && mf_tensor_is_contiguous(l->grad) &&
            mf_tensor_device(l->grad) == MF_DEV_CPU)
            p->zgrad = (char *)mf_tensor_data(l->grad) + (size_t)(p->row0 * p->inner) * mf_dtype_size(l->dtype);
    }
    return st;
}
