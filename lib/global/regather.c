/*
 * lib/global/regather.c - parameters gathered for one use and freed
 * right after it (ZeRO-3 as SBP, doc/parallelism.md "Transformers").
 *
 * A parameter that lives split (S(0) over the data-parallel ranks) is
 * boxed to B for each module that uses it; the boxing is differentiable,
 * so its backward reduce-scatters the gradient into the parameter's own
 * split. mfi_gather_transient marks the gathered storage: an op that
 * saves a view of it for backward (a Linear its weight) keeps the view
 * without its bytes (lib/op.c), so the gathered copy is freed as soon as
 * the forward drops it, and the backward that needs it gathers it again
 * (mfi_regather_fill); the node frees that copy once it has run.
 */
#include "lib/global/global_internal.h"

struct mfi_regather {
    int refcount;
    mf_tensor *param;   /* the split parameter (a reference) */
    mf_nd_sbp to;       /* what it is gathered to */
};

void mfi_regather_retain(struct mfi_regather *r) { r->refcount++; }

void mfi_regather_release(struct mfi_regather *r)
{
    if (!r || --r->refcount > 0) return;
    mf_tensor_destroy(r->param);
    free(r);
}

/* the gathered value, with no graph */
static mf_tensor *gather(mf_tensor *w, const mf_nd_sbp *to)
{
    mf_no_grad_begin();
    mf_tensor *g = mfi_redistribute(w, w->global->placement, to);
    mf_no_grad_end();
    return g;
}

mf_tensor *mfi_gather_transient(mf_tensor *w, const mf_nd_sbp *to)
{
    if (!w || !w->global) {
        mfi_error(MF_ERR_ARG, "mfi_gather_transient: not a global tensor");
        return NULL;
    }
    mf_tensor *g = mfi_redistribute(w, w->global->placement, to);
    if (!g) return NULL;
    mf_tensor *l = g->global->local, *wl = w->global->local;
    /* a fresh storage only: nothing to free when no bytes moved */
    if (!l || !l->storage || (wl && wl->storage == l->storage) || l->storage->regather) return g;
    struct mfi_regather *r = malloc(sizeof *r);
    if (!r) {
        mf_tensor_destroy(g);
        mfi_error(MF_ERR_NOMEM, "gathering '%s': out of memory", mf_tensor_name(w));
        return NULL;
    }
    *r = (struct mfi_regather){1, mf_tensor_retain(w), *to};
    l->storage->regather = r;
    return g;
}

mf_status mfi_regather_fill(struct mfi_regather *r, mf_tensor *stub)
{
    mf_tensor *g = gather(r->param, &r->to);
    if (!g) return mfi_error_context("gathering '%s' again for backward", mf_tensor_name(r->param));
    mf_tensor *l = g->global->local;
    if (!l || !l->storage) {
        mf_tensor_destroy(g);
        MF_FAIL(MF_ERR_INTERNAL, "gathering '%s' again for backward: no local piece", mf_tensor_name(r->param));
    }
    stub->storage = l->storage;
    stub->storage->refcount++;
    mf_tensor_destroy(g);
    return MF_OK;
}
