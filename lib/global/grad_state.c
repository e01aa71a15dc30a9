/*
 * lib/global/grad_state.c - whether a global tensor's gradient already
 * has the tensor's own SBP (doc/design.md section 6).
 *
 * The backward leaves a parameter's gradient laid out as the dual of its
 * SBP (partial sums where the parameter is broadcast); the gradient sync,
 * the pipeline's shard sum, or a user's mf_tensor_set_grad with the own
 * SBP turns it into the parameter's own layout. The global layer records
 * which local pieces hold such a gradient, keyed by the piece, so the
 * core tensor carries no field for it. A new contribution from the
 * backward, a local mf_tensor_set_grad, or freeing the piece drops the
 * record.
 */
#include "base/ptrmap.h"
#include "lib/global/global_internal.h"

static mfi_ptr_map synced;   /* local piece -> 1 */

void mfi_global_grad_changed(const mf_tensor *local)
{
    if (!synced.n) return;
    if (mfi_ptr_map_remove(&synced, local) && !synced.n) mfi_ptr_map_free(&synced);
}

bool mfi_global_grad_synced(const mf_tensor *t)
{
    const mf_tensor *l = t->global ? t->global->local : NULL;
    return l && synced.n && mfi_ptr_map_at(&synced, l, false) != NULL;
}

mf_status mfi_global_set_grad_synced(const mf_tensor *t, bool on)
{
    const mf_tensor *l = t->global ? t->global->local : NULL;
    if (!l) return MF_OK;
    if (!on) {
        mfi_global_grad_changed(l);
        return MF_OK;
    }
    if (!mfi_ptr_map_at(&synced, l, true)) return mfi_error_context("gradient of '%s'", mf_tensor_name(t));
    return MF_OK;
}
