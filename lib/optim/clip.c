/*
 * lib/optim/clip.c - gradient clipping by global L2 norm, as
 * torch.nn.utils.clip_grad_norm_: scale = max_norm / (norm + 1e-6),
 * applied only when it is below 1.
 */
#include <math.h>
#include "lib/optim/optim_internal.h"
#include "lib/global/global_internal.h"

mf_status mf_clip_grad_norm(const mf_tensor_list *params, double max_norm, double *total_norm)
{
    if (mfi_graph_rec) mfi_graph_update_begin();
    if (!params) MF_FAIL(MF_ERR_ARG, "mf_clip_grad_norm: the parameter list is NULL");
    if (!(max_norm > 0)) MF_FAIL(MF_ERR_ARG, "mf_clip_grad_norm: max_norm %g must be > 0", max_norm);
    MF_TRY(mfi_grad_buckets_flush(params));   /* the norm is of the summed gradients */
    bool prev = mf_set_grad_enabled(false);
    double sq = 0;
    mf_status st = MF_OK;
    for (int i = 0; i < params->n && st == MF_OK; i++) {
        mf_tensor *g = mf_tensor_grad(params->items[i].tensor);
        double whole;
        if (!g) continue;
        if (mfi_global_grad_sumsq(params->items[i].tensor, &whole)) {   /* deterministic ZeRO: of the summed whole */
            sq += whole;
            continue;
        }
        mf_tensor *s = mfi_reduce(MFI_RED_SUMSQ, g, 0, NULL, false);
        if (!s) st = mf_last_status();
        else sq += mf_tensor_item(s);
        mf_tensor_destroy(s);
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
