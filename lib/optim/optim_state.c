/*
 * lib/optim/optim_state.c - an optimizer's state for checkpoints
 * (lib/optim/optim_state.h).
 */
#include "lib/global/global_internal.h"
#include "lib/optim/optim_internal.h"
#include "lib/optim/optim_state.h"

int mfi_optim_nparams(const mf_optim *o) { return o->n; }
const char *mfi_optim_param_name(const mf_optim *o, int i) { return o->params[i].name; }
int mfi_optim_nstate(const mf_optim *o) { return o->nstate; }

const char *mfi_optim_state_name(const mf_optim *o, int k)
{
    return k >= 0 && k < o->nstate && o->uses[k] ? o->state_names[k] : NULL;
}

double mfi_optim_state_bytes(const mf_optim *o)
{
    double b = 0;
    for (int i = 0; o->steps > 0 && i < o->n; i++)
        for (int k = 0; k < o->nstate; k++)
            if (mfi_optim_state_name(o, k))
                b += (double)mf_tensor_numel(o->params[i].p) * (double)mf_dtype_size(mf_tensor_dtype(o->params[i].p));
    return b;
}

mf_tensor *mfi_optim_state_view(mf_optim *o, int i, int k, bool create)
{
    if (!mfi_optim_state_name(o, k)) return NULL;
    mfi_opt_param *pp = &o->params[i];
    mf_tensor *piece = mfi_local(pp->p);
    if (piece && !pp->state[k] && create) pp->state[k] = mfi_optim_state_new(o, i);
    if (!pp->p->global) return pp->state[k] ? mf_tensor_retain(pp->state[k]) : NULL;
    mfi_meta gm;
    mfi_meta_of(pp->p, &gm);
    mf_tensor *st = piece ? pp->state[k] : NULL;
    if (piece && !st) return NULL;
    mf_nd_sbp sbp = mfi_optim_state_sbp(o, i);   /* S(0) under ZeRO-1 */
    return mfi_global_wrap(mf_tensor_retain(st), pp->p->global->placement, &sbp, &gm, false);
}

void mfi_optim_set_steps(mf_optim *o, int64_t steps)
{
    o->steps = steps;
    for (int i = 0; i < o->n; i++) o->params[i].step = steps;
}

int mfi_optim_hypers(const mf_optim *o, const char *const *names, double *v, int max)
{
    bool sgd = !strcmp(o->type, "sgd"), rms = !strcmp(o->type, "rmsprop");
    int n = 0;
    for (; names && names[n] && n < max; n++) {
        const char *k = names[n];
        v[n] = !strcmp(k, "lr")             ? o->lr
               : !strcmp(k, "momentum")     ? (sgd ? o->h.sgd.momentum : o->h.rms.momentum)
               : !strcmp(k, "weight_decay") ? (sgd ? o->h.sgd.weight_decay : rms ? o->h.rms.weight_decay : o->h.adam.weight_decay)
               : !strcmp(k, "alpha")        ? o->h.rms.alpha
               : !strcmp(k, "eps")          ? (rms ? o->h.rms.eps : o->h.adam.eps)
               : !strcmp(k, "beta1")        ? o->h.adam.beta1
                                            : o->h.adam.beta2;
    }
    return n;
}
