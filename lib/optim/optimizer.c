/*
 * lib/optim/optimizer.c - what all optimizers share: parameters, lazily
 * created state, step/zero_grad, and the state list for checkpoints.
 */
#include <stdio.h>
#include "lib/optim/optim_internal.h"

mf_optim *mfi_optim_new(const char *type, const mf_tensor_list *params, double lr, int nstate,
                        const char *const *state_names)
{
    if (!params) {
        mfi_error(MF_ERR_ARG, "%s: the parameter list is NULL", type);
        return NULL;
    }
    if (!(lr >= 0)) {
        mfi_error(MF_ERR_ARG, "%s: learning rate %g must be >= 0", type, lr);
        return NULL;
    }
    mf_optim *o = calloc(1, sizeof *o);
    if (!o || !(o->params = calloc((size_t)(params->n ? params->n : 1), sizeof *o->params))) {
        free(o);
        mfi_error(MF_ERR_NOMEM, "%s: out of memory", type);
        return NULL;
    }
    o->type = type;
    o->lr = lr;
    o->bucket_mb = 25;
    o->nstate = nstate;
    for (int i = 0; i < nstate; i++) o->state_names[i] = state_names[i];
    for (int i = 0; i < params->n; i++) {
        mf_tensor *t = params->items[i].tensor;
        if (!mf_dtype_is_float(mf_tensor_dtype(t))) {
            mfi_error(MF_ERR_DTYPE, "%s: parameter '%s' is %s, not a float tensor", type, params->items[i].name,
                      mf_dtype_name(mf_tensor_dtype(t)));
            mf_optim_destroy(o);
            return NULL;
        }
        o->params[i].name = strdup(params->items[i].name);
        o->params[i].p = mf_tensor_retain(t);
        o->n++;
        if (!o->params[i].name) {
            mfi_error(MF_ERR_NOMEM, "%s: out of memory", type);
            mf_optim_destroy(o);
            return NULL;
        }
    }
    return o;
}

void mf_optim_destroy(mf_optim *o)
{
    if (!o) return;
    mfi_grad_buckets_free(o->buckets);
    for (int i = 0; i < o->n; i++) {
        free(o->params[i].name);
        mf_tensor_destroy(o->params[i].p);
        for (int k = 0; k < MFI_OPT_MAX_STATE; k++) mf_tensor_destroy(o->params[i].state[k]);
    }
    free(o->params);
    free(o);
}

mf_status mf_optim_step(mf_optim *o)
{
    if (mfi_graph_rec) mfi_graph_update_begin();
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_step: optimizer is NULL");
    MF_TRY(mf_optim_sync_grads(o));
    for (int i = 0; i < o->n; i++) {
        mfi_opt_param *p = &o->params[i];
        if (p->zero) continue;   /* its rows, below */
        /* global parameters: update the local piece with its synced gradient */
        mf_tensor *pt = mfi_local_piece(p->p);
        if (!pt) continue;
        mf_tensor *g = pt->grad;
        if (!g) continue;
        if (!mf_tensor_is_contiguous(pt))
            MF_FAIL(MF_ERR_ARG, "%s: parameter '%s' is not contiguous", o->type, p->name);
        mf_tensor *gc = mfi_contiguous_raw(g);
        if (!gc) return mf_last_status();
        mfi_view vs[MFI_OPT_MAX_STATE];
        mf_status st = MF_OK;
        for (int k = 0; k < o->nstate && st == MF_OK; k++) {
            if (!o->uses[k]) continue;
            if (!p->state[k]) {
                p->state[k] = mfi_optim_state_new(o, i);
                if (!p->state[k]) st = mf_last_status();
                else {
                    char nm[512];
                    snprintf(nm, sizeof nm, "%s/%s", p->name, o->state_names[k]);
                    mf_tensor_set_name(p->state[k], nm);
                }
            }
            if (st == MF_OK) vs[k] = mfi_view_of(p->state[k]);
        }
        if (st == MF_OK) {
            p->step++;
            mfi_view vp = mfi_view_of(pt), vg = mfi_view_of(gc);
            st = o->update(o, p, &vp, &vg, vs);
            mfi_bump_version(pt);
        }
        mf_tensor_destroy(gc);
        if (st != MF_OK) return mfi_error_context("%s: parameter '%s'", o->type, p->name);
    }
    if (o->zero) MF_TRY(mfi_zero_step(o));
    o->steps++;
    return MF_OK;
}

mf_status mf_optim_zero_grad(mf_optim *o)
{
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_zero_grad: optimizer is NULL");
    mf_status st = mfi_grad_buckets_prepare(o);
    for (int i = 0; i < o->n; i++) mf_tensor_set_grad(o->params[i].p, NULL);
    return st;
}

void mf_optim_set_lr(mf_optim *o, double lr) { o->lr = lr; }
double mf_optim_lr(const mf_optim *o) { return o->lr; }
int64_t mf_optim_steps(const mf_optim *o) { return o->steps; }
const char *mf_optim_type(const mf_optim *o) { return o->type; }

mf_tensor_list *mf_optim_state(const mf_optim *o)
{
    mf_tensor_list *l = calloc(1, sizeof *l);
    if (!l) {
        mfi_error(MF_ERR_NOMEM, "mf_optim_state: out of memory");
        return NULL;
    }
    int cap = o->n * o->nstate + 1;
    l->items = calloc((size_t)cap, sizeof *l->items);
    if (!l->items) {
        free(l);
        mfi_error(MF_ERR_NOMEM, "mf_optim_state: out of memory");
        return NULL;
    }
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < o->nstate; k++) {
            if (!o->params[i].state[k]) continue;
            char nm[512];
            snprintf(nm, sizeof nm, "%s/%s", o->params[i].name, o->state_names[k]);
            l->items[l->n].name = strdup(nm);
            l->items[l->n].tensor = mf_tensor_retain(o->params[i].state[k]);
            l->items[l->n].kind = MF_ENTRY_STATE;
            if (!l->items[l->n].name) {
                mf_tensor_list_destroy(l);
                mfi_error(MF_ERR_NOMEM, "mf_optim_state: out of memory");
                return NULL;
            }
            l->n++;
        }
    return l;
}
