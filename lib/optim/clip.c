/*
 * lib/optim/clip.c - gradient clipping by global L2 norm, as
 * torch.nn.utils.clip_grad_norm_: scale = max_norm / (norm + 1e-6),
 * applied only when it is below 1.
 */
#include <math.h>
#include "lib/optim/optim_internal.h"
#include "lib/global/global_internal.h"

/* The sum of squares of t (a local piece, or a whole global tensor), into *v. */
static mf_status piece_sumsq(mf_tensor *local, double *v)
{
    mf_tensor *s = mfi_reduce(MFI_RED_SUMSQ, local, 0, NULL, false);
    if (!s) return mf_last_status();
    *v = mf_tensor_item(s);
    mf_tensor_destroy(s);
    return MF_OK;
}

/* The squared norm in one allreduce where every gradient is global on
 * one placement with no partial sums and some are split (ZeRO-2/3's,
 * tensor parallel's): each rank adds its pieces, one replicated along
 * mesh dimensions divided by their sizes (powers of two in practice:
 * exact), instead of a collective per parameter. False, with nothing
 * done, for any other list and in deterministic mode (whose norm keeps
 * its order). */
static bool split_sumsq(const mf_tensor_list *params, double *sq, mf_status *st)
{
    const mf_placement *pl = NULL;
    bool split = false;
    double whole;
    if (mfi_coll_deterministic()) return false;
    for (int i = 0; i < params->n; i++) {
        mf_tensor *w = params->items[i].tensor, *g = mf_tensor_grad(w);
        if (!g) continue;
        if (!g->global || !g->global->local || mfi_global_grad_sumsq(w, &whole)) return false;
        if (!pl) pl = g->global->placement;
        else if (g->global->placement != pl && !mf_placement_equal(g->global->placement, pl)) return false;
        for (int d = 0; d < g->global->sbp.ndim; d++) {   /* a dimension of one rank sums nothing */
            const mf_sbp_kind k = g->global->placement->mesh[d] > 1 ? g->global->sbp.d[d].kind : MF_SBP_B;
            if (k == MF_SBP_P) return false;
            split |= k == MF_SBP_S;
        }
    }
    if (!pl || !split || !pl->comm) return false;
    double rep = 0, part = 0;   /* the replicated gradients' (the same on every rank), the others' shares */
    *st = MF_OK;
    for (int i = 0; i < params->n && *st == MF_OK; i++) {
        mf_tensor *g = mf_tensor_grad(params->items[i].tensor);
        double v = 0, copies = 1;
        bool any_split = false;
        if (!g || (*st = piece_sumsq(g->global->local, &v)) != MF_OK) continue;
        for (int d = 0; d < g->global->sbp.ndim; d++) {
            if (pl->mesh[d] == 1) continue;
            if (g->global->sbp.d[d].kind == MF_SBP_B) copies *= pl->mesh[d];
            else any_split = true;
        }
        if (any_split) part += v / copies;
        else rep += v;
    }
    if (*st == MF_OK) *st = mfi_allreduce(pl->comm, &part, &part, 1, MF_F64);
    *sq = rep + part;
    return true;
}

mf_status mf_clip_grad_norm(const mf_tensor_list *params, double max_norm, double *total_norm)
{
    if (mfi_graph_rec) mfi_graph_update_begin();
    if (!params) MF_FAIL(MF_ERR_ARG, "mf_clip_grad_norm: the parameter list is NULL");
    if (!(max_norm > 0)) MF_FAIL(MF_ERR_ARG, "mf_clip_grad_norm: max_norm %g must be > 0", max_norm);
    MF_TRY(mfi_grad_buckets_flush(params));   /* the norm is of the summed gradients */
    bool prev = mf_set_grad_enabled(false);
    double sq = 0;
    mf_status st = MF_OK;
    const bool done = mfi_grad_buckets_zero_sumsq(params, &sq, &st) || split_sumsq(params, &sq, &st);
    for (int i = 0; !done && i < params->n && st == MF_OK; i++) {
        mf_tensor *g = mf_tensor_grad(params->items[i].tensor);
        double whole;
        if (!g) continue;
        if (mfi_global_grad_sumsq(params->items[i].tensor, &whole)) {   /* deterministic ZeRO: of the summed whole */
            sq += whole;
            continue;
        }
        if ((st = piece_sumsq(g, &whole)) == MF_OK) sq += whole;   /* a global g: its collective */
    }
    double norm = sqrt(sq);
    if (total_norm) *total_norm = norm;
    double coef = max_norm / (norm + 1e-6);
    for (int i = 0; i < params->n && st == MF_OK && coef < 1.0; i++) {
        mf_tensor *g = mf_tensor_grad(params->items[i].tensor);
        if (g) st = mf_scale_(g, coef);
    }
    if (st == MF_OK && coef < 1.0) mfi_grad_buckets_scaled(params, coef);   /* ZeRO's summed shards */
    mf_set_grad_enabled(prev);
    return st;
}
