/*
 * lib/optim/sgd.c - SGD with momentum, dampening, Nesterov and weight
 * decay (PyTorch's torch.optim.SGD; the update is in cpu_optim.c).
 */
#include "lib/optim/optim_internal.h"

mf_sgd_opts mf_sgd_defaults(void)
{
    mf_sgd_opts o = {0.01, 0.0, 0.0, 0.0, false};
    return o;
}

static mf_status sgd_update(mf_optim *o, mfi_opt_param *p, mfi_view *param, mfi_view *grad, mfi_view *state)
{
    const mf_sgd_opts *h = &o->h.sgd;
    mfi_sgd_hp hp = {o->lr, h->momentum, h->dampening, h->weight_decay, h->nesterov, p->step == 1};
    mf_status st;
    MFI_KERNEL(st, MF_PROF_OPTIM, mfi_backend_of(p->p), sgd_step, &hp, param, grad, o->uses[0] ? &state[0] : NULL);
    return st;
}

mf_optim *mf_sgd_create(const mf_tensor_list *params, const mf_sgd_opts *opts)
{
    mf_sgd_opts h = opts ? *opts : mf_sgd_defaults();
    if (h.momentum < 0 || h.weight_decay < 0 || h.dampening < 0) {
        mfi_error(MF_ERR_ARG, "sgd: momentum %g, dampening %g and weight_decay %g must be >= 0", h.momentum,
                  h.dampening, h.weight_decay);
        return NULL;
    }
    if (h.nesterov && (h.momentum <= 0 || h.dampening != 0)) {
        mfi_error(MF_ERR_ARG, "sgd: Nesterov momentum needs momentum > 0 and dampening 0");
        return NULL;
    }
    static const char *const names[] = {"momentum_buffer"};
    mf_optim *o = mfi_optim_new("sgd", params, h.lr, 1, names);
    if (!o) return NULL;
    o->h.sgd = h;
    o->uses[0] = h.momentum != 0;
    o->update = sgd_update;
    return o;
}
