/*
 * lib/optim/adam.c - Adam (L2 weight decay added to the gradient) and
 * AdamW (decoupled weight decay), as torch.optim.Adam/AdamW, with
 * optional AMSGrad. Bias correction uses each parameter's own step.
 */
#include "lib/optim/optim_internal.h"

mf_adam_opts mf_adam_defaults(void)
{
    mf_adam_opts o = {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false};
    return o;
}

mf_adam_opts mf_adamw_defaults(void)
{
    mf_adam_opts o = mf_adam_defaults();
    o.weight_decay = 1e-2;
    return o;
}

static mf_status adam_update(mf_optim *o, mfi_opt_param *p, mfi_view *param, mfi_view *grad, mfi_view *state)
{
    const mf_adam_opts *h = &o->h.adam;
    double wd = h->decay_matrices_only && mf_tensor_ndim(p->p) < 2 ? 0.0 : h->weight_decay;
    mfi_adam_hp hp = {o->lr, h->beta1, h->beta2, h->eps, wd, o->decoupled, h->amsgrad, p->step};
    mf_status st;
    MFI_KERNEL(st, MF_PROF_OPTIM, mfi_backend_of(p->p), adam_step, &hp, param, grad, &state[0], &state[1],
               h->amsgrad ? &state[2] : NULL);
    return st;
}

static mf_optim *create(const char *type, const mf_tensor_list *params, const mf_adam_opts *h, bool decoupled)
{
    if (!(h->beta1 >= 0 && h->beta1 < 1 && h->beta2 >= 0 && h->beta2 < 1) || h->eps < 0 || h->weight_decay < 0) {
        mfi_error(MF_ERR_ARG, "%s: betas (%g, %g) must be in [0, 1), eps %g and weight_decay %g >= 0", type,
                  h->beta1, h->beta2, h->eps, h->weight_decay);
        return NULL;
    }
    static const char *const names[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    mf_optim *o = mfi_optim_new(type, params, h->lr, 3, names);
    if (!o) return NULL;
    o->h.adam = *h;
    o->decoupled = decoupled;
    o->uses[0] = o->uses[1] = true;
    o->uses[2] = h->amsgrad;
    o->update = adam_update;
    return o;
}

mf_optim *mf_adam_create(const mf_tensor_list *params, const mf_adam_opts *opts)
{
    mf_adam_opts h = opts ? *opts : mf_adam_defaults();
    return create("adam", params, &h, false);
}

mf_optim *mf_adamw_create(const mf_tensor_list *params, const mf_adam_opts *opts)
{
    mf_adam_opts h = opts ? *opts : mf_adamw_defaults();
    return create("adamw", params, &h, true);
}
