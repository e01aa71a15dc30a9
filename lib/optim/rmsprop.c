/*
 * lib/optim/rmsprop.c - RMSprop (PyTorch's torch.optim.RMSprop: alpha
 * 0.99, eps 1e-8, optional momentum and centering).
 */
#include "lib/optim/optim_internal.h"

mf_rmsprop_opts mf_rmsprop_defaults(void)
{
    mf_rmsprop_opts o = {0.01, 0.99, 1e-8, 0.0, 0.0, false};
    return o;
}

static mf_status rms_update(mf_optim *o, mfi_opt_param *p, mfi_view *param, mfi_view *grad, mfi_view *state)
{
    const mf_rmsprop_opts *h = &o->h.rms;
    mfi_rmsprop_hp hp = {o->lr, h->alpha, h->eps, h->weight_decay, h->momentum, h->centered};
    mf_status st;
    MFI_KERNEL(st, MF_PROF_OPTIM, mfi_backend_of(p->p), rmsprop_step, &hp, param, grad, &state[0],
               o->uses[1] ? &state[1] : NULL, o->uses[2] ? &state[2] : NULL);
    return st;
}

mf_optim *mf_rmsprop_create(const mf_tensor_list *params, const mf_rmsprop_opts *opts)
{
    mf_rmsprop_opts h = opts ? *opts : mf_rmsprop_defaults();
    if (h.alpha < 0 || h.eps < 0 || h.momentum < 0 || h.weight_decay < 0) {
        mfi_error(MF_ERR_ARG, "rmsprop: alpha %g, eps %g, momentum %g and weight_decay %g must be >= 0", h.alpha,
                  h.eps, h.momentum, h.weight_decay);
        return NULL;
    }
    static const char *const names[] = {"square_avg", "momentum_buffer", "grad_avg"};
    mf_optim *o = mfi_optim_new("rmsprop", params, h.lr, 3, names);
    if (!o) return NULL;
    o->h.rms = h;
    o->uses[0] = true;
    o->uses[1] = h.momentum > 0;
    o->uses[2] = h.centered;
    o->update = rms_update;
    return o;
}
